"""Division by a feature map and the L2 norm: the integer pieces of ``x / max(||x||, eps)``.

``Div`` (a run-time divisor): ``y = clamp(round(a * M / (d * 2**n)), lo, hi)`` with
``M 2**-n ~ s_a / (s_d s_out)``, one exact integer division per element (the divider the
Softmax and LayerNorm kernels already use for their sums and counts). The quotient is the
correctly rounded one of the integers, so no reciprocal table and no second rounding: the
only approximations are the 15-bit multiplier and the output step. ``d = 0`` saturates to the
sign of ``a`` (``0 / 0 = 0``), the integer picture of the float ``+-inf`` that the output
clamp would make anyway. Rounding of the quotient by the kernel's mode:

* ``floor``: ``floor(t / D)``; ``half_up``: ``floor((2t + D) / (2D))``;
* ``half_away``: ``sign(t) floor((2|t| + D) / (2D))``;
* ``half_even``: ``half_up``, minus one where the quotient is an exact tie and odd,

with ``t = a M sign(d)`` and ``D = |d| 2**n``. Bounds: ``|a M| <= 2**49`` (the multiplier
takes a left shift for ratios past ``2**15``, capped at :data:`DIV_MAX_RATIO`, where any
``a != 0`` saturates anyway) and ``n <= 49 - (d_bits - 1)``, so ``|2t + D| + 4D < 2**53``:
the double division of the ONNX form is then exact after Floor (see :mod:`.fixedpoint`).

``ReduceL2`` (``sqrt(sum x**2)`` over any axes): the integer sum of squares ``t`` is scaled
by ``4**k`` (or divided by ``4**-k``, rounding down, when it could pass ``2**51``; it must stay
within ``2**53``, the exactness of the ONNX form's double ReduceSum), its exact integer
square root :func:`~.fixedpoint.isqrt_numpy` then carries ``k`` extra bits, and a
:class:`~.requantize.Requantize` by ``(s_x / s_out) 2**-k`` makes the output. ``k`` is the
largest (at most :data:`L2_MAX_EXTRA_BITS`) with ``count * 2**(2 (bits-1)) * 4**k < 2**51``:
the truncation of the root is below ``2**-k`` input LSB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from hbtool.kernels.base import Kernel, check, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import (
    DEFAULT_ROUNDING,
    ROUNDING_MODES,
    int_range,
    isqrt_numpy,
    isqrt_onnx,
    quantize_multiplier,
)
from hbtool.kernels.linear import check_activation
from hbtool.kernels.requantize import Requantize, clamp_bounds
from hbtool.kernels.units import VECTOR

#: ratios above this are implemented as this: any a != 0 (|d| <= 2**15) already gives |y| >= 2**18
DIV_MAX_RATIO = 2.0**33
#: extra bits of the integer square root of ReduceL2
L2_MAX_EXTRA_BITS = 20
#: a divisor of 0 gives this times sign(a) before the output clamp
_SATURATE = 2**20


@dataclass(frozen=True, eq=False)
class Div(Kernel):
    """``clamp(round(a * M / (d * 2**n)))``: Div of two feature maps (numpy broadcasting)."""

    unit = VECTOR
    vector_class = "divide"
    merges_samples = True

    M: int
    n: int
    a_bits: int
    d_bits: int
    lo: int
    hi: int
    rounding: str = DEFAULT_ROUNDING
    ratio: float = 0.0
    n_inputs = 2

    @classmethod
    def build(cls, scale_a: float, scale_d: float, scale_out: float, a_bits: int = 8, d_bits: int = 8, out_bits: int = 8,
              relu: bool = False, lo: int | None = None, hi: int | None = None, rounding: str = DEFAULT_ROUNDING) -> "Div":
        check_scales("Div", scale_a=scale_a, scale_d=scale_d, scale_out=scale_out)
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {rounding!r}")
        int_range(a_bits)
        int_range(d_bits)
        low, high = clamp_bounds(out_bits, relu, lo, hi)
        r = float(scale_a) / (float(scale_d) * float(scale_out))
        M, n = quantize_multiplier(min(r, DIV_MAX_RATIO), max_shift=49 - (d_bits - 1), max_left_shift=20)
        if n < 0:  # a left shift folds into the multiplier
            M, n = M << -n, 0
        return cls(M=int(M), n=int(n), a_bits=a_bits, d_bits=d_bits, lo=low, hi=high, rounding=rounding, ratio=r)

    def apply_numpy(self, a: np.ndarray, d: np.ndarray) -> np.ndarray:
        a = check_activation(a, self.a_bits, "a")
        d = check_activation(d, self.d_bits, "d")
        a, d = np.broadcast_arrays(a, d)
        sign = np.sign(d)
        t = a * self.M * sign
        D = np.maximum(np.abs(d), 1) << self.n
        if self.rounding == "floor":
            q = t // D
        elif self.rounding == "half_away":
            q = np.sign(t) * ((2 * np.abs(t) + D) // (2 * D))
        else:
            u = 2 * t + D
            q = u // (2 * D)
            if self.rounding == "half_even":
                q = q - ((u == q * 2 * D) & (q % 2 == 1))
        q = np.where(d == 0, np.sign(a) * _SATURATE, q)
        return np.clip(q, self.lo, self.hi)

    def emit(self, b: OnnxBuilder, a: str, d: str) -> str:
        sign = b.op("Sign", d)
        t = b.mul(b.mul(a, b.const(float(self.M))), sign)
        D = b.mul(b.op("Max", b.op("Abs", d), b.const(1.0)), b.const(float(2**self.n)))
        if self.rounding == "floor":
            q = b.floor(b.div(t, D))
        elif self.rounding == "half_away":
            two_d = b.mul(D, b.const(2.0))
            mag = b.floor(b.div(b.add(b.mul(b.op("Abs", t), b.const(2.0)), D), two_d))
            q = b.mul(b.op("Sign", t), mag)
        else:
            two_d = b.mul(D, b.const(2.0))
            u = b.add(b.mul(t, b.const(2.0)), D)
            q = b.floor(b.div(u, two_d))
            if self.rounding == "half_even":
                tie = b.cast(b.op("Equal", u, b.mul(q, two_d)), np.float64)
                odd = b.sub(q, b.mul(b.floor(b.mul(q, b.const(0.5))), b.const(2.0)))
                q = b.sub(q, b.mul(tie, odd))
        zero = b.op("Equal", d, b.const(0.0))
        q = b.where(zero, b.mul(b.op("Sign", a), b.const(float(_SATURATE))), q)
        return b.clip(q, float(self.lo), float(self.hi))


@dataclass(frozen=True, eq=False)
class ReduceL2(Kernel):
    """``requantize(isqrt(sum(x**2) * 4**k))`` over ``axes`` (see the module docstring)."""

    unit = VECTOR
    vector_class = "pool"
    reduction = "l2"
    merges_samples = True

    axes: tuple[int, ...]
    keepdims: bool
    count: int
    in_bits: int
    k: int
    requant: Requantize

    @classmethod
    def build(cls, axes: Sequence[int], count: int, scale_in: float, scale_out: float, keepdims: bool = True,
              in_bits: int = 8, out_bits: int = 8, rounding: str = DEFAULT_ROUNDING) -> "ReduceL2":
        check_scales("ReduceL2", scale_in=scale_in, scale_out=scale_out)
        qmin, _ = int_range(in_bits)
        t_max = int(count) * qmin * qmin
        if t_max > 2**53:
            raise ValueError(f"ReduceL2 over {count} int{in_bits} elements: the sum of squares passes 2**53")
        k = min(L2_MAX_EXTRA_BITS, (51 - t_max.bit_length()) // 2)
        scaled = t_max << (2 * k) if k >= 0 else t_max >> (-2 * k)
        root_max = int(isqrt_numpy(np.array([scaled]))[0]) + 1
        rq = Requantize.build(float(scale_in) / float(scale_out) * 2.0**-k, out_bits, acc_bound=root_max, rounding=rounding)
        return cls(axes=tuple(int(a) for a in axes), keepdims=bool(keepdims), count=int(count), in_bits=in_bits, k=int(k), requant=rq)

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        x = check_activation(x, self.in_bits)
        check(int(np.prod([x.shape[a] for a in self.axes])) == self.count, "reduced element count differs from build")
        t = (x * x).sum(axis=self.axes, keepdims=True)
        t = t << (2 * self.k) if self.k >= 0 else t >> (-2 * self.k)
        y = self.requant.apply_trusted(isqrt_numpy(t))
        if self.keepdims:
            return y
        drop = {a % x.ndim for a in self.axes}
        return y.reshape([d for i, d in enumerate(y.shape) if i not in drop])

    def emit(self, b: OnnxBuilder, x: str) -> str:
        t = b.reduce("ReduceSum", b.mul(x, x), self.axes, True)
        if self.k > 0:
            t = b.mul(t, b.const(float(4**self.k)))
        elif self.k < 0:
            t = b.floor(b.mul(t, b.const(2.0 ** (2 * self.k))))  # exact: t <= 2**53 is a double
        y = self.requant.emit(b, isqrt_onnx(b, t))
        if not self.keepdims:
            y = b.op("Squeeze", y, b.const(np.array(self.axes, np.int64), np.int64, "axes"))
        return y
