"""By default a convolution's product call of fewer than ``cores.CONV_SMALL_PRODUCT_MACS`` multiply-adds runs on its
session's one-thread twin (every convolution route: the pointwise ``MatMulInteger``, the columns' GEMM,
``ConvInteger``, the float convolution), while Linear and MatMul keep ``cores.SMALL_PRODUCT_MACS`` (off); the
environment's threshold overrides both. Which session ran is read from ``PerCoreSession.on_twin``, never from timing,
and the outputs are the same either way (every product is exact).
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv, Linear, MatMul
from hbtool.simulator import accel, cores
from hbtool.simulator.cores import PerCoreSession

ENV = cores.SMALL_PRODUCT_MACS_ENV


def _twins(monkeypatch, build, *inputs):
    """The output of a product built at 2 threads, and for each session call whether it ran on the twin."""
    seen = []
    real = PerCoreSession.on_twin

    def spy(self, feeds):
        seen.append(real(self, feeds))
        return seen[-1]

    fast = build()
    monkeypatch.setattr(PerCoreSession, "on_twin", spy)
    out = fast(*inputs)
    monkeypatch.setattr(PerCoreSession, "on_twin", real)
    return out, seen


def _convs(rng):
    """One small layer per convolution route, with its input (each call well under 2e7 multiply-adds)."""
    pointwise = Conv.build(rng.integers(-127, 128, (24, 16, 1, 1)), None, 0.03, 0.01, 0.5)
    columns = Conv.build(rng.integers(-127, 128, (8, 32, 3, 3)), None, 0.03, 0.001, 0.5, pads=[1, 1, 1, 1])
    narrow = Conv.build(rng.integers(-127, 128, (8, 4, 1, 1)), None, 0.03, 0.01, 0.5)  # under 8 channels: ConvInteger
    stem = Conv.build(rng.integers(-127, 128, (8, 3, 3, 3)), None, 0.03, 0.001, 0.5, strides=[2, 2], pads=[0, 0, 1, 1])
    return [(pointwise, rng.integers(-128, 128, (1, 16, 14, 14))), (columns, rng.integers(-128, 128, (1, 32, 7, 7))),
            (narrow, rng.integers(-128, 128, (1, 4, 14, 14))), (stem, rng.integers(-128, 128, (1, 3, 16, 16)))]


def test_small_convolution_products_run_on_one_thread_by_default_and_the_environment_overrides(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert cores.small_product_macs() == cores.SMALL_PRODUCT_MACS == 0 and cores.CONV_SMALL_PRODUCT_MACS == 2 * 10**7
    for kern, x in _convs(np.random.default_rng(11)):
        build = lambda: accel.conv_fast(kern, 2, x.shape[1:])  # noqa: E731
        monkeypatch.delenv(ENV, raising=False)
        default, on_default = _twins(monkeypatch, build, x)
        monkeypatch.setenv(ENV, "0")
        off, on_off = _twins(monkeypatch, build, x)
        monkeypatch.setenv(ENV, "1")  # every call is bigger than one multiply-add
        _, on_one = _twins(monkeypatch, build, x)
        assert on_default and all(on_default), kern.weight.shape
        assert on_off and not any(on_off) and not any(on_one), kern.weight.shape
        np.testing.assert_array_equal(default, off)
        np.testing.assert_array_equal(default.astype(np.int64), kern.apply_numpy(x))


@pytest.mark.parametrize("kind", ["linear", "matmul"])
def test_other_products_keep_the_threshold_off_by_default(monkeypatch, kind):
    monkeypatch.delenv(ENV, raising=False)
    rng = np.random.default_rng(12)
    if kind == "linear":
        lin = Linear.build(rng.integers(-127, 128, (64, 24)), None, 0.02, rng.uniform(0.001, 0.01, 24), 0.7)
        build, inputs = (lambda: accel.linear_fast(lin, 2)), (rng.integers(-128, 128, (1, 5, 64)),)
    else:
        mm = MatMul.build(0.01, 0.02, 0.5, 32, 16, 8, 8)
        build, inputs = (lambda: accel.matmul_fast(mm, 2)), (rng.integers(-32768, 32768, (3, 20, 32)), rng.integers(-128, 128, (3, 32, 9)))
    _, on = _twins(monkeypatch, build, *inputs)
    assert on and not any(on)
