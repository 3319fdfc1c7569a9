"""The statistics pass bins |x| with fewer array passes, into the very bins of the float64 formula.

``TensorStats.update`` computes ``min(|x| * per_bin, bins - 1)`` as ``|x|`` in the tensor's own float
type (exact), multiplied in float64 (the same product as of the float64 value); every threshold and
so every calibrated file depends on these counts, so they must not move by one element.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.quant.observers import DEFAULT_BINS, TensorStats


def _reference_hist(batches: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The histogram as the float64 formula bins it, with the same range doubling."""
    ref = TensorStats("ref")
    for x in batches:
        flat = x.reshape(-1)
        amax = float(np.abs(flat.astype(np.float64)).max())
        ref.absmax = max(ref.absmax, amax)
        if amax == 0.0:
            ref.hist[0] += flat.size
            continue
        ref._grow_to(amax)
        per_bin = ref.bins / ref.hist_range
        idx = np.minimum(np.abs(flat.astype(np.float64)) * per_bin, ref.bins - 1).astype(np.int64)
        ref.hist += np.bincount(idx, minlength=ref.bins)
    return ref.hist, ref.hist_range


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_bins_match_the_float64_formula(dtype):
    rng = np.random.default_rng(7)
    batches = []
    for k, scale in enumerate([1.0, 3.0, 1e-3, 40.0]):
        x = (rng.standard_normal(5000) * scale).astype(dtype)
        x[:4] = [0.0, -0.0, np.abs(x).max(), -np.abs(x).max()]   # values on the top edge and at zero
        batches.append(x)
    # values within one float step of every bin edge of the range the first batch sets (where a product rounded
    # in another precision would land in the neighbouring bin)
    first = TensorStats("first")
    first.update(batches[0])
    edges = (np.arange(1, DEFAULT_BINS) * (first.hist_range / DEFAULT_BINS)).astype(dtype)
    near = np.concatenate([edges, np.nextafter(edges, dtype(0)), np.nextafter(edges, dtype(np.inf))])
    batches.insert(1, near[np.abs(near.astype(np.float64)) <= first.hist_range])
    stats = TensorStats("t")
    for x in batches:
        stats.update(x)
    hist, hist_range = _reference_hist(batches)
    assert stats.hist_range == hist_range
    assert stats.hist.sum() == sum(x.size for x in batches)
    np.testing.assert_array_equal(stats.hist, hist)
    assert stats.hist.size == DEFAULT_BINS
