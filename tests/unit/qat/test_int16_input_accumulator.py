"""The exact accumulator of int16-input weighted kernels in the QAT module (byte split in float32)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from hbtool.kernels.linear import F32_EXACT
from hbtool.qat.module import QatModel


def _stub():
    stub = SimpleNamespace(device=torch.device("cpu"))
    stub._dev = lambda a, keep_dtype=False: QatModel._dev(stub, a, keep_dtype)
    return stub


def test_int16_linear_accumulator_is_the_int64_product_with_a_large_bias():
    rng = np.random.default_rng(3)
    k, n = 96, 24
    w = rng.integers(-127, 128, (k, n)).astype(np.int64)
    bias = rng.integers(-(2**28), 2**28, n).astype(np.int64) | 1  # odd, beyond float32's exact integers
    x = rng.integers(-32768, 32768, (5, k)).astype(np.int64)
    wsum = int(np.abs(w).sum(axis=0).max())
    assert 32768 * wsum > F32_EXACT  # a float32 product of these codes would round
    kernel = SimpleNamespace(weight=w, bias=bias, wsum=wsum)
    got = QatModel._exact_accumulate(_stub(), None, kernel, torch.from_numpy(x.astype(np.float32)))
    np.testing.assert_array_equal(got, x @ w + bias)
    # the former route rounded the bias through float32 before the float64 product
    rounded = x @ w + bias.astype(np.float32).astype(np.int64)
    assert (rounded != x @ w + bias).any()


def test_wide_weights_fall_back_to_float64_and_stay_exact():
    rng = np.random.default_rng(4)
    k, n = 4096, 3
    w = np.full((k, n), 127, np.int64) * rng.choice([-1, 1], (k, n))
    x = rng.integers(-32768, 32768, (2, k)).astype(np.int64)
    wsum = int(np.abs(w).sum(axis=0).max())
    assert 255 * wsum > F32_EXACT
    kernel = SimpleNamespace(weight=w, bias=None, wsum=wsum)
    got = QatModel._exact_accumulate(_stub(), None, kernel, torch.from_numpy(x.astype(np.float32)))
    np.testing.assert_array_equal(got, x @ w)
