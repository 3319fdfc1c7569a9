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


def _mse(stats: TensorStats, qmax: int) -> float:
    """Threshold minimising E[(x - q(x))^2] over the histogram (bin centres as samples)."""
    hist = stats.hist.astype(np.float64)
    width = stats.bin_width
    centres = (np.arange(hist.size) + 0.5) * width
    last = int(np.nonzero(hist)[0].max()) + 1
    hi = min(stats.absmax, last * width)
    candidates = np.linspace(hi * 0.05, hi, 160)
    hist, centres = hist[:last], centres[:last]
    # clipped part: squared distance to T; kept part: uniform rounding noise step^2 / 12
    step = candidates / qmax
    over = np.maximum(centres[None, :] - candidates[:, None], 0.0)
    err = (hist[None, :] * (over**2)).sum(axis=1) + (hist[None, :] * (centres[None, :] <= candidates[:, None])).sum(axis=1) * step**2 / 12.0
    return float(candidates[int(np.argmin(err))])


def _kl(stats: TensorStats, qmax: int) -> float:
    """TensorRT-style entropy calibration on the |x| histogram; falls back to MSE for int16.

    For each candidate cut i, P is the histogram up to i with the tail folded into its last bin,
    Q merges P's bins into ``qmax + 1`` levels and spreads each level evenly over its non-empty
    bins; the cut with the smallest KL(P || Q) wins. Merging uses ``np.add.reduceat``.
    """
    levels = qmax + 1
    hist = stats.hist.astype(np.float64)
    bins = hist.size
    if levels >= bins // 2:
        return _mse(stats, qmax)
    last = int(np.nonzero(hist)[0].max()) + 1
    start = max(levels, 1)
    best_i, best_kl = last, np.inf
    tail = np.cumsum(hist[::-1])[::-1]  # tail[i] = sum(hist[i:])
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
