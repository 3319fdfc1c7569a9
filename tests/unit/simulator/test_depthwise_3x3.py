"""MobileNet's 3 x 3 depthwise layers as one loop (``depthwise.run_3x3``: the flat stride-1 plane, the four phases of a
stride-2 one) against the Conv kernel's numpy form, at 0 LSB; then which layers take the route.

Random layers: planes from 2 x 2 up (odd sizes at stride 1), padded on every side or only after the plane (stride 2), batches of 1-3, int8 and int16 codes (float32 and
float64 sums), every rounding mode (the int64, float64 and generic requantizing forms), ReLU and 8/16-bit outputs,
codes and weights at both ends of their range, rows split across two threads.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv
from hbtool.simulator import accel, depthwise, fused
from tests.helpers import random_depthwise_layer

ROUNDINGS = ["floor", "half_up", "half_away", "half_even"]


def _layer(rng, stride: int):
    C = int(rng.integers(2, 12))
    in_bits = 8 if stride == 2 else int(rng.choice([8, 16]))
    if stride == 2:
        H, W = (2 * int(v) for v in rng.integers(1, 9, 2))
    else:
        H, W = (int(v) for v in rng.integers(1, 17, 2))
    pads = [1, 1, 1, 1] if stride == 1 or rng.random() < 0.5 else [0, 0, 1, 1]
    return random_depthwise_layer(rng, C, 1, (3, 3), (H, W), strides=(stride, stride), pads=pads, in_bits=in_bits,
                                  roundings=ROUNDINGS)


@pytest.mark.parametrize("int64_form", [True, False])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("seed", range(30))
def test_the_3x3_loops_equal_the_numpy_form(monkeypatch, seed, stride, int64_form):
    """Both requantizing forms of floor / half_up (int64 where AVX-512 vectorises it, else float64), the generic one
    for the other roundings; the codes as int8, int16 and int64 (a numpy-form producer's)."""
    monkeypatch.setattr(depthwise, "int64_requant_vectorises", lambda: int64_form)
    rng = np.random.default_rng(2000 + 100 * stride + seed)
    kern, x = _layer(rng, stride)
    monkeypatch.setattr(depthwise, "PHASES_MIN_PLANE", 1)
    assert depthwise.takes_3x3_loop(kern, (1,) + x.shape[1:])
    cout = kern.weight.shape[0]
    run = depthwise.run_3x3(kern, accel.RequantParams(kern.requant, cout), accel._bias(kern, cout))
    want = kern.apply_numpy(x)
    for dtype in ([np.int8, np.int16, np.int64] if kern.in_bits <= 8 else [np.int16, np.int64]):
        got = run(x.astype(dtype))
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize("stride,pads", [(1, [1, 1, 1, 1]), (2, [1, 1, 1, 1]), (2, [0, 0, 1, 1])])
def test_rows_split_over_two_threads_equal_the_numpy_form(monkeypatch, stride, pads):
    """A split starts a thread mid-batch (its first row is any channel of any sample)."""
    from hbtool.simulator import jit

    monkeypatch.setattr(jit, "MIN_PARALLEL_WORK", 1)
    rng = np.random.default_rng(5 + stride + pads[0])
    C = 13
    kern = Conv.build(rng.integers(-128, 128, (C, 1, 3, 3)), rng.integers(-5000, 5000, C), 0.03, rng.uniform(0.001, 0.02, C),
                      0.5, strides=[stride, stride], pads=pads, group=C, rounding="half_up")
    x = rng.integers(-128, 128, (3, C, 14, 12)).astype(np.int8)
    run = depthwise.run_3x3(kern, accel.RequantParams(kern.requant, C), accel._bias(kern, C))
    fused.set_threads(2)
    try:
        np.testing.assert_array_equal(run(x).astype(np.int64), kern.apply_numpy(x))
    finally:
        fused.set_threads(None)


def test_which_layers_take_the_3x3_loop():
    """3 x 3, pads of one, no dilation, one output channel per input channel, stride 1 (any plane) or 2 (int8, even
    planes), a known shape; the others keep the routes before it, and ``accelerate`` picks it."""
    rng = np.random.default_rng(3)

    def conv(**kw):
        args = dict(strides=[1, 1], pads=[1, 1, 1, 1], group=16)
        args.update(kw)
        return Conv.build(rng.integers(-128, 128, (16, 1, 3, 3)), None, 0.03, 0.01, 0.5, **args)

    plain = conv()
    assert depthwise.takes_3x3_loop(plain, (1, 16, 7, 7)) and depthwise.takes_3x3_loop(plain, (1, 16, 112, 112))
    assert depthwise.takes_3x3_loop(plain, (1, 16, 13, 1))
    assert not depthwise.takes_3x3_loop(plain, None) and not depthwise.takes_3x3_loop(plain, (1, 16, "h", 28))
    strided = conv(strides=[2, 2])
    assert depthwise.takes_3x3_loop(strided, (1, 16, 28, 28))
    assert not depthwise.takes_3x3_loop(strided, (1, 16, 26, 28))  # a 13 x 14 output plane: the session
    assert not depthwise.takes_3x3_loop(strided, (1, 16, 29, 28))  # odd plane: the padding after it is read
    assert not depthwise.takes_3x3_loop(conv(strides=[2, 2], in_bits=16), (1, 16, 28, 28))
    assert depthwise.takes_3x3_loop(conv(in_bits=16), (1, 16, 28, 28))
    assert not depthwise.takes_3x3_loop(conv(strides=[2, 1]), (1, 16, 28, 28))
    assert depthwise.takes_3x3_loop(conv(strides=[2, 2], pads=[0, 0, 1, 1]), (1, 16, 28, 28))  # TensorFlow's "same"
    assert not depthwise.takes_3x3_loop(conv(pads=[0, 0, 1, 1]), (1, 16, 28, 28))
    assert not depthwise.takes_3x3_loop(conv(strides=[2, 2], pads=[1, 1, 0, 0]), (1, 16, 28, 28))
    assert not depthwise.takes_3x3_loop(conv(strides=[2, 2], pads=[0, 1, 1, 1]), (1, 16, 28, 28))
    assert not depthwise.takes_3x3_loop(conv(dilations=[2, 2]), (1, 16, 28, 28))
    multiplier = Conv.build(rng.integers(-128, 128, (32, 1, 3, 3)), None, 0.03, 0.01, 0.5, pads=[1, 1, 1, 1], group=16)
    assert not depthwise.takes_3x3_loop(multiplier, (1, 16, 28, 28))
    five = Conv.build(rng.integers(-128, 128, (16, 1, 5, 5)), None, 0.03, 0.01, 0.5, pads=[1, 1, 1, 1], group=16)
    assert not depthwise.takes_3x3_loop(five, (1, 16, 28, 28))
    fast = accel.accelerate(strided, in_shape=(1, 16, 28, 28))
    assert getattr(fast, "depthwise_loop", False) and accel.reader_dtype(fast, 0) == np.int8
    x = rng.integers(-128, 128, (2, 16, 28, 28)).astype(np.int8)
    np.testing.assert_array_equal(fast(x).astype(np.int64), strided.apply_numpy(x))


def test_the_requantizing_form(monkeypatch):
    """int64 where AVX-512 vectorises it or float64 is switched off, float64 where every value is below ``2**53``,
    else int64, generic for roundings other than floor / half_up."""
    from types import SimpleNamespace

    rq = SimpleNamespace(M=None, n=22, clamp_acc=None, pre_shift=None, lo=-128, hi=127, rounding="half_up")
    bias = np.array([1000, -2000], np.int64)
    for M, bound, want in ((2**20, 2**20, fused.REQUANT_FLOAT64), (2**38, 2**20, fused.REQUANT_INT64)):
        rq.M = np.array([M, 3], np.int64)
        params = accel.RequantParams(rq, 2)
        monkeypatch.setattr(depthwise, "int64_requant_vectorises", lambda: False)
        assert depthwise.requant_form(params, bias, bound) == want
        assert depthwise.requant_form(params, bias, bound, float64_allowed=False) == fused.REQUANT_INT64
        monkeypatch.setattr(depthwise, "int64_requant_vectorises", lambda: True)
        assert depthwise.requant_form(params, bias, bound) == fused.REQUANT_INT64
    rq.rounding = "half_even"
    assert depthwise.requant_form(accel.RequantParams(rq, 2), bias, 2**20) == fused.REQUANT_GENERIC
