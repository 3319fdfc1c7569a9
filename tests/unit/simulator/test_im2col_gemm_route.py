"""Convolutions of int8 activations with a kernel larger than 1 x 1 (and strided or padded pointwise ones of 32
or more input channels) run as int8 columns (``accel.columns``) and one onnxruntime ``MatMulInteger`` where this
CPU's uint8 x int8 kernel is exact, and equal the kernel's numpy form bit for bit: padding (the code 0), strides,
dilations and rectangular kernels per axis, bias, every rounding, several samples."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv
from hbtool.simulator import accel


def _conv(rng, w, **geometry):
    cout = w.shape[0]
    return Conv.build(w, rng.integers(-20000, 20000, cout), 0.03, rng.uniform(0.0001, 0.002, cout), 0.5,
                      rounding=str(rng.choice(["floor", "half_up", "half_even", "half_away"])), relu=bool(rng.random() < 0.5),
                      **geometry)


def _columns_numpy(x, kh, kw, sh, sw, ph, pw, ph_end, pw_end, dh, dw):
    """The columns by their definition: a zero-padded plane read at every output position and tap."""
    n, c, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph_end), (pw, pw_end)))
    oh = (H + ph + ph_end - dh * (kh - 1) - 1) // sh + 1
    ow = (W + pw + pw_end - dw * (kw - 1) - 1) // sw + 1
    out = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i, j] = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
    return out.reshape(n, c * kh * kw, oh * ow)


@pytest.mark.parametrize("seed", range(40))
def test_columns_equal_their_definition(seed):
    rng = np.random.default_rng(seed)
    kh, kw = (int(v) for v in rng.integers(1, 6, 2))
    sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, 4))
    ph, pw, ph_end, pw_end = (int(v) for v in rng.integers(0, 4, 4))
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    H = max(1, dh * (kh - 1) + 1 - ph - ph_end) + int(rng.integers(0, 8))
    W = max(1, dw * (kw - 1) + 1 - pw - pw_end) + int(rng.integers(0, 8))
    x = rng.integers(-128, 128, (n, c, H, W)).astype(np.int8)
    want = _columns_numpy(x, kh, kw, sh, sw, ph, pw, ph_end, pw_end, dh, dw)
    got = accel.columns(x, (kh, kw), (sh, sw), (ph, pw, ph_end, pw_end), (dh, dw))
    assert got.dtype == np.int8 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(16))
def test_a_kxk_conv_runs_as_columns_and_one_integer_gemm_exactly(seed):
    rng = np.random.default_rng(700 + seed)
    if not accel._cpu_integer_gemm_never_saturates():
        pytest.skip("this CPU's uint8 x int8 GEMM saturates pair sums: the route is not taken")
    kh, kw = int(rng.choice([1, 3, 5, 7])), int(rng.choice([1, 3, 4]))
    cin = 32 + int(rng.integers(0, 20))
    geometry = dict(strides=[int(v) for v in rng.integers(1, 3, 2)], pads=[int(v) for v in rng.integers(0, 3, 4)],
                    dilations=[int(v) for v in rng.integers(1, 3, 2)])
    if (kh, kw) == (1, 1) and geometry["strides"] == [1, 1]:
        geometry["strides"] = [2, 1]
    w = rng.integers(-128, 128, (int(rng.integers(4, 40)), cin, kh, kw))
    w.reshape(-1)[:2] = [-128, 127]
    kern = _conv(rng, w, **geometry)
    fast = accel.conv_fast(kern, int(rng.integers(1, 3)), None)
    assert fast is not None and fast.reads == {0: np.dtype(np.int8)}
    H = int(rng.integers(kh * 2 + 1, 20))
    x = rng.integers(-128, 128, (int(rng.integers(1, 4)), cin, H, H + 3))
    x.reshape(-1)[:2] = [-128, 127]
    np.testing.assert_array_equal(fast(x.astype(np.int8)).astype(np.int64), kern.apply_numpy(x))
    assert accel._im2col_integer_matmul(kern, np.asarray(kern.weight, np.int64), 1) is not None


def test_plain_pointwise_narrow_grouped_and_int16_convs_keep_their_routes():
    rng = np.random.default_rng(3)
    plain = _conv(rng, rng.integers(-128, 128, (64, 64, 1, 1)))                      # the pointwise GEMM route
    narrow = _conv(rng, rng.integers(-128, 128, (64, 16, 1, 1)), strides=[2, 2])     # ConvInteger stays faster there
    stem = _conv(rng, rng.integers(-128, 128, (32, 3, 3, 3)), strides=[2, 2], pads=[1, 1, 1, 1])  # K = 27: too short a GEMM
    grouped = _conv(rng, rng.integers(-128, 128, (64, 32, 3, 3)), group=2)
    wide16 = Conv.build(rng.integers(-127, 128, (8, 64, 3, 3)), None, 0.03, 0.001, 0.5, in_bits=16)
    for kern in (plain, narrow, stem, grouped, wide16):
        assert accel._im2col_integer_matmul(kern, np.asarray(kern.weight, np.int64), 1) is None
