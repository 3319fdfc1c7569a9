"""Clipping thresholds from activation statistics: max, percentile, KL, MSE.

A symmetric quantizer with ``qmax`` levels on each side maps [-T, T] to integers with scale
``T / qmax``. The methods trade clipping error (values beyond T) against rounding error
(the step T/qmax): ``max`` never clips; ``percentile`` drops a tiny tail; ``kl`` (TensorRT's
entropy calibration) keeps the distribution's information; ``mse`` minimises the expected
squared error over the histogram, which is what accuracy usually follows.
"""

from __future__ import annotations

import numpy as np

from hbtool.quant.observers import TensorStats

METHODS = ("max", "percentile", "kl", "mse")


def threshold(stats: TensorStats, method: str, qmax: int, percentile: float = 0.99995) -> float:
    """The clipping threshold T (> 0) for ``stats`` with the given method (memoised on ``stats``)."""
    if method == "kl" and qmax + 1 >= stats.hist.size // 2:
        method = "mse"   # KL falls back to MSE at int16's levels: one search serves both
    key = (method, qmax, percentile if method == "percentile" else None)
    cache = stats.__dict__.setdefault("_thresholds", {})
    if key not in cache:
        cache[key] = _threshold(stats, method, qmax, percentile)
    return cache[key]


def _threshold(stats: TensorStats, method: str, qmax: int, percentile: float) -> float:
    if stats.absmax <= 0.0 or stats.hist_range <= 0.0:
        return max(stats.absmax, 1e-8)
    if method == "max":
        return stats.absmax
    if method == "percentile":
        return _percentile(stats, percentile)
    if method == "kl":
        return _kl(stats, qmax)
    if method == "mse":
        return _mse(stats, qmax)
    raise ValueError(f"unknown calibration method {method!r}")


def _percentile(stats: TensorStats, p: float) -> float:
    total = stats.hist.sum()
    if total == 0:
        return stats.absmax
    cum = np.cumsum(stats.hist)
    k = int(np.searchsorted(cum, p * total))
    return float(min(stats.absmax, (k + 1) * stats.bin_width))


def _mse_errors(hist: np.ndarray, centres: np.ndarray, candidates: np.ndarray, qmax: int) -> np.ndarray:
    """The expected squared error of each threshold in ``candidates`` (one row of bins each), as the search sums it."""
    step = candidates / qmax
    over = np.maximum(centres[None, :] - candidates[:, None], 0.0)
    return (hist[None, :] * (over**2)).sum(axis=1) + (hist[None, :] * (centres[None, :] <= candidates[:, None])).sum(axis=1) * step**2 / 12.0


def _mse(stats: TensorStats, qmax: int) -> float:
    """Threshold minimising E[(x - q(x))^2] over the histogram (bin centres as samples).

    Clipped part: squared distance to T; kept part: uniform rounding noise step^2 / 12. Summing every
    candidate over every bin is a matrix of 160 rows; instead each candidate's error is estimated
    from running sums of ``h``, ``h c`` and ``h c^2`` with a bound on the rounding, and only the
    candidates the bound cannot rule out (nearly always one) are summed bin by bin and decide: the
    very threshold the full matrix picks (``tests/unit/quant/test_kl_threshold.py``).
    """
    hist = stats.hist.astype(np.float64)
    width = stats.bin_width
    centres = (np.arange(hist.size) + 0.5) * width
    last = int(np.nonzero(hist)[0].max()) + 1
    hi = min(stats.absmax, last * width)
    candidates = np.linspace(hi * 0.05, hi, 160)
    hist, centres = hist[:last], centres[:last]
    kept = np.searchsorted(centres, candidates, side="right")     # bins with centre <= T: rounding noise only
    s0 = np.concatenate([[0.0], np.cumsum(hist)])
    s1 = np.concatenate([[0.0], np.cumsum(hist * centres)])
    s2 = np.concatenate([[0.0], np.cumsum(hist * centres**2)])
    t0, t1, t2 = s0[-1] - s0[kept], s1[-1] - s1[kept], s2[-1] - s2[kept]    # sums over the clipped bins
    step = candidates / qmax
    noise = s0[kept] * step**2 / 12.0
    estimate = t2 - 2.0 * candidates * t1 + candidates**2 * t0 + noise
    # every sum has at most ``last`` terms; each of the running sums is subtracted from a total, so both the
    # estimate and the bin-by-bin sum are within a few ``last * eps`` of the magnitudes summed
    slack = 16.0 * (last + 8) * np.finfo(np.float64).eps * (s2[-1] + 2.0 * candidates * s1[-1] + candidates**2 * s0[-1] + noise)
    if not (np.all(np.isfinite(estimate)) and np.all(np.isfinite(slack))):
        return float(candidates[int(np.argmin(_mse_errors(hist, centres, candidates, qmax)))])
    rows = np.flatnonzero(estimate - slack <= np.min(estimate + slack))
    return float(candidates[rows[int(np.argmin(_mse_errors(hist, centres, candidates[rows], qmax)))]])


