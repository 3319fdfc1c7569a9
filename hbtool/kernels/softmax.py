"""Integer Softmax over one axis, the last by default (``axis``, negative: ``-3`` is the 16 bins of
YOLOv8's distribution focal loss on a (B, 16, 4, A) tensor).

The maximum and the sum run over ``axis`` wherever it sits (the vector unit walks a non-last
axis with a stride, no transpose); everything else is elementwise, so a non-last axis changes
nothing below and both forms stay exact.

Input int8/int16 ``q`` at scale ``s``; output at the fixed scale ``2**-p``: ``p = 7`` for int8
output (1.0 shows as 127 = 0.992), ``p = 15`` for int16 output (clamped at 32767).

1. ``u = max(q) - q``, an integer in [0, 65535] (``d = -u <= 0``).
2. ``e = exp(-s u)`` as an unsigned fixed-point number with ``E`` fractional bits
   (``exp_bits``, default 20), from two 256-entry tables:
   ``e = rshift(T_hi[u >> 8] * T_lo[u & 255], E)`` with
   ``T_hi[h] = round(2**E exp(-256 s h))`` and ``T_lo[l] = round(2**E exp(-s l))``;
   values under ``2**-(E+1)`` become 0. For int8 input ``u < 256`` and ``e = T_lo[u]``.
3. Masked logits: an input equal to the integer minimum (where a float mask was clamped)
   gets ``e = 0`` unless it is the row maximum, i.e. unless the whole row is masked (which
   then comes out uniform).
4. ``S = sum(e)`` (at least ``2**E``: the maximum gives exactly ``2**E``) and
   ``y = clamp(floor((e 2**p + floor(S / 2)) / S), 0, 2**p - 1)`` (rounded division).

Log2 output (FQ-ViT's log2 quantizer, ``log2_bits = b``, 4 by default when used): the output
is a code ``k`` in ``0 .. Z`` with ``Z = 2**b - 1``: ``k < Z`` stands for the probability
``2**-k``, ``Z`` for 0 (probabilities below ``2**-(Z - 0.5)``). From the fixed-point
probability ``y = floor((e 2**L + floor(S / 2)) / S)`` with ``L = 2**b + 6`` bits (22 for
b = 4), ``k = #{j in 0 .. Z-1 : y < T_j}`` with the integers ``T_j = ceil(2**(L - j - 0.5))``,
i.e. ``k = round(-log2 P)`` with the rounding boundaries at ``2**-(j + 0.5)`` (exact, since
``2**(L - j - 0.5)`` is irrational), clamped to ``Z``. Bounds: ``e 2**L <= 2**(E + L) = 2**42``.
Only the attention MatMul consumes these codes (:class:`~hbtool.kernels.linear.Log2MatMul`):
``P @ V`` becomes shifts of V and additions.

Why two tables instead of an interpolated one or I-BERT's polynomial: ``exp(-s(256h + l))``
*is* ``exp(-256 s h) exp(-s l)``, so the split has no approximation error at all, for every
input scale; only the two table roundings and the product's rounding remain (each below
one unit of ``2**-E``). A 257-knot interpolated table misses exp by up to ``h**2/8`` relative
at knot spacing ``h = 256 s`` (0.8 % at ``s = 2**-10``, far over the 2**-12 target), and a
low-order polynomial like I-BERT's carries a fixed approximation error of its own. The cost
is two 256-entry gathers and one multiply.

Why E = 20 and not 15: every ``e`` carries up to about one unit of ``2**-E`` of rounding,
and a long, flat row adds N of them to the sum. Measured with E = 15 on N(0, 3) logits,
N = 768: max error 2**-11.8, over the target; E = 20 keeps it at the output rounding.

Exactness: ``T_hi T_lo <= 2**(2E) <= 2**50`` (``E <= 25``); the division is exact in DOUBLE
while ``N 2**(E+2) + 2**(E+p) < 2**53`` for rows of length N (``N < 2**30`` at E = 20,
p = 15), checked by the numpy form.

Accuracy (``tests/unit/kernels/test_numpy_and_onnx_forms_agree.py::test_softmax_accuracy``), int16 logits N(0, sigma) with
sigma in 1..15, rows of N = 49, 197, 768, scale = max|x| / 32767, against float64 softmax of
the dequantized input: int16 output max abs error 2**-15.0 (the clamp of 1.0 to 32767/32768;
2**-15.5 elsewhere; target 2**-12); int8 output 2**-7 (the clamp of 1.0 to 127/128), 2**-8 elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hbtool.kernels.base import Kernel, check, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING, ROUNDING_MODES, int_range, rounding_shift_numpy, rounding_shift_onnx
from hbtool.kernels.linear import check_activation
from hbtool.kernels.units import VECTOR


@dataclass(frozen=True, eq=False)
class Softmax(Kernel):
    """Softmax over ``axis`` (the last by default) with output scale ``2**-p``; make it with :meth:`build`."""

    unit = VECTOR
    vector_class = "softmax"
    merges_samples = True

    t_hi: np.ndarray  # int64 [256]
    t_lo: np.ndarray  # int64 [256]
    in_bits: int
    out_bits: int
    exp_bits: int
    mask_min: bool = True
    rounding: str = DEFAULT_ROUNDING
    log2_bits: int = 0  # 0: linear output at 2**-p; b in 2..4: log2 codes (module docstring)
    axis: int = -1  # the softmax axis, negative

    @classmethod
    def build(cls, scale_in: float, in_bits: int = 16, out_bits: int = 16, exp_bits: int = 20,
              mask_min: bool = True, rounding: str = DEFAULT_ROUNDING, log2_bits: int = 0, axis: int = -1) -> "Softmax":
        """``exp_bits`` (E) fractional bits of the exponentials, 8..25; ``mask_min``: see step 3;
        ``log2_bits``: 0 for the linear output, 2..4 for log2 codes (``out_bits`` is then unused);
        ``axis``: the softmax axis, counted from the end (negative)."""
        check_scales("Softmax", scale_in=scale_in)
        if int(axis) >= 0:
            raise ValueError(f"Softmax axis must be negative (counted from the end), got {axis}")
        if log2_bits and not 2 <= log2_bits <= 4:
            raise ValueError("log2_bits must be 0 (linear output) or within 2..4")
        int_range(in_bits)
        int_range(out_bits)
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {rounding!r}")
        if not 8 <= exp_bits <= 25:
            raise ValueError("exp_bits must be within 8..25")
        s = float(scale_in)
        if not s > 0:
            raise ValueError("scale must be > 0")
        k = np.arange(256, dtype=np.float64)
        one = 2.0**exp_bits
        t_lo = np.floor(np.exp(-s * k) * one + 0.5).astype(np.int64)
        t_hi = np.floor(np.exp(-s * 256.0 * k) * one + 0.5).astype(np.int64)
        return cls(t_hi=t_hi, t_lo=t_lo, in_bits=in_bits, out_bits=out_bits, exp_bits=exp_bits,
                   mask_min=mask_min, rounding=rounding, log2_bits=int(log2_bits), axis=int(axis))

    @property
    def p(self) -> int:
        return self.out_bits - 1

    @property
    def scale_out(self) -> float:
        return 2.0 ** -self.p

    @property
    def zero_code(self) -> int:
        """The log2 code that stands for probability 0 (``2**log2_bits - 1``)."""
        return 2**self.log2_bits - 1

    @property
    def log2_prob_bits(self) -> int:
        """L: fractional bits of the probability the log2 codes are read from."""
        return 2**self.log2_bits + 6

    @property
    def log2_thresholds(self) -> np.ndarray:
        """``T_j = ceil(2**(L - j - 0.5))`` for j = 0 .. Z-1, int64, decreasing."""
        L = self.log2_prob_bits
        return np.array([math.ceil(2.0 ** (L - j - 0.5)) for j in range(self.zero_code)], np.int64)

    def exp_of_gap(self, u: np.ndarray) -> np.ndarray:
        """The fixed-point exponential of ``u = max - q >= 0`` before masking (step 2), int64: one
        table for 8-bit inputs, the product of two for 16-bit ones."""
        if self.in_bits == 8:
            return self.t_lo[u]
        return rounding_shift_numpy(self.t_hi[u >> 8] * self.t_lo[u & 255], self.exp_bits, self.rounding)

    def exp_numpy(self, q: np.ndarray) -> np.ndarray:
        """The fixed-point exponentials ``e`` (steps 1-3), int64."""
        q = check_activation(q, self.in_bits)
        check(q.ndim >= -self.axis, f"Softmax over axis {self.axis} needs rank >= {-self.axis}, got {q.ndim}")
        u = q.max(axis=self.axis, keepdims=True) - q
        e = self.exp_of_gap(u)
        if self.mask_min:
            e = np.where((q == int_range(self.in_bits)[0]) & (u > 0), 0, e)
        return e

    def apply_numpy(self, q: np.ndarray) -> np.ndarray:
        e = self.exp_numpy(q)
        if e.size == 0:
            return e
        p = self.log2_prob_bits if self.log2_bits else self.p
        check(e.shape[self.axis] * 2 ** (self.exp_bits + 2) + 2 ** (self.exp_bits + p) < 2**53, "softmax row too long")
        total = e.sum(axis=self.axis, keepdims=True)
        num = (e << p) + (total >> 1)
        if self.log2_bits:
            y = num // total
            return (y[..., None] < self.log2_thresholds).sum(axis=-1).astype(np.int64)
        return np.clip(num // total, 0, 2**self.p - 1)

    def emit(self, b: OnnxBuilder, q: str) -> str:
        u = b.sub(b.reduce("ReduceMax", q, [self.axis]), q)
        if self.in_bits == 8:
            e = b.op("Gather", b.const(self.t_lo.astype(np.float64), hint="exp_lo"), b.cast(u, np.int64))
        else:
            h = b.floor(b.mul(u, b.const(1.0 / 256)))
            lo = b.sub(u, b.mul(h, b.const(256.0)))
            e_hi = b.op("Gather", b.const(self.t_hi.astype(np.float64), hint="exp_hi"), b.cast(h, np.int64))
            e_lo = b.op("Gather", b.const(self.t_lo.astype(np.float64), hint="exp_lo"), b.cast(lo, np.int64))
            e = rounding_shift_onnx(b, b.mul(e_hi, e_lo), self.exp_bits, self.rounding)
        if self.mask_min:
            qmin = float(int_range(self.in_bits)[0])
            masked = b.op("And", b.op("Equal", q, b.const(qmin)), b.op("Greater", u, b.const(0.0)))
            e = b.where(masked, b.const(0.0), e)
        total = b.reduce("ReduceSum", e, [self.axis])
        p = self.log2_prob_bits if self.log2_bits else self.p
        num = b.add(b.mul(e, b.const(2.0**p)), b.floor(b.mul(total, b.const(0.5))))
        y = b.floor(b.div(num, total))
        if self.log2_bits:
            below = b.op("Less", b.op("Unsqueeze", y, b.const(np.array([-1], np.int64), np.int64, "axes")),
                         b.const(self.log2_thresholds.astype(np.float64), hint="log2_thresholds"))
            return b.reduce("ReduceSum", b.cast(below, np.float64), [-1], keepdims=False)
        return b.clip(y, 0.0, float(2**self.p - 1))


#: index bits of the log2-mantissa table of :class:`LogSoftmax` (4096 entries: |error| < 2**-13 * ln 2 / ln 2 nats)
LOG_TABLE_BITS = 12


@dataclass(frozen=True, eq=False)
class LogSoftmax(Kernel):
    """``log(softmax(x))`` over ``axis`` as integers: ``-(s u + ln(S / 2**E)) / s_out`` (make it with :meth:`build`).

    ``x - max - log(sum exp(x - max))``: the exponentials and their sum ``S`` are the Softmax kernel's
    (steps 1-2 above, ``S >= 2**E``), then ``ln(S / 2**E) = ln 2 (L - E + log2 m)`` with ``L = floor(log2 S)``
    and ``m = S / 2**L`` in [1, 2), ``log2 m`` read from a table on the ``K = LOG_TABLE_BITS`` bits after
    the leading one (at each interval's midpoint). In ``F`` fractional bits of the output LSB:

    ``Z = u M + (L - E) C + T[(S 2**K >> L) - 2**K]``, ``y = clamp(-rshift(Z, F), lo, hi)``

    with ``M = round(s / s_out 2**F)``, ``C = round(ln 2 / s_out 2**F)``,
    ``T[i] = round(ln(1 + (i + 0.5) / 2**K) / s_out 2**F)``. No division, no float at run time; the ONNX
    form finds ``L`` by counting the powers of two ``<= S`` (exact in DOUBLE), so both forms agree bit for
    bit. Error against the float op: the output rounding, the table's ``2**-(K+1)`` in ``log2 m`` (under
    ``1.8e-4`` nats) and the exponentials' roundings (the Softmax kernel's).

    Bounds: ``u <= 65535``; ``F`` (at most 20) is chosen so that ``Z < 2**52``.
    """

    unit = VECTOR
    vector_class = "softmax"
    merges_samples = True

    exp: Softmax
    M: int
    C: int
    table: np.ndarray  # int64 [2**K]
    frac_bits: int
    lo: int
    hi: int
    rounding: str = DEFAULT_ROUNDING

    @property
    def axis(self) -> int:
        return self.exp.axis

    @property
    def in_bits(self) -> int:
        return self.exp.in_bits

    @classmethod
    def build(cls, scale_in: float, scale_out: float, in_bits: int = 8, out_bits: int = 8, axis: int = -1,
              rounding: str = DEFAULT_ROUNDING, max_row: int = 2**20) -> "LogSoftmax":
        """``max_row``: the longest row the bounds are checked for (the kernel refuses longer ones)."""
        check_scales("LogSoftmax", scale_in=scale_in, scale_out=scale_out)
        exp = Softmax.build(scale_in, in_bits, 16, mask_min=False, rounding=rounding, axis=axis)
        lo, hi = int_range(out_bits)
        K, E = LOG_TABLE_BITS, exp.exp_bits
        ratio, per_octave = float(scale_in) / float(scale_out), math.log(2.0) / float(scale_out)
        octaves = math.ceil(math.log2(max_row)) + 1
        for F in range(20, -1, -1):
            M, C = round(ratio * 2**F), round(per_octave * 2**F)
            if 65535 * M + octaves * C + C < 2**52:
                break
        else:
            raise ValueError("LogSoftmax: the input and output scales are too far apart for exact integers")
        i = np.arange(2**K, dtype=np.float64)
        table = np.floor(np.log1p((i + 0.5) / 2**K) / float(scale_out) * 2**F + 0.5).astype(np.int64)
        return cls(exp=exp, M=int(M), C=int(C), table=table, frac_bits=F, lo=lo, hi=0 if hi > 0 else hi, rounding=rounding)

    def apply_numpy(self, q: np.ndarray) -> np.ndarray:
        e = self.exp.exp_numpy(q)
        if e.size == 0:
            return e
        q = np.asarray(q, np.int64)
        u = q.max(axis=self.axis, keepdims=True) - q
        total = e.sum(axis=self.axis, keepdims=True)
        check(int(total.max()) < 2 ** (62 - LOG_TABLE_BITS), "LogSoftmax row too long")
        L = np.frexp(total.astype(np.float64))[1].astype(np.int64) - 1  # exact: total < 2**53
        idx = ((total << LOG_TABLE_BITS) >> L) - 2**LOG_TABLE_BITS
        z = u * self.M + (L - self.exp.exp_bits) * self.C + self.table[idx]
        return np.clip(-rounding_shift_numpy(z, self.frac_bits, self.rounding), self.lo, self.hi)

    def emit(self, b: OnnxBuilder, q: str) -> str:
        K, E = LOG_TABLE_BITS, self.exp.exp_bits
        u = b.sub(b.reduce("ReduceMax", q, [self.axis]), q)
        if self.in_bits == 8:
            e = b.op("Gather", b.const(self.exp.t_lo.astype(np.float64), hint="exp_lo"), b.cast(u, np.int64))
        else:
            h = b.floor(b.mul(u, b.const(1.0 / 256)))
            lo = b.sub(u, b.mul(h, b.const(256.0)))
            e_hi = b.op("Gather", b.const(self.exp.t_hi.astype(np.float64), hint="exp_hi"), b.cast(h, np.int64))
            e_lo = b.op("Gather", b.const(self.exp.t_lo.astype(np.float64), hint="exp_lo"), b.cast(lo, np.int64))
            e = rounding_shift_onnx(b, b.mul(e_hi, e_lo), E, self.rounding)
        total = b.reduce("ReduceSum", e, [self.axis])
        powers = b.const(2.0 ** np.arange(1, 53, dtype=np.float64), hint="powers")
        at_least = b.op("GreaterOrEqual", b.op("Unsqueeze", total, b.const(np.array([-1], np.int64), np.int64, "axes")), powers)
        L = b.reduce("ReduceSum", b.cast(at_least, np.float64), [-1], keepdims=False)  # floor(log2 total)
        L_index = b.cast(L, np.int64)
        scale_down = b.op("Gather", b.const(2.0 ** (K - np.arange(53, dtype=np.float64)), hint="pow2"), L_index)
        idx = b.sub(b.floor(b.mul(total, scale_down)), b.const(float(2**K)))
        lse = b.add(b.mul(b.sub(L, b.const(float(E))), b.const(float(self.C))),
                    b.op("Gather", b.const(self.table.astype(np.float64), hint="log_table"), b.cast(idx, np.int64)))
        z = b.add(b.mul(u, b.const(float(self.M))), lse)
        y = b.op("Neg", rounding_shift_onnx(b, z, self.frac_bits, self.rounding))
        return b.clip(y, float(self.lo), float(self.hi))
