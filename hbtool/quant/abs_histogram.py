"""Count |x| into histogram bins in one compiled pass (the statistics pass's histogram).

``TensorStats.update`` bins a fixed subset of every observed tensor's elements, on every sample. In numpy
that is six array passes (gather the subset, |x|, the float64 product, the clip to the last bin, the cast
to integers, ``bincount``) with a temporary each; on the PP-OCRv5 recogniser (230 observed tensors) they
cost 3.5 of the statistics pass's 8 CPU seconds, more than the model's own 64 runs. The loop here reads
each chosen element once and adds 1 to its bin, with the GIL released, so the statistics thread also
leaves the interpreter to the thread feeding onnxruntime.

Why the counts are the very counts numpy gives: the bin of an element is
``int64(min(float64(|x|) * per_bin, bins - 1))`` in both. |x| is exact in any float type and the
float64 value of a float32 is exact, so ``abs(float64(x))`` is numpy's ``float64(abs(x))``; the product is
one IEEE float64 multiplication (numba compiles without fast-math, so nothing is fused or reordered);
``min`` with the last bin and the truncating cast are exact. The elements are those numpy's
``flat[index]`` or ``flat[::step]`` picks. ``tests/unit/quant/test_abs_histogram_kernel.py`` compares the
counts bin for bin, with values on every bin edge.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# float types the compiled loop takes (the others, float16 and rarer ones, keep numpy's passes)
COMPILED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@njit(nogil=True, cache=True)
def _count_picked(flat, index, per_bin, last_bin, hist):   # pragma: no cover - compiled
    for k in range(index.size):
        v = abs(np.float64(flat[index[k]])) * per_bin
        if v > last_bin:
            v = last_bin
        hist[np.int64(v)] += 1


@njit(nogil=True, cache=True)
def _count_strided(flat, step, per_bin, last_bin, hist):   # pragma: no cover - compiled
    for k in range(0, flat.size, step):
        v = abs(np.float64(flat[k])) * per_bin
        if v > last_bin:
            v = last_bin
        hist[np.int64(v)] += 1


def add_abs_counts(hist: np.ndarray, flat: np.ndarray, per_bin: float, index: np.ndarray | None = None, step: int = 1) -> bool:
    """Add to ``hist`` (int64) the bin counts of ``|flat[index]|`` (or of ``|flat[::step]|``) for bins of width
    ``1 / per_bin``, the last bin taking everything above it. ``flat``: one-dimensional, finite.

    Returns False, having counted nothing, for a float type the loop is not compiled for (the caller bins it in numpy)."""
    if flat.dtype not in COMPILED_DTYPES or hist.dtype != np.int64 or flat.ndim != 1:
        return False
    last_bin = float(hist.size - 1)
    flat = np.ascontiguousarray(flat)
    if index is not None:
        _count_picked(flat, np.ascontiguousarray(index, dtype=np.int64), float(per_bin), last_bin, hist)
    else:
        _count_strided(flat, int(step), float(per_bin), last_bin, hist)
    return True


def load_loops() -> None:
    """Load both loops for float32 tensors (numba's import, then each loop from numba's on-disk cache, or compiled on
    the first run ever) by counting two zeros into a scratch histogram. The statistics pass calls this on a thread
    of its own while onnxruntime opens the session (which releases the GIL), instead of its first histogram
    paying for it while the feeding thread waits; nothing of the pass's own counts is touched."""
    hist = np.zeros(2, np.int64)
    flat = np.zeros(2, np.float32)
    add_abs_counts(hist, flat, 1.0, np.zeros(1, np.int64))
    add_abs_counts(hist, flat, 1.0, None, 1)
