"""The fused depthwise loop (``fused.depthwise_rows``) against the Conv kernel's numpy form, at 0 LSB.

Random depthwise layers: channel multipliers, rectangular kernels, strides and dilations per
axis, asymmetric padding (wider than the kernel too), planes down to one pixel, int8 and int16
codes (float32 and float64 sums), every rounding mode (the spelled-out floor / half_up pass and
the generic one), ReLU and 8/16-bit outputs, codes at both ends of their range; then the rule
that picks the loop over the one-node session by output plane.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv
from hbtool.simulator import accel
from tests.helpers import random_depthwise_layer

ROUNDINGS = ["floor", "half_up", "half_away", "half_even"]


def _layer(rng, kernel=None):
    C = int(rng.integers(1, 9))
    mult = int(rng.choice([1, 1, 2]))
    kh, kw = kernel or (int(v) for v in rng.integers(1, 6, 2))
    sh, sw = (int(v) for v in rng.integers(1, 4, 2))
    dh, dw = (int(v) for v in rng.choice([1, 1, 2], 2))
    pads = [int(v) for v in rng.integers(0, 4, 4)]
    H = int(rng.integers(max(1, dh * (kh - 1) + 1 - pads[0] - pads[2]), 14))
    W = int(rng.integers(max(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 14))
    in_bits = int(rng.choice([8, 16]))
    return random_depthwise_layer(rng, C, mult, (kh, kw), (H, W), strides=(sh, sw), pads=pads, dilations=(dh, dw),
                                  in_bits=in_bits, roundings=ROUNDINGS)


@pytest.mark.parametrize("float64_requant", [True, False])
@pytest.mark.parametrize("seed", range(70))
def test_the_depthwise_loop_equals_the_numpy_form(monkeypatch, seed, float64_requant):
    """Seeds from 40 on draw 3 x 3 kernels (their own pass per kernel row) at random strides and dilations.
    floor / half_up requantize in float64 where exact (``fused.REQUANT_FLOAT64``), and in the int64 form with it off."""
    from hbtool.simulator import depthwise

    monkeypatch.setattr(accel, "DEPTHWISE_FLOAT64_REQUANT", float64_requant)
    monkeypatch.setattr(depthwise, "int64_requant_vectorises", lambda: False)  # the float64 form on AVX-512 too
    rng = np.random.default_rng(1000 + seed)
    kern, x = _layer(rng, (3, 3) if seed >= 40 else None)
    cout = kern.weight.shape[0]
    run = accel._depthwise_runner(kern, accel.RequantParams(kern.requant, cout), accel._bias(kern, cout))
    want = kern.apply_numpy(x)
    for dtype in ([np.int8, np.int16] if kern.in_bits <= 8 else [np.int16]):
        got = run(x.astype(dtype))
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.astype(np.int64), want)
    np.testing.assert_array_equal(run(x).astype(np.int64), want)  # int64 codes from a numpy-form producer


@pytest.mark.parametrize("vnni", [True, False])
def test_the_loop_runs_on_large_planes_and_the_session_on_small_ones(monkeypatch, vnni):
    """28 x 28 output planes and larger where the uint8 x int8 GEMM never saturates (VNNI), 14 x 14 elsewhere (the 3 x 3
    layers of one zero's padding switched off their own loop, ``depthwise.run_3x3``, which takes them on any plane)."""
    from hbtool.simulator import depthwise

    monkeypatch.setattr(accel, "_cpu_integer_gemm_never_saturates", lambda: vnni)
    monkeypatch.setattr(depthwise, "LOOP_3X3", False)
    rng = np.random.default_rng(3)
    kern = Conv.build(rng.integers(-128, 128, (16, 1, 3, 3)), None, 0.03, 0.01, 0.5, pads=[1, 1, 1, 1], group=16)
    strided = Conv.build(rng.integers(-128, 128, (16, 1, 3, 3)), None, 0.03, 0.01, 0.5, strides=[2, 2], pads=[1, 1, 1, 1],
                         group=16)
    assert accel.depthwise_in_loop(kern, (1, 16, 28, 28))
    assert accel.depthwise_in_loop(kern, (1, 16, 14, 14)) == (not vnni)
    assert accel.depthwise_in_loop(strided, (1, 16, 28, 28)) == (not vnni)  # a 14 x 14 output plane
    assert not accel.depthwise_in_loop(kern, (1, 16, 13, 14))
    assert not accel.depthwise_in_loop(strided, (1, 16, 14, 14))  # 7 x 7
    assert accel.depthwise_in_loop(strided, (1, 16, 56, 56))
    assert not accel.depthwise_in_loop(kern, None)  # shape unknown: the session route
    assert not accel.depthwise_in_loop(kern, (1, 16, "h", 28))
    fast = accel.accelerate(kern, in_shape=(1, 16, 32, 32))
    assert getattr(fast, "depthwise_loop", False)
    assert accel.reader_dtype(fast, 0) == np.int8  # the producer hands over int8 codes, not float32
    assert not getattr(accel.accelerate(kern, in_shape=(1, 16, 8, 8)), "depthwise_loop", False)
    x = rng.integers(-128, 128, (2, 16, 32, 32)).astype(np.int8)
    np.testing.assert_array_equal(fast(x).astype(np.int64), kern.apply_numpy(x))
    pointwise = Conv.build(rng.integers(-128, 128, (16, 16, 1, 1)), None, 0.03, 0.01, 0.5)
    assert not accel.depthwise_in_loop(pointwise, (1, 16, 64, 64))


@pytest.mark.parametrize("strides,dilations,mult", [((2, 2), (1, 1), 1), ((2, 1), (1, 2), 2), ((3, 2), (2, 1), 1)])
def test_a_strided_layer_split_over_threads_equals_the_numpy_form(monkeypatch, strides, dilations, mult):
    """Strided planes run through stride-phase planes; rows split across threads start mid-plane (a
    thread's first row copies its own plane); the split forced whatever the tensor's size."""
    from hbtool.simulator import fused, jit

    monkeypatch.setattr(jit, "MIN_PARALLEL_WORK", 1)

    rng = np.random.default_rng(sum(strides) * 10 + mult)
    C = 24
    kern = Conv.build(rng.integers(-128, 128, (C * mult, 1, 3, 3)), rng.integers(-5000, 5000, C * mult), 0.03,
                      rng.uniform(0.001, 0.02, C * mult), 0.5, strides=list(strides), pads=[1, 0, 2, 1],
                      dilations=list(dilations), group=C, rounding="half_even")
    x = rng.integers(-128, 128, (2, C, 57, 61)).astype(np.int8)
    run = accel._depthwise_runner(kern, accel.RequantParams(kern.requant, C * mult), accel._bias(kern, C * mult))
    fused.set_threads(2)
    try:
        np.testing.assert_array_equal(run(x).astype(np.int64), kern.apply_numpy(x))
    finally:
        fused.set_threads(None)


def test_the_float64_requantization_is_taken_only_where_every_value_is_below_2_53(monkeypatch):
    """Which form the runner passes the loop: float64 for the kernels ``Conv.build`` makes (its requantizers keep
    ``acc * M`` below ``2**52``), generic for other roundings, and int64 for a requantizer whose ``(|bias| + max|sum|)
    * M`` could reach ``2**53`` (hand-made: 38-bit multipliers), checked against Python integers."""
    from types import SimpleNamespace

    from hbtool.simulator import depthwise

    monkeypatch.setattr(depthwise, "int64_requant_vectorises", lambda: False)  # where AVX-512 has it, int64 always
    forms = []
    real = accel.fused.depthwise_rows
    monkeypatch.setattr(accel.fused, "depthwise_rows", lambda *a: (forms.append(int(a[11])), real(*a))[1])
    rng = np.random.default_rng(77)
    w = rng.integers(-128, 128, size=(4, 1, 3, 3))
    w[0] = 127
    x = rng.integers(-128, 128, size=(1, 4, 6, 6))
    x[0, 0] = 127
    bias = rng.integers(-5000, 5000, 4)
    for rounding, form in (("half_up", accel.fused.REQUANT_FLOAT64), ("half_even", accel.fused.REQUANT_GENERIC)):
        kern = Conv.build(w, bias, 0.03, rng.uniform(0.001, 0.02, 4), 0.5, pads=[1, 1, 1, 1], group=4, in_bits=8,
                          out_bits=16, rounding=rounding)
        run = accel._depthwise_runner(kern, accel.RequantParams(kern.requant, 4), accel._bias(kern, 4))
        np.testing.assert_array_equal(run(x.astype(np.int8)).astype(np.int64), kern.apply_numpy(x))
        assert forms[-1] == form
    M, n = np.full(4, 2**38 + 12345, np.int64), np.full(4, 44, np.int64)
    wide = SimpleNamespace(M=M, n=n, clamp_acc=None, pre_shift=None, lo=-32768, hi=32767, rounding="half_up")
    params = accel.RequantParams(wide, 4)
    got = accel._depthwise_runner(kern, params, bias)(x.astype(np.int8))
    assert forms[-1] == accel.fused.REQUANT_INT64
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    for c in range(4):
        for oy in range(6):
            for ox in range(6):
                acc = int(bias[c]) + sum(int(w[c, 0, ky, kx]) * int(xp[c, oy + ky, ox + kx]) for ky in range(3) for kx in range(3))
                want = min(max((acc * int(M[c]) + (1 << 43)) >> 44, -32768), 32767)
                assert int(got[0, c, oy, ox]) == want
