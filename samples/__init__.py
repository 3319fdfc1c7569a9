"""Sample models for hbtool.

* :mod:`samples.architectures` -- standard architectures in plain torch
  (ResNet50, EfficientNet-Lite4, Swin-T, DeiT-Tiny), random init, seeded.
* :mod:`samples.export` -- ONNX export of those architectures (generated on demand).
* :mod:`samples.tiny` -- tiny classifiers trained on scikit-learn's digits; the trained
  ONNX files, the held-out set and a calibration set are committed.
* :mod:`samples.warts` -- builders of small ONNX models carrying the warts of real exports.

See ``samples/README.md``.
"""

from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parent
TINY_DIR = SAMPLES_DIR / "tiny"
DATA_DIR = SAMPLES_DIR / "data"

__all__ = ["SAMPLES_DIR", "TINY_DIR", "DATA_DIR"]
