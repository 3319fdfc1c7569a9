"""The statistics pass loads the histogram's compiled loops on a thread of its own while the session opens
(hbtool.quant.collect._loops_loading_beside): the loops load off the calling thread, once per pass that bins
with them and never for one that bins in numpy, and the statistics are those of the pass without it."""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from hbtool.quant import abs_histogram, collect
from hbtool.quant.collect import collect_stats
from tests.unit.quant.test_statistics_in_pieces import _conv_chain, _observed


def _pass(graph, tensors, monkeypatch, num_samples: int, loading: bool):
    calls = []
    original = abs_histogram.load_loops
    monkeypatch.setattr(abs_histogram, "load_loops", lambda: calls.append(threading.current_thread()) or original())
    if not loading:
        monkeypatch.setattr(collect, "_loops_loading_beside", lambda compiled: contextlib.nullcontext())
    rng = np.random.default_rng(3)
    batches = [{"x": rng.normal(0, 1, (1, 3, 96, 96)).astype(np.float32)} for _ in range(3)]
    stats = collect_stats(graph, tensors, batches, channel_means={tensors[0]: 1}, num_samples=num_samples)
    monkeypatch.undo()
    return stats, calls


def test_loops_load_on_their_own_thread_and_change_no_statistic(tmp_path, monkeypatch):
    graph = _conv_chain(tmp_path)
    tensors = _observed(graph)
    many = 10**9   # as many samples as make the pass bin with the compiled loops
    beside, calls = _pass(graph, tensors, monkeypatch, many, loading=True)
    assert len(calls) == 1 and calls[0] is not threading.main_thread()
    plain, none = _pass(graph, tensors, monkeypatch, many, loading=False)
    assert none == []
    _, short = _pass(graph, tensors, monkeypatch, 3, loading=True)   # a short pass bins in numpy: nothing loads
    assert short == []
    for t in tensors:
        a, b = beside[t], plain[t]
        assert (a.minimum, a.maximum, a.absmax, a.count, a.hist_range) == (b.minimum, b.maximum, b.absmax, b.count, b.hist_range)
        assert np.array_equal(a.hist, b.hist)
    assert np.array_equal(beside[tensors[0]].channel_mean, plain[tensors[0]].channel_mean)
