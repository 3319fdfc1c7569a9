"""Placement rules, subgraph ids, checker.json and the CLI's exit codes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from hbtool.checker.placement import assign_subgraphs, place_graph
from hbtool.checker.run import run_checker
from hbtool.cli import main
from hbtool.ir import import_onnx
from hbtool.march import load_march
from hbtool.march.op_rules import OP_TABLE, reason_of, conv_kernel_within_limit

from tests.helpers import make_model, small_conv_model, tensor, vinfo

BAYES = load_march("bayes")


def _placed(model, shapes=None, node_info=None):
    g = import_onnx(model, shapes)
    place_graph(g, BAYES, node_info)
    return g


def _conv(name, x, y, w_shape, **attrs):
    w = np.random.default_rng(0).standard_normal(w_shape).astype(np.float32) * 0.1
    return helper.make_node("Conv", [x, f"{name}_w"], [y], name=name, **attrs), tensor(f"{name}_w", w)


def test_reason_is_the_rule_docstring_with_limits_filled_in():
    text = reason_of(conv_kernel_within_limit, BAYES, "kernel 33x33")
    assert text == "Conv kernel height and width must be within 1..31 on the tensor unit of march bayes (kernel 33x33)"


def test_every_registered_rule_has_a_docstring():
    for op, support in OP_TABLE.items():
        for rule in support.rules:
            assert rule.__doc__ and len(rule.__doc__.split()) >= 4, (op, rule.__name__)


def test_conv_with_huge_kernel_falls_back_with_reason():
    node, w = _conv("big", "x", "y", (4, 3, 33, 33), pads=[16, 16, 16, 16])
    g = _placed(make_model([node], [vinfo("x", [1, 3, 40, 40])], [vinfo("y", [1, 4, 40, 40])], [w]))
    n = g.node("big")
    assert n.meta["on"] == "CPU"
    assert "within 1..31" in n.meta["reason"] and "33x33" in n.meta["reason"]


def test_conv_too_many_channels_per_group():
    node, w = _conv("wide", "x", "y", (8, 9000, 1, 1))
    g = _placed(make_model([node], [vinfo("x", [1, 9000, 2, 2])], [vinfo("y", [1, 8, 2, 2])], [w]))
    assert g.node("wide").meta["on"] == "CPU"
    assert "8192" in g.node("wide").meta["reason"]


def test_normal_conv_is_on_bpu_with_horizon_type():
    g = _placed(small_conv_model())
    conv = g.node("conv")
    assert conv.meta["on"] == "BPU" and conv.meta["bpu_type"] == "HzSQuantizedConv" and conv.meta["subgraph"] == 0


def test_unsupported_op_goes_to_cpu_and_splits_subgraphs():
    # conv -> CumSum (CPU) -> conv: two BPU subgraphs around one CPU node
    n1, w1 = _conv("c1", "x", "a", (4, 3, 3, 3), pads=[1, 1, 1, 1])
    cs = helper.make_node("CumSum", ["a", "axis"], ["b"], name="cumsum")
    n2, w2 = _conv("c2", "b", "y", (4, 4, 3, 3), pads=[1, 1, 1, 1])
    axis = tensor("axis", np.array(1, np.int64))
    g = _placed(make_model([n1, cs, n2], [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], [w1, w2, axis]))
    assert g.node("cumsum").meta["on"] == "CPU"
    assert "running sums" in g.node("cumsum").meta["reason"]
    assert g.node("c1").meta["subgraph"] == 0 and g.node("c2").meta["subgraph"] == 1


def test_op_without_any_bpu_form_names_itself():
    n1, w1 = _conv("c1", "x", "a", (4, 3, 3, 3), pads=[1, 1, 1, 1])
    hm = helper.make_node("Hardmax", ["a"], ["y"], name="hardmax", axis=1)
    g = _placed(make_model([n1, hm], [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], [w1]))
    assert g.node("hardmax").meta["reason"] == "Hardmax has no BPU implementation on march bayes"


def test_parallel_branches_without_cpu_between_share_a_subgraph():
    n1, w1 = _conv("c1", "x", "a", (4, 3, 1, 1))
    n2, w2 = _conv("c2", "x", "b", (4, 3, 1, 1))
    add = helper.make_node("Add", ["a", "b"], ["y"], name="add")
    g = _placed(make_model([n1, n2, add], [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], [w1, w2]))
    assert {g.node(n).meta["subgraph"] for n in ("c1", "c2", "add")} == {0}


def test_subgraph_never_depends_on_itself_through_cpu():
    # c1 feeds both a CPU node and c2 directly; c2 also reads the CPU node's output.
    n1, w1 = _conv("c1", "x", "a", (4, 3, 1, 1))
    cs = helper.make_node("CumSum", ["a", "axis"], ["b"], name="cumsum")
    add = helper.make_node("Add", ["a", "b"], ["y"], name="add")
    axis = tensor("axis", np.array(1, np.int64))
    g = _placed(make_model([n1, cs, add], [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], [w1, axis]))
    assert g.node("c1").meta["subgraph"] != g.node("add").meta["subgraph"]
    assert assign_subgraphs(g) == 2


def test_node_info_forces_cpu():
    g = _placed(small_conv_model(), node_info={"relu": {"ON": "CPU"}})
    assert g.node("relu").meta["on"] == "CPU" and g.node("relu").meta["reason"] == "node_info asks for the CPU"


def test_token_embedding_and_mask_arithmetic_go_to_cpu_with_reason():
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((50, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
        helper.make_node("Cast", ["mask"], ["mf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "mf"], ["inv"], name="invert"),
        helper.make_node("Mul", ["inv", "fmin"], ["bias"], name="to_bias"),
        helper.make_node("MatMul", ["e", "w"], ["h"], name="proj"),
        helper.make_node("MatMul", ["h", "ht"], ["s"], name="scores"),
        helper.make_node("Transpose", ["h"], ["ht"], name="tr", perm=[0, 2, 1]),
        helper.make_node("Add", ["s", "bias3"], ["sm"], name="add_mask"),
        helper.make_node("Unsqueeze", ["bias", "ax"], ["bias3"], name="unsq"),
        helper.make_node("Softmax", ["sm"], ["y"], name="softmax", axis=-1),
    ]
    inits = [tensor("emb", emb), tensor("w", w), tensor("one", np.array(1.0, np.float32)),
             tensor("fmin", np.array(np.finfo(np.float32).min, np.float32)), tensor("ax", np.array([1], np.int64))]
    model = make_model(
        [nodes[0], nodes[1], nodes[2], nodes[3], nodes[8], nodes[4], nodes[6], nodes[5], nodes[7], nodes[9]],
        [vinfo("ids", [1, 6], TensorProto.INT64), vinfo("mask", [1, 6], TensorProto.INT64)],
        [vinfo("y", [1, 6, 6])], inits, opset=13,
    )
    g = _placed(model)
    assert g.node("embed").meta["on"] == "CPU" and "run time" in g.node("embed").meta["reason"]
    for name in ("to_bias", "invert"):
        n = g.node(name)
        if n is not None:  # may be folded/merged, but if present it must be on the CPU
            assert n.meta["on"] == "CPU" and "integer model inputs" in n.meta["reason"]
    for name in ("proj", "scores", "add_mask", "softmax"):
        assert g.node(name).meta["on"] == "BPU", name


def test_run_checker_writes_json_of_the_promised_shape(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(small_conv_model(), str(path))
    res = run_checker(path, output_dir=tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "checker.json").read_text())
    assert set(doc) == {"model", "march", "nodes", "summary"}
    assert doc["march"] == "bayes"
    assert set(doc["nodes"][0]) == {"name", "op_type", "on", "subgraph", "bpu_type", "reason"}
    assert {"bpu_nodes", "cpu_nodes", "subgraphs", "bpu_mac_fraction"} <= set(doc["summary"])
    assert doc["summary"]["bpu_mac_fraction"] == 1.0
    assert (tmp_path / "out" / "m_optimized_float_model.onnx").exists()
    assert res.deployable


def test_cli_exit_codes(tmp_path):
    runner = CliRunner()
    good = tmp_path / "good.onnx"
    onnx.save(small_conv_model(), str(good))
    r = runner.invoke(main, ["checker", "--model", str(good), "--output-dir", str(tmp_path / "o1")])
    assert r.exit_code == 0, r.output
    assert "HzSQuantizedConv" in r.output

    r = runner.invoke(main, ["checker", "--model", str(tmp_path / "missing.onnx")])
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output

    # nothing the BPU can run: a lone CumSum
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], name="cumsum")]
    bad = tmp_path / "cpu_only.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 4])], [vinfo("y", [1, 4])], [tensor("axis", np.array(1, np.int64))]), str(bad))
    r = runner.invoke(main, ["checker", "--model", str(bad), "--output-dir", str(tmp_path / "o2")])
    assert r.exit_code == 1 and "no node of the model can run on the BPU" in r.output
    assert (tmp_path / "o2" / "checker.json").exists()

    r = runner.invoke(main, ["checker", "--model", str(good), "--input-shape", "x", "3by4"])
    assert r.exit_code == 2 and "not a shape" in r.output


def test_cli_dynamic_input_without_shape_is_exit_2(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    m = make_model(nodes, [vinfo("x", ["n", 4])], [vinfo("y", ["n", 4])])
    path = tmp_path / "dyn.onnx"
    onnx.save(m, str(path))
    r = CliRunner().invoke(main, ["checker", "--model", str(path), "--output-dir", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "--input-shape x" in r.output
    assert not (tmp_path / "o" / "checker.json").exists()
    r = CliRunner().invoke(main, ["checker", "--model", str(path), "--input-shape", "x", "2x4", "--output-dir", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output


# ----------------------------------------------------------------- real-export warts
CORE_OPS = {"Conv", "MatMul", "Gemm", "Linear", "LayerNormalization", "Softmax", "Gelu", "Add"}


def _check_wart(tmp_path, name):
    from samples.warts import WARTS, example_feed

    path = WARTS[name][0](tmp_path / f"{name}.onnx")
    shapes = {k: v.shape for k, v in example_feed(name).items()}
    return run_checker(path, input_shapes=shapes, output_dir=tmp_path / "out")


@pytest.mark.parametrize("name", ["paddle_style_ln", "swin_block_dynamic", "cnn_warts", "tf_style"])
def test_wart_models_run_their_core_ops_on_the_bpu(tmp_path, name):
    res = _check_wart(tmp_path, name)
    off = [(n.name, n.op_type, n.meta["reason"]) for n in res.graph.nodes if n.op_type in CORE_OPS and n.meta["on"] != "BPU"]
    assert not off
    assert res.summary["bpu_mac_fraction"] == 1.0
    assert not {"Shape", "Mod", "ConstantOfShape"} & set(res.graph.op_types())
    assert all(res.graph.is_const(n.inputs[1]) for n in res.graph.nodes if n.op_type == "Gather")


def test_bert_style_puts_embedding_and_mask_on_cpu_with_reasons(tmp_path):
    res = _check_wart(tmp_path, "bert_style")
    cpu = [n for n in res.graph.nodes if n.meta["on"] == "CPU"]
    assert cpu and all(n.meta["reason"] for n in cpu)
    assert any(n.op_type == "Gather" and "run time" in n.meta["reason"] for n in cpu)
    bpu_core = [n for n in res.graph.nodes if n.op_type in {"MatMul", "Gemm", "Linear", "Softmax", "LayerNormalization"}]
    assert bpu_core and all(n.meta["on"] == "BPU" for n in bpu_core)
    assert res.summary["subgraphs"] == 1


def test_unsupported_standard_op_falls_back_with_reason(tmp_path):
    res = _check_wart(tmp_path, "unsupported_op")
    cumsum = [n for n in res.graph.nodes if n.op_type == "CumSum"]
    assert cumsum and cumsum[0].meta["on"] == "CPU" and "running sums" in cumsum[0].meta["reason"]
    assert res.deployable


def test_custom_domain_op_is_a_clear_cli_error(tmp_path):
    from samples.warts import build_custom_op

    path = build_custom_op(tmp_path / "custom.onnx", with_function=False)
    r = CliRunner().invoke(main, ["checker", "--model", str(path), "--output-dir", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "custom domain 'com.example'" in r.output and "fix:" in r.output
    assert not (tmp_path / "o").exists()
