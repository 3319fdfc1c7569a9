"""``python -m hbtool.optable [--write | --check]``: print, write or check docs/ops.md."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from hbtool.optable.table import build_table, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hbtool.optable", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"write {DOC}")
    group.add_argument("--check", action="store_true", help=f"exit 1 when {DOC} is out of date")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    text = render(build_table())
    if args.write:
        from hbtool.utils.atomic import atomic_write_files

        atomic_write_files({DOC: text.encode()})
        return 0
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is out of date; run: python -m hbtool.optable --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
