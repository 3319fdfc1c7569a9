"""A 1 x 1 depthwise convolution (one weight per channel: the preprocessing's normalisation, ``HzPreprocess``)
runs as an int32 product per channel and the requantizing pass, bit for bit the kernel's numpy form: int8 and
int16 codes at their extremes, weights of either sign up to 128 in size, every rounding, several samples."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv
from hbtool.simulator import accel


@pytest.mark.parametrize("seed", range(12))
def test_a_weight_per_channel_runs_as_a_product_and_the_requantizing_pass(seed):
    rng = np.random.default_rng(900 + seed)
    C, in_bits = int(rng.integers(1, 6)), int(rng.choice([8, 16]))
    w = rng.integers(-128, 128, (C, 1, 1, 1))
    w.reshape(-1)[0] = int(rng.choice([-128, 127]))
    kern = Conv.build(w, rng.integers(-2_000_000, 2_000_000, C), 0.03, rng.uniform(0.0001, 0.002, C), 0.5, group=C,
                      in_bits=in_bits, out_bits=int(rng.choice([8, 16])), relu=bool(rng.random() < 0.5),
                      rounding=str(rng.choice(["floor", "half_up", "half_even", "half_away"])))
    assert accel.channel_scale(kern)
    fast = accel.conv_fast(kern, 1, (1, C, 30, 31))
    top = 1 << (in_bits - 1)
    x = rng.integers(-top, top, (int(rng.integers(1, 4)), C, 30, 31))
    x.reshape(-1)[:2] = [-top, top - 1]
    np.testing.assert_array_equal(fast(x.astype(np.int16)).astype(np.int64), kern.apply_numpy(x))


def test_kernels_wider_than_one_tap_strided_or_padded_keep_the_depthwise_routes():
    rng = np.random.default_rng(1)
    taps = Conv.build(rng.integers(-128, 128, (4, 1, 3, 3)), None, 0.03, 0.001, 0.5, group=4, pads=[1, 1, 1, 1])
    strided = Conv.build(rng.integers(-128, 128, (4, 1, 1, 1)), None, 0.03, 0.001, 0.5, group=4, strides=[2, 2])
    multiplier = Conv.build(rng.integers(-128, 128, (8, 1, 1, 1)), None, 0.03, 0.001, 0.5, group=4)
    for kern in (taps, strided, multiplier):
        assert not accel.channel_scale(kern)
