"""ReduceMean / ReduceSum over trailing axes as one row-sum-and-requantize loop, bit for bit the kernels' numpy form."""

import numpy as np
import pytest

from hbtool.kernels.pool import ReduceMean, ReduceSum
from hbtool.simulator import accel, fused
from tests.helpers import edge_codes

RNG = np.random.default_rng(7)


def _codes(shape, bits):
    return edge_codes(RNG, shape, bits)


@pytest.mark.parametrize("rounding", ["floor", "half_up", "half_away", "half_even"])
@pytest.mark.parametrize("in_bits, out_bits", [(8, 8), (16, 8), (8, 16), (16, 16)])
@pytest.mark.parametrize("kind", [ReduceMean, ReduceSum])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_global_pool_is_the_numpy_form(monkeypatch, rounding, in_bits, out_bits, kind, threads):
    from hbtool.simulator import jit

    monkeypatch.setattr(jit, "MIN_PARALLEL_WORK", 1)  # at 2 threads the rows split
    before = fused.threads()
    fused.set_threads(threads)
    try:
        scale_in, scale_out = (0.05, 0.04) if kind is ReduceMean else (0.05, 2.0)
        kern = kind.global_avgpool(4, 49, scale_in, scale_out, in_bits=in_bits, out_bits=out_bits, rounding=rounding)
        fast = accel.accelerate(kern)
        assert fast is not None
        x = _codes((3, 40, 7, 7), in_bits)
        got = fast(x.astype(np.int8 if in_bits == 8 else np.int16))
        np.testing.assert_array_equal(got, kern.apply_numpy(x))
        assert got.shape == (3, 40, 1, 1)
    finally:
        fused.set_threads(before)


@pytest.mark.parametrize("axes, keepdims", [((-1,), False), ((2, 3), False), ((1, 2, 3), True), ((0, 1, 2, 3), False)])
def test_trailing_axes_with_or_without_keepdims(axes, keepdims):
    shape = (2, 5, 6, 4)
    count = int(np.prod([shape[a] for a in axes]))
    kern = ReduceMean.build(axes, count, 0.05, 0.03, keepdims=keepdims, relu=True)
    x = _codes(shape, 8)
    got = accel.accelerate(kern)(x.astype(np.int8))
    want = kern.apply_numpy(x)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_a_leading_axis_keeps_the_numpy_form(monkeypatch):
    """Axes that are not the trailing ones (a mean over channels) run the kernel's own form."""
    kern = ReduceMean.build((1,), 5, 0.05, 0.03, keepdims=True)
    calls = []
    monkeypatch.setattr(fused, "row_sums_requant", lambda *a: calls.append(a))
    x = _codes((2, 5, 6, 4), 8)
    np.testing.assert_array_equal(accel.accelerate(kern)(x.astype(np.int8)), kern.apply_numpy(x))
    assert calls == []
