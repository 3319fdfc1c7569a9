"""The KL threshold is the very float the cut-by-cut loop gives.

``hbtool.quant.thresholds._kl`` estimates every cut's divergence from per-group sums and sums only
the cuts its rounding bound cannot rule out bin by bin. Here the loop it replaced (TensorRT's entropy
calibration, every cut summed bin by bin) is the reference: on histograms of many shapes (bell, long
tail, sparse with empty bins, all mass in a few bins, mass up to the last bin, ties) and every qmax
calibration uses, both give the same threshold to the last bit, and the estimates stay inside
their bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.quant.observers import DEFAULT_BINS, TensorStats
from hbtool.quant.thresholds import _kl, _kl_estimates, _kl_of_cut, _mse, threshold


def _reference_kl(stats: TensorStats, qmax: int) -> float:
    """The cut-by-cut loop as calibration ran it before the estimates (copied unchanged)."""
    levels = qmax + 1
    hist = stats.hist.astype(np.float64)
    bins = hist.size
    if levels >= bins // 2:
        return _mse(stats, qmax)
    last = int(np.nonzero(hist)[0].max()) + 1
    start = max(levels, 1)
    best_i, best_kl = last, np.inf
    tail = np.cumsum(hist[::-1])[::-1]
    for i in range(start, max(last, start) + 1, max(1, (last - start) // 96)):
        src = hist[:i]
        p = src.copy()
        if i < bins:
            p[i - 1] += tail[i]
        ps = p.sum()
        if ps == 0:
            continue
        edges = np.linspace(0, i, levels + 1).astype(np.int64)
        edges = edges[:-1][np.diff(edges) > 0]
        sums = np.add.reduceat(src, edges)
        nonzero = np.add.reduceat((src > 0).astype(np.float64), edges)
        per_bin = np.where(nonzero > 0, sums / np.maximum(nonzero, 1), 0.0)
        group = np.searchsorted(edges, np.arange(i), side="right") - 1
        q = np.where(src > 0, per_bin[group], 0.0)
        qs = q.sum()
        if qs == 0:
            continue
        pn, qn = p / ps, q / qs
        mask = pn > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = float(np.sum(pn[mask] * np.log(pn[mask] / np.where(qn[mask] > 0, qn[mask], 1e-12))))
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(min(stats.absmax, (best_i + 0.5) * stats.bin_width))


def _observed(values: np.ndarray) -> TensorStats:
    st = TensorStats("t")
    for chunk in np.array_split(values.astype(np.float32), 4):
        st.update(chunk)
    return st


def _histograms() -> list[TensorStats]:
    rng = np.random.default_rng(7)
    out = [
        _observed(rng.normal(size=200_000)),
        _observed(rng.laplace(size=200_000)),
        _observed(rng.standard_cauchy(size=100_000)),                 # a very long tail: most bins empty
        _observed(np.abs(rng.normal(size=50_000)) ** 3),
        _observed(np.maximum(rng.normal(size=80_000), 0.0)),          # ReLU output: half the mass at 0
        _observed(rng.integers(0, 5, size=10_000).astype(np.float64)),  # a few values only
        _observed(rng.uniform(-1, 1, size=60_000)),
        _observed(np.concatenate([rng.normal(size=30_000), [40.0, -55.0]])),  # outliers
        _observed(rng.normal(size=300)),                              # few samples: sparse histogram
    ]
    for pattern in ("flat", "last_bin", "two_bins", "front"):
        st = TensorStats("h")
        st.absmax, st.hist_range, st.count = 1.0, 1.0, 1
        hist = np.zeros(DEFAULT_BINS, np.int64)
        if pattern == "flat":          # every cut scores alike: ties decide by cut order
            hist[:] = 5
        elif pattern == "last_bin":
            hist[::3] = rng.integers(1, 50, size=hist[::3].size)
            hist[-1] = 1000
        elif pattern == "two_bins":
            hist[0], hist[1500] = 10_000, 3
        else:                          # all mass before the first cut (last < start)
            hist[:40] = rng.integers(0, 100, size=40)
        st.hist = hist
        out.append(st)
    return out


@pytest.mark.parametrize("qmax", [127, 7, 15, 255, 32767])
def test_kl_threshold_is_the_loop_s_float(qmax):
    for st in _histograms():
        assert _kl(st, qmax) == _reference_kl(st, qmax)


def test_estimates_stay_inside_their_bound():
    for st in _histograms():
        hist = st.hist
        last = int(np.nonzero(hist)[0].max()) + 1
        cuts = np.arange(128, max(last, 128) + 1, max(1, (last - 128) // 96))
        est = _kl_estimates(hist, cuts, 128)
        assert est is not None
        kl, slack = est
        tail = np.cumsum(hist[::-1].astype(np.float64))[::-1]
        exact = [_kl_of_cut(hist.astype(np.float64), tail, int(i), 128) for i in cuts]
        for k, e, s, x in zip(cuts, kl, slack, exact):
            if x is not None:
                assert abs(e - x) <= s / 100, (k, e, x, s)


def test_int16_kl_and_mse_share_one_search():
    st = _histograms()[0]
    assert threshold(st, "kl", 32767) == threshold(st, "mse", 32767) == _mse(st, 32767)
