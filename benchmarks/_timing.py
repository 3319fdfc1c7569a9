"""The one best-of-N wall timer the per-layer probes share (the minimum is the run least disturbed by the
other work on a shared machine)."""
from __future__ import annotations

import time


def best_of(fn, x, repeat: int) -> float:
    """Seconds of the fastest of ``repeat`` calls ``fn(x)``."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(x)
        best = min(best, time.perf_counter() - t)
    return best
