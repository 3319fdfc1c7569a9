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