def _kl_edges(i: int, levels: int) -> np.ndarray:
    """The first bin of each of the ``levels`` groups that bins ``[0, i)`` merge into, as ``np.linspace``
    cuts them; memoised, as every tensor asks for the same cuts."""
    edges = _KL_EDGES.get((i, levels))
    if edges is None:
        edges = np.linspace(0, i, levels + 1).astype(np.int64)
        edges = _KL_EDGES[(i, levels)] = edges[:-1][np.diff(edges) > 0]
    return edges


_KL_EDGES: dict[tuple[int, int], np.ndarray] = {}


def _kl_of_cut(hist: np.ndarray, tail: np.ndarray, i: int, levels: int) -> float | None:
    """KL(P || Q) of the cut at bin ``i`` (None: P or Q empty), summed as TensorRT's loop sums it."""
    bins = hist.size
    src = hist[:i]
    p = src.copy()
    if i < bins:
        p[i - 1] += tail[i]
    ps = p.sum()
    if ps == 0:
        return None
    edges = _kl_edges(i, levels)
    sums = np.add.reduceat(src, edges)
    nonzero = np.add.reduceat((src > 0).astype(np.float64), edges)
    per_bin = np.where(nonzero > 0, sums / np.maximum(nonzero, 1), 0.0)
    group = np.searchsorted(edges, np.arange(i), side="right") - 1
    q = np.where(src > 0, per_bin[group], 0.0)
    qs = q.sum()
    if qs == 0:
        return None
    pn, qn = p / ps, q / qs
    mask = pn > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.sum(pn[mask] * np.log(pn[mask] / np.where(qn[mask] > 0, qn[mask], 1e-12))))


