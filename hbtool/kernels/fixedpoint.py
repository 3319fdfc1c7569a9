"""Fixed-point primitives shared by every kernel, in both executable forms.

* :func:`int_range` - the integer range of an 8- or 16-bit activation.
* :func:`quantize_multiplier` - a real ratio r as ``M * 2**-n`` with a 15-bit M.
* :func:`rounding_shift_numpy` / :func:`rounding_shift_onnx` - ``x / 2**n`` rounded by one
  of :data:`ROUNDING_MODES`.
* :func:`floor_div_numpy` / :func:`floor_div_onnx` - ``floor(a / b)`` for a positive
  integer b that is only known at run time (softmax sum, LayerNorm count).
* :func:`isqrt_numpy` / :func:`isqrt_onnx` - the exact integer square root.

Exactness in the ONNX form (integers carried as IEEE doubles):

* every integer with ``|v| <= 2**53`` is a double, and ``+ - *`` of such integers are exact
  while the exact result stays within that bound;
* multiplying by ``2**-n`` only changes the exponent, so ``x * 2**-n`` is exact;
* ``floor(x * 2**-n + 0.5)`` is exact when ``x + 2**(n-1)`` is a double: guaranteed by
  ``|x| < 2**52`` and ``n <= 52`` (:data:`EXACT_LIMIT`, :data:`MAX_SHIFT`);
* ``floor(a / b)`` (one correctly rounded division, then Floor) is exact when
  ``|a| + 2*b < 2**53``: the quotient ``k - j/b`` (j >= 1) is at least ``1/b`` below the
  next integer ``k``, which is more than half an ulp of ``k`` under that bound.

The numpy forms check the same bounds on their inputs and raise
:class:`~hbtool.kernels.base.RangeError` when a caller breaks them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hbtool.kernels.base import as_int, check
from hbtool.kernels.builder import OnnxBuilder

#: right shifts go from 0 to this many bits
MAX_SHIFT = 52
#: integers fed to a rounding shift (and integer products in general) stay below this magnitude
EXACT_LIMIT = 2**52
#: bits of the requantization multiplier: M lies in [2**(MULT_BITS-1), 2**MULT_BITS)
MULT_BITS = 15

#: the supported rounding modes of a right shift; "half_up" is the default (hardware style)
ROUNDING_MODES = ("half_up", "half_even", "half_away", "floor")
DEFAULT_ROUNDING = "half_up"


def int_range(bits: int) -> tuple[int, int]:
    """(qmin, qmax) of a signed ``bits``-bit activation: (-128, 127) or (-32768, 32767)."""
    if bits not in (8, 16):
        raise ValueError(f"activation bits must be 8 or 16, not {bits}")
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _check_mode(mode: str) -> None:
    if mode not in ROUNDING_MODES:
        raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {mode!r}")


# --------------------------------------------------------------------------- multiplier
def quantize_multiplier(r: Any, bits: int = MULT_BITS, max_shift: int = MAX_SHIFT,
                        max_left_shift: int = 0) -> tuple[Any, Any]:
    """Approximate a real ratio ``r >= 0`` (scalar or array) by ``M * 2**-n``.

    Returns int64 ``(M, n)`` with the shape of ``r`` (Python ints for a scalar), where
    ``2**(bits-1) <= M < 2**bits`` and ``-max_left_shift <= n <= max_shift``, and the relative
    error ``|M * 2**-n - r| / r <= 2**-bits`` (< 2**-14 for the default 15 bits). A negative
    ``n`` is a left shift: only callers that allow one (``max_left_shift > 0``) get it.

    Edge cases: ``r == 0`` gives ``(0, 0)``. A tiny r that would need ``n > max_shift`` keeps
    ``n = max_shift`` and ``M = round(r * 2**max_shift)``, which may be below
    ``2**(bits-1)`` or 0 (its absolute error is at most ``2**-(max_shift+1)``). A huge r
    (``M * 2**-n`` would need ``n < -max_left_shift``; with the default 0, r >= 2**bits - 0.5)
    raises ValueError: a right-shift requantizer cannot amplify that much.
    """
    arr = np.asarray(r, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("requantization ratios must be finite and >= 0")
    mant, exp = np.frexp(arr)  # arr = mant * 2**exp, mant in [0.5, 1)
    n = bits - exp.astype(np.int64)
    m = np.floor(mant * 2.0**bits + 0.5)
    carry = m >= 2.0**bits
    m = np.where(carry, 2.0 ** (bits - 1), m)
    n = np.where(carry, n - 1, n)
    tiny = n > max_shift
    if np.any(tiny):
        m = np.where(tiny, np.floor(np.ldexp(arr, max_shift) + 0.5), m)
        n = np.where(tiny, max_shift, n)
    zero = arr == 0
    m = np.where(zero, 0, m)
    n = np.where(zero, 0, n)
    if np.any(n < -max_left_shift):
        bad = float(np.max(arr[n < -max_left_shift]))
        how = "a right shift" if max_left_shift == 0 else f"a left shift of at most {max_left_shift}"
        raise ValueError(f"requantization ratio {bad:g} is too large for a {bits}-bit multiplier and {how}")
    M = m.astype(np.int64)
    n = n.astype(np.int64)
    if M.ndim == 0:
        return int(M), int(n)
    return M, n


# --------------------------------------------------------------------------- rounding shift
def rounding_shift_numpy(x: Any, n: Any, mode: str = DEFAULT_ROUNDING, check_range: bool = True) -> np.ndarray:
    """``x / 2**n`` rounded to an integer by ``mode`` (int64 arithmetic).

    ``n`` is an int or an int array broadcasting against ``x``, ``0 <= n <= 52``; the
    ONNX form is exact for ``|x| < 2**52``, which is checked here unless the caller
    already guarantees it (``check_range=False``, used on the kernels' hot paths).

    * ``half_up``:   ``floor((x + 2**(n-1)) / 2**n)`` - ties toward +infinity
    * ``half_even``: ties to the even neighbour (banker's rounding)
    * ``half_away``: ties away from zero (symmetric)
    * ``floor``:     ``floor(x / 2**n)`` - an arithmetic right shift, no rounding
    """
    _check_mode(mode)
    x = as_int(x, "shift input")
    n = np.asarray(n, dtype=np.int64)
    if check_range:
        check(bool(np.all((n >= 0) & (n <= MAX_SHIFT))), f"shift out of range [0, {MAX_SHIFT}]")
        if x.size:
            check(max(-int(x.min()), int(x.max())) < EXACT_LIMIT, "rounding shift input reaches 2**52")
    if mode == "floor":
        return x >> n
    if n.ndim == 0:
        half = np.int64(1 << (int(n) - 1)) if n > 0 else np.int64(0)
    else:
        half = np.where(n > 0, np.left_shift(np.int64(1), np.maximum(n - 1, 0)), 0)
    if mode == "half_up":
        r = x + half
        r >>= n
        return r
    if mode == "half_away":
        mag = np.abs(x)
        mag += half
        mag >>= n
        return np.where(x < 0, -mag, mag)
    # half_even
    q = x >> n
    rem = x - (q << n)
    up = (rem > half) | ((rem == half) & (n > 0) & ((q & 1) == 1))
    q += up
    return q


def rounding_shift_onnx(b: OnnxBuilder, x: str, n: Any, mode: str = DEFAULT_ROUNDING) -> str:
    """ONNX form of :func:`rounding_shift_numpy`; ``n`` is static (int or broadcastable array).

    Built from ``Mul`` by ``2**-n`` (exact) then ``Floor`` (floor, half_up with ``+0.5``),
    ``Round`` (half_even: ONNX Round is round-half-to-even) or ``Sign``/``Abs`` (half_away).
    """
    _check_mode(mode)
    n = np.asarray(n, dtype=np.int64)
    if not np.all((n >= 0) & (n <= MAX_SHIFT)):
        raise ValueError(f"shift out of range [0, {MAX_SHIFT}]")
    if not np.any(n):
        return x
    inv = b.const(np.ldexp(1.0, -n), hint="pow2_neg")
    if mode == "floor":
        return b.floor(b.mul(x, inv))
    if mode == "half_even":
        return b.op("Round", b.mul(x, inv))
    half = b.const(0.5)
    if mode == "half_up":
        return b.floor(b.add(b.mul(x, inv), half))
    mag = b.floor(b.add(b.mul(b.op("Abs", x), inv), half))
    return b.mul(b.op("Sign", x), mag)


# --------------------------------------------------------------------------- floor division
def floor_div_numpy(a: Any, d: Any) -> np.ndarray:
    """``floor(a / d)`` for integer arrays, ``d > 0``; checks ``|a| + 2d < 2**53``."""
    a = as_int(a, "dividend")
    d = as_int(d, "divisor")
    check(bool(np.all(d > 0)), "divisor must be positive")
    if a.size:
        check(bool(np.all(np.abs(a) + 2 * d < 2**53)), "floor division operands reach 2**53")
    return a // d


def floor_div_onnx(b: OnnxBuilder, a: str, d: str) -> str:
    """ONNX form of :func:`floor_div_numpy`: ``Floor(Div(a, d))`` in double (exact, see module doc)."""
    return b.floor(b.div(a, d))


# --------------------------------------------------------------------------- integer sqrt
def isqrt_numpy(t: Any) -> np.ndarray:
    """Exact ``floor(sqrt(t))`` of an int64 array, ``0 <= t < 2**52`` (Newton from above, int64 only)."""
    t = as_int(t, "isqrt input")
    if t.size == 0:
        return t.copy()
    check(bool(np.all((t >= 0) & (t < EXACT_LIMIT))), "isqrt input outside [0, 2**52)")
    tt = np.maximum(t, 1)
    x = np.full(tt.shape, 2**26, dtype=np.int64)  # >= sqrt(2**52) > sqrt(t)
    while True:
        y = (x + tt // x) >> 1
        better = y < x
        if not better.any():
            break
        x = np.where(better, y, x)
    return np.where(t == 0, 0, x)


def isqrt_onnx(b: OnnxBuilder, t: str) -> str:
    """ONNX form of :func:`isqrt_numpy`: ``Floor(Sqrt(t))`` corrected to the exact value.

    For ``t < 2**52`` the double square root is correctly rounded, so its floor is the exact
    root or one above it (when ``sqrt(t)`` is within half an ulp below an integer); the
    correction subtracts 1 when ``s*s > t`` and adds 1 when ``(s+1)**2 <= t`` (for safety).
    """
    s = b.floor(b.op("Sqrt", t))
    too_big = b.cast(b.op("Greater", b.mul(s, s), t), np.float64)
    s = b.sub(s, too_big)
    s1 = b.add(s, b.const(1.0))
    too_small = b.cast(b.op("LessOrEqual", b.mul(s1, s1), t), np.float64)
    return b.add(s, too_small)
