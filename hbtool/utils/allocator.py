"""glibc's allocator told to keep freed memory, for a command that passes large arrays around (``hbtool calibrate``,
``hbtool simulate`` and its worker processes).

By default glibc serves a request of 128 KB or more (a threshold it raises, as such blocks are freed, up to 32 MB)
with a fresh ``mmap`` and gives it back to the system when freed, and it returns the top of its heap to the system
once more than 128 KB of it are free (later twice the raised threshold). A calibration allocates and frees arrays of a few MB
(every observed tensor of every sample, the candidates' and the evaluation's outputs) and copies of a 100 MB
model (import, folding, serialization) all the time, so the same memory is handed back and mapped again, and each
first touch of a fresh page is a page fault the kernel fills with zeros: ResNet50's calibration took 1.6 million
faults and 4 s of system time, where onnxruntime's ``quantize_static`` takes 430,000 and 1 s.

:func:`keep_freed_memory` sets, for the rest of the process, the mmap threshold to 32 MB (glibc's largest: every
tensor of a CNN comes from the heap and is reused), the trim threshold to 1 GB (freed heap memory stays mapped
up to that) and the top pad to 256 MB (the heap grows in large steps): ResNet50's command took 1.24-1.27 million
faults against 1.65-1.71 million, 0.5-1 s less system time, and a peak resident size up to 0.2 GB larger (2.0-2.2
against 1.9-2.0 GB; docs/calibrate.md); a 256 MB trim threshold and a 64 MB top pad saved less. Where and how memory is laid out changes
nothing computed: every array's values are the same (the output files are the same bytes).

``one_arena=True`` also puts every thread on the main heap (``M_ARENA_MAX`` 1), for a command whose threads
allocate (``hbtool simulate``: a batch's passes run on two threads). glibc gives each new thread an arena of its
own, a heap it unmaps whole as soon as every block in it is free, which the end of each pass makes so; the next pass
then faults all its memory in again, however the thresholds are set. The recogniser at batch 16 took about 29,000
page faults a batch (2.5-4.8 ms of system time a sample) with the thresholds alone, 5 with one arena; its peak
resident size fell from 0.85-1.4 to 0.5 GB (docs/simulate.md, session sim8). A user's own
``MALLOC_*`` environment variables or ``GLIBC_TUNABLES`` win (nothing is set then), and anything but glibc on
Linux is left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MB = 1 << 20
# {parameter: value}: the values measured on ResNet50's calibration (docs/calibrate.md)
SETTINGS = {M_MMAP_THRESHOLD: 32 * MB, M_TRIM_THRESHOLD: 1024 * MB, M_TOP_PAD: 256 * MB}
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version   # glibc only (musl's mallopt does nothing)
        libc.mallopt
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def keep_freed_memory(one_arena: bool = False) -> bool:
    """Set :data:`SETTINGS` process-wide, with ``one_arena`` also one arena for all threads (call it before the
    threads start: a thread keeps the arena it took); True when glibc took them all, False when nothing was set
    (not glibc, or the user set the allocator through the environment)."""
    if any(v in os.environ for v in USER_VARIABLES):
        return False
    libc = _glibc()
    if libc is None:
        return False
    settings = {**SETTINGS, M_ARENA_MAX: 1} if one_arena else SETTINGS
    return all(libc.mallopt(param, value) == 1 for param, value in settings.items())
