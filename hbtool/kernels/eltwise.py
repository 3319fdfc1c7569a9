"""Elementwise Add / Sub / Mul of two activations with different scales (numpy broadcasting).

``Add`` (and Sub): both operands are brought to one shift,
``y = clamp(rshift(a * A +- b * B, n), lo, hi)`` with ``A ~ (s_a / s_out) 2**n`` and
``B ~ (s_b / s_out) 2**n``. Each multiplier is rounded to an integer, so the operand ``b``
carries an error of up to ``|b| 2**-(n+1)`` output LSB: a shift sized for the larger ratio
alone (the larger multiplier in [2**14, 2**15)) leaves the smaller one a few bits, and an
int16 operand of small ratio then moves by hundreds of LSB (a learnable-affine bias
``x + c`` with an int8 ``x`` of wide range, ``c`` an int16 constant: 255 LSB, a constant
offset in every such Add of PP-OCRv4's backbone). ``n`` is therefore the shift that gives
the *smaller* ratio a 15-bit multiplier too (the larger then takes ``ratio_a / ratio_b``
times more bits), as far as ``|a A| + |b B| < 2**50`` allows: exact in int64 and in the
ONNX form's doubles. Equal ratios keep ``|a A + b B| <= 2**31``. A ratio of ``2**14`` or
more (one input's LSB spans that many output LSB: a 15-bit shift would be 0 or 1, or
negative past ``2**15``) likewise takes the largest ``n >= 0`` within that budget.

Per-channel scales (power-of-two factors, FQ-ViT's PTF): any of ``s_a``, ``s_b``, ``s_out`` may
be a 1-D array over the last axis (channel ``c``). Then ``A``, ``B`` and ``n`` are int64
arrays ``[C]``, one multiplier pair and shift per channel, from the ratios of that channel;
an output scale ``s 2**alpha_c`` only adds ``alpha_c`` to that channel's shift. The bound
above holds per channel.

``Mul``: ``y = requantize(a * b)`` with the ratio ``s_a s_b / s_out``; ``|a b| <= 2**30``.

Both take an optional fused ReLU (``lo = 0``) and integer clamp bounds. A constant operand
is passed as an ordinary input (the graph writer makes it a constant tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbtool.kernels.base import Kernel, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import (
    DEFAULT_ROUNDING,
    MAX_SHIFT,
    ROUNDING_MODES,
    int_range,
    quantize_multiplier,
    rounding_shift_numpy,
    rounding_shift_onnx,
)
from hbtool.kernels.linear import check_activation
from hbtool.kernels.requantize import Requantize, clamp_bounds
from hbtool.kernels.units import VECTOR


WIDE_LIMIT = 2**50  # bound on |a A| + |b B| when a ratio needs a multiplier past 15 bits


def _common_shift(ra: np.ndarray, rb: np.ndarray, a_bits: int, b_bits: int) -> np.ndarray:
    """The shift ``n`` of an Add: the one that gives the smaller ratio a 15-bit multiplier
    (:func:`quantize_multiplier`'s shift for it), capped by the budget ``|a A| + |b B| < 2**50``,
    and never below the larger ratio's own shift.

    Why the smaller ratio: a multiplier rounded to an integer is off by up to 1/2, i.e. by
    ``2**-(n+1)`` output LSB per unit of its operand. The larger ratio's shift alone leaves
    the smaller multiplier a few bits: ratios 266 (an int8 operand of wide range) and 0.07
    (an int16 constant) into an int16 output gave n = 6, B = round(4.5) = 5, and the constant
    term ``32767 * 5 >> 6`` 255 LSB off. From a larger ratio of ``2**14`` on (its own
    shift 0 or 1, none past ``2**15``) the budget decides alone, as before."""
    ra, rb = np.broadcast_arrays(np.asarray(ra, np.float64), np.asarray(rb, np.float64))
    r = np.maximum(ra, rb)
    small = np.minimum(ra, rb)
    wide = r >= 2.0**14
    _, n_large = quantize_multiplier(np.where(wide, 1.0, r))
    _, n_small = quantize_multiplier(np.where((small > 0) & (small < 2.0**14), small, 1.0))
    top = np.ldexp(ra, a_bits - 1) + np.ldexp(rb, b_bits - 1)
    _, e = np.frexp(np.where(top > 0, top, 1.0))  # top < 2**e
    budget = np.clip(50 - e, 0, MAX_SHIFT)
    n = np.where(wide, budget, np.maximum(np.asarray(n_large, np.int64), np.minimum(np.asarray(n_small, np.int64), budget)))
    return np.asarray(n, np.int64)


def _check_add_bound(A, B, a_bits: int, b_bits: int) -> None:
    """``|a A| + |b B| < 2**51``: exact in int64 and in the ONNX form's doubles."""
    top = (int(np.max(np.abs(A))) << (a_bits - 1)) + (int(np.max(np.abs(B))) << (b_bits - 1))
    if top >= 2**51:
        raise ValueError(f"Add ratios too large for exact integer arithmetic (|a A| + |b B| up to 2**{top.bit_length()})")


@dataclass(frozen=True, eq=False)
class Add(Kernel):
    """``clamp(rshift(a*A + sign*b*B, n))``: Add (``sign=+1``) or Sub (``sign=-1``)."""

    unit = VECTOR
    merges_samples = True

    A: int | np.ndarray  # int, or int64 [C] per channel of the last axis
    B: int | np.ndarray
    n: int | np.ndarray
    sign: int
    a_bits: int
    b_bits: int
    lo: int
    hi: int
    rounding: str = DEFAULT_ROUNDING
    n_inputs = 2

    @classmethod
    def build(
        cls,
        scale_a: float,
        scale_b: float,
        scale_out: float,
        a_bits: int = 8,
        b_bits: int = 8,
        out_bits: int = 8,
        sub: bool = False,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
    ) -> "Add":
        check_scales("Add", scale_a=scale_a, scale_b=scale_b, scale_out=scale_out)
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {rounding!r}")
        int_range(a_bits)
        int_range(b_bits)
        low, high = clamp_bounds(out_bits, relu, lo, hi)
        sign = -1 if sub else 1
        if all(np.ndim(s) == 0 for s in (scale_a, scale_b, scale_out)):
            ra = float(scale_a) / float(scale_out)
            rb = float(scale_b) / float(scale_out)
            n = int(_common_shift(ra, rb, a_bits, b_bits))
            A = int(np.floor(np.ldexp(ra, n) + 0.5))
            B = int(np.floor(np.ldexp(rb, n) + 0.5))
            _check_add_bound(A, B, a_bits, b_bits)
            return cls(A=A, B=B, n=n, sign=sign, a_bits=a_bits, b_bits=b_bits, lo=low, hi=high, rounding=rounding)
        sizes = {np.size(s) for s in (scale_a, scale_b, scale_out) if np.ndim(s) > 0}
        if len(sizes) != 1 or any(np.ndim(s) > 1 for s in (scale_a, scale_b, scale_out)):
            raise ValueError("per-channel Add scales must be 1-D arrays of one length (the last axis)")
        ra = np.asarray(scale_a, np.float64) / np.asarray(scale_out, np.float64)
        rb = np.asarray(scale_b, np.float64) / np.asarray(scale_out, np.float64)
        ra, rb = np.broadcast_arrays(ra, rb)
        nv = np.asarray(_common_shift(ra, rb, a_bits, b_bits), np.int64)
        Av = np.floor(np.ldexp(ra, nv) + 0.5).astype(np.int64)
        Bv = np.floor(np.ldexp(rb, nv) + 0.5).astype(np.int64)
        _check_add_bound(Av, Bv, a_bits, b_bits)
        return cls(A=Av, B=Bv, n=nv, sign=sign, a_bits=a_bits, b_bits=b_bits, lo=low, hi=high, rounding=rounding)

    def apply_numpy(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = check_activation(a, self.a_bits, "a")
        b = check_activation(b, self.b_bits, "b")
        acc = a * self.A + (self.sign * self.B) * b
        return np.clip(rounding_shift_numpy(acc, self.n, self.rounding), self.lo, self.hi)

    def emit(self, bld: OnnxBuilder, a: str, b: str) -> str:
        A = np.asarray(self.A, np.float64)
        B = np.asarray(self.sign * np.asarray(self.B), np.float64)
        acc = bld.add(bld.mul(a, bld.const(A)), bld.mul(b, bld.const(B)))
        return bld.clip(rounding_shift_onnx(bld, acc, self.n, self.rounding), float(self.lo), float(self.hi))


@dataclass(frozen=True, eq=False)
class Mul(Kernel):
    """``requantize(a * b)`` with the ratio ``s_a * s_b / s_out``."""

    unit = VECTOR
    merges_samples = True

    a_bits: int
    b_bits: int
    requant: Requantize
    n_inputs = 2

    @classmethod
    def build(
        cls,
        scale_a: float,
        scale_b: float,
        scale_out: float,
        a_bits: int = 8,
        b_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
    ) -> "Mul":
        check_scales("Mul", scale_a=scale_a, scale_b=scale_b, scale_out=scale_out)
        int_range(a_bits)
        int_range(b_bits)
        bound = 2 ** (a_bits - 1) * 2 ** (b_bits - 1)
        rq = Requantize.build(float(scale_a) * float(scale_b) / float(scale_out), out_bits, acc_bound=bound,
                              relu=relu, lo=lo, hi=hi, rounding=rounding)
        return cls(a_bits=a_bits, b_bits=b_bits, requant=rq)

    def apply_numpy(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = check_activation(a, self.a_bits, "a")
        b = check_activation(b, self.b_bits, "b")
        return self.requant.apply_trusted(a * b)

    def emit(self, bld: OnnxBuilder, a: str, b: str) -> str:
        return self.requant.emit(bld, bld.mul(a, b))
