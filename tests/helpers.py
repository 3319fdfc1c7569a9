"""Small model builders and comparisons shared by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import to_onnx


def run_ort(model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12))


def assert_graph_matches(original: onnx.ModelProto | str | Path, graph: Graph, feeds: Mapping[str, np.ndarray], tol: float = 1e-4) -> None:
    """The IR, exported, computes what the original model computes (relative max error)."""
    ref = run_ort(original, feeds)
    got = run_ort(to_onnx(graph), feeds)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.shape == g.shape
        assert max_rel_err(r, g) <= tol, max_rel_err(r, g)


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17, functions=()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], functions=list(functions))
    model.ir_version = 8
    return model


def tensor(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def vinfo(name: str, shape, elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def small_conv_model(channels: int = 8, opset: int = 17, extra_nodes=(), tail: str = "y") -> onnx.ModelProto:
    """input (1,3,16,16) -> Conv(3->channels, 3x3) -> Relu -> y (plus optional nodes)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.2
    b = rng.standard_normal(channels).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y" if not extra_nodes else "r"], name="relu"),
        *extra_nodes,
    ]
    return make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo(tail, [1, channels, 16, 16])], [tensor("w", w), tensor("b", b)], opset)
