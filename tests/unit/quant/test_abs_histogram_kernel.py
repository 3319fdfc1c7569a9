"""The compiled histogram loop counts every element into the bin numpy's passes put it in.

Every threshold, and so every calibrated file, depends on these counts: the loop (hbtool.quant.abs_histogram)
must give numpy's ``bincount(min(|x| * per_bin, bins - 1))`` of the same picked elements, bin for bin, with
values on and one float step either side of every bin edge, through a subset index and a stride.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.quant import abs_histogram
from hbtool.quant.observers import DEFAULT_BINS, MAX_HIST_SAMPLES, TensorStats


def _numpy_counts(flat: np.ndarray, per_bin: float, bins: int) -> np.ndarray:
    scaled = np.multiply(np.abs(flat), per_bin, dtype=np.float64)
    np.minimum(scaled, bins - 1, out=scaled)
    return np.bincount(scaled.astype(np.int64), minlength=bins)


def _edge_values(dtype, hist_range: float, bins: int, rng) -> np.ndarray:
    edges = (np.arange(0, bins + 1) * (hist_range / bins)).astype(dtype)
    near = np.concatenate([edges, np.nextafter(edges, dtype(0)), np.nextafter(edges, dtype(np.inf)), [dtype(0), -dtype(0)]])
    signs = rng.choice([-1, 1], near.size).astype(dtype)
    near = near * signs
    return near[np.abs(near.astype(np.float64)) <= hist_range * 1.01]   # a little past the top: the last bin takes it


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_counts_match_numpy_on_every_bin_edge(dtype):
    rng = np.random.default_rng(3)
    for hist_range in (2.5, 1e-3, 317.0, 1e-38):
        per_bin = DEFAULT_BINS / hist_range
        flat = np.concatenate([_edge_values(dtype, hist_range, DEFAULT_BINS, rng),
                               (rng.standard_normal(20000) * hist_range / 4).astype(dtype)])
        flat = np.clip(flat, -hist_range * 1.01, hist_range * 1.01).astype(dtype)
        rng.shuffle(flat)
        hist = np.zeros(DEFAULT_BINS, np.int64)
        assert abs_histogram.add_abs_counts(hist, flat, per_bin)
        np.testing.assert_array_equal(hist, _numpy_counts(flat, per_bin, DEFAULT_BINS))
        # through a sorted subset index, and through a stride, added onto earlier counts
        index = np.sort(rng.choice(flat.size, 5000, replace=False))
        before = hist.copy()
        assert abs_histogram.add_abs_counts(hist, flat, per_bin, index)
        np.testing.assert_array_equal(hist - before, _numpy_counts(flat[index], per_bin, DEFAULT_BINS))
        before = hist.copy()
        assert abs_histogram.add_abs_counts(hist, flat, per_bin, step=7)
        np.testing.assert_array_equal(hist - before, _numpy_counts(flat[::7], per_bin, DEFAULT_BINS))


def test_other_float_types_are_left_to_numpy():
    hist = np.zeros(16, np.int64)
    assert not abs_histogram.add_abs_counts(hist, np.ones(10, np.float16), 4.0)
    assert not hist.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_tensor_stats_are_the_same_with_and_without_the_loop(dtype, monkeypatch):
    """Whole ``TensorStats`` updates (range doubling, shared subset index, stride, non-finite values dropped)."""
    rng = np.random.default_rng(11)
    size = MAX_HIST_SAMPLES * 3 + 5
    index = np.sort(rng.choice(size, MAX_HIST_SAMPLES, replace=False))
    batches = [(rng.standard_normal(size) * s).astype(dtype) for s in (1.0, 5.0, 0.2, 40.0)]
    batches.append(rng.standard_normal(1000).astype(dtype))              # small: every element
    batches.append(rng.standard_normal(MAX_HIST_SAMPLES * 2).astype(dtype))  # no index of its size: the stride
    with_nan = (rng.standard_normal(size) * 3).astype(dtype)
    with_nan[[5, 77]] = np.nan
    batches.append(with_nan)                                              # the index no longer fits: the stride

    def run() -> TensorStats:
        st = TensorStats("t")
        for x in batches:
            st.update(x.reshape(1, -1), index if x.size == size else None)
        return st

    compiled = run()
    monkeypatch.setattr(abs_histogram, "add_abs_counts", lambda *a, **k: False)
    reference = run()
    np.testing.assert_array_equal(compiled.hist, reference.hist)
    assert (compiled.hist_range, compiled.absmax, compiled.count, compiled.nonfinite) == \
        (reference.hist_range, reference.absmax, reference.count, reference.nonfinite)
    assert compiled.nonfinite == 2


def test_a_short_pass_keeps_numpy(monkeypatch):
    """The loop pays for numba's start-up only over a long pass: a short one bins in numpy (the same counts)."""
    from hbtool.quant.observers import COMPILED_HISTOGRAM_MIN_ELEMENTS, histogram_elements

    assert histogram_elements({"a": 10, "b": 1 << 20}, 8) == (10 + MAX_HIST_SAMPLES) * 8
    assert histogram_elements(None, 8) == histogram_elements({"a": 10}, None) == float("inf")
    assert histogram_elements({"a": 1 << 20}, 8) < COMPILED_HISTOGRAM_MIN_ELEMENTS <= histogram_elements({"a": 1 << 20}, 8000)
    called = []
    monkeypatch.setattr(abs_histogram, "add_abs_counts", lambda *a, **k: called.append(1) or False)
    TensorStats("t").update(np.arange(10, dtype=np.float32), compiled=False)
    assert not called
    TensorStats("t").update(np.arange(10, dtype=np.float32))
    assert called
