"""AvgPool as the depthwise loop with a weight of ones (``accel.avgpool_fast``): bit for bit the kernel's
numpy form, and the numpy form kept where the requantizer is one per output position (border counts)."""

import numpy as np
import pytest

from hbtool.kernels.pool import AvgPool
from hbtool.simulator import accel, fused

RNG = np.random.default_rng(34)
ROUNDINGS = ["half_up", "floor", "half_even", "half_away"]


def _codes(shape, bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = RNG.integers(lo, hi + 1, size=shape)
    x.reshape(-1)[:4] = [lo, hi, 0, -1]
    x[0, 0, :2, :2] = hi  # a window of the largest sums, where a rounding tie or a saturation would show
    return x


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("in_bits, out_bits, relu", [(8, 8, False), (16, 8, True), (16, 16, False), (8, 16, False)])
@pytest.mark.parametrize("k, s, pads, hw", [((3, 3), (3, 3), (0, 0, 0, 0), (3, 80)), ((2, 2), (2, 2), (0, 0, 0, 0), (7, 9)),
                                            ((3, 3), (1, 1), (1, 1, 1, 1), (6, 5)), ((3, 1), (2, 1), (1, 0, 0, 0), (9, 4)),
                                            ((1, 5), (1, 2), (0, 2, 0, 2), (1, 11)), ((5, 5), (1, 1), (0, 0, 0, 0), (5, 5))])
def test_avgpool_loop_is_bit_exact(rounding, in_bits, out_bits, relu, k, s, pads, hw):
    C = 6
    kern = AvgPool.build(k, RNG.uniform(0.01, 0.1), RNG.uniform(0.01, 0.1), C, strides=s, pads=pads, count_include_pad=True,
                         in_bits=in_bits, out_bits=out_bits, relu=relu, rounding=rounding)
    fast = accel.accelerate(kern)
    assert fast is not None
    for n in (1, 3):
        x = _codes((n, C) + hw, in_bits)
        got = fast(x.astype(np.int8 if in_bits == 8 else np.int16))
        np.testing.assert_array_equal(got, kern.apply_numpy(x))


def test_avgpool_loop_splits_over_threads_bit_exact(monkeypatch):
    from hbtool.simulator import jit

    monkeypatch.setattr(jit, "MIN_PARALLEL_WORK", 1)  # split whatever the tensor's size
    before = fused.threads()
    fused.set_threads(2)
    try:
        kern = AvgPool.build((3, 3), 0.05, 0.04, 64, strides=(1, 1), pads=(1, 1, 1, 1), count_include_pad=True, in_bits=8)
        x = _codes((2, 64, 40, 40), 8)
        np.testing.assert_array_equal(accel.accelerate(kern)(x.astype(np.int8)), kern.apply_numpy(x))
    finally:
        fused.set_threads(before)


@pytest.mark.parametrize("C", [6, 30])
def test_border_counts_keep_the_numpy_form(C):
    """count_include_pad=0 divides each window by what it covers: a requantizer per output position
    (5 x 6 = 30 of them, as many as the channels in the second case) is not the loop's per channel one."""
    kern = AvgPool.build((3, 3), 0.05, 0.04, C, strides=(1, 1), pads=(1, 1, 1, 1), count_include_pad=False,
                         spatial_shape=(5, 6), in_bits=8)
    assert np.size(kern.requant.M) > 1
    assert accel.accelerate(kern) is None
