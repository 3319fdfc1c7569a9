"""``model_parameters.log_level``: the log file a stage keeps in the working directory.

``hb_mapper`` writes ``hb_mapper_<stage>.log`` at the config's log level whatever the console
shows. hbtool does the same: while a stage runs, every ``hbtool.*`` record at ``log_level`` or
above also goes to ``<working_dir>/hbtool_<stage>.log`` (the console keeps its own level).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

class _LazyFileHandler(logging.FileHandler):
    """Creates the file (and its folder) on the first record: a run that logs nothing writes nothing."""

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


@contextlib.contextmanager
def stage_log(working_dir: Path, stage: str, level: str) -> Iterator[Path]:
    path = Path(working_dir) / f"hbtool_{stage}.log"
    handler = _LazyFileHandler(path, mode="w", encoding="utf-8", delay=True)
    handler.setLevel(LEVELS[level])
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("hbtool")
    root = logging.getLogger()
    console_level = root.getEffectiveLevel()
    saved = [(h, h.level) for h in root.handlers]
    for h, lvl in saved:  # the console keeps showing what it showed before
        h.setLevel(max(lvl, console_level))
    old_level = logger.level
    logger.setLevel(min(LEVELS[level], logger.getEffectiveLevel()))
    logger.addHandler(handler)
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        for h, lvl in saved:
            h.setLevel(lvl)
        handler.close()
