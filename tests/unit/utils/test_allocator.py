"""hbtool.utils.allocator: glibc keeps freed memory after keep_freed_memory, a user's own settings win, and
``hbtool calibrate`` sets it. Each allocator check runs in a fresh interpreter (the setting is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from hbtool.utils import allocator

pytestmark = pytest.mark.skipif(allocator._glibc() is None, reason="glibc only")

# how many bytes a fresh 16 MB malloc maps on its own (mallinfo2's hblkhd: the bytes of mmapped blocks)
PROBE = r"""
import ctypes, sys
from hbtool.utils.allocator import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
took = keep_freed_memory() if sys.argv[1] == "set" else None
before = libc.mallinfo2().hblkhd
p = libc.malloc(16 << 20)
mapped = libc.mallinfo2().hblkhd - before
libc.free(p)
print(took, mapped)
"""


def _probe(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k not in allocator.USER_VARIABLES}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env={**clean, **env}).stdout.split()
    return out[0], int(out[1])


def test_large_blocks_come_from_the_heap_once_set():
    assert _probe("leave") == ("None", pytest.approx(16 << 20, rel=0.01))   # glibc's default: its own mapping
    assert _probe("set") == ("True", 0)


def test_the_users_environment_wins():
    took, mapped = _probe("set", MALLOC_TOP_PAD_="0")
    assert took == "False" and mapped >= 16 << 20


def test_calibrate_command_sets_it(monkeypatch, tmp_path):
    from hbtool.cli import main

    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: calls.append(1) or True)
    result = CliRunner().invoke(main, ["calibrate", "-c", str(tmp_path / "missing.yaml")])
    assert result.exit_code != 0 and calls == [1]
