"""Movement ops that move whole aligned runs of codes (Swin's Roll, WindowPartition, WindowReverse on channel
rows) gather rows, not elements (``batching._aligned_runs``): the same arrays as the one-sample ops, sample by
sample, and as the element gather the index map ran before."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.ir.graph import Graph
from hbtool.kernels.movement import MOVEMENT
from hbtool.simulator import batching


def _node(op: str, in_shape: tuple, out_shape: tuple, attrs: dict):
    graph = Graph("g", 17)
    graph.set_value("x", in_shape, np.int16)
    graph.set_value("y", out_shape, np.int16)
    node = graph.add_node(op, ["x"], ["y"], attrs, name="n")
    return graph, node


CASES = [
    # op, one sample's input shape, output shape, attrs, the run length the rows take
    ("Roll", (1, 8, 8, 6), (1, 8, 8, 6), {"shifts": [-3, -3], "axes": [1, 2]}, 6),
    ("Roll", (1, 8, 8, 96), (1, 8, 8, 96), {"shifts": [3, 3], "axes": [1, 2]}, 96),
    ("Roll", (1, 4, 6), (1, 4, 6), {"shifts": [2], "axes": [2]}, 2),   # along the rows themselves: runs of 2
    ("Roll", (1, 4, 5), (1, 4, 5), {"shifts": [1], "axes": [2]}, 1),   # no aligned run: the element gather
    ("WindowPartition", (1, 8, 8, 6), (4, 4, 4, 6), {"window_size": [4, 4]}, 6),
    ("WindowPartition", (1, 14, 14, 12), (4, 49, 12), {"window_size": [7, 7]}, 12),
    ("WindowReverse", (4, 16, 6), (1, 8, 8, 6), {"window_size": [4, 4]}, 6),
]


@pytest.mark.parametrize("op, in_shape, out_shape, attrs, run", CASES)
def test_row_gather_equals_the_one_sample_op(op, in_shape, out_shape, attrs, run, monkeypatch):
    graph, node = _node(op, in_shape, out_shape, attrs)
    one = lambda xs: MOVEMENT[op](node, graph, *xs)  # noqa: E731
    rng = np.random.default_rng(len(in_shape) + in_shape[-1])
    x = rng.integers(-32768, 32768, (3,) + in_shape).astype(np.int16)
    want = np.stack([one([x[s]])[0] for s in range(3)])
    assert tuple(want.shape[1:]) == out_shape
    lengths = []
    real = batching._aligned_runs
    monkeypatch.setattr(batching, "_aligned_runs", lambda *a: lengths.append(real(*a)) or lengths[-1])
    got = batching.movement_step(node, graph, one)([x])[0]
    assert lengths == [run]
    assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    # the element gather (every run length 1) gives the same array
    monkeypatch.setattr(batching, "_aligned_runs", lambda *a: 1)
    assert np.array_equal(batching.movement_step(node, graph, one)([x])[0], want)


def test_aligned_runs_needs_whole_aligned_runs():
    idx = np.arange(12, dtype=np.int64)
    assert batching._aligned_runs(idx, 12, (2, 6)) == 6
    assert batching._aligned_runs(np.roll(idx, 3), 12, (2, 6)) == 3       # runs of 3 start at 9, 0, 3, 6
    assert batching._aligned_runs(np.roll(idx, 1), 12, (2, 6)) == 1       # runs start at 11: not aligned
    assert batching._aligned_runs(idx[::-1].copy(), 12, (2, 6)) == 1      # reversed: no run
    assert batching._aligned_runs(np.arange(1, 13, dtype=np.int64), 13, (2, 6)) == 1  # shifted by one
