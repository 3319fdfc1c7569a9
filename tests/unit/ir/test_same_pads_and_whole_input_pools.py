"""HF EfficientNet's head: Conv auto_pad SAME_* and AvgPool2d(1280, ceil_mode=True) on a 7x7 map.

On main every ``auto_pad = SAME_UPPER`` Conv fell back to float ("no integer lowering"), and the
oversized AveragePool went to the CPU ("kernels ... at most 256"); now the pads are explicit and
a pool whose one window covers the input is its global form, and the model runs wholly as integers.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.passes import optimize_float
from hbtool.ir.passes.explicit_pads import same_pads
from tests.helpers import assert_graph_matches, cosine, make_model, run_ort, run_pipeline, tensor, vinfo


def _head_model(pool: helper.NodeProto, pooled_shape, conv_auto_pad: str = "SAME_UPPER", stride: int = 2) -> "onnx.ModelProto":
    """x [1,3,13,13] -> Conv 3x3 (auto_pad, stride 2: 7x7) -> Relu -> pool -> y."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(8).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", auto_pad=conv_auto_pad, strides=[stride, stride]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        pool,
    ]
    return make_model(nodes, [vinfo("x", [1, 3, 13, 13])], [vinfo("y", pooled_shape)], [tensor("w", w), tensor("b", b)], opset=13)


def _efficientnet_pool(**overrides) -> helper.NodeProto:
    attrs = dict(kernel_shape=[1280, 1280], strides=[1280, 1280], ceil_mode=1, count_include_pad=1, pads=[0, 0, 0, 0])
    attrs.update(overrides)
    return helper.make_node("AveragePool", ["r"], ["y"], name="pool", **attrs)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_same_pads_match_onnxruntime(mode):
    model = _head_model(helper.make_node("Identity", ["r"], ["y"], name="id"), [1, 8, 7, 7], mode)
    graph = import_onnx(model)
    optimize_float(graph)
    conv = graph.node("conv")
    assert "auto_pad" not in conv.attrs
    assert conv.attr("pads") == same_pads([13, 13], [3, 3], [2, 2], [1, 1], upper=mode == "SAME_UPPER")
    assert_graph_matches(model, graph, {"x": np.random.default_rng(0).standard_normal((1, 3, 13, 13)).astype(np.float32)})


def test_same_pads_put_the_odd_element_where_onnx_does():
    # 6 wide, kernel 4, stride 1: total 3 -> SAME_UPPER 1 before / 2 after, SAME_LOWER 2 / 1
    assert same_pads([6], [4], [1], [1], upper=True) == [1, 2]
    assert same_pads([6], [4], [1], [1], upper=False) == [2, 1]


def test_onnxruntime_divides_a_ceil_mode_overhang_by_the_input_size():
    """The ONNX semantics the rewrite relies on: ceil_mode overhang is not counted, explicit pads are."""
    x = np.random.default_rng(2).standard_normal((1, 8, 7, 7)).astype(np.float32)

    def pool(**attrs):
        node = helper.make_node("AveragePool", ["r"], ["y"], **attrs)
        return run_ort(make_model([node], [vinfo("r", [1, 8, 7, 7])], [vinfo("y", None)], opset=13), {"r": x})[0]

    global_mean = x.mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(pool(kernel_shape=[1280, 1280], strides=[1280, 1280], ceil_mode=1, count_include_pad=1),
                               global_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pool(kernel_shape=[9, 9], pads=[1, 1, 1, 1], count_include_pad=0), global_mean, rtol=1e-5, atol=1e-6)
    counted = pool(kernel_shape=[9, 9], pads=[1, 1, 1, 1], count_include_pad=1)
    np.testing.assert_allclose(counted, global_mean * 49 / 81, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pool, global_op", [
    (_efficientnet_pool(), "GlobalAveragePool"),
    (_efficientnet_pool(kernel_shape=[9, 9], strides=[1, 1], ceil_mode=0, count_include_pad=0, pads=[1, 1, 1, 1]), "GlobalAveragePool"),
    (helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[9, 9], pads=[1, 1, 1, 1]), "GlobalMaxPool"),
    (helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[300, 300], strides=[300, 300], ceil_mode=1), "GlobalMaxPool"),
])
def test_whole_input_pool_becomes_global_and_matches_onnxruntime(pool, global_op):
    model = _head_model(pool, [1, 8, 1, 1])
    graph = import_onnx(model)
    optimize_float(graph)
    assert graph.node("pool").op_type == global_op
    assert_graph_matches(model, graph, {"x": np.random.default_rng(3).standard_normal((1, 3, 13, 13)).astype(np.float32)})


def test_counted_padding_keeps_the_average_pool():
    """count_include_pad = 1 with pads: the divisor counts the pads, not a global mean."""
    model = _head_model(_efficientnet_pool(kernel_shape=[9, 9], strides=[1, 1], ceil_mode=0, pads=[1, 1, 1, 1]), [1, 8, 1, 1])
    graph = import_onnx(model)
    optimize_float(graph)
    assert graph.node("pool").op_type == "AveragePool"
    assert_graph_matches(model, graph, {"x": np.random.default_rng(4).standard_normal((1, 3, 13, 13)).astype(np.float32)})


@pytest.mark.parametrize("pool, global_op", [
    (_efficientnet_pool(), "GlobalAveragePool"),
    (helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[300, 300], strides=[300, 300], ceil_mode=1), "GlobalMaxPool"),
])
def test_efficientnet_head_runs_wholly_as_integers(tmp_path, pool, global_op):
    model = _head_model(pool, [1, 8, 1, 1])
    calibration, compiled, _feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 3, 13, 13))
    placed = {n.name: (n.op_type, n.meta.get("on"), n.meta.get("reason")) for n in calibration.graph.nodes}
    assert placed["pool"][:2] == (global_op, "BPU"), placed["pool"]
    assert all(on == "BPU" for _, on, _ in placed.values()), placed
    assert compiled.fallbacks == []
    for sim, q, f in zip(simulated, quantized, floats):
        np.testing.assert_array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.999, cosine(sim[0], f[0])
