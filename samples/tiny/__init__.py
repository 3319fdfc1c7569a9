"""Tiny image classifiers trained on scikit-learn's handwritten digits.

The 8x8 digits (values 0-16) are upscaled to 32x32 (bilinear), scaled to 0-255 uint8 and the
single channel is replicated to three ("rgb"), so they look like a small image model's input.
The models take the NORMALISED input ``(x - MEAN) * SCALE`` (mean 127.5, scale 1/127.5 per
channel), which is what hbtool's ``norm_type: data_mean_and_scale`` folds into the deployed
model so that it takes raw 0-255 pixels.

Committed files (regenerate with ``python -m samples.tiny.train``):

* ``samples/tiny/{tiny_cnn,tiny_swin,tiny_vit}.onnx`` -- opset 17, input ``input`` 1x3x32x32
  float (normalised), output ``logits`` 1x10;
* ``samples/tiny/metrics.json`` -- float held-out top-1 of each model;
* ``samples/data/digits_heldout.npz`` -- ``images`` uint8 N x 3 x 32 x 32, ``labels`` int64;
* ``samples/data/digits_cal/*.png`` -- 64 calibration images (32x32 RGB) from the train split.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .. import DATA_DIR, TINY_DIR

MODELS = ("tiny_cnn", "tiny_swin", "tiny_vit")
MEAN = 127.5
SCALE = 1.0 / 127.5
HELDOUT_PATH = DATA_DIR / "digits_heldout.npz"
CAL_DIR = DATA_DIR / "digits_cal"
METRICS_PATH = TINY_DIR / "metrics.json"


def onnx_path(name: str) -> Path:
    """Path of the committed ONNX file of tiny model ``name``."""
    if name not in MODELS:
        raise KeyError(f"unknown tiny model {name!r}; choose from {MODELS}")
    return TINY_DIR / f"{name}.onnx"


def normalize(images: np.ndarray) -> np.ndarray:
    """uint8 0-255 images -> the float32 input the tiny models expect."""
    return ((images.astype(np.float32) - MEAN) * SCALE).astype(np.float32)


def load_heldout() -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 N x 3 x 32 x 32, labels int64 N) of the held-out split."""
    with np.load(HELDOUT_PATH) as data:
        return data["images"], data["labels"]


def load_metrics() -> dict:
    """The recorded metrics (``metrics.json``)."""
    return json.loads(METRICS_PATH.read_text())


__all__ = ["MODELS", "MEAN", "SCALE", "HELDOUT_PATH", "CAL_DIR", "METRICS_PATH",
           "onnx_path", "normalize", "load_heldout", "load_metrics"]
