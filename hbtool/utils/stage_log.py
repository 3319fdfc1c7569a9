"""``model_parameters.log_level``: what a stage's log file in the working directory records.

``hb_mapper`` writes its log at the config's log level whatever the console shows. hbtool does
the same: while a stage runs, every ``hbtool.*`` record at ``log_level`` or above is collected
(the console keeps its own level), and the stage appends them to its log file
(``hb_calibrate.log``, ``hb_compile.log``) under ``log (level <L>):``, written with the stage's
other outputs, so a stage that fails leaves the working directory as it was. No timestamps: a
rerun writes the same log.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class StageLog(logging.Handler):
    def __init__(self, level: str):
        super().__init__(LEVELS[level])
        self.level_name = level
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def text(self) -> str:
        """The section appended to the stage's log file ('' when nothing was recorded)."""
        if not self.lines:
            return ""
        return f"\nlog (level {self.level_name}):\n" + "".join(line + "\n" for line in self.lines)


@contextlib.contextmanager
def stage_log(level: str) -> Iterator[StageLog]:
    handler = StageLog(level)
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
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        for h, lvl in saved:
            h.setLevel(lvl)
