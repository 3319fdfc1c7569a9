"""Requantize: a wide integer accumulator to an 8/16-bit activation.

``y = clamp(rounding_shift(acc * M, n), lo, hi)`` with a 15-bit multiplier ``M`` and a right
shift ``n`` per tensor or per channel (:func:`~hbtool.kernels.fixedpoint.quantize_multiplier`
of the real ratio ``s_acc / s_out``), and integer clamp bounds ``lo, hi`` (the output range,
narrowed by a fused ReLU to ``lo = 0`` or by a ReLU6-style bound to ``hi = round(6/s_out)``).

Exactness: both forms are exact while ``|acc * M| < 2**52``. For accumulators whose
declared bound ``acc_bound`` would break that, ``build`` adds two steps, in this order:

1. clamp ``acc`` to ``+-C`` where ``C`` is past the saturation point of the channel
   (``C * M / 2**n > qmax + 1``): the output cannot change, since it saturates anyway;
2. if ``C * M`` is still too large (large ``n``), a rounded pre-shift ``acc >> s0`` of the
   clamped value, with ``s0 <= n``, and the multiplier then shifts by ``n - s0``. The
   extra error is at most ``M * 2**(s0-n-1)`` output LSB, below ``2**-22`` by construction.

Large ratios (``r >= 2**15``: the output step is finer than the accumulator's, e.g. a conv
whose output calibrated to a zero range) are a 15-bit multiplier and a *left* shift
``M * 2**L``; ``build`` folds the shift into ``M`` (``n = 0``), so both forms are unchanged.
Step 1 then clamps ``acc`` to a few units (at such ratios ``|acc| = 1`` already reaches
saturation), which keeps ``acc * M`` exact. Ratios above :data:`MAX_AMPLIFY` are implemented as ``MAX_AMPLIFY``: any
``acc != 0`` saturates under both, so the output is the same for every integer input.

The accumulator itself must satisfy ``|acc| <= acc_bound <= 2**52 - 1``; the numpy form
checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hbtool.kernels.base import Kernel, as_int, check
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import (
    DEFAULT_ROUNDING,
    EXACT_LIMIT,
    ROUNDING_MODES,
    int_range,
    quantize_multiplier,
    rounding_shift_numpy,
    rounding_shift_onnx,
)
from hbtool.kernels.units import VECTOR


#: the largest ratio implemented as such; above it every nonzero accumulator saturates anyway
MAX_AMPLIFY = 2.0**40
#: left shift of the 15-bit multiplier that reaches MAX_AMPLIFY
MAX_LEFT_SHIFT = 26


def requant_multiplier(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``(M, n)`` with ``M * 2**-n ~ r``, ``n >= 0``: a left shift of large ratios folded into ``M``."""
    if not np.all(np.isfinite(r)) or np.any(r < 0):
        raise ValueError("requantization ratios must be finite and >= 0")
    M, n = quantize_multiplier(np.minimum(r, MAX_AMPLIFY), max_left_shift=MAX_LEFT_SHIFT)
    M = np.asarray(M, np.int64)
    n = np.asarray(n, np.int64)
    left = np.maximum(-n, 0)
    return np.left_shift(M, left), n + left


def channel_shape(values: Any, axis: int | None) -> np.ndarray:
    """Reshape a per-channel vector to broadcast along ``axis`` (negative, from the end).

    ``axis=None`` keeps the array as it is (a scalar, or already broadcast-shaped).
    """
    arr = np.asarray(values)
    if axis is None or arr.ndim == 0:
        return arr
    if axis >= 0:
        raise ValueError(f"channel axis must be negative (counted from the last dimension), not {axis}")
    if arr.ndim != 1:
        raise ValueError("per-channel values must be a 1-D array")
    return arr.reshape([arr.size] + [1] * (-axis - 1))


def _rshift_int(x: int, n: int, mode: str) -> int:
    """Python-int reference of the rounding shift (build-time checks only)."""
    if n == 0:
        return x
    if mode == "floor":
        return x >> n
    half = 1 << (n - 1)
    if mode == "half_up":
        return (x + half) >> n
    if mode == "half_away":
        m = (abs(x) + half) >> n
        return -m if x < 0 else m
    q, r = x >> n, x - ((x >> n) << n)
    return q + (1 if r > half or (r == half and q & 1) else 0)


def clamp_bounds(out_bits: int, relu: bool, lo: int | None, hi: int | None) -> tuple[int, int]:
    """The output clamp of a kernel: the int range, narrowed by a fused ReLU and explicit bounds."""
    qmin, qmax = int_range(out_bits)
    low = qmin if lo is None else max(qmin, int(lo))
    if relu:
        low = max(low, 0)
    high = qmax if hi is None else min(qmax, int(hi))
    if low > high:
        raise ValueError(f"empty clamp range [{low}, {high}]")
    return low, high


