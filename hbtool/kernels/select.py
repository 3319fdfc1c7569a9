"""Kernels that choose between values: PRelu, elementwise Max / Min, ArgMax / ArgMin.

None of them multiplies two activations, so each is a requantization (or none) and a comparison:

``PRelu``
    ``y = q >= 0 ? rq_pos(q) : rq_neg[c](q)``: two requantizers of the input codes, the positive
    side at the ratio ``s_in / s_out``, the negative side at ``|a_c| s_in / s_out`` per channel
    ``c`` of the slope (one slope, or one per channel along ``axis``, negative, from the end). A
    negative slope multiplies the code by -1 first (the ratio of a requantizer is never negative).
    ``|q| < 2**15``, so ``q * M < 2**30``: exact in both forms. LeakyRelu's single slope runs as a
    table (:mod:`.lut`); PRelu's per-channel slopes would need one table per channel.
``MinMax``
    ``y = max(rq_a(a), rq_b(b))`` (or min): each operand is first requantized to the output
    scale (``s_a / s_out``, ``s_b / s_out``), then compared. A requantization never reverses an
    order, so this is ``max`` of the two values as the output's codes see them; numpy and ONNX
    broadcasting are the same rules (one operand may be ``1x8x1x1`` or a constant).
``ArgMax``
    The index of the largest (smallest) code along ``axis``, the first one on ties (ONNX's
    default ``select_last_index=0``), as ``numpy.argmax`` and onnxruntime's ArgMax both do.
    Scales play no part: a quantization keeps the order of the values (up to ties of values
    that fall on one code, which is the quantization's error, not the kernel's). The output is
    an index, not a quantized value; the model boundary casts it to int64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbtool.kernels.base import Kernel, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING
from hbtool.kernels.linear import check_activation
from hbtool.kernels.requantize import Requantize, channel_shape
from hbtool.kernels.units import VECTOR


@dataclass(frozen=True, eq=False)
class PRelu(Kernel):
    """``q >= 0 ? rq_pos(q) : rq_neg(sign * q)``; make it with :meth:`build`."""

    unit = VECTOR
    merges_samples = True

    pos: Requantize
    neg: Requantize
    sign: np.ndarray  # +-1 per slope channel, broadcast-shaped
    in_bits: int
    out_bits: int

    @classmethod
    def build(cls, scale_in: float, slopes, scale_out: float, in_bits: int = 8, out_bits: int = 8,
              axis: int | None = None, rounding: str = DEFAULT_ROUNDING) -> "PRelu":
        """``slopes``: a scalar, a 1-D per-channel vector placed along ``axis`` (negative), or an array
        already shaped to broadcast against the input (ONNX's slope tensor)."""
        check_scales("PRelu", scale_in=scale_in, scale_out=scale_out)
        a = channel_shape(np.asarray(slopes, np.float64), axis)
        if not np.all(np.isfinite(a)):
            raise ValueError("PRelu: slopes must be finite")
        bound = 2 ** (in_bits - 1)
        ratio = float(scale_in) / float(scale_out)
        pos = Requantize.build(ratio, out_bits, acc_bound=bound, rounding=rounding)
        neg = Requantize.build(np.abs(a) * ratio, out_bits, acc_bound=bound, rounding=rounding)
        sign = np.where(a < 0, -1, 1).astype(np.int64)
        return cls(pos=pos, neg=neg, sign=sign, in_bits=in_bits, out_bits=out_bits)

    def channel_arrays(self) -> tuple[np.ndarray, ...]:
        return (*self.pos.channel_arrays(), *self.neg.channel_arrays(), self.sign)

    def apply_numpy(self, q: np.ndarray) -> np.ndarray:
        q = check_activation(q, self.in_bits)
        return np.where(q >= 0, self.pos.apply_trusted(q), self.neg.apply_trusted(q * self.sign))

    def emit(self, b: OnnxBuilder, q: str) -> str:
        positive = self.pos.emit(b, q)
        negative = self.neg.emit(b, b.mul(q, b.const(self.sign.astype(np.float64), hint="sign")))
        return b.where(b.op("GreaterOrEqual", q, b.const(0.0)), positive, negative)


@dataclass(frozen=True, eq=False)
class MinMax(Kernel):
    """``max`` (or ``min``) of two operands requantized to the output scale; make it with :meth:`build`."""

    unit = VECTOR
    merges_samples = True

    n_inputs = 2
    rq_a: Requantize
    rq_b: Requantize
    a_bits: int
    b_bits: int
    mode: str  # "max" | "min"

    @classmethod
    def build(cls, scale_a, scale_b, scale_out: float, a_bits: int = 8, b_bits: int = 8, out_bits: int = 8,
              mode: str = "max", rounding: str = DEFAULT_ROUNDING) -> "MinMax":
        if mode not in ("max", "min"):
            raise ValueError(f"MinMax mode must be 'max' or 'min', not {mode!r}")
        check_scales("MinMax", scale_a=scale_a, scale_b=scale_b, scale_out=scale_out)
        rq_a = Requantize.build(float(scale_a) / float(scale_out), out_bits, acc_bound=2 ** (a_bits - 1), rounding=rounding)
        rq_b = Requantize.build(float(scale_b) / float(scale_out), out_bits, acc_bound=2 ** (b_bits - 1), rounding=rounding)
        return cls(rq_a=rq_a, rq_b=rq_b, a_bits=a_bits, b_bits=b_bits, mode=mode)

    def apply_numpy(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # a scalar constant operand as a 1-element array: it broadcasts the same, and the requantizer clamps in place
        ya = self.rq_a.apply_trusted(np.atleast_1d(check_activation(a, self.a_bits, "a")))
        yb = self.rq_b.apply_trusted(np.atleast_1d(check_activation(b, self.b_bits, "b")))
        return np.maximum(ya, yb) if self.mode == "max" else np.minimum(ya, yb)

    def emit(self, bld: OnnxBuilder, a: str, b: str) -> str:
        return bld.op("Max" if self.mode == "max" else "Min", self.rq_a.emit(bld, a), self.rq_b.emit(bld, b))


@dataclass(frozen=True, eq=False)
class ArgMax(Kernel):
    """Index of the largest (``mode="max"``) or smallest code along ``axis`` (negative), first on ties."""

    unit = VECTOR
    vector_class = "pool"  # a max over the channels
    merges_samples = True

    axis: int
    keepdims: bool
    in_bits: int
    mode: str = "max"

    @classmethod
    def build(cls, axis: int, keepdims: bool = True, in_bits: int = 8, mode: str = "max") -> "ArgMax":
        if axis >= 0:
            raise ValueError(f"ArgMax axis must be negative (counted from the last dimension), not {axis}")
        if mode not in ("max", "min"):
            raise ValueError(f"ArgMax mode must be 'max' or 'min', not {mode!r}")
        return cls(axis=int(axis), keepdims=bool(keepdims), in_bits=int(in_bits), mode=mode)

    def apply_numpy(self, q: np.ndarray) -> np.ndarray:
        q = check_activation(q, self.in_bits)
        idx = (np.argmax if self.mode == "max" else np.argmin)(q, axis=self.axis)
        return np.expand_dims(idx, self.axis) if self.keepdims else idx

    def emit(self, b: OnnxBuilder, q: str) -> str:
        idx = b.op("ArgMax" if self.mode == "max" else "ArgMin", q, axis=self.axis, keepdims=int(self.keepdims))
        return b.cast(idx, np.float64)
