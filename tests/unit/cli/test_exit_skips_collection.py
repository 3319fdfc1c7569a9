"""The CLI has the interpreter's shutdown skip its cyclic garbage collections: every object is frozen
(``gc.freeze``) when the exit begins, so shutdown's collections do not traverse numba's object graph
(0.3-0.6 s of ``hbtool calibrate``'s exit on the loaded 2-core machine)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import atexit, gc
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))   # runs after the CLI's
from hbtool.cli import freeze_objects_at_exit
freeze_objects_at_exit()
freeze_objects_at_exit()   # a second command in the same process registers nothing more
print("frozen before exit:", gc.get_freeze_count() > 0, flush=True)
"""


def test_objects_are_frozen_when_the_exit_begins():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["frozen before exit: False", "frozen at exit: True"]


def test_a_command_registers_the_freeze(monkeypatch):
    import atexit
    import gc

    from click.testing import CliRunner

    from hbtool.cli import main

    registered = []
    monkeypatch.setattr(atexit, "register", lambda f, *a, **k: registered.append(f) or f)
    monkeypatch.setattr(atexit, "unregister", lambda f: None)
    CliRunner().invoke(main, ["checker", "-m", "/nonexistent.onnx"])   # any command, failing or not
    assert gc.freeze in registered
