"""The one table writer of the benchmarks: markdown tables, and result files replaced whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table; ``|`` inside a cell is escaped so that the cell stays whole."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_results(folder: Path, files: dict[str, str | dict | list]) -> None:
    """Write each ``name: text`` (a dict or list as indented JSON) into ``folder``, each replaced whole,
    so that a run interrupted between rows keeps the files of the last complete row."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content, indent=1)
        tmp = folder / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(folder / name)


def write_result(path: Path, content: str | dict | list) -> None:
    """One result file, replaced whole (:func:`write_results`)."""
    write_results(path.parent, {path.name: content})
