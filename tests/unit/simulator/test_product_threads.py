"""A product session runs a call on one onnxruntime thread when the call's product is small, on the executor's
threads when it is large (:class:`hbtool.simulator.accel._SizedSession`), and computes the same bits either way.

Why it matters: the product sessions' pools do not spin, so a second thread is woken on every call and
pays only once the product outlasts the wake-up; most of MobileNetV2's products take 30-180 us
(docs/simulate.md, "Two cores at batch 1").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hbtool.kernels import Conv, Linear
from hbtool.kernels.builder import ElemType
from hbtool.simulator import accel, onnx_bytes
from tests.helpers import compile_like_tiny_cnn


@pytest.fixture
def session_threads(monkeypatch):
    """The intra-op thread counts of the product sessions built, in order."""
    asked: list = []
    build = accel._build_session

    def spy(model, threads=None):
        asked.append(threads)
        return build(model, threads)

    monkeypatch.setattr(accel, "_build_session", spy)
    return asked


def test_the_split_point_is_where_a_call_reaches_the_threshold():
    assert accel.product_split_at(accel.PRODUCT_SPLIT_MIN_MACS, 100) == 100
    assert accel.product_split_at(accel.PRODUCT_SPLIT_MIN_MACS // 4, 100) == 400
    assert accel.product_split_at(3, 1) == -(-accel.PRODUCT_SPLIT_MIN_MACS // 3)
    assert accel.product_split_at(0, 100) is None  # no product (a MaxPool's session): the executor's threads
    assert accel.product_split_at(None, 100) is None and accel.product_split_at(10, None) is None


def test_a_session_built_without_a_size_is_plain():
    w = np.ones((4, 3), np.float32)
    model = onnx_bytes.model([onnx_bytes.node("MatMul", ["x", "w"], ["y"])], {"x": ElemType.FLOAT}, {"y": ElemType.FLOAT}, {"w": w})
    assert not isinstance(accel._session(model, 2), accel._SizedSession)


def test_a_pointwise_conv_runs_small_calls_on_one_thread(session_threads):
    rng = np.random.default_rng(1)
    cin, cout, plane = 96, 576, 8
    kern = Conv.build(rng.integers(-127, 128, (cout, cin, 1, 1)), rng.integers(-2000, 2000, cout), 0.03,
                      rng.uniform(0.0001, 0.002, cout), 0.5, rounding="half_up")
    shape = (1, cin, plane, plane)
    macs = kern.macs(shape, (1, cout, plane, plane))  # 3.5 M a sample: about 10 samples a call reach 32 M
    run = accel.accelerate(kern, 2, shape, macs, int(np.prod(shape)))
    before = len(session_threads)
    for n, threads in ((1, 1), (12, 2), (2, None)):  # None: both built already, nothing new
        x = rng.integers(-128, 128, (n, cin, plane, plane))
        x.reshape(-1)[:2] = [-128, 127]
        np.testing.assert_array_equal(run(x.astype(np.int8)).astype(np.int64), kern.apply_numpy(x))
        if threads is not None:
            assert session_threads[-1] == threads
    assert len(session_threads) - before == 2


def test_a_linear_runs_small_calls_on_one_thread(session_threads):
    rng = np.random.default_rng(2)
    K, N, rows = 192, 768, 16  # 2.4 M multiply-adds a sample
    kern = Linear.build(rng.integers(-127, 128, (K, N)), rng.integers(-2000, 2000, N), 0.02,
                        rng.uniform(0.0001, 0.002, N), 0.5, rounding="half_up")
    run = accel.accelerate(kern, 2, (rows, K), kern.macs((rows, K), (rows, N)), rows * K)
    for n, threads in ((1, 1), (16, 2)):
        x = rng.integers(-128, 128, (n * rows, K))
        np.testing.assert_array_equal(np.asarray(run(x.astype(np.int16)), np.int64), kern.apply_numpy(x))
        assert session_threads[-1] == threads


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny")
    return compile_like_tiny_cnn(tmp, Path(__file__).resolve().parents[3] / "samples" / "tiny" / "tiny_cnn.onnx", "tiny")


def test_the_executor_sizes_products_by_their_kernels_count(tiny_artifact, session_threads, monkeypatch):
    from hbtool.compiler.compile import kernel_macs
    from hbtool.simulator.executor import Executor, _macs

    sized = Executor(tiny_artifact, threads=2)
    kernels = [s.node for s in sized.steps if "kernel" in s.node.meta]
    assert [_macs(n, sized.program)[0] for n in kernels] == [kernel_macs(n, sized.program) for n in kernels]
    monkeypatch.setattr(accel, "PRODUCT_SPLIT_MIN_MACS", 1)  # every product call at the executor's two threads
    split = Executor(tiny_artifact, threads=2)
    shape = tuple(tiny_artifact.header["inputs"][0]["shape"][1:])
    name = tiny_artifact.header["inputs"][0]["name"]
    rng = np.random.default_rng(3)
    for n in (1, 5, 64):
        x = rng.integers(0, 256, (n,) + shape).astype(np.float32)
        want = split.run({name: x})
        got = sized.run({name: x})
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    assert 1 in session_threads and 2 in session_threads
