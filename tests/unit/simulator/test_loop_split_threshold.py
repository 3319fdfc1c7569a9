"""The integer loops split their rows over the cores only past ``jit.MIN_PARALLEL_WORK``.

A split costs about 21 us of wall and CPU (the pool thread's round trip) on the 2-core VM, and a batch-1
CNN's loops are 2-50 us each: below the threshold the calling thread runs the whole loop itself."""

import numpy as np

from hbtool.simulator import jit


def _recording_loop(calls):
    def loop(r0, r1, out):
        calls.append((r0, r1))
        out[r0:r1] = 1

    return loop


def test_a_batch_one_cnn_loop_runs_in_the_calling_thread(monkeypatch):
    """MobileNetV2's largest 7 x 7 requantize (960 x 49 = 47,040 elements, 10 us) was split at the old 1 << 15."""
    calls = []
    monkeypatch.setattr(jit, "_compiled", lambda loop, args: True)
    jit.set_threads(2)
    try:
        rows, work = 960, 960 * 49
        assert work < jit.MIN_PARALLEL_WORK
        out = np.zeros(rows, np.int64)
        jit.over_rows(_recording_loop(calls), rows, work, out)
        assert calls == [(0, rows)] and out.sum() == rows
    finally:
        jit.set_threads(None)


def test_a_loop_past_the_threshold_splits_over_the_cores(monkeypatch):
    calls = []
    monkeypatch.setattr(jit, "_compiled", lambda loop, args: True)
    jit.set_threads(2)
    try:
        rows = 64
        out = np.zeros(rows, np.int64)
        jit.over_rows(_recording_loop(calls), rows, jit.MIN_PARALLEL_WORK, out)
        assert sorted(calls) == [(0, 32), (32, 64)] and out.sum() == rows
    finally:
        jit.set_threads(None)
