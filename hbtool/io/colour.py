"""The one RGB <-> YUV conversion: calibration, the emulator's inputs and the camera model all call it.

Two directions, one definition each, both on :mod:`hbtool.kernels.colour`'s BT.601 matrix:

* **YUV (a camera frame) -> the training colour**: :func:`runtime_to_train` is the chip's own
  integer converter (:class:`~hbtool.kernels.colour.InputConvert` without the mean/scale):
  chroma upsampled by nearest neighbour, ``A p + B`` with the integer matrix at ``2**-14``
  (:data:`~hbtool.kernels.colour.FRACTION_BITS`), neither rounded nor clipped to 0-255. A
  calibration ``.nv12`` frame therefore gives the float model exactly the values the chip's
  conversion computes before it normalises (float32 holds ``A p + B`` at ``2**-14`` exactly).
* **RGB -> YUV (what a camera writes)**: :func:`rgb_to_yuv` (unrounded, full range or
  ``bt601_video``), :func:`round_pixels` (round half up, clip to 0-255), :func:`yuv_to_nv12`
  (the mean of each 2x2 block of chroma). Calibration's images for a model trained on yuv444
  (:func:`rgb_to_yuv444`) and ``hbtool simulate``'s images for a yuv444 or nv12 input
  (:func:`hbtool.io.runtime_input.to_runtime`) are the same numbers, bit for bit.
"""

from __future__ import annotations

import numpy as np

from hbtool.errors import InputError
from hbtool.kernels.colour import (FRACTION_BITS, VIDEO_OFFSET, VIDEO_SPAN, YUV_OFFSET, buffer_pixels, colour_sums,
                                   fixed_point_conversion, rgb_to_yuv_matrix)


def round_pixels(values: np.ndarray) -> np.ndarray:
    """Values as an 8-bit buffer holds them: rounded half up (``floor(v + 0.5)``) and clipped to 0-255, float64."""
    return np.clip(np.floor(np.asarray(values, np.float64) + 0.5), 0, 255)


def rgb_to_yuv(rgb: np.ndarray, video_range: bool = False) -> np.ndarray:
    """Unrounded BT.601 YUV (last axis Y, U, V) of RGB pixel values (last axis R, G, B), float64.

    Full range (JFIF, ``input_space_and_range: regular``) or, with ``video_range``, Y in 16-235 and
    U/V in 16-240.
    """
    yuv = np.asarray(rgb, np.float64) @ rgb_to_yuv_matrix().T + YUV_OFFSET
    return to_video_range(yuv) if video_range else yuv


def to_video_range(yuv: np.ndarray) -> np.ndarray:
    """Full-range YUV -> BT.601 video range (Y 16-235, U/V 16-240), unrounded."""
    return VIDEO_OFFSET + (np.asarray(yuv, np.float64) - YUV_OFFSET) * VIDEO_SPAN / 255.0


def rgb_to_yuv444(rgb: np.ndarray) -> np.ndarray:
    """Full-range YUV of RGB pixels as an 8-bit yuv444 buffer holds it (rounded half up, clipped), float32."""
    return round_pixels(rgb_to_yuv(rgb)).astype(np.float32)


def yuv_to_nv12(yuv: np.ndarray) -> np.ndarray:
    """Unrounded YUV ``(..., H, W, 3)`` -> nv12 ``(..., 3H/2, W)`` uint8 (2x2 chroma means, rounded half up)."""
    h, w = yuv.shape[-3], yuv.shape[-2]
    if h % 2 or w % 2:
        raise InputError(f"nv12 needs an even height and width, got {h}x{w}", "give images of even height and width")
    y = round_pixels(yuv[..., 0])
    c = yuv[..., 1:].reshape(yuv.shape[:-3] + (h // 2, 2, w // 2, 2, 2)).mean(axis=(-4, -2))
    uv = round_pixels(c).reshape(yuv.shape[:-3] + (h // 2, w))
    return np.concatenate([y, uv], axis=-2).astype(np.uint8)


def runtime_to_train(buffer: np.ndarray, fmt: str, train: str, height: int, width: int, *,
                     layout_in: str = "NHWC", video_range: bool = False) -> np.ndarray:
    """A batch of run-time pixels (0-255: nv12 ``(N, 3H/2, W)``, else ``(N, H, W, C)`` or NCHW) in colour
    ``train``, as ``(N, H, W, C)`` float32 values of the chip's integer conversion (see the module doc)."""
    weight, bias = fixed_point_conversion(fmt, train, video_range=video_range)
    pixels = buffer_pixels(np.asarray(buffer).astype(np.int64), fmt, height, width, layout_in)
    return (colour_sums(pixels, weight, bias) / float(2**FRACTION_BITS)).astype(np.float32)
