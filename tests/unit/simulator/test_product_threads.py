"""A product session runs on one onnxruntime thread when its product is small, on the executor's threads
when it is large (:func:`hbtool.simulator.accel.product_threads`), and computes the same bits either way.

Why it matters: the product sessions' pools do not spin, so a second thread is woken on every call and
pays only once the product outlasts the wake-up; most of MobileNetV2's products take 30-180 us
(docs/simulate.md, "Two cores at batch 1").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

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


def test_product_threads_by_size():
    small, large = accel.PRODUCT_SPLIT_MIN_MACS - 1, accel.PRODUCT_SPLIT_MIN_MACS
    assert accel.product_threads(2, small) == 1
    assert accel.product_threads(None, small) == 1
    assert accel.product_threads(2, large) == 2
    assert accel.product_threads(None, large) is None
    assert accel.product_threads(2, None) == 2  # size unknown: the executor's threads
    assert accel.product_threads(2, 0) == 2  # no product (a MaxPool's session)


@pytest.mark.parametrize("plane", [8, 64])
def test_a_pointwise_conv_session_gets_threads_by_its_size(session_threads, plane):
    rng = np.random.default_rng(plane)
    cin, cout = 96, 576
    kern = Conv.build(rng.integers(-127, 128, (cout, cin, 1, 1)), rng.integers(-2000, 2000, cout), 0.03,
                      rng.uniform(0.0001, 0.002, cout), 0.5, rounding="half_up")
    macs = kern.macs((1, cin, plane, plane), (1, cout, plane, plane))  # 8 x 8: 3.5 M; 64 x 64: 226 M
    want = 1 if macs < accel.PRODUCT_SPLIT_MIN_MACS else 2
    assert want == (1 if plane == 8 else 2)
    run = accel.accelerate(kern, 2, (1, cin, plane, plane), macs)
    assert session_threads[-1] == want  # (a first call also builds the CPU check's one-thread session)
    x = rng.integers(-128, 128, (2, cin, 5, 7))
    x.reshape(-1)[:2] = [-128, 127]
    np.testing.assert_array_equal(run(x.astype(np.int8)).astype(np.int64), kern.apply_numpy(x))


@pytest.mark.parametrize("rows", [16, 4096])
def test_a_linear_session_gets_threads_by_its_size(session_threads, rows):
    rng = np.random.default_rng(rows)
    K, N = 192, 768  # 16 rows: 2.4 M multiply-adds; 4096 rows: 604 M
    kern = Linear.build(rng.integers(-127, 128, (K, N)), rng.integers(-2000, 2000, N), 0.02,
                        rng.uniform(0.0001, 0.002, N), 0.5, rounding="half_up")
    run = accel.accelerate(kern, 2, (rows, K), kern.macs((rows, K), (rows, N)))
    assert session_threads[-1] == (1 if rows == 16 else 2)
    x = rng.integers(-128, 128, (3, K))
    np.testing.assert_array_equal(np.asarray(run(x.astype(np.int16)), np.int64), kern.apply_numpy(x))


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory):
    import yaml

    from hbtool.cli import main
    from hbtool.compiler.artifact import read_artifact

    root = Path(__file__).resolve().parents[3]
    tmp = tmp_path_factory.mktemp("tiny")
    data = yaml.safe_load((root / "configs" / "tiny_cnn.yaml").read_text())
    data["model_parameters"].update(onnx_model=str(root / "samples" / "tiny" / "tiny_cnn.onnx"), working_dir=str(tmp / "wd"),
                                    output_model_file_prefix="tiny")
    data["calibration_parameters"].update(cal_data_dir=str(root / "samples" / "data" / "digits_cal"), num_samples=8)
    cfg = tmp / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["compile", "-c", str(cfg)])
    assert r.exit_code == 0, r.output
    return read_artifact(tmp / "wd" / "tiny.bin")


def test_the_executor_sizes_each_product_by_its_kernels_count(tiny_artifact, session_threads, monkeypatch):
    from hbtool.compiler.compile import kernel_macs
    from hbtool.simulator.executor import Executor, _macs

    small = Executor(tiny_artifact, threads=2)
    counted = [_macs(s.node, small.program) for s in small.steps if "kernel" in s.node.meta]
    assert counted == [kernel_macs(s.node, small.program) for s in small.steps if "kernel" in s.node.meta]
    assert any(counted) and max(counted) < accel.PRODUCT_SPLIT_MIN_MACS  # a tiny CNN: every product small
    built = len(session_threads)
    pools = sum(type(s.node.meta.get("kernel")).__name__ == "MaxPool" for s in small.steps)  # no product: keeps two
    assert pools and session_threads.count(2) == pools and session_threads.count(1) == built - pools
    monkeypatch.setattr(accel, "PRODUCT_SPLIT_MIN_MACS", 0)  # every session at the executor's two threads
    split = Executor(tiny_artifact, threads=2)
    assert session_threads[built:] and all(t == 2 for t in session_threads[built:])
    x = np.random.default_rng(3).integers(0, 256, (5,) + tuple(tiny_artifact.header["inputs"][0]["shape"][1:])).astype(np.float32)
    name = tiny_artifact.header["inputs"][0]["name"]
    want = split.run({name: x})
    got = small.run({name: x})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
