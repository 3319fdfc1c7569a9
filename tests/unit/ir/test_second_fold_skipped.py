"""An opset-11 model is folded, lifted to the IR's opset and folded again; when the lift changed nothing but the
opset number (ResNet50: Conv, Relu, MaxPool, Add, Gemm) the second fold is skipped, as it gave the same bytes back.
A lift that writes nodes (Unsqueeze's axes as an input) still gets its second fold."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from hbtool.ir import onnx_import
from hbtool.ir.onnx_export import to_onnx
from hbtool.ir.onnx_import import import_onnx


def _plain_model(squeeze: bool = False) -> onnx.ModelProto:
    """Conv, BatchNormalization, Relu, MaxPool at opset 11; ``squeeze``: then a Squeeze with its axes as an
    attribute, which the lift to opset 13+ turns into an input (a new constant)."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    gamma, beta = rng.random(16).astype(np.float32) + 0.5, rng.standard_normal(16).astype(np.float32)
    mean, var = rng.standard_normal(16).astype(np.float32), rng.random(16).astype(np.float32) + 0.5
    inits = [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.tobytes(), raw=True)
             for n, a in (("w", w), ("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p" if squeeze else "y"], kernel_shape=[2, 2], strides=[2, 2], name="pool")]
    if squeeze:
        nodes.append(helper.make_node("Squeeze", ["p"], ["y"], axes=[0], name="squeeze"))
    out = [16, 4, 4] if squeeze else [1, 16, 4, 4]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    return model


def _imported(model: onnx.ModelProto, monkeypatch, force_second: bool) -> tuple[bytes, int]:
    """(the imported graph's bytes, how many times onnxruntime folded)."""
    folds = []
    fold = onnx_import._fold_with_onnxruntime

    def counted(*args, **kwargs):
        folds.append(1)
        return fold(*args, **kwargs)

    monkeypatch.setattr(onnx_import, "_fold_with_onnxruntime", counted)
    if force_second:
        monkeypatch.setattr(onnx_import, "_only_the_opset_changed", lambda folded, lifted: False)
    graph = import_onnx(model)
    monkeypatch.undo()
    return to_onnx(graph).SerializeToString(), len(folds)


def test_a_lift_that_changes_only_the_opset_is_not_folded_again(monkeypatch):
    skipped, folds = _imported(_plain_model(), monkeypatch, force_second=False)
    forced, forced_folds = _imported(_plain_model(), monkeypatch, force_second=True)
    assert (folds, forced_folds) == (1, 2)
    assert skipped == forced


def test_a_lift_that_writes_nodes_is_folded_again(monkeypatch):
    _, folds = _imported(_plain_model(squeeze=True), monkeypatch, force_second=False)
    assert folds == 2
