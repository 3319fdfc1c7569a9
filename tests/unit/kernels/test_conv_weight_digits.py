"""The weight digit split and the exact-float plan of a convolution, computed on int16 codes.

The weights arrive as int64; the split (``w = 16 * hi + lo``) and the partial-sum bounds are taken on an int16 copy
when the values allow, which must give the same digits and the same plan as the int64 arithmetic did, and leave
values too wide for int16 on their own type.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels.conv import plan_float_conv, split_weight


def _split_int64(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hi = (w + 8) >> 4
    return hi, w - 16 * hi


def _plan_int64(w: np.ndarray, in_bits: int) -> tuple[bool, bool] | None:
    def worst(parts):
        return max(int(np.abs(p).reshape(p.shape[0], -1).sum(axis=1).max(initial=0)) for p in parts)

    xmax, ws, wsplit = 2 ** (in_bits - 1), worst([w]), worst(_split_int64(w))
    options = [(False, False, xmax * ws), (False, True, xmax * wsplit)]
    if in_bits > 8:
        options += [(True, False, 128 * ws), (True, True, 128 * wsplit)]
    return next(((sx, sw) for sx, sw, bound in options if bound <= 2 ** 24), None)


@pytest.mark.parametrize("low, high", [(-128, 128), (-8, 8), (-(2 ** 15) + 16, 2 ** 15 - 16)])
def test_int16_digits_are_the_int64_digits(low, high):
    w = np.random.default_rng(3).integers(low, high, (64, 32, 3, 3)).astype(np.int64)
    hi, lo = split_weight(w)
    want_hi, want_lo = _split_int64(w)
    assert hi.dtype == np.int16 and np.array_equal(hi, want_hi) and np.array_equal(lo, want_lo)
    for in_bits in (8, 16):
        want = _plan_int64(w, in_bits)
        if want is None:
            with pytest.raises(ValueError):
                plan_float_conv(w, in_bits)
        else:
            assert plan_float_conv(w, in_bits) == want


def test_wide_values_keep_their_type():
    for w in (np.array([[2 ** 20, -5, 7]], np.int64), np.array([[-(2 ** 15), 3, 0]], np.int64)):
        hi, lo = split_weight(w)
        assert hi.dtype == np.int64 and np.array_equal(16 * hi + lo, w)


def test_row_bounds_do_not_overflow_in_int16():
    """A row whose absolute sum passes int16 (4608 weights of 127): the bound is summed in int64."""
    w = np.full((2, 512, 3, 3), 127, np.int64)
    assert _plan_int64(w, 8) == plan_float_conv(w, 8)
