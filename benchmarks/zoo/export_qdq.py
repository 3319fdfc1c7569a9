"""Corpus models that arrive already quantized: another corpus model through onnxruntime's ``quantize_static``.

A ``qdq`` spec names its ``base`` (a trained corpus model, exported first if missing) and its
``form`` (``prequantized.FORMS``: QDQ with int8 symmetric activations and per-channel weights; QDQ
with onnxruntime's defaults, uint8 activations with zero points and per-tensor weights; QOperator,
``QLinearConv`` and friends). The quantizer calibrates on the base model's first 32 calibration
samples (``data.samples(base, 32, 0)``, the images the corpus calibrates hbtool with), in float
form; the result is what a user who quantized the model with onnxruntime hands hbtool.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from benchmarks.zoo.corpus import BY_NAME, ModelSpec

CALIBRATION_SAMPLES = 32


def export(spec: ModelSpec, path: Path) -> None:
    from benchmarks.zoo.data import float_samples, samples
    from benchmarks.zoo.export import export_one
    from benchmarks.zoo.prequantized import quantize

    base = BY_NAME[spec.extra["base"]]
    if not base.onnx_path.exists():
        export_one(base)
    tmp = Path(tempfile.mkdtemp(prefix="export_qdq_"))
    try:
        written = quantize(base, spec.extra["form"], float_samples(base, samples(base, CALIBRATION_SAMPLES, 0)), tmp)
        dictionary = written.with_suffix(".dict.txt")
        if dictionary.exists():     # a recogniser's charset, beside the model as for its base
            shutil.copy(dictionary, path.with_suffix(".dict.txt"))
        shutil.move(str(written), str(path))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
