"""A product session runs on one onnxruntime thread when its product is small, on the executor's threads
when it is large (:func:`hbtool.simulator.accel.product_threads`), and computes the same bits either way.

Why it matters: the product sessions' pools do not spin, so a second thread is woken on every call and
pays only once the product outlasts the wake-up; most of MobileNetV2's products are 30-150 us
(docs/simulate.md, "Two cores at batch 1").
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv, Linear
from hbtool.simulator import accel


@pytest.fixture
def session_threads(monkeypatch):
    """The intra-op thread counts the product sessions were built with, in order."""
    asked: list = []
    build = accel._session

    def spy(model, threads=None):
        asked.append(threads)
        return build(model, threads)

    monkeypatch.setattr(accel, "_session", spy)
    return asked


def _pointwise(rng, cin, cout):
    return Conv.build(rng.integers(-127, 128, (cout, cin, 1, 1)), rng.integers(-2000, 2000, cout), 0.03,
                      rng.uniform(0.0001, 0.002, cout), 0.5, rounding="half_up")


def test_conv_macs_counts_the_output_plane():
    rng = np.random.default_rng(0)
    kern = Conv.build(rng.integers(-5, 6, (8, 4, 3, 3)), None, 0.03, 0.001, 0.5, strides=[2, 2], pads=[1, 1, 1, 1])
    assert accel._conv_macs(kern, (1, 4, 16, 15)) == 8 * 4 * 9 * (8 * 8)
    assert accel._conv_macs(kern, (2, 4, 16, 15)) == 2 * 8 * 4 * 9 * (8 * 8)
    assert accel._conv_macs(kern, None) is None
    assert accel._conv_macs(kern, (1, 4, "h", 15)) is None


def test_product_threads_by_size():
    small, large = accel.PRODUCT_SPLIT_MIN_MACS - 1, accel.PRODUCT_SPLIT_MIN_MACS
    assert accel.product_threads(2, small) == 1
    assert accel.product_threads(None, small) == 1
    assert accel.product_threads(2, large) == 2
    assert accel.product_threads(None, large) is None
    assert accel.product_threads(2, None) == 2  # size unknown: the executor's threads


@pytest.mark.parametrize("plane, want", [(8, 1), (64, 2)])
def test_a_pointwise_conv_session_gets_threads_by_its_size(session_threads, plane, want):
    rng = np.random.default_rng(plane)
    cin, cout = 96, 576  # 8 x 8: 3.5 M multiply-adds; 64 x 64: 226 M
    kern = _pointwise(rng, cin, cout)
    assert (accel._conv_macs(kern, (1, cin, plane, plane)) >= accel.PRODUCT_SPLIT_MIN_MACS) == (want == 2)
    run = accel.conv_fast(kern, 2, (1, cin, plane, plane))
    assert session_threads[-1] == want  # (a first call also builds the CPU check's one-thread session)
    x = rng.integers(-128, 128, (2, cin, 5, 7))
    x.reshape(-1)[:2] = [-128, 127]
    np.testing.assert_array_equal(run(x.astype(np.int8)).astype(np.int64), kern.apply_numpy(x))


@pytest.mark.parametrize("rows, want", [(16, 1), (4096, 2)])
def test_a_linear_session_gets_threads_by_its_size(session_threads, rows, want):
    rng = np.random.default_rng(rows)
    K, N = 192, 768  # 16 rows: 2.4 M multiply-adds; 4096 rows: 604 M
    kern = Linear.build(rng.integers(-127, 128, (K, N)), rng.integers(-2000, 2000, N), 0.02,
                        rng.uniform(0.0001, 0.002, N), 0.5, rounding="half_up")
    run = accel.linear_fast(kern, 2, (rows, K))
    assert session_threads[-1] == want
    x = rng.integers(-128, 128, (3, K))
    np.testing.assert_array_equal(np.asarray(run(x.astype(np.int16)), np.int64), kern.apply_numpy(x))
