"""Task metrics for ``debug_parameters.metric`` in the benchmarks (``module:function`` hooks).

``transcription_agreement``: the fraction of text lines whose CTC greedy transcription (argmax,
repeats collapsed, blank 0 dropped) is exactly the float model's. Character indices are compared,
so no dictionary is needed; blank is index 0 for PaddleOCR and ddddocr alike.
"""

from __future__ import annotations

import numpy as np


def _decode(row: np.ndarray) -> tuple[int, ...]:
    idx = np.argmax(row.reshape(-1, row.shape[-1]), axis=-1)
    out, last = [], -1
    for i in idx.tolist():
        if i != last and i != 0:
            out.append(i)
        last = i
    return tuple(out)


def transcription_agreement(quantized: dict, float_: dict) -> float:
    name = next(iter(float_))
    q, f = np.asarray(quantized[name]), np.asarray(float_[name])
    return float(np.mean([_decode(a) == _decode(b) for a, b in zip(q, f)]))