def _kl_estimates(hist: np.ndarray, cuts: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(KL of every cut, a bound on how far each may be from :func:`_kl_of_cut`), from per-group sums.

    ``sum_b p_b log(p_b/ps / (q_b/qs))`` splits into running sums of ``h log h`` and ``h`` over the
    bins and one ``sums_g log(sums_g / nonzero_g)`` per group, so a cut costs O(groups), not O(bins).
    None when a cut's groups are not all non-empty (then every cut is summed bin by bin).
    """
    h = hist.astype(np.float64)
    bins = h.size
    counts = np.concatenate([[0], np.cumsum(hist, dtype=np.int64)])         # counts[b] = sum(hist[:b])
    filled = np.concatenate([[0], np.cumsum(hist > 0, dtype=np.int64)])     # non-empty bins among hist[:b]
    with np.errstate(divide="ignore", invalid="ignore"):
        hlogh = np.where(h > 0, h * np.log(np.where(h > 0, h, 1.0)), 0.0)
    s1 = np.concatenate([[0.0], np.cumsum(hlogh)])
    edge_rows = [_kl_edges(int(i), levels) for i in cuts]
    if any(e.size != levels for e in edge_rows):
        return None
    edges = np.stack(edge_rows)
    ends = np.concatenate([edges[:, 1:], cuts[:, None]], axis=1)
    sums = (counts[ends] - counts[edges]).astype(np.float64)
    nonzero = (filled[ends] - filled[edges]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_bin = np.where(nonzero > 0, sums / np.maximum(nonzero, 1), 1.0)
        g_terms = np.where(sums > 0, sums * np.log(per_bin), 0.0)
    total = float(counts[-1])
    ps = total                       # P keeps every count: the tail goes into its last bin
    qs = counts[cuts].astype(np.float64)   # Q spreads each group's count over its non-empty bins
    last = cuts - 1
    h_last = h[last]
    before = counts[last].astype(np.float64)             # counts of the bins before the last one
    g_last = per_bin[:, -1]
    inner = (s1[last] - before * np.log(ps) + before * np.log(np.maximum(qs, 1.0))
             - (g_terms.sum(axis=1) - np.where(h_last > 0, h_last * np.log(g_last), 0.0)))
    p_last = h_last + np.where(cuts < bins, total - counts[np.minimum(cuts, bins)], 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        qn_last = np.where(h_last > 0, g_last / np.maximum(qs, 1.0), 1e-12)
        last_term = np.where(p_last > 0, (p_last / ps) * np.log((p_last / ps) / qn_last), 0.0)
    kl = inner / ps + last_term
    scale = (np.abs(s1[last]) + before * (abs(np.log(ps)) + np.abs(np.log(np.maximum(qs, 1.0))))
             + np.abs(g_terms).sum(axis=1)) / ps + np.abs(last_term) + 1.0
    # every sum above has fewer than 4 * bins terms: 64 * bins * eps * magnitude is far above their rounding
    slack = 64 * bins * np.finfo(np.float64).eps * scale
    return kl, slack


def _kl(stats: TensorStats, qmax: int) -> float:
    """TensorRT-style entropy calibration on the |x| histogram; falls back to MSE for int16.

    For each candidate cut i, P is the histogram up to i with the tail folded into its last bin,
    Q merges P's bins into ``qmax + 1`` levels and spreads each level evenly over its non-empty
    bins; the cut with the smallest KL(P || Q) wins (the first of equals).

    Summing every cut bin by bin (:func:`_kl_of_cut`) is most of a calibration's planning time, so
    the divergences of all cuts are first estimated together from per-group sums with a bound on
    their rounding (:func:`_kl_estimates`); only the cuts the bound cannot rule out (nearly always
    one) are summed bin by bin, in cut order, and decide. The threshold is the very float the
    cut-by-cut loop gives (``tests/unit/quant/test_kl_threshold.py``).
    """
    levels = qmax + 1
    hist = stats.hist
    bins = hist.size
    if levels >= bins // 2:
        return _mse(stats, qmax)
    last = int(np.nonzero(hist)[0].max()) + 1
    start = max(levels, 1)
    cuts = np.arange(start, max(last, start) + 1, max(1, (last - start) // 96))
    tail = np.cumsum(hist[::-1].astype(np.float64))[::-1]   # tail[i] = sum(hist[i:])
    est = _kl_estimates(hist, cuts, levels)
    if est is None or not (np.all(np.isfinite(est[0])) and np.all(np.isfinite(est[1]))):
        candidates = cuts
    else:
        kl, slack = est
        candidates = cuts[kl - slack <= np.min(kl + slack)]
    best_i, best_kl = last, np.inf
    h = hist.astype(np.float64)
    for i in candidates:
        kl_i = _kl_of_cut(h, tail, int(i), levels)
        if kl_i is not None and kl_i < best_kl:
            best_kl, best_i = kl_i, int(i)
    return float(min(stats.absmax, (best_i + 0.5) * stats.bin_width))


def sqnr_db(stats: TensorStats, thr: float, qmax: int) -> float:
    """Expected signal-to-quantization-noise ratio (dB) of ``stats`` quantized with threshold ``thr``.

    Noise: uniform rounding noise step^2/12 inside [-thr, thr], squared clipping distance outside.
    It predicts how much a tensor loses at a given bit width before anything is run.
    """
    hist = stats.hist.astype(np.float64)
    total = hist.sum()
    if total == 0 or stats.hist_range <= 0:
        return float("inf")
    centres = (np.arange(hist.size) + 0.5) * stats.bin_width
    signal = float((hist * centres**2).sum() / total)
    if signal <= 0:
        return float("inf")
    step = thr / qmax
    inside = centres <= thr
    noise = float((hist[inside].sum() * step**2 / 12.0 + (hist[~inside] * (centres[~inside] - thr) ** 2).sum()) / total)
    if noise <= 0:
        return float("inf")
    return 10.0 * np.log10(signal / noise)
