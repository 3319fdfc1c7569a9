"""The simulator's Softmax loop reads every exponential from one table of all gaps ``max - q``
(:meth:`Softmax.exp_of_gap` tabulated once): bit-exact with the kernel's numpy form on every gap."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Softmax
from hbtool.simulator import accel


@pytest.mark.parametrize("rounding", ["floor", "half_up", "half_away", "half_even"])
@pytest.mark.parametrize("in_bits, exp_bits, mask_min", [(16, 20, True), (16, 12, False), (16, 25, True), (8, 20, True)])
def test_every_gap_of_the_table_gives_the_numpy_forms_bits(rounding, in_bits, exp_bits, mask_min):
    lo, hi = -(1 << (in_bits - 1)), (1 << (in_bits - 1)) - 1
    kern = Softmax.build(0.0005 if in_bits == 16 else 0.05, in_bits, 16, exp_bits=exp_bits, mask_min=mask_min, rounding=rounding)
    fast = accel.accelerate(kern)
    # every code once per row of 128 (in order, so each row's maximum is its last code): every gap from
    # 0 to 127 in every row, and the full-range rows below add the gaps up to 2**in_bits - 1
    codes = np.arange(lo, hi + 1, dtype=np.int64)
    q = codes.reshape(-1, 128)
    np.testing.assert_array_equal(fast(q.astype(np.int16)), kern.apply_numpy(q))
    rng = np.random.default_rng(7)
    wide = rng.integers(lo, hi + 1, (64, 300))
    wide[:, 0], wide[:, 1] = hi, lo          # the largest gap, masked when mask_min
    wide[::2, 2] = lo + 1                    # the largest unmasked gap
    np.testing.assert_array_equal(fast(wide.astype(np.int16)), kern.apply_numpy(wide))


def test_the_gap_table_is_the_kernels_own_exponential():
    kern = Softmax.build(0.0005, 16, 16)
    u = np.array([[0, 1, 255, 256, 65535]])
    q = 32767 - u   # row maximum 32767: gaps u, the last one at the masked code -32768
    e = kern.exp_numpy(q)
    np.testing.assert_array_equal(e[0, :4], kern.exp_of_gap(u)[0, :4])
    assert e[0, 4] == 0   # masked in exp_numpy, not in the gap's exponential


def _quotients_numpy(q, exps, p, ymax):
    """The kernel's quotient (``Softmax.apply_numpy``) on a given exponential table, masked codes at -32768."""
    q = q.astype(np.int64)
    e = exps[q.max(axis=1, keepdims=True) - q].astype(np.int64)
    e[(q == -32768) & (q < q.max(axis=1, keepdims=True))] = 0   # not reached where no code is -32768
    total = e.sum(axis=1, keepdims=True)
    return np.clip(((e << p) + (total >> 1)) // total, 0, ymax)


def test_the_float64_division_and_the_corrected_reciprocal_give_the_same_quotients():
    """Rows whose sum ``T`` lies on both sides of ``2**(53 - p)``, where the loop switches from one float64
    division (proved exact below it) to the reciprocal with an integer check each way, each row with a
    quotient ``1 / T`` below an integer, where a product by the rounded reciprocal without the checks lands
    on the integer (measured: the test fails with it). Same quotients as the kernel's integer division."""
    from hbtool.simulator import fused

    p, rows = 26, 30000
    rng = np.random.default_rng(0)
    exps = np.ones(1 << 16, np.int64)             # gap 0 (each row's maximum, 32767): exponential 1
    q = np.zeros((rows, 3), np.int16)
    gaps = iter(range(1, 1 << 16))
    kept = 0
    while kept < rows:
        T = int(rng.integers(1 << 26, 1 << 28)) | 1
        # a * 2**p + T // 2 + 1 == 0 (mod T): a's quotient is an integer less 1 / T
        a = (-(T // 2 + 1) * pow(1 << p, -1, T)) % T
        b = T - 1 - a
        if not (0 <= b and max(a, b) < 1 << (53 - p)):   # num = e * 2**p + T // 2 below 2**53
            continue
        ga, gb = next(gaps), next(gaps)
        exps[ga], exps[gb] = a, b
        q[kept] = (32767, 32767 - ga, 32767 - gb)
        kept += 1
    ymax = np.int64((1 << p) - 1)
    out = np.empty(q.shape, np.int64)
    fused._softmax_rows(0, rows, q, exps.astype(np.int32), False, np.int64(-32768), np.int64(p), ymax,
                        np.zeros(0, np.int64), out)
    np.testing.assert_array_equal(out, _quotients_numpy(q, exps, p, ymax))
    sums = exps[32767 - q.astype(np.int64)].sum(axis=1)
    assert (sums < 1 << (53 - p)).sum() > 1000 and (sums >= 1 << (53 - p)).sum() > 1000   # both routes ran


@pytest.mark.parametrize("mask_min", [True, False])
def test_rows_without_the_masked_code_skip_the_mask_with_the_same_bits(mask_min):
    """The loop masks ``qmin`` codes only in rows that hold one (found in the max pass): rows with it below the
    maximum, at the maximum (a gap of 0 is never masked), alone, and rows without it, mixed in one tensor."""
    kern = Softmax.build(0.0005, 16, 16, mask_min=mask_min)
    fast = accel.accelerate(kern)
    rng = np.random.default_rng(11)
    q = rng.integers(-32768, 32768, (40, 257))
    q[::3, 5] = -32768                       # a masked code below the maximum
    q[1::6] = -32768                         # every code at qmin: each one a row maximum, none masked
    q[2::6, :3] = -32768
    q[4::6] = rng.integers(-32767, -32000, (len(q[4::6]), 257))   # near qmin, never at it
    np.testing.assert_array_equal(fast(q.astype(np.int16)), kern.apply_numpy(q))
