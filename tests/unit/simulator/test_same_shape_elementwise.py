"""The flat pass of an Add / Mul whose operands have one shape (``fused.add_same_simple`` /
``fused.mul_same_simple``): bit for bit the kernels' numpy forms, and taken where it should be."""

import numpy as np
import pytest

from hbtool.kernels.eltwise import Add, Mul
from hbtool.simulator import accel, fused

RNG = np.random.default_rng(34)
SHAPES = [(), (1,), (7,), (1, 1, 24, 56, 56), (1, 160, 7, 7), (3, 5, 1), (2, 1, 9, 4099)]


def _codes(shape, bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = RNG.integers(lo, hi + 1, size=shape)
    flat = x.reshape(-1)
    k = min(4, flat.size)
    flat[:k] = [lo, hi, 0, -1][:k]  # the extremes, where saturation and the rounding's ties show
    return x


def _counting(monkeypatch, name):
    calls = []
    real = getattr(fused, name)
    monkeypatch.setattr(fused, name, lambda *a: (calls.append(a[0].shape), real(*a)))
    return calls


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rounding", ["floor", "half_up"])
@pytest.mark.parametrize("a_bits, b_bits, out_bits, sub, relu",
                         [(8, 8, 8, False, False), (16, 8, 8, True, True), (16, 16, 16, False, False), (8, 16, 8, True, False)])
def test_add_of_one_shape_is_one_flat_pass_bit_exact(monkeypatch, loop_threads, shape, rounding, a_bits, b_bits, out_bits, sub, relu):
    calls = _counting(monkeypatch, "add_same_simple")
    scales = RNG.uniform(0.002, 0.05, 3)
    kern = Add.build(*scales, a_bits, b_bits, out_bits, sub=sub, relu=relu, rounding=rounding)
    a, b = _codes(shape, a_bits), _codes(shape, b_bits)
    got = accel.accelerate(kern)(a.astype(np.int16), b.astype(np.int16 if b_bits > 8 else np.int8))
    np.testing.assert_array_equal(got, kern.apply_numpy(a, b))
    assert got.shape == np.shape(a) and got.dtype == np.int16
    assert len(calls) == (1 if kern.n >= 0 else 0)


@pytest.mark.parametrize("shape", SHAPES[1:])  # Mul's numpy form takes no 0-d operands (its clip needs an array)
@pytest.mark.parametrize("rounding", ["floor", "half_up"])
@pytest.mark.parametrize("a_bits, b_bits, out_bits, relu", [(8, 8, 8, False), (16, 8, 8, True), (16, 16, 16, False)])
def test_mul_of_one_shape_is_one_flat_pass_bit_exact(monkeypatch, loop_threads, shape, rounding, a_bits, b_bits, out_bits, relu):
    calls = _counting(monkeypatch, "mul_same_simple")
    kern = Mul.build(*RNG.uniform(0.002, 0.05, 2), 0.01, a_bits, b_bits, out_bits, relu=relu, rounding=rounding)
    a, b = _codes(shape, a_bits), _codes(shape, b_bits)
    got = accel.accelerate(kern)(a.astype(np.int16), b.astype(np.int16))
    np.testing.assert_array_equal(got, kern.apply_numpy(a, b))
    assert len(calls) == 1


@pytest.mark.parametrize("rounding", ["half_even", "half_away"])
def test_other_roundings_and_broadcasts_keep_the_row_forms(monkeypatch, rounding):
    calls = _counting(monkeypatch, "add_same_simple") + _counting(monkeypatch, "mul_same_simple")
    add = Add.build(0.02, 0.003, 0.025, 16, 8, 8, rounding=rounding)
    mul = Mul.build(0.02, 0.003, 0.01, 16, 8, 8, rounding=rounding)
    a, b = _codes((4, 9, 7), 16), _codes((4, 9, 7), 8)
    for kern in (add, mul):
        np.testing.assert_array_equal(accel.accelerate(kern)(a, b), kern.apply_numpy(a, b))
    floor = Add.build(0.02, 0.003, 0.025, 16, 8, 8, rounding="floor")
    np.testing.assert_array_equal(accel.accelerate(floor)(a, b[:1]), floor.apply_numpy(a, b[:1]))  # a broadcast
    assert calls == []
