"""Elementwise Add / Sub / Mul of two activations with different scales (numpy broadcasting).

``Add`` (and Sub): both operands are brought to one shift,
``y = clamp(rshift(a * A +- b * B, n), lo, hi)`` with ``A ~ (s_a / s_out) 2**n`` and
``B ~ (s_b / s_out) 2**n``. ``n`` comes from :func:`quantize_multiplier` of the larger ratio,
so the larger of A, B lies in [2**14, 2**15) and the smaller one keeps the same absolute
precision. ``|a A + b B| <= 2 * 2**15 * 2**15 = 2**31``: exact everywhere.

``Mul``: ``y = requantize(a * b)`` with the ratio ``s_a s_b / s_out``; ``|a b| <= 2**30``.

Both take an optional fused ReLU (``lo = 0``) and integer clamp bounds. A constant operand
is passed as an ordinary input (the graph writer makes it a constant tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbtool.kernels.base import Kernel
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import (
    DEFAULT_ROUNDING,
    ROUNDING_MODES,
    int_range,
    quantize_multiplier,
    rounding_shift_numpy,
    rounding_shift_onnx,
)
from hbtool.kernels.linear import check_activation
from hbtool.kernels.requantize import Requantize, clamp_bounds


@dataclass(frozen=True, eq=False)
class Add(Kernel):
    """``clamp(rshift(a*A + sign*b*B, n))``: Add (``sign=+1``) or Sub (``sign=-1``)."""

    A: int
    B: int
    n: int
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
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {rounding!r}")
        int_range(a_bits)
        int_range(b_bits)
        ra = float(scale_a) / float(scale_out)
        rb = float(scale_b) / float(scale_out)
        _, n = quantize_multiplier(max(ra, rb))
        A = int(np.floor(np.ldexp(ra, n) + 0.5))
        B = int(np.floor(np.ldexp(rb, n) + 0.5))
        low, high = clamp_bounds(out_bits, relu, lo, hi)
        return cls(A=A, B=B, n=int(n), sign=-1 if sub else 1, a_bits=a_bits, b_bits=b_bits, lo=low, hi=high,
                   rounding=rounding)

    def apply_numpy(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = check_activation(a, self.a_bits, "a")
        b = check_activation(b, self.b_bits, "b")
        acc = a * self.A + (self.sign * self.B) * b
        return np.clip(rounding_shift_numpy(acc, self.n, self.rounding), self.lo, self.hi)

    def emit(self, bld: OnnxBuilder, a: str, b: str) -> str:
        acc = bld.add(bld.mul(a, bld.const(float(self.A))), bld.mul(b, bld.const(float(self.sign * self.B))))
        return bld.clip(rounding_shift_onnx(bld, acc, self.n, self.rounding), float(self.lo), float(self.hi))


@dataclass(frozen=True, eq=False)
class Mul(Kernel):
    """``requantize(a * b)`` with the ratio ``s_a * s_b / s_out``."""

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
