"""The one-part requantizing loops multiply 32 x 32 -> 64 bits: ``(y * M + (bias * M + half)) >> n`` with the
multipliers read as int32 (``RequantParams.M32``), the same int64 value as ``((bias + y) * M + half) >> n``.

Checked here where the other tests do not reach: multipliers that do not fit int32 (no requantizer built by
``Requantize.build`` has them, its multipliers are 15-bit; a hand-made one can) take the two-part loop instead
and stay exact, and the constant term is worked out once per bias array, not per call.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from hbtool.simulator import accel

RNG = np.random.default_rng(3434)


def _exact(acc, bias, M, n, half, lo, hi):
    """Python integers: no int64 anywhere."""
    out = np.empty(acc.shape, np.int64)
    for idx in np.ndindex(acc.shape):
        c = idx[-1]
        v = ((int(bias[c]) + int(acc[idx])) * int(M[c]) + int(half[c])) >> int(n[c])
        out[idx] = min(max(v, lo), hi)
    return out


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("rounding", ["floor", "half_up"])
def test_multipliers_past_int32_take_the_int64_loop_and_stay_exact(monkeypatch, wide, rounding):
    M = np.array([2**31 + 5, 3, 2**40 + 1] if wide else [2**31 - 1, 3, 2**20 + 7], np.int64)
    n = np.array([45, 1, 50], np.int64)
    rq = SimpleNamespace(M=M, n=n, clamp_acc=None, pre_shift=None, lo=-32768, hi=32767, rounding=rounding)
    params = accel.RequantParams(rq, 3)
    assert (params.M32 is None) == wide
    used = []
    for name in ("requantize_cols_one", "requantize_cols"):
        monkeypatch.setattr(accel.fused, name, lambda *a, _f=getattr(accel.fused, name), _n=name: (used.append(_n), _f(*a))[1])
    acc = RNG.integers(-2**20, 2**20, size=(40, 3)).astype(np.int32)
    acc[:2] = [[2**20, -2**20, 0], [-2**20, 2**20, 1]]
    bias = RNG.integers(-5000, 5000, 3)
    got = params.apply((acc,), np.ones(1, np.int64), bias, True)
    assert used == ["requantize_cols" if wide else "requantize_cols_one"]
    np.testing.assert_array_equal(got.astype(np.int64), _exact(acc, bias, M, n, params.half, -32768, 32767))


def test_the_constant_term_is_worked_out_once_per_bias_array():
    rq = SimpleNamespace(M=np.array([12345, 777], np.int64), n=np.array([10, 3], np.int64), clamp_acc=None,
                         pre_shift=None, lo=-128, hi=127, rounding="half_up")
    params = accel.RequantParams(rq, 2)
    bias = np.array([100, -7], np.int64)
    first = params.folded(bias)
    assert params.folded(bias) is first
    np.testing.assert_array_equal(first, bias * rq.M + params.half)
    other = np.array([1, 2], np.int64)
    np.testing.assert_array_equal(params.folded(other), other * rq.M + params.half)
