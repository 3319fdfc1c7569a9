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


def interleaved_best(calls, repeat: int, rounds: int = 3) -> list[float]:
    """Seconds of the fastest call of each ``(fn, x)`` in ``calls`` over ``rounds`` interleaved rounds of
    :func:`best_of`: each round times every route once, so a burst of other work on the machine falls on all of
    them rather than on one."""
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for k, (fn, x) in enumerate(calls):
            best[k] = min(best[k], best_of(fn, x, repeat))
    return best
