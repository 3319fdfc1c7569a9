"""The KL and MSE thresholds are the very floats the bin-by-bin searches give.

``hbtool.quant.thresholds._kl`` estimates every cut's divergence from per-group sums and sums only
the cuts its rounding bound cannot rule out bin by bin. Here the loop it replaced (TensorRT's entropy
calibration, every cut summed bin by bin) is the reference: on histograms of many shapes (bell, long
tail, sparse with empty bins, all mass in a few bins, mass up to the last bin, ties) and every qmax
calibration uses, both give the same threshold to the last bit, and the estimates stay inside
their bound. The same for the MSE search (``_mse``: running sums and a bound, then the few
candidates the bound keeps summed as the 160-row matrix summed them).
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.quant.observers import DEFAULT_BINS, TensorStats
from hbtool.quant.thresholds import _kl, _kl_estimates, _kl_of_cut, _mse, _mse_errors, threshold


def _reference_mse(stats: TensorStats, qmax: int) -> float:
    """The MSE search as calibration ran it before the estimates: all 160 candidates summed over every bin."""
    hist = stats.hist.astype(np.float64)
    width = stats.bin_width
    centres = (np.arange(hist.size) + 0.5) * width
    last = int(np.nonzero(hist)[0].max()) + 1
    hi = min(stats.absmax, last * width)
    candidates = np.linspace(hi * 0.05, hi, 160)
    hist, centres = hist[:last], centres[:last]
    step = candidates / qmax
    over = np.maximum(centres[None, :] - candidates[:, None], 0.0)
    err = (hist[None, :] * (over**2)).sum(axis=1) + (hist[None, :] * (centres[None, :] <= candidates[:, None])).sum(axis=1) * step**2 / 12.0
    return float(candidates[int(np.argmin(err))])


def _reference_kl(stats: TensorStats, qmax: int) -> float:
    """The cut-by-cut loop as calibration ran it before the estimates (copied unchanged)."""
    levels = qmax + 1
    hist = stats.hist.astype(np.float64)
    bins = hist.size
    if levels >= bins // 2:
        return _reference_mse(stats, qmax)
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


@pytest.mark.parametrize("qmax", [127, 7, 15, 255, 32767])
def test_mse_threshold_is_the_matrix_s_float(qmax):
    for st in _histograms():
        assert _mse(st, qmax) == _reference_mse(st, qmax)


def test_mse_rows_summed_alone_as_in_the_matrix():
    """The candidates the bound keeps are summed as rows of a smaller matrix: each row's sum is its own."""
    st = _histograms()[1]
    hist = st.hist.astype(np.float64)
    centres = (np.arange(hist.size) + 0.5) * st.bin_width
    cands = np.linspace(0.1, st.absmax, 160)
    full = _mse_errors(hist, centres, cands, 127)
    for k in (0, 37, 159):
        assert _mse_errors(hist, centres, cands[k:k + 1], 127)[0] == full[k]
    assert np.array_equal(_mse_errors(hist, centres, cands[[3, 90, 91]], 127), full[[3, 90, 91]])
