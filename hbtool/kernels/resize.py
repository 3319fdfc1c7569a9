"""Resize: where each output pixel reads, and the bilinear kernel.

Both interpolation modes share one source-coordinate rule, computed at build time for the
program's fixed shapes, exactly as ONNX defines it and onnxruntime evaluates it (float32,
same operation order), so the integer program indexes the pixels the float model indexes:

=======================  ===============================================================
``asymmetric``           ``x_out / scale``
``half_pixel``           ``(x_out + 0.5) / scale - 0.5``
``pytorch_half_pixel``   as ``half_pixel``, but 0 when the output axis has length 1
``align_corners``        ``x_out * (in - 1) / (out - 1)`` (0 when the output has length 1)
``tf_half_pixel_for_nn`` ``(x_out + 0.5) / scale``
=======================  ===============================================================

``scale`` is the float32 ``scales`` entry, or ``float32(out) / float32(in)`` when the model
gives ``sizes``. An axis of scale 1 is left as it is (onnxruntime does so for nearest even
where the rule would shift it, e.g. ``tf_half_pixel_for_nn``).

* **nearest** moves integer codes (input and output share the scale): the source index is
  the coordinate rounded by ``nearest_mode`` and clamped to the axis. It runs as data
  movement (:mod:`hbtool.kernels.movement` calls :func:`nearest_indices`); no kernel.
* **bilinear** (:class:`BilinearResize`, ``mode=linear`` on H and W of NCHW): per axis two
  source indices and integer weights ``w0 + w1 = 2**k`` (``k =`` :data:`WEIGHT_BITS`),
  ``w1 = round(lambda 2**k)`` for the float fraction ``lambda`` of the clamped coordinate.
  The output is ``shift(sum_ab wy_a wx_b x[iy_a, ix_b], 2k)``: a convex combination,
  so it stays in the input's range and needs no clamp. The plan
  (:mod:`hbtool.quant.plan`) gives Resize's output the input's scale (Resize is
  ``SCALE_PRESERVING``: interpolation never leaves the input's range), so the rounding
  shift is the whole requantization; there is no multiplier.

Bounds: ``|x| <= 2**15``, ``wy wx <= 2**(2k) = 2**30``; the sum of four products is at most
``2**45 < 2**52`` (rounding shift exact in both forms). The ONNX form gathers rows and
columns with ``Gather`` on DOUBLE tensors and weighs them with ``Mul``/``Add`` by constant
weight tensors: every intermediate is an integer below ``2**45``, exact.

Error against float Resize of the same codes: the rounding shift adds at most 1/2 LSB; the
weights are off by at most ``2**-(k+1)`` each, which moves the result by at most
``2**-(k+1) |x1 - x0|`` per axis, i.e. at most ``2 * 2**-(k+1) * (2**bits - 1)`` LSB: 0.008
LSB for int8, 1 LSB for int16 at the most extreme neighbour jump (full-scale edges).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from hbtool.kernels.base import Kernel, check
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING, int_range, rounding_shift_numpy, rounding_shift_onnx
from hbtool.kernels.linear import check_activation
from hbtool.kernels.units import VECTOR

#: coordinate transformations the integer forms compute (tf_crop_and_resize needs roi and extrapolation)
COORDINATE_MODES = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
#: fraction bits of each axis weight: w0 + w1 = 2**WEIGHT_BITS
WEIGHT_BITS = 15


def axis_scales(in_shape: Sequence[int], out_shape: Sequence[int], scales: Sequence[float] | None) -> list[np.float32]:
    """The float32 scale of every axis: the ``scales`` input, or ``out / in`` when ``sizes`` was given."""
    if scales is not None and len(scales):
        return [np.float32(s) for s in scales]
    return [np.float32(o) / np.float32(i) for i, o in zip(in_shape, out_shape)]


def source_coordinates(in_len: int, out_len: int, scale: float, mode: str) -> np.ndarray:
    """float32 [out_len]: the input coordinate of every output pixel (see the module table)."""
    if mode not in COORDINATE_MODES:
        raise ValueError(f"coordinate_transformation_mode {mode!r} has no integer form (one of {COORDINATE_MODES})")
    x = np.arange(int(out_len), dtype=np.float32)
    s, half = np.float32(scale), np.float32(0.5)
    if mode == "asymmetric":
        return x / s
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and out_len > 1):
        return (x + half) / s - half
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / s
    if mode == "align_corners" and out_len > 1:
        return x * np.float32(in_len - 1) / np.float32(out_len - 1)
    return np.zeros(int(out_len), np.float32)


def _unscaled(in_len: int, out_len: int, scale: float) -> bool:
    """An axis of scale 1, which onnxruntime leaves as it is whatever the coordinate rule says."""
    return bool(np.float32(scale) == 1 and in_len == out_len)


def nearest_indices(in_len: int, out_len: int, scale: float, mode: str, nearest_mode: str) -> np.ndarray:
    """int64 [out_len]: the input index each output pixel copies (ONNX ``mode=nearest``)."""
    if nearest_mode not in NEAREST_MODES:
        raise ValueError(f"nearest_mode {nearest_mode!r} is not one of {NEAREST_MODES}")
    if _unscaled(in_len, out_len, scale):
        return np.arange(int(in_len), dtype=np.int64)
    c = source_coordinates(in_len, out_len, scale, mode)
    tie = c == np.trunc(c) + np.float32(0.5)
    if nearest_mode == "round_prefer_floor":
        i = np.where(tie, np.floor(c), np.round(c))
    elif nearest_mode == "round_prefer_ceil":
        i = np.where(tie, np.ceil(c), np.round(c))
    elif nearest_mode == "floor":
        i = np.floor(c)
    else:
        i = np.ceil(c)
    return np.clip(i, 0, in_len - 1).astype(np.int64)


def linear_taps(in_len: int, out_len: int, scale: float, mode: str, weight_bits: int = WEIGHT_BITS):
    """int64 ``(i0, i1, w0, w1)`` [out_len] of one axis: ``out = (w0 x[i0] + w1 x[i1]) / 2**weight_bits``."""
    if _unscaled(in_len, out_len, scale):
        i = np.arange(int(in_len), dtype=np.int64)
        return i, i, np.full(int(in_len), 1 << int(weight_bits), np.int64), np.zeros(int(in_len), np.int64)
    c = np.clip(source_coordinates(in_len, out_len, scale, mode).astype(np.float64), 0.0, in_len - 1)
    i0 = np.minimum(np.floor(c), in_len - 1).astype(np.int64)
    i1 = np.minimum(i0 + 1, in_len - 1)
    one = 1 << int(weight_bits)
    w1 = np.floor((c - i0) * one + 0.5).astype(np.int64)
    w1 = np.where(i1 == i0, 0, w1)
    return i0, i1, one - w1, w1


@dataclass(frozen=True, eq=False)
class BilinearResize(Kernel):
    """Bilinear resize of H and W of an NCHW tensor; the output shares the input's scale."""

    unit = VECTOR
    merges_samples = True

    in_bits: int
    weight_bits: int
    rows: np.ndarray      # int64 [2, OH]: the two source rows of every output row
    row_weights: np.ndarray  # int64 [2, OH], each column sums to 2**weight_bits
    cols: np.ndarray      # int64 [2, OW]
    col_weights: np.ndarray  # int64 [2, OW]
    rounding: str = DEFAULT_ROUNDING

    @classmethod
    def build(cls, in_hw: Sequence[int], out_hw: Sequence[int], scales_hw: Sequence[float], mode: str,
              in_bits: int = 8, rounding: str = DEFAULT_ROUNDING, weight_bits: int = WEIGHT_BITS) -> "BilinearResize":
        """``scales_hw``: the float32 scales of H and W (:func:`axis_scales`); ``mode``: coordinate transformation."""
        int_range(in_bits)
        check(2 * weight_bits + in_bits - 1 + 2 < 52, "weights too wide for an exact rounding shift")
        (h, w), (oh, ow) = [int(v) for v in in_hw], [int(v) for v in out_hw]
        ry0, ry1, wy0, wy1 = linear_taps(h, oh, scales_hw[0], mode, weight_bits)
        rx0, rx1, wx0, wx1 = linear_taps(w, ow, scales_hw[1], mode, weight_bits)
        return cls(in_bits=int(in_bits), weight_bits=int(weight_bits), rows=np.stack([ry0, ry1]),
                   row_weights=np.stack([wy0, wy1]), cols=np.stack([rx0, rx1]), col_weights=np.stack([wx0, wx1]),
                   rounding=rounding)

    @property
    def out_hw(self) -> tuple[int, int]:
        return int(self.rows.shape[1]), int(self.cols.shape[1])

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        x = check_activation(x, self.in_bits)
        check(x.ndim == 4, "BilinearResize takes NCHW tensors")
        wy, wx = self.row_weights, self.col_weights
        t = x[:, :, self.rows[0], :] * wy[0][:, None] + x[:, :, self.rows[1], :] * wy[1][:, None]
        u = t[:, :, :, self.cols[0]] * wx[0] + t[:, :, :, self.cols[1]] * wx[1]
        return rounding_shift_numpy(u, 2 * self.weight_bits, self.rounding, check_range=False)

    def emit(self, b: OnnxBuilder, x: str) -> str:
        oh, ow = self.out_hw

        def weighed(src: str, idx: np.ndarray, w: np.ndarray, axis: int, shape: tuple[int, ...]) -> str:
            picked = b.op("Gather", src, b.const(idx, np.int64, "index"), axis=axis)
            return b.mul(picked, b.int_const(w.reshape(shape), hint="weight"))

        t = b.add(weighed(x, self.rows[0], self.row_weights[0], 2, (oh, 1)),
                  weighed(x, self.rows[1], self.row_weights[1], 2, (oh, 1)))
        u = b.add(weighed(t, self.cols[0], self.col_weights[0], 3, (ow,)),
                  weighed(t, self.cols[1], self.col_weights[1], 3, (ow,)))
        return rounding_shift_onnx(b, u, 2 * self.weight_bits, self.rounding)
