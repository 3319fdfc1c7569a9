"""Every execution route of the simulator's products against the kernels' reference loops, at 0 LSB.

Random layers of the shapes where a route could go wrong: depthwise, grouped, strided, padded,
few channels, int8 and int16 activations (the int16 pointwise convolution runs as an integer GEMM
on two base-256 digits), extreme codes at the edges of each range; MatMul and Linear; and the
final dequantization's in-place form.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Add, Conv, Linear, MatMul, Mul
from hbtool.kernels.quantize import Dequantize
from hbtool.simulator import accel

RNG = np.random.default_rng(34)


def _codes(shape, bits, seed):
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = rng.integers(lo, hi + 1, size=shape)
    flat = x.reshape(-1)
    flat[: min(4, flat.size)] = [lo, hi, 0, -1][: min(4, flat.size)]
    return x.astype(np.int16)


CONVS = [  # (cout, cin, group, kernel, stride, pads, in_bits)
    (16, 16, 16, 3, 1, [1, 1, 1, 1], 8),     # depthwise
    (16, 16, 16, 5, 2, [2, 2, 2, 2], 16),    # depthwise, strided, int16
    (8, 8, 4, 3, 1, [1, 0, 1, 0], 8),        # grouped, asymmetric padding
    (6, 4, 2, 3, 2, [0, 1, 1, 0], 16),       # grouped, int16
    (4, 3, 1, 3, 2, [1, 1, 1, 1], 8),        # stem: few channels
    (2, 1, 1, 1, 1, [0, 0, 0, 0], 8),        # one input channel
    (24, 40, 1, 1, 1, [0, 0, 0, 0], 8),      # pointwise int8: integer GEMM
    (24, 40, 1, 1, 2, [0, 0, 0, 0], 16),     # pointwise int16, strided: integer GEMM on digits
    (12, 5, 1, 1, 1, [0, 0, 0, 0], 16),      # pointwise int16, few channels
    (12, 5, 1, 1, 1, [1, 0, 0, 1], 16),      # pointwise int16 with padding: the float route
    (40, 32, 1, 1, 1, [0, 0, 0, 0], 8),      # pointwise, >= 32 input channels: uint8 x int8 MatMulInteger
    (24, 48, 1, 1, 1, [0, 0, 0, 0], 16),     # the same on int16 digits
    (200, 32, 1, 1, 1, [0, 0, 0, 0], 8),     # an expansion from 32 channels: MatMulInteger
    (96, 16, 1, 1, 1, [0, 0, 0, 0], 8),      # a narrow expansion (16 input channels): MatMulInteger since sim9
    (24, 4, 1, 1, 1, [0, 0, 0, 0], 8),       # fewer than 8 input channels: ConvInteger
    (64, 40, 1, 3, 1, [1, 1, 1, 1], 8),      # 3 x 3 from >= 32 channels: int8 columns and MatMulInteger
    (64, 40, 1, 1, 2, [0, 0, 0, 0], 8),      # strided pointwise from >= 32 channels: the same
]


@pytest.mark.parametrize("cout, cin, group, k, stride, pads, in_bits", CONVS)
@pytest.mark.parametrize("seed", [0, 1])
def test_conv_routes_equal_the_reference_loop(cout, cin, group, k, stride, pads, in_bits, seed):
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, size=(cout, cin // group, k, k))
    w[0] = 127  # every pair at its largest same-sign product
    kern = Conv.build(w, rng.integers(-2000, 2000, cout), 0.03, rng.uniform(0.001, 0.01, cout), 0.5, strides=[stride, stride],
                      pads=pads, group=group, in_bits=in_bits, out_bits=8 if seed else 16, relu=bool(seed))
    fast = accel.accelerate(kern)
    assert fast is not None
    x = _codes((3, cin, 9, 11), in_bits, seed)
    x[0, :, 0, 0] = (1 << (in_bits - 1)) - 1
    x[0, :, 0, 1] = -(1 << (in_bits - 1))
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


def test_pointwise_int16_conv_takes_the_integer_route_unless_padded():
    w = RNG.integers(-128, 128, size=(8, 6, 1, 1))
    plain = Conv.build(w, None, 0.03, RNG.uniform(0.001, 0.01, 8), 0.5, in_bits=16, out_bits=16)
    padded = Conv.build(w, None, 0.03, RNG.uniform(0.001, 0.01, 8), 0.5, pads=[1, 1, 1, 1], in_bits=16, out_bits=16)
    attrs = {"kernel_shape": [1, 1]}
    assert accel._pointwise_integer_conv(plain, np.asarray(plain.weight, np.int64), attrs, None) is not None
    assert accel._pointwise_integer_conv(padded, np.asarray(padded.weight, np.int64), attrs, None) is None


@pytest.mark.parametrize("a_bits, b_bits, k", [(8, 8, 3), (16, 8, 64), (16, 16, 7)])
def test_matmul_routes_equal_the_reference_loop(a_bits, b_bits, k):
    kern = MatMul.build(0.01, 0.02, 0.5, k, a_bits, b_bits, 8)
    a, b = _codes((2, 3, 5, k), a_bits, 1), _codes((2, 3, k, 4), b_bits, 2)
    np.testing.assert_array_equal(accel.accelerate(kern)(a, b), kern.apply_numpy(a, b))


@pytest.mark.parametrize("in_bits, k, n", [(8, 3, 2), (16, 40, 7), (8, 300, 1)])
def test_linear_routes_equal_the_reference_loop(in_bits, k, n):
    kern = Linear.build(RNG.integers(-128, 128, size=(k, n)), RNG.integers(-500, 500, n), 0.02, RNG.uniform(0.001, 0.01, n), 0.7,
                        in_bits=in_bits, out_bits=8)
    x = _codes((4, k), in_bits, 3)
    np.testing.assert_array_equal(accel.accelerate(kern)(x), kern.apply_numpy(x))


@pytest.mark.parametrize("scale, shape", [(0.0123, (2, 40, 7)), (np.array([0.5, 0.25, 3e-5], np.float32), (2, 3, 1)),
                                          (np.array([0.5, 0.25, 3e-5], np.float32), (1,))])
@pytest.mark.parametrize("dtype", [np.int16, np.int64, np.int32])
def test_dequantize_fast_form_is_bit_exact(scale, shape, dtype):
    kern = Dequantize.build(scale, axis=None if np.ndim(scale) == 0 else -2 if len(shape) == 3 else -1)
    q = _codes(shape, 16, 4).astype(dtype)
    got, want = accel.accelerate(kern)(q), kern.apply_numpy(q)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


ROUNDINGS = ["floor", "half_up", "half_away", "half_even"]


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("in_bits", [8, 16])
def test_channel_scale_mul_and_add_routes_equal_the_reference_loop(rounding, in_bits):
    """One value per channel over the spatial axes (squeeze-excite gates, hard-swish halves): the
    branch-free loops for floor / half_up, the general ones for the other roundings."""
    a = _codes((2, 6, 5, 7), in_bits, 5)
    b = _codes((2, 6, 1, 1), 8, 6)
    for big_first in (True, False):
        bits = (in_bits, 8) if big_first else (8, in_bits)
        x, y = (a, b) if big_first else (b, a)
        for kern in (Mul.build(0.02, 0.0003, 0.01, *bits, 8, rounding=rounding),
                     Add.build(0.02, 0.003, 0.025, *bits, 8, relu=True, rounding=rounding)):
            np.testing.assert_array_equal(accel.accelerate(kern)(x, y), kern.apply_numpy(x, y))


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("b_shape", [(2, 6, 5, 7), (5, 7), (1, 1, 5, 1)])
def test_elementwise_mul_and_add_routes_equal_the_reference_loop(rounding, b_shape):
    """Same-shape and row-broadcast operands (hard-swish's ``x * gate``, residual sums), per-channel
    output scales for Add: the branch-free loops for floor / half_up, the general ones otherwise."""
    a, b = _codes((2, 6, 5, 7), 16, 7), _codes(b_shape, 8, 8)
    s_out = 2.0 ** np.random.default_rng(9).integers(0, 3, 7) * 0.01
    kernels = [Mul.build(0.02, 0.0003, 0.01, 16, 8, 8, rounding=rounding),
               Add.build(0.02, 0.003, 0.025, 16, 8, 8, rounding=rounding),
               Add.build(np.full(7, 0.02), 0.003, s_out, 16, 8, 16, relu=True, rounding=rounding, sub=True)]
    for kern in kernels:
        np.testing.assert_array_equal(accel.accelerate(kern)(a, b), kern.apply_numpy(a, b))


def test_wide_pointwise_convolutions_take_the_matmul_integer_route():
    w = RNG.integers(-128, 128, size=(40, 32, 1, 1))
    kern = Conv.build(w, None, 0.03, RNG.uniform(0.001, 0.01, 40), 0.5, in_bits=8, out_bits=8)
    strided = Conv.build(w, None, 0.03, RNG.uniform(0.001, 0.01, 40), 0.5, strides=[2, 2], in_bits=8, out_bits=8)
    expansion = Conv.build(RNG.integers(-128, 128, size=(200, 32, 1, 1)), None, 0.03, 0.004, 0.5, in_bits=8, out_bits=8)
    narrow = Conv.build(RNG.integers(-128, 128, size=(96, 16, 1, 1)), None, 0.03, 0.004, 0.5, in_bits=8, out_bits=8)
    narrowest = Conv.build(RNG.integers(-128, 128, size=(24, 4, 1, 1)), None, 0.03, 0.004, 0.5, in_bits=8, out_bits=8)
    wide = accel._pointwise_integer_matmul(kern, np.asarray(kern.weight, np.int64), None)
    assert (wide is not None) == accel._cpu_integer_gemm_never_saturates()
    assert accel._pointwise_integer_matmul(strided, np.asarray(strided.weight, np.int64), None) is None
    # expansions take it too (measured faster, benchmarks/pointwise_probe.py), from 16 channels since sim9; fewer
    # than 8 keep ConvInteger
    for kern in (expansion, narrow):
        expanded = accel._pointwise_integer_matmul(kern, np.asarray(kern.weight, np.int64), None)
        assert (expanded is not None) == accel._cpu_integer_gemm_never_saturates()
    assert accel._pointwise_integer_matmul(narrowest, np.asarray(narrowest.weight, np.int64), None) is None


@pytest.mark.parametrize("cout, cin, group, k, stride, pads, in_bits", CONVS)
def test_a_conv_written_as_its_readers_dtype_holds_the_same_integers(cout, cin, group, k, stride, pads, in_bits):
    """Every conv route's requantizing loop writing float32 (for a float product reading it) or int8 (for an
    int8 GEMM, under an 8-bit clamp) instead of int16: the same integers, saturated codes included."""
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, size=(cout, cin // group, k, k))
    for out_bits in (8, 16):
        kern = Conv.build(w, rng.integers(-2000, 2000, cout), 0.03, rng.uniform(0.001, 0.01, cout), 0.002 if out_bits == 8 else 0.05,
                          strides=[stride, stride], pads=pads, group=group, in_bits=in_bits, out_bits=out_bits)
        fast = accel.accelerate(kern)
        x = _codes((2, cin, 9, 11), in_bits, 3)
        want = kern.apply_numpy(x)
        rq = accel.writes_through(fast)
        assert rq is not None and rq.out_dtype == np.int16
        for dtype in (np.float32, np.int8):
            if not accel.narrowable(rq, np.dtype(dtype)):
                assert dtype == np.int8 and out_bits == 16
                continue
            rq.out_dtype = np.dtype(dtype)
            got = fast(x)
            rq.out_dtype = rq.dtype
            assert got.dtype == dtype
            np.testing.assert_array_equal(got.astype(np.int64), want)
        if out_bits == 8:
            assert want.min() == -128 and want.max() == 127  # both clamps reached


def test_the_readers_dtype_is_the_one_each_route_converts_to():
    """float32 products read float32, the int8 GEMM reads int8; routes that re-encode (digits, uint8 offsets) read any."""
    rng = np.random.default_rng(8)
    depthwise = Conv.build(rng.integers(-128, 128, (16, 1, 3, 3)), None, 0.03, 0.01, 0.5, pads=[1, 1, 1, 1], group=16)
    wide = Conv.build(rng.integers(-128, 128, (40, 32, 1, 1)), None, 0.03, 0.01, 0.5)
    wide16 = Conv.build(rng.integers(-128, 128, (24, 48, 1, 1)), None, 0.03, 0.01, 0.5, in_bits=16)
    assert accel.reader_dtype(accel.accelerate(depthwise), 0) == np.float32
    assert accel.reader_dtype(accel.accelerate(wide), 0) == (np.int8 if accel._cpu_integer_gemm_never_saturates() else None)
    assert accel.reader_dtype(accel.accelerate(wide16), 0) is None
