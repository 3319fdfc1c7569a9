"""Fixtures shared by the simulator's loop tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def loop_threads(request, monkeypatch):
    """The compiled loops on 1 and on 2 threads: both the one-call path and the split over threads (at 2 threads
    every shape of more than one row splits, whatever its size)."""
    from hbtool.simulator import fused, jit

    monkeypatch.setattr(jit, "MIN_PARALLEL_WORK", 1)
    before = fused.threads()
    fused.set_threads(request.param)
    yield request.param
    fused.set_threads(before)
