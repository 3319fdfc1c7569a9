"""The table lookup loop (four elements a turn, the rest one by one) and the one-pass Dequantize by one float32
scale (``fused.dequantize``): the same values as the numpy forms, on every tail length and split over threads."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels.quantize import Dequantize
from hbtool.simulator import accel, fused


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 1001, 65536])
@pytest.mark.parametrize("table_dtype", [np.int8, np.int16, np.int32])
def test_lookup_equals_indexing_on_every_tail(loop_threads, n, table_dtype):
    rng = np.random.default_rng(n)
    x = rng.integers(-32768, 32768, n).astype(np.int16)
    if n == 65536:
        x = np.arange(-32768, 32768, dtype=np.int16)
    info = np.iinfo(table_dtype)
    table = rng.integers(max(info.min, -32768), min(info.max, 32767) + 1, 65536).astype(table_dtype)
    out = np.empty(n, table_dtype)
    fused.lookup(x, table, np.int64(32768), out)
    np.testing.assert_array_equal(out, table[x.astype(np.int64) + 32768])


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
@pytest.mark.parametrize("scale", [1.0, 0.0123, 3.0517578125e-05, 7.77e3, np.float32(1 / 3)])
@pytest.mark.parametrize("shape", [(), (1,), (5,), (3, 1001), (2, 4, 9)])
def test_dequantize_by_one_scale_is_one_pass_with_the_same_floats(monkeypatch, loop_threads, dtype, scale, shape):
    calls = []
    real = fused.dequantize
    monkeypatch.setattr(fused, "dequantize", lambda *a: (calls.append(1), real(*a)))
    info = np.iinfo(dtype)
    q = np.random.default_rng(2).integers(info.min, info.max + 1, shape).astype(dtype)
    if q.size >= 2:
        q.reshape(-1)[:2] = [info.min, info.max]
    kern = Dequantize.build(scale)
    got, want = accel.dequantize_fast(kern)(q), kern.apply_numpy(q)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got.view(np.int32), want.view(np.int32))   # the same bits, signed zeros included
    assert calls == [1]


def test_other_codes_and_per_channel_scales_keep_the_numpy_multiply(monkeypatch):
    monkeypatch.setattr(fused, "dequantize", lambda *a: pytest.fail("the one-pass loop ran"))
    q = np.arange(-6, 6).reshape(1, 3, 4)
    per_channel = Dequantize.build(np.array([0.5, 0.25, 0.125], np.float32), axis=-2)
    np.testing.assert_array_equal(accel.dequantize_fast(per_channel)(q.astype(np.int16)), per_channel.apply_numpy(q))
    one = Dequantize.build(0.1)
    np.testing.assert_array_equal(accel.dequantize_fast(one)(q.astype(np.int64)), one.apply_numpy(q))
