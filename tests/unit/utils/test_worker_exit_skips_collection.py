"""A worker process of the pool exits without the interpreter's last garbage collections (``gc.freeze`` as its first
exit step, as the CLI's own process): the pool's close waits for that exit, which took 0.5-1.1 s with two workers
holding only the debug imports (numba, onnxruntime) on the loaded 2-core machine, 0.09-0.22 s frozen."""

from __future__ import annotations

import os
from pathlib import Path

from hbtool.utils.workers import TaskPool


def _note_the_exit(folder: str) -> None:
    """The pool's initializer: at this process's exit, write whether its objects were frozen by then."""
    import atexit
    import gc

    path = Path(folder) / f"{os.getpid()}.txt"
    atexit.register(lambda: path.write_text(str(gc.get_freeze_count() > 0)))


def _pid(_: int) -> int:
    return os.getpid()


def test_each_worker_process_freezes_its_objects_when_its_exit_begins(tmp_path):
    with TaskPool(2, initializer=_note_the_exit, initargs=(str(tmp_path),)) as pool:
        pids = set(pool.map(_pid, range(4)))
    notes = {int(p.stem): p.read_text() for p in tmp_path.glob("*.txt")}   # the close waited for the exits
    assert os.getpid() not in pids and pids <= set(notes)
    assert len(notes) == 2 and set(notes.values()) == {"True"}
