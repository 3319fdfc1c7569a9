"""The torch int64 requantization of the QAT forward equals the kernels' numpy form, integer for integer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hbtool.kernels.fixedpoint import rounding_shift_numpy
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.lut import Lut
from hbtool.kernels.eltwise import Add, Mul
from hbtool.kernels.softmax import Softmax
from hbtool.qat.int_ops import add, lut_of_codes, mul, requantize, rounding_shift, softmax

MODES = ("half_up", "half_even", "half_away", "floor")


@pytest.mark.parametrize("mode", MODES)
def test_rounding_shift_matches_numpy_on_ties_and_random_values(mode):
    rng = np.random.default_rng(0)
    n = np.arange(0, 12, dtype=np.int64).reshape(1, -1)
    ties = np.arange(-40, 41, dtype=np.int64).reshape(-1, 1) * (1 << 4)  # exact halves for several n
    rand = rng.integers(-(1 << 40), 1 << 40, (200, 1), dtype=np.int64)
    for x in (ties, rand):
        x = np.broadcast_to(x, (x.shape[0], n.shape[1])).copy()
        ours = rounding_shift(torch.from_numpy(x), torch.from_numpy(n), mode).numpy()
        assert np.array_equal(ours, rounding_shift_numpy(x, n, mode))


@pytest.mark.parametrize("mode", MODES)
def test_requantize_matches_apply_trusted_per_channel_with_clamp_and_pre_shift(mode):
    rng = np.random.default_rng(1)
    ratios = np.concatenate([rng.uniform(1e-7, 1e-2, 6), [1e-11, 0.7]])  # tiny ratios take a pre-shift
    rq = Requantize.build(ratios.reshape(-1, 1, 1), out_bits=8, acc_bound=(1 << 45), rounding=mode)
    # outputs of -200..200 LSB before the clamp (some saturate, most do not), ties included by chance
    acc = np.round(rng.uniform(-200, 200, (3, 8, 4, 5)) / ratios.reshape(-1, 1, 1)).astype(np.int64)
    acc[0, :, 0, 0] = 0
    ours = requantize(rq, torch.from_numpy(acc)).numpy()
    ref = rq.apply_trusted(acc)
    assert rq.clamp_acc is not None and rq.pre_shift is not None and rq.pre_shift.max() > 0
    assert np.array_equal(ours, ref)
    assert len(np.unique(ref)) > 20  # not all saturated: the comparison sees the rounding


def test_requantize_of_a_relu_output_range():
    rq = Requantize.build(np.float64(0.01), out_bits=16, relu=True)
    acc = np.arange(-5000, 5000, 7, dtype=np.int64)
    assert np.array_equal(requantize(rq, torch.from_numpy(acc)).numpy(), rq.apply_trusted(acc))


@pytest.mark.parametrize("in_bits,out_bits,fn", [(8, 8, "sigmoid"), (16, 16, "gelu"), (16, 8, "tanh")])
def test_lut_matches_apply_numpy_on_every_code(in_bits, out_bits, fn):
    kernel = Lut.build(fn, 0.05 if in_bits == 8 else 2e-4, in_bits, 1.0 / (2 ** (out_bits - 1) - 1), out_bits)
    lo, hi = -(2 ** (in_bits - 1)), 2 ** (in_bits - 1)
    q = np.arange(lo, hi, dtype=np.int64).reshape(-1, 8)
    ref = kernel.apply_numpy(q)
    float_codes = lut_of_codes(kernel, torch.from_numpy(q).to(torch.float32))
    assert float_codes.dtype == torch.float32 and np.array_equal(float_codes.numpy(), ref)
    assert len(np.unique(ref)) > 50


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bits", [(8, 8, 8), (16, 8, 16), (16, 16, 8)])
def test_add_and_mul_match_apply_numpy_on_full_range_codes(mode, bits):
    a_bits, b_bits, out_bits = bits
    rng = np.random.default_rng(2)
    a = rng.integers(-(2 ** (a_bits - 1)), 2 ** (a_bits - 1), (4, 6, 5), dtype=np.int64)
    b = rng.integers(-(2 ** (b_bits - 1)), 2 ** (b_bits - 1), (4, 6, 5), dtype=np.int64)
    sa, sb = 0.02 / 2 ** (a_bits - 8), 0.013 / 2 ** (b_bits - 8)
    kernels = [Add.build(sa, sb, 0.03 / 2 ** (out_bits - 8), a_bits, b_bits, out_bits, rounding=mode),
               Add.build(sa, sb, 0.03 / 2 ** (out_bits - 8), a_bits, b_bits, out_bits, sub=True, relu=True, rounding=mode),
               Add.build(sa, np.full(5, sb) * rng.uniform(0.5, 2, 5), np.full(5, 0.03 / 2 ** (out_bits - 8)),
                         a_bits, b_bits, out_bits, rounding=mode),  # per channel of the last axis
               Mul.build(sa, sb, sa * sb * 2 ** (a_bits + b_bits - out_bits - 2), a_bits, b_bits, out_bits, rounding=mode)]
    for kernel in kernels:
        ref = kernel.apply_numpy(a, b)
        ours = (add if isinstance(kernel, Add) else mul)(kernel, torch.from_numpy(a), torch.from_numpy(b)).numpy()
        assert np.array_equal(ours, ref), type(kernel).__name__
        assert len(np.unique(ref)) > 30  # not saturated: the comparison sees the rounding


@pytest.mark.parametrize("in_bits,out_bits,log2_bits,axis", [(8, 8, 0, -1), (16, 16, 0, -1), (16, 8, 0, -2), (16, 16, 3, -1)])
def test_softmax_matches_apply_numpy(in_bits, out_bits, log2_bits, axis):
    rng = np.random.default_rng(3)
    lo, hi = -(2 ** (in_bits - 1)), 2 ** (in_bits - 1)
    q = rng.integers(lo, hi, (3, 7, 9), dtype=np.int64) // (1 if in_bits == 8 else 8)
    q[0, 0, :] = lo  # a row at the masked minimum
    q[1, :, 2] = lo
    kernel = Softmax.build(0.05 if in_bits == 8 else 4e-4, in_bits, out_bits, log2_bits=log2_bits, axis=axis)
    ref = kernel.apply_numpy(q)
    assert np.array_equal(softmax(kernel, torch.from_numpy(q)).numpy(), ref)
    assert len(np.unique(ref)) > (4 if log2_bits else 40)
