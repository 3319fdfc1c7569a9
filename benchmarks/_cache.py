"""A benchmark's results cache: one JSON file, read if present, rewritten whole after each result.

Long measurements (the recogniser's greedy sets, the calibration options) save every result as it comes, so a run
that is stopped or cut off keeps what it measured and a rerun picks up from there.
"""

from __future__ import annotations

import json
from pathlib import Path

from hbtool.utils.atomic import atomic_write_text


def load_results(path: Path) -> dict:
    """The results saved at ``path`` (an empty dict when there are none yet)."""
    return json.loads(path.read_text()) if path.exists() else {}


def save_results(path: Path, data: dict) -> None:
    """``data`` written to ``path`` whole (a cut-off write leaves the previous file)."""
    atomic_write_text(path, json.dumps(data, indent=1, default=str))
