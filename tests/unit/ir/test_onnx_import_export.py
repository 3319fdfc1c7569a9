"""ONNX import/export: real-export warts in, a static standard graph out, same numbers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from hbtool.errors import ModelError
from hbtool.ir import Graph, import_onnx, to_onnx
from hbtool.ir.onnx_import import STAGE_KEY

from tests.helpers import assert_graph_matches, make_model, run_ort, small_conv_model, tensor, vinfo


class _DynamicBlock(torch.nn.Module):
    """Reshape targets computed from the input's dynamic size, as exporters write them."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        y = self.drop(self.bn(self.conv(x)))
        b, c, h, w = y.shape
        y = y.reshape(b, c, h * w).transpose(1, 2)
        return torch.roll(y.reshape(b, h, w, c), (1, 1), (1, 2))


def _export_dynamic(path, opset):
    m = _DynamicBlock().eval()
    torch.onnx.export(
        m, (torch.randn(1, 3, 8, 8),), str(path), input_names=["x"], output_names=["y"], opset_version=opset,
        dynamo=False, dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}},
    )
    return path


@pytest.mark.parametrize("opset", [11, 12, 13, 17])
def test_dynamic_export_folds_to_static_standard_graph(tmp_path, opset):
    path = _export_dynamic(tmp_path / "m.onnx", opset)
    raw = onnx.load(str(path))
    assert any(n.op_type == "Shape" for n in raw.graph.node)
    g = import_onnx(path, {"x": (1, 3, 8, 12)})
    ops = g.op_types()
    for folded in ("Shape", "Gather", "Unsqueeze", "Constant", "Identity", "Dropout", "BatchNormalization"):
        assert folded not in ops, ops
    assert g.opset >= 17
    assert all(v.shape is not None for n in g.nodes for v in (g.values[o] for o in n.outputs))
    assert g.shape("y") == (1, 8, 12, 8)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 12)).astype(np.float32)
    assert_graph_matches(path, g, {"x": x})


def test_node_names_survive_import(tmp_path):
    model = small_conv_model()
    g = import_onnx(model)
    assert {n.name for n in g.nodes} == {"conv", "relu"}


def test_missing_dynamic_shape_names_input_and_fix(tmp_path):
    path = _export_dynamic(tmp_path / "m.onnx", 13)
    with pytest.raises(ModelError) as err:
        import_onnx(path)
    msg = str(err.value)
    assert "'x'" in msg and "--input-shape x" in msg


def test_unknown_input_name_in_shapes_is_an_error():
    with pytest.raises(ModelError, match="'images' given a shape does not exist"):
        import_onnx(small_conv_model(), {"images": (1, 3, 16, 16)})


def test_shape_of_wrong_rank_is_an_error():
    with pytest.raises(ModelError, match="rank 4 in the model"):
        import_onnx(small_conv_model(), {"x": (3, 16, 16)})


def test_shape_conflicting_with_fixed_dim_is_an_error():
    with pytest.raises(ModelError, match="fixed dimension 1 = 3"):
        import_onnx(small_conv_model(), {"x": (1, 4, 16, 16)})


def test_missing_file_and_garbage_bytes(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        import_onnx(tmp_path / "nope.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf at all \x00\xff" * 10)
    with pytest.raises(ModelError, match="not"):
        import_onnx(junk)


def test_checker_invalid_model_is_rejected(tmp_path):
    # a node reading a tensor nobody produces fails onnx's checker
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"], name="r")]
    model = make_model(nodes, [vinfo("x", [1, 4])], [vinfo("y", [1, 4])])
    with pytest.raises(ModelError, match="ONNX checker rejects"):
        import_onnx(model)


def test_custom_domain_op_is_rejected_with_its_name():
    nodes = [helper.make_node("MyOp", ["x"], ["y"], name="special", domain="com.example")]
    model = make_model(nodes, [vinfo("x", [1, 4])], [vinfo("y", [1, 4])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(ModelError) as err:
        import_onnx(model)
    assert "special" in str(err.value) and "com.example" in str(err.value)


def test_opset_too_old_is_rejected():
    model = small_conv_model(opset=9)
    with pytest.raises(ModelError, match="opset 9"):
        import_onnx(model)


def test_constant_nodes_become_constants():
    w = np.ones((4, 4), np.float32)
    nodes = [
        helper.make_node("Constant", [], ["w"], value=tensor("w", w)),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    g = import_onnx(make_model(nodes, [vinfo("x", [1, 4])], [vinfo("y", [1, 4])]))
    assert g.op_types() == {"MatMul": 1}
    assert np.array_equal(g.const(g.nodes[0].inputs[1]), w)


def test_external_data_weights(tmp_path):
    model = small_conv_model(channels=64)
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").exists()
    g = import_onnx(path)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    assert_graph_matches(small_conv_model(channels=64), g, {"x": x})


def test_int64_inputs_keep_their_dtype():
    emb = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["y"], name="embed")]
    model = make_model(nodes, [vinfo("ids", ["b", "s"], TensorProto.INT64)], [vinfo("y", ["b", "s", 4])], [tensor("emb", emb)])
    g = import_onnx(model, {"ids": (1, 5)})
    assert g.dtype("ids") == np.int64 and g.shape("y") == (1, 5, 4)


def test_export_round_trip_keeps_hbtool_function_ops():
    g = import_onnx(small_conv_model())
    relu = g.node("relu")
    body = Graph("b", g.opset)
    body.inputs, body.outputs = ["a"], ["o"]
    body.add_node("Relu", ["a"], ["o"])
    relu.op_type, relu.domain, relu.body, relu.attrs = "MyRelu", "hbtool", body, {"alpha": 0.5}
    model = to_onnx(g, stage="test")
    onnx.checker.check_model(model)
    assert {f.name for f in model.functions} == {"MyRelu"}
    assert any(p.key == STAGE_KEY for p in model.metadata_props)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = run_ort(small_conv_model(), {"x": x})[0]
    got = run_ort(model, {"x": x})[0]
    assert np.allclose(ref, got, atol=1e-6)
    again = import_onnx(model)
    node = again.node("relu")
    assert node.op_type == "MyRelu" and node.domain == "hbtool" and node.body is not None
    assert node.attrs == {"alpha": 0.5}


def test_distinct_bodies_get_distinct_function_names():
    g = import_onnx(small_conv_model())
    relu = g.node("relu")
    body1 = Graph("b", g.opset)
    body1.inputs, body1.outputs = ["a"], ["o"]
    body1.add_node("Relu", ["a"], ["o"])
    relu.op_type, relu.domain, relu.body = "Act", "hbtool", body1
    extra_out = g.unique_name("act2")
    g.value(extra_out)
    body2 = Graph("b", g.opset)
    body2.inputs, body2.outputs = ["a"], ["o"]
    body2.add_node("Sigmoid", ["a"], ["o"])
    node2 = g.add_node("Act", [relu.outputs[0]], [extra_out], name="act2", domain="hbtool", body=body2)
    g.set_value(extra_out, g.shape(relu.outputs[0]), np.float32)
    g.outputs = [extra_out]
    model = to_onnx(g)
    names = sorted(f.name for f in model.functions)
    assert names == ["Act", "Act__1"]
    again = import_onnx(model)
    assert [n.op_type for n in again.nodes if n.domain == "hbtool"] == ["Act", "Act"]
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = 1 / (1 + np.exp(-run_ort(small_conv_model(), {"x": x})[0]))
    assert np.allclose(run_ort(model, {"x": x})[0], ref, atol=1e-6)
    assert node2.name == "act2"