@dataclass(frozen=True, eq=False)
class Requantize(Kernel):
    """``acc -> clamp(rshift(acc * M, n), lo, hi)``; make it with :meth:`build`."""

    unit = VECTOR
    merges_samples = True

    M: np.ndarray
    n: np.ndarray
    lo: int
    hi: int
    out_bits: int
    acc_bound: int
    rounding: str = DEFAULT_ROUNDING
    clamp_acc: np.ndarray | None = None
    pre_shift: np.ndarray | None = None
    ratio: np.ndarray = field(default_factory=lambda: np.zeros(()))

    @classmethod
    def build(
        cls,
        ratio: Any,
        out_bits: int = 8,
        axis: int | None = None,
        acc_bound: int = EXACT_LIMIT - 1,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
    ) -> "Requantize":
        """Requantizer for the real ratio ``s_acc / s_out`` (scalar, per channel, or broadcast-shaped).

        ``axis`` (negative) places a 1-D per-channel ratio; ``acc_bound`` is the largest
        ``|acc|`` the producer can make (used to keep ``acc * M`` exact); ``relu`` sets
        ``lo = 0``; ``lo``/``hi`` are extra integer clamp bounds inside the output range.
        """
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {rounding!r}")
        acc_bound = int(acc_bound)
        if not 0 <= acc_bound < EXACT_LIMIT:
            raise ValueError(f"accumulator bound {acc_bound} is not below 2**52")
        r = channel_shape(np.asarray(ratio, dtype=np.float64), axis)
        M, n = requant_multiplier(r)
        qmin, qmax = int_range(out_bits)
        low, high = clamp_bounds(out_bits, relu, lo, hi)

        clamp = None
        pre = None
        if acc_bound * int(M.max(initial=0)) >= EXACT_LIMIT:
            Mb, nb = np.broadcast_arrays(M, n)
            C = np.empty(Mb.shape, np.int64)
            S = np.zeros(Mb.shape, np.int64)
            for idx in np.ndindex(Mb.shape):
                m, k = int(Mb[idx]), int(nb[idx])
                if m == 0 or acc_bound * m < EXACT_LIMIT:
                    C[idx], S[idx] = acc_bound, 0
                    continue
                # past saturation: c * m / 2**k >= 2**(bits-1) + 2
                c = min(acc_bound, -(-((2 ** (out_bits - 1) + 2) << k) // m) + 1)
                s0 = 0
                while (-(-c >> s0) + 1) * m >= EXACT_LIMIT:
                    s0 += 1
                if s0 > k:
                    raise ValueError("requantizer cannot keep acc * M below 2**52 (ratio too large for the accumulator bound)")
                if c < acc_bound:  # the clamp must not change the output
                    top = _rshift_int(_rshift_int(c, s0, rounding) * m, k - s0, rounding)
                    bot = _rshift_int(_rshift_int(-c, s0, rounding) * m, k - s0, rounding)
                    if top < qmax or bot > qmin:
                        raise AssertionError("internal: accumulator clamp below saturation")
                C[idx], S[idx] = c, s0
            clamp = C if bool(np.any(C < acc_bound)) else None
            pre = S if bool(np.any(S > 0)) else None
        return cls(M=M, n=n, lo=low, hi=high, out_bits=out_bits, acc_bound=acc_bound, rounding=rounding,
                   clamp_acc=clamp, pre_shift=pre, ratio=r)

    # --------------------------------------------------------------------------- forms
    def channel_arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.asarray(a) for a in (self.M, self.n, self.clamp_acc, self.pre_shift) if a is not None)

    def apply_numpy(self, acc: np.ndarray) -> np.ndarray:
        acc = as_int(acc, "accumulator")
        if acc.size:
            check(max(-int(acc.min()), int(acc.max())) <= self.acc_bound,
                  f"accumulator exceeds its declared bound {self.acc_bound}")
        return self.apply_trusted(acc)

    def apply_trusted(self, acc: np.ndarray) -> np.ndarray:
        """:meth:`apply_numpy` for an int64 ``acc`` its producer guarantees within ``acc_bound`` (no checks)."""
        if self.clamp_acc is not None:
            acc = np.clip(acc, -self.clamp_acc, self.clamp_acc)
        n = self.n
        if self.pre_shift is not None:
            acc = rounding_shift_numpy(acc, self.pre_shift, self.rounding, check_range=False)
            n = self.n - self.pre_shift
        y = rounding_shift_numpy(acc * self.M, n, self.rounding, check_range=False)
        return np.clip(y, self.lo, self.hi, out=y)

    def emit(self, b: OnnxBuilder, acc: str) -> str:
        x = acc
        if self.clamp_acc is not None:
            c = self.clamp_acc.astype(np.float64)
            x = b.op("Max", b.op("Min", x, b.const(c, hint="acc_hi")), b.const(-c, hint="acc_lo"))
        n = self.n
        if self.pre_shift is not None:
            x = rounding_shift_onnx(b, x, self.pre_shift, self.rounding)
            n = self.n - self.pre_shift
        x = b.mul(x, b.const(self.M.astype(np.float64), hint="M"))
        x = rounding_shift_onnx(b, x, n, self.rounding)
        return b.clip(x, float(self.lo), float(self.hi))

    # ------------------------------------------------------------------------ reports
    @property
    def effective_ratio(self) -> np.ndarray:
        """The ratio the integers implement, ``M * 2**-n`` (for error reports)."""
        return np.ldexp(self.M.astype(np.float64), -self.n)
