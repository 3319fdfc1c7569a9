"""The statistics pass and the candidate scoring give the same numbers whatever onnxruntime's thread count.

The statistics session runs two samples at once, each on its calling thread, with the cores left over as its pool
(``hbtool.quant.collect.statistics_runs``, ``statistics_run_threads``), so that the statistics thread has a core of
its own, and the sessions that run two at a time (candidate scorings, the
final evaluation's float and quantized models) on half the cores each; before, each ran on every core. That changes no output file only if
onnxruntime's CPU kernels give the same float bits at any intra-op thread count: they split their work over
output elements (rows, channels, tiles) rather than one sum over threads. Checked here bit for bit on a graph large
enough for onnxruntime to split (convolutions, a batched MatMul, Softmax, LayerNorm, reductions, pooling, Gemm)
and, through ``collect_stats``, on the statistics of two tiny corpus models. (On the five speed-benchmark models
every observed array was compared at 1, 2 and 3 threads: docs/calibrate.md, "Where the time goes".)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from hbtool.config import load_config
from hbtool.quant import calibrate as calib
from hbtool.quant import collect
from hbtool.quant.collect import open_session

ROOT = Path(__file__).resolve().parents[3]


def _splittable_model() -> bytes:
    """Kernels onnxruntime parallelises at batch 1 (and a fake-quantizer's four nodes, as candidate scoring runs
    them), every intermediate tensor a graph output."""
    rng = np.random.default_rng(3)

    def const(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)

    inits = [const("w1", 32, 16, 3, 3), const("b1", 32), const("w2", 32, 32, 3, 3), const("b2", 32),
             const("wm", 128, 128), const("g", 128), const("beta", 128), const("wg", 10, 32), const("bg", 10),
             numpy_helper.from_array(np.array([1, 256, 128], np.int64), "shape"),
             numpy_helper.from_array(np.float32(0.037), "s"), numpy_helper.from_array(np.float32(-128), "qmin"),
             numpy_helper.from_array(np.float32(127), "qmax")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Div", ["c2", "s"], ["d2"]),   # a fake-quantizer as the candidate scoring model writes it
        helper.make_node("Round", ["d2"], ["q2"]),
        helper.make_node("Clip", ["q2", "qmin", "qmax"], ["k2"]),
        helper.make_node("Mul", ["k2", "s"], ["f2"]),
        helper.make_node("Add", ["f2", "c2"], ["a2"]),
        helper.make_node("Reshape", ["a2", "shape"], ["seq"]),
        helper.make_node("MatMul", ["seq", "wm"], ["m"]),
        helper.make_node("LayerNormalization", ["m", "g", "beta"], ["ln"], axis=-1),
        helper.make_node("Transpose", ["ln"], ["lt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["ln", "lt"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "ln"], ["att"]),
        helper.make_node("ReduceMean", ["att"], ["pooled"], axes=[2], keepdims=0),
        helper.make_node("GlobalAveragePool", ["r1"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wg", "bg"], ["y"], transB=1),
    ]
    outs = ["c1", "r1", "c2", "d2", "q2", "k2", "f2", "a2", "m", "ln", "logits", "p", "att", "pooled", "gap", "y"]
    graph = helper.make_graph(nodes, "splittable", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64, 64])],
                              [helper.make_empty_tensor_value_info(o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_onnxruntime_arrays_are_the_same_bits_at_any_thread_count():
    model = _splittable_model()
    sessions = {t: open_session(model, threads=t, spinning=False) for t in (1, 2, 4)}
    names = [o.name for o in sessions[1].get_outputs()]
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {"x": rng.standard_normal((1, 16, 64, 64)).astype(np.float32)}
        want = sessions[1].run(names, feeds)
        for t in (2, 4):
            for name, a, b in zip(names, want, sessions[t].run(names, feeds)):
                assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (name, t)


def _statistics(tmp_path: Path, model: str, threads: int, runs: int, monkeypatch) -> dict:
    monkeypatch.setattr(collect, "statistics_run_threads", lambda: threads)
    monkeypatch.setattr(collect, "statistics_runs", lambda: runs)
    data = yaml.safe_load((ROOT / "configs" / f"{model}.yaml").read_text())
    data["model_parameters"]["onnx_model"] = str(ROOT / "samples" / "tiny" / f"{model}.onnx")
    data["model_parameters"]["working_dir"] = str(tmp_path / "wd")
    data["calibration_parameters"].update(cal_data_dir=str(ROOT / "samples" / "data" / "digits_cal"), num_samples=8)
    path = tmp_path / f"cfg_{threads}_{runs}.yaml"
    path.write_text(yaml.safe_dump(data))
    run = calib._Calibration(load_config(path), None, None, None)
    with calib.ThreadPoolExecutor(1) as run.background:
        run.prepare_graph()
        run.load_data()
        run.collect_statistics()
        run.reference_outputs()
    return run.root_stats


@pytest.mark.parametrize("model", ["tiny_cnn", "tiny_vit"])
def test_statistics_do_not_depend_on_the_thread_count(tmp_path, monkeypatch, model):
    one = _statistics(tmp_path, model, 1, 1, monkeypatch)
    many = _statistics(tmp_path, model, 3, 3, monkeypatch)   # three runs in flight, observed in sample order
    assert one.keys() == many.keys() and one
    for name, a in one.items():
        b = many[name]
        assert (a.absmax, a.minimum, a.maximum, a.count, a.hist_range) == (b.absmax, b.minimum, b.maximum, b.count, b.hist_range), name
        assert np.array_equal(a.hist, b.hist), name
        for field in ("channel_mean", "channel_absmax"):
            x, y = getattr(a, field), getattr(b, field)
            assert (x is None) == (y is None) and (x is None or x.tobytes() == y.tobytes()), (name, field)


def test_concurrent_runs_of_one_session_give_each_sample_its_own_bits():
    from concurrent.futures import ThreadPoolExecutor

    sess = open_session(_splittable_model(), threads=1, spinning=False)
    names = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 16, 64, 64)).astype(np.float32)} for _ in range(6)]
    alone = [sess.run(names, f) for f in feeds]
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda f: sess.run(names, f), feeds))
    for want, got in zip(alone, together):
        for name, a, b in zip(names, want, got):
            assert a.tobytes() == b.tobytes(), name


def test_the_statistics_runs_and_the_statistics_thread_share_the_cores(monkeypatch):
    """and two sessions that run side by side (candidate scorings, the final evaluation) take half the cores each"""
    import hbtool.utils.workers as workers

    monkeypatch.setattr(workers, "default_workers", lambda: 2)
    assert (collect.statistics_runs(), collect.statistics_run_threads()) == (2, 1)
    monkeypatch.setattr(workers, "default_workers", lambda: 1)
    assert (collect.statistics_runs(), collect.statistics_run_threads()) == (1, 1)
    monkeypatch.setattr(workers, "default_workers", lambda: 16)
    assert (collect.statistics_runs(), collect.statistics_run_threads()) == (2, 14)
    assert collect.side_by_side_threads() == 8
    monkeypatch.setattr(workers, "default_workers", lambda: 2)
    assert collect.side_by_side_threads() == 1
    monkeypatch.setattr(workers, "default_workers", lambda: 1)
    assert collect.side_by_side_threads() == 1
