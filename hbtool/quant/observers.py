"""Streaming statistics of activations, so memory does not grow with the number of samples.

Per tensor we keep the exact absolute maximum and a histogram of |x| with a fixed number of
bins over a range that doubles when a larger value arrives: doubling merges pairs of bins
exactly, so no re-binning error accumulates. Large tensors feed the histogram a fixed random
subset of their elements (the maximum still sees every element): percentile, KL and MSE
thresholds are statistics of the distribution's shape, and 64k samples per batch resolve it
far below one quantization step, while the cost stays flat as models grow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEFAULT_BINS = 2048
MAX_HIST_SAMPLES = 1 << 16
# histogram elements of a whole statistics pass from which the compiled loop pays for numba's start-up (about 0.85
# CPU seconds against 3-4.5 ns saved per element): on 64 samples ResNet50 bins 4.6e8, MobileNetV2 3.2e8, PP-OCRv5 7.5e8
COMPILED_HISTOGRAM_MIN_ELEMENTS = 250_000_000


def histogram_elements(sizes: dict[str, int] | None, num_samples: int | None) -> float:
    """The elements a statistics pass of ``num_samples`` samples bins, from the observed tensors' sizes
    (inf when either is unknown)."""
    if sizes is None or num_samples is None:
        return float("inf")
    return float(sum(min(s, MAX_HIST_SAMPLES) for s in sizes.values())) * num_samples


@dataclass
class TensorStats:
    """What calibration remembers about one tensor."""

    name: str
    bins: int = DEFAULT_BINS
    absmax: float = 0.0
    minimum: float = np.inf
    maximum: float = -np.inf
    count: int = 0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(DEFAULT_BINS, np.int64))
    hist_range: float = 0.0  # upper edge of the histogram; 0 until the first non-zero value
    nonfinite: int = 0
    channel_mean: np.ndarray | None = None  # per-channel mean, when asked for (bias correction)
    channel_absmax: np.ndarray | None = None  # per-channel max |x|, when asked for (PTF, SmoothQuant)

    @property
    def bin_width(self) -> float:
        return self.hist_range / self.bins if self.hist_range > 0 else 0.0

    def update(self, x: np.ndarray, sample_index: np.ndarray | None = None, compiled: bool = True) -> None:
        """Fold one batch into the statistics. ``compiled``: count the histogram with the compiled loop
        (:mod:`hbtool.quant.abs_histogram`, the same counts); False keeps numpy's passes, which a short pass
        does not pay numba's start-up (about 0.85 CPU seconds) for."""
        x = np.asarray(x)
        if x.size == 0:
            return
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(np.float32)
        flat = x.reshape(-1)
        lo, hi = float(flat.min()), float(flat.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):
            # min/max propagate NaN and reach +-inf: only then pay for the element-wise check
            finite = np.isfinite(flat)
            self.nonfinite += int((~finite).sum())
            flat = flat[finite]
            if flat.size == 0:
                return
            lo, hi = float(flat.min()), float(flat.max())
        self.minimum = min(self.minimum, lo)
        self.maximum = max(self.maximum, hi)
        amax = max(abs(lo), abs(hi))
        self.absmax = max(self.absmax, amax)
        self.count += flat.size
        if amax == 0.0:
            self.hist[0] += flat.size
            return
        index, step = None, 1
        if sample_index is not None and flat.size == x.size and flat.size > sample_index.size:
            # the shared index was drawn for the whole tensor: after dropping non-finite values it no longer fits
            index = sample_index
        elif flat.size > MAX_HIST_SAMPLES:
            step = int(np.ceil(flat.size / MAX_HIST_SAMPLES))
        self._grow_to(amax)
        # float64: for a tensor of tiny values (1e-41, as deep randomly initialised networks give)
        # bins / hist_range exceeds float32's range, and a float32 product would overflow to inf
        per_bin = self.bins / self.hist_range
        # one compiled pass over the picked elements, the GIL released: the counts numpy's passes below give
        # (hbtool.quant.abs_histogram; tests/unit/quant/test_abs_histogram_kernel.py)
        if compiled:
            from hbtool.quant.abs_histogram import add_abs_counts   # numba: imported by the first histogram, not by every command

        if compiled and add_abs_counts(self.hist, flat, per_bin, index, step):
            return
        flat = flat[index] if index is not None else flat[::step]
        # |x| is exact in any float type and the float64 product is taken of the float64 value either way: the same
        # indices as min(|float64(x)| * per_bin, bins - 1) in fewer passes (tests/unit/quant/test_histogram_bins_exact.py)
        scaled = np.multiply(np.abs(flat), per_bin, dtype=np.float64)
        np.minimum(scaled, self.bins - 1, out=scaled)
        idx = scaled.astype(np.int64)
        self.hist += np.bincount(idx, minlength=self.bins)

    def _grow_to(self, amax: float) -> None:
        if self.hist_range == 0.0:
            # leave head-room so that typical later batches do not force a doubling at once
            self.hist_range = amax * 1.25
            return
        while amax > self.hist_range:
            merged = self.hist.reshape(-1, 2).sum(axis=1)
            self.hist = np.concatenate([merged, np.zeros(self.bins - merged.size, np.int64)])
            self.hist_range *= 2.0

    def merge(self, other: "TensorStats") -> None:
        """Fold another observer of the same tensor into this one (parallel collection)."""
        if other.count == 0:
            return
        self.minimum = min(self.minimum, other.minimum)
        self.maximum = max(self.maximum, other.maximum)
        self.count += other.count
        self.nonfinite += other.nonfinite
        if self.hist_range == 0.0:
            self.hist, self.hist_range, self.absmax = other.hist.copy(), other.hist_range, other.absmax
            return
        target = max(self.hist_range, other.hist_range)
        self._grow_to(target)
        theirs = TensorStats(other.name, other.bins, hist=other.hist.copy(), hist_range=other.hist_range)
        if theirs.hist_range > 0:
            # express both on a common doubling ladder; ranges may differ by a non-power of two,
            # so re-bin the other histogram by bin centres (a rare path: merges of partial runs)
            centres = (np.arange(theirs.bins) + 0.5) * theirs.bin_width
            idx = np.minimum((centres * (self.bins / self.hist_range)).astype(np.int64), self.bins - 1)
            np.add.at(self.hist, idx, theirs.hist)
        self.absmax = max(self.absmax, other.absmax)
