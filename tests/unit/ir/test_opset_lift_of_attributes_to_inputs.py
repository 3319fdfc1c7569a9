"""Models below opset 17 whose attributes became inputs in the lift (Paddle2ONNX-style exports).

onnx's version converter turns Squeeze/Unsqueeze ``axes``, Split ``split``, ReduceSum ``axes``
(opset 13) into ``Constant`` nodes, and Softmax (13) into a Shape/Flatten/Reshape chain.
Folded before the lift, those stayed computed at run time: the checker put each such node on
the CPU and one BPU subgraph split in several; and the Constant node lost its name to shape
inference, so the exported optimized float model read a tensor nobody wrote (onnxruntime:
"Node input '_v_655' is not a graph input, initializer, or output of a previous node").
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hbtool.checker.run import run_checker
from hbtool.ir import Graph, import_onnx, to_onnx
from hbtool.ir.onnx_export import DanglingTensorError
from tests.helpers import cosine, run_ort, run_pipeline

AXES_ARE_INPUTS = 13  # Squeeze, Unsqueeze, Split, ReduceSum


def _const(name: str, array) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"{name}_const", value=numpy_helper.from_array(np.asarray(array), name))


def _axes_node(op: str, inputs: list[str], outputs: list[str], opset: int, key: str, value: list[int], name: str, **attrs):
    """``op`` with ``key`` as an attribute below opset 13, as a Constant-node input from 13 (as Paddle2ONNX writes)."""
    if opset < AXES_ARE_INPUTS:
        return [helper.make_node(op, inputs, outputs, name=name, **{key: value}, **attrs)]
    return [_const(f"{name}_{key}", np.array(value, np.int64)),
            helper.make_node(op, inputs + [f"{name}_{key}"], outputs, name=name, **attrs)]


def paddle_style_model(opset: int) -> onnx.ModelProto:
    """Conv -> Split -> Clip(Constant min/max) + Add -> Pad(Constant pads) -> Conv -> Resize x2
    (Constant scales) -> ReduceSum over C -> Squeeze -> Unsqueeze: every parameter constant, none
    an initializer."""
    rng = np.random.default_rng(opset)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    nodes += _axes_node("Split", ["c1"], ["a", "b"], opset, "split", [4, 4], "split", axis=1)
    nodes += [
        _const("lo", np.array(0.0, np.float32)), _const("hi", np.array(3.0, np.float32)),
        helper.make_node("Clip", ["a", "lo", "hi"], ["ca"], name="clip"),
        helper.make_node("Add", ["ca", "b"], ["ab"], name="add"),
        _const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        helper.make_node("Pad", ["ab", "pads"], ["p"], name="pad"),
        helper.make_node("Conv", ["p", "w2"], ["c2"], name="conv2"),
        _const("roi", np.array([], np.float32)), _const("scales", np.array([1, 1, 2, 2], np.float32)),
        helper.make_node("Resize", ["c2", "roi", "scales"], ["r"], name="resize", mode="nearest"),
    ]
    nodes += _axes_node("ReduceSum", ["r"], ["rs"], opset, "axes", [1], "reduce_sum", keepdims=1)
    nodes += _axes_node("Squeeze", ["rs"], ["sq"], opset, "axes", [1], "squeeze")
    nodes += _axes_node("Unsqueeze", ["sq"], ["y"], opset, "axes", [3], "unsqueeze")
    graph = helper.make_graph(nodes, "paddle_style", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 1])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    onnx.checker.check_model(model, full_check=True)
    return model


def _assert_one_bpu_subgraph(graph: Graph) -> None:
    placed = [(n.name, n.op_type, n.meta.get("on"), n.meta.get("reason")) for n in graph.nodes]
    assert all(on == "BPU" for _, _, on, _ in placed), placed
    assert not any("run time" in (why or "") for *_, why in placed), placed
    assert {n.meta.get("subgraph") for n in graph.nodes} == {0}, placed


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_lifted_parameters_are_constants_and_all_on_bpu(tmp_path, opset):
    model = paddle_style_model(opset)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = run_checker(path, output_dir=tmp_path / "check")
    kinds = {n.op_type for n in result.graph.nodes}
    assert {"Split", "Clip", "Resize", "ReduceSum"} <= kinds and not kinds & {"Constant", "Shape"}
    _assert_one_bpu_subgraph(result.graph)
    assert result.summary["subgraphs"] == 1 and result.summary["cpu_nodes"] == 0
    for n in result.graph.nodes:
        for name in n.inputs[1:]:
            assert not name or result.graph.is_const(name) or result.graph.producer(name) is not None, (n.name, name)
    written = onnx.load(result.files["optimized_float_model"])
    onnx.checker.check_model(written, full_check=True)
    feed = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(run_ort(written, feed)[0], run_ort(model, feed)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_lifted_model_calibrates_compiles_and_simulates_exactly(tmp_path, opset):
    model = paddle_style_model(opset)
    calibration, compiled, _feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 3, 8, 8))
    _assert_one_bpu_subgraph(calibration.graph)
    assert compiled.fallbacks == []
    for sim, q, f in zip(simulated, quantized, floats):
        np.testing.assert_array_equal(sim[0], q[0])  # the simulator is the quantized model, bit for bit
        assert cosine(sim[0], f[0]) > 0.999, cosine(sim[0], f[0])
    for written in sorted((tmp_path / "wd").glob("*.onnx")):
        onnx.checker.check_model(onnx.load(written), full_check=True)
        run_ort(written, _feeds[0])


def test_softmax_lifted_from_opset_12_has_no_runtime_shape(tmp_path):
    """Softmax 12 -> 13 is written as Shape -> Flatten -> Softmax -> Reshape: only a fold after
    the lift makes the Reshape target constant."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Softmax", ["c"], ["y"], name="softmax", axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=7)
    onnx.save(model, tmp_path / "m.onnx")
    result = run_checker(tmp_path / "m.onnx", output_dir=tmp_path / "check")
    assert "Shape" not in {n.op_type for n in result.graph.nodes}
    _assert_one_bpu_subgraph(result.graph)


def test_constant_node_named_by_shape_inference_keeps_its_name():
    """value_info for a Constant node's output registered the name first; the constant must take
    it over rather than move to a fresh name and leave its readers dangling."""
    nodes = [_const("axes", np.array([0], np.int64)), helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="unsqueeze")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4])],
                              value_info=[helper.make_tensor_value_info("axes", TensorProto.INT64, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    g = import_onnx(model, fold=False)
    assert g.const("axes").tolist() == [0]
    onnx.checker.check_model(to_onnx(g), full_check=True)


def test_export_refuses_a_dangling_input():
    g = Graph("g", 17)
    g.inputs, g.outputs = ["x"], ["y"]
    g.set_value("x", (1, 4), np.float32)
    g.set_value("y", (1, 4), np.float32)
    g.add_node("Add", ["x", "nowhere"], ["y"], {}, name="add")
    with pytest.raises(DanglingTensorError, match="'add'.*'nowhere'"):
        to_onnx(g)
