"""hbtool.utils.allocator: glibc keeps freed memory after keep_freed_memory, also threads' memory with one arena, a
user's own settings win, and ``hbtool calibrate`` and ``hbtool simulate`` set it. Each allocator check runs in a fresh interpreter (the setting is process-wide)."""

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


# page faults of each round of two threads that each take, fill and free 24 blocks of 4 MB (96 MB: more than one
# 64 MB heap of a thread's own arena, the heaps glibc unmaps whole once they are empty)
THREADS_PROBE = r"""
import ctypes, resource, sys, threading
from hbtool.utils.allocator import keep_freed_memory
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
took = keep_freed_memory(one_arena=True) if sys.argv[1] == "set" else None
def fill_and_free():
    blocks = [libc.malloc(4 << 20) for _ in range(24)]
    for p in blocks:
        libc.memset(p, 1, 4 << 20)
    for p in blocks:
        libc.free(p)
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    threads = [threading.Thread(target=fill_and_free) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(took, *faults)
"""
PAGES_A_ROUND = 2 * 24 * (4 << 20) // 4096


def _probe(mode: str, **env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k not in allocator.USER_VARIABLES}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env={**clean, **env}).stdout.split()
    return out[0], int(out[1])


def test_large_blocks_come_from_the_heap_once_set():
    assert _probe("leave") == ("None", pytest.approx(16 << 20, rel=0.01))   # glibc's default: its own mapping
    assert _probe("set") == ("True", 0)


def test_threads_reuse_freed_memory_with_one_arena():
    clean = {k: v for k, v in os.environ.items() if k not in allocator.USER_VARIABLES}

    def rounds(mode: str) -> tuple[str, list[int]]:
        out = subprocess.run([sys.executable, "-c", THREADS_PROBE, mode], capture_output=True, text=True, check=True,
                             env=clean).stdout.split()
        return out[0], [int(f) for f in out[1:]]

    took, faults = rounds("leave")   # glibc's default: every round faults its pages in again
    assert took == "None" and min(faults) > PAGES_A_ROUND // 2
    took, faults = rounds("set")     # one arena: the first round's pages serve the later rounds
    assert took == "True" and faults[0] > PAGES_A_ROUND // 2 and max(faults[1:]) < PAGES_A_ROUND // 100


def test_the_users_environment_wins():
    took, mapped = _probe("set", MALLOC_TOP_PAD_="0")
    assert took == "False" and mapped >= 16 << 20


def test_calibrate_command_sets_it(monkeypatch, tmp_path):
    from hbtool.cli import main

    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: calls.append(1) or True)
    result = CliRunner().invoke(main, ["calibrate", "-c", str(tmp_path / "missing.yaml")])
    assert result.exit_code != 0 and calls == [1]


def test_simulate_command_sets_it_with_one_arena(monkeypatch, tmp_path):
    from hbtool.cli import main

    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda one_arena=False: calls.append(one_arena) or True)
    result = CliRunner().invoke(main, ["simulate", str(tmp_path / "missing.bin"), "-i", f"x={tmp_path / 'missing.npy'}"])
    assert result.exit_code != 0 and calls == [True]
