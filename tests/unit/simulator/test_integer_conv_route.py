"""Convolutions of int8 activations with kernels larger than 1 x 1 run as onnxruntime ``ConvInteger`` exactly
where their float32 form would split the weight into digits (two products), and equal the kernel's numpy form
bit for bit there: padding (onnxruntime pads with the zero point, the code 0), strides, dilations, bias.
(On a CPU whose uint8 x int8 GEMM never saturates they take int8 columns and ``MatMulInteger`` first since sim9,
``test_im2col_gemm_route.py``; the route is still built and the result still compared here.)"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv
from hbtool.kernels.conv import plan_float_conv
from hbtool.simulator import accel


def _conv(rng, cin, cout, k, weight_bound, **geometry):
    w = rng.integers(-weight_bound, weight_bound + 1, (cout, cin, k, k))
    return Conv.build(w, rng.integers(-20000, 20000, cout), 0.03, rng.uniform(0.0001, 0.002, cout), 0.5,
                      rounding=str(rng.choice(["floor", "half_up", "half_even"])), relu=bool(rng.random() < 0.5),
                      **geometry)


@pytest.mark.parametrize("seed", range(12))
def test_a_split_needing_conv_runs_integer_and_exact(seed):
    rng = np.random.default_rng(500 + seed)
    cin = int(rng.choice([320, 400]))
    k = int(rng.choice([3, 3, 5]))
    geometry = dict(strides=[int(rng.integers(1, 3))] * 2, pads=[int(v) for v in rng.integers(0, 3, 4)],
                    dilations=[int(rng.choice([1, 2]))] * 2)
    kern = _conv(rng, cin, int(rng.integers(4, 20)), k, 127, **geometry)
    w = np.asarray(kern.weight, np.int64)
    assert any(plan_float_conv(w, 8))  # the float32 form would split: the integer route is taken
    attrs = dict(kernel_shape=[k, k], strides=kern.strides, pads=kern.pads, dilations=kern.dilations, group=1)
    assert accel._pointwise_integer_conv(kern, w, attrs, 1) is not None
    H = int(rng.integers(k * 2, 16))
    x = rng.integers(-128, 128, (int(rng.integers(1, 3)), cin, H, H + 1))
    x.reshape(-1)[:2] = [-128, 127]
    got = accel.conv_fast(kern, 1, (1, cin, H, H + 1))(x.astype(np.int8))
    np.testing.assert_array_equal(got.astype(np.int64), kern.apply_numpy(x))


def test_a_conv_exact_in_one_float_product_keeps_the_float_route():
    rng = np.random.default_rng(9)
    kern = _conv(rng, 8, 8, 3, 3, pads=[1, 1, 1, 1])  # small weights: float32 sums exact without a split
    w = np.asarray(kern.weight, np.int64)
    assert not any(plan_float_conv(w, 8))
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    assert accel._pointwise_integer_conv(kern, w, attrs, 1) is None
    kern16 = Conv.build(rng.integers(-127, 128, (8, 300, 3, 3)), None, 0.03, 0.001, 0.5, in_bits=16, pads=[1, 1, 1, 1])
    assert accel._pointwise_integer_conv(kern16, np.asarray(kern16.weight, np.int64), attrs, 1) is None  # int16: digits
