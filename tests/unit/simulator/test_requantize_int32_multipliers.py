"""The one-part requantizing loops multiply 32 x 32 -> 64 bits: ``(y * M + (bias * M + half)) >> n`` with the
multipliers read as int32 (``RequantParams.M32``), the same int64 value as ``((bias + y) * M + half) >> n``.

The two-part loops (int16 digit products: ``f0 = 256``) likewise, with ``A_k = f_k * M`` read as int32.
Checked here where the other tests do not reach: multipliers that do not fit int32 (no requantizer built by
``Requantize.build`` has them, its multipliers are 15-bit; a hand-made one can), or whose digit multiple does
not, take the generic loop instead and stay exact, and the constant term is worked out once per bias array.
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
def test_multipliers_past_int32_take_the_generic_loop_and_stay_exact(monkeypatch, wide, rounding):
    M = np.array([2**31 + 5, 3, 2**40 + 1] if wide else [2**31 - 1, 3, 2**20 + 7], np.int64)
    n = np.array([45, 1, 50], np.int64)
    rq = SimpleNamespace(M=M, n=n, clamp_acc=None, pre_shift=None, lo=-32768, hi=32767, rounding=rounding)
    params = accel.RequantParams(rq, 3)
    assert (params.M32 is None) == wide
    used = []
    for name in ("requantize_cols_one", "requantize_cols", "requantize_parts"):
        monkeypatch.setattr(accel.fused, name, lambda *a, _f=getattr(accel.fused, name), _n=name: (used.append(_n), _f(*a))[1])
    acc = RNG.integers(-2**20, 2**20, size=(40, 3)).astype(np.int32)
    acc[:2] = [[2**20, -2**20, 0], [-2**20, 2**20, 1]]
    bias = RNG.integers(-5000, 5000, 3)
    got = params.apply((acc,), np.ones(1, np.int64), bias, True)
    assert used == ["requantize_parts" if wide else "requantize_cols_one"]
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


@pytest.mark.parametrize("per_col", [True, False])
@pytest.mark.parametrize("rounding", ["floor", "half_up"])
def test_two_digit_parts_take_the_int32_loop_unless_256_m_overflows(monkeypatch, per_col, rounding):
    """``256 * hi + lo`` digit products: ``256 * M`` in int32 up to ``M < 2**23``; past it the generic loop."""
    for M, loop in (([2**23 - 1, 5, 2**15], "requantize_cols"), ([2**23, 5, 2**15], "requantize_parts")):
        M = np.array(M, np.int64)
        n = np.array([40, 2, 20], np.int64)
        rq = SimpleNamespace(M=M, n=n, clamp_acc=None, pre_shift=None, lo=-32768, hi=32767, rounding=rounding)
        params = accel.RequantParams(rq, 3)
        used = []
        monkeypatch.undo()
        for name in ("requantize_cols", "requantize_rows", "requantize_parts"):
            monkeypatch.setattr(accel.fused, name, lambda *a, _f=getattr(accel.fused, name), _n=name: (used.append(_n), _f(*a))[1])
        rows = 30 if per_col else 3 * 10
        hi = RNG.integers(-2**15, 2**15, size=(rows, 3)).astype(np.int32)
        lo = RNG.integers(-2**15, 2**15, size=(rows, 3)).astype(np.int32)
        bias = RNG.integers(-5000, 5000, 3)
        got = params.apply((hi, lo), [256, 1], bias, per_col)
        expect_loop = loop if per_col or loop == "requantize_parts" else "requantize_rows"
        assert used == [expect_loop]
        acc = 256 * hi.astype(np.int64) + lo
        if per_col:
            want = _exact(acc, bias, M, n, params.half, -32768, 32767)
        else:  # channel of row r is r % 3: columns of the transposed rows
            want = np.empty(acc.shape, np.int64)
            for r in range(rows):
                c = r % 3
                for q in range(3):
                    v = ((int(bias[c]) + int(acc[r, q])) * int(M[c]) + int(params.half[c])) >> int(n[c])
                    want[r, q] = min(max(v, -32768), 32767)
        np.testing.assert_array_equal(got.astype(np.int64), want)
