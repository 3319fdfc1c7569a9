"""Regression tests of the causes of accuracy loss found on the trained corpus models (PP-OCR, PicoDet, PP-LCNet).

Each test builds a small model with the pattern that lost accuracy and drives the real
calibrate -> compile -> simulate path.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.passes import optimize_float
from tests.helpers import cosine, make_model, run_pipeline, tensor, vinfo


def _db_head(bias_shape=(1, 1, 1, 1)) -> "onnx.ModelProto":  # noqa: F821
    """Conv -> Relu -> ConvTranspose (no bias) -> Add(bias) -> BatchNorm -> Sigmoid: paddle2onnx's DB head.

    The logits span about +-60 with the zero crossing near the binarisation threshold, as in
    a DB detector, so an int8 step on the ConvTranspose output (before the bias) flattens the map.
    """
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.5
    w2 = rng.standard_normal((8, 1, 2, 2)).astype(np.float32) * 6.0
    bias = np.full(bias_shape, -2.0, np.float32)
    bn = [np.array([0.5], np.float32), np.array([0.25], np.float32), np.array([0.1], np.float32), np.array([1.0], np.float32)]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "w2"], ["t"], name="up", strides=[2, 2]),
        helper.make_node("Add", ["t", "bias"], ["a"], name="bias_add"),
        helper.make_node("BatchNormalization", ["a", "g", "b", "m", "v"], ["n"], name="bn"),
        helper.make_node("Sigmoid", ["n"], ["y"], name="prob"),
    ]
    inits = [tensor("w1", w1), tensor("w2", w2), tensor("bias", bias)] + [tensor(k, v) for k, v in zip("gbmv", bn)]
    return make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 1, 32, 32])], inits, opset=13)


def test_bias_add_after_conv_transpose_folds_into_its_bias(tmp_path):
    model = _db_head()
    graph = import_onnx(model, {})
    optimize_float(graph)
    ops = [n.op_type for n in graph.nodes]
    assert "Add" not in ops and "BatchNormalization" not in ops and "Mul" not in ops, ops
    up = next(n for n in graph.nodes if n.op_type == "ConvTranspose")
    assert len(up.inputs) == 3 and graph.const(up.inputs[2]) is not None


def test_channel_bias_shapes_that_do_not_fold_stay_an_add():
    model = _db_head(bias_shape=(1, 1, 1, 32))      # varies along the width: not a channel bias
    graph = import_onnx(model, {})
    optimize_float(graph)
    assert "Add" in [n.op_type for n in graph.nodes]


def test_db_head_logits_keep_int16_through_the_bias(tmp_path):
    cal, compiled, _, simulated, quantized, float_out = run_pipeline(_db_head(), tmp_path, (1, 3, 16, 16))
    up = next(n for n in cal.graph.nodes if n.op_type == "ConvTranspose")
    assert cal.plan.tensors[up.outputs[0]].bits == 16       # the Sigmoid's input, written by the layer itself
    for sim, q, ref in zip(simulated, quantized, float_out):
        np.testing.assert_array_equal(sim[0], q[0])
        assert cosine(sim[0], ref[0]) > 0.999, cosine(sim[0], ref[0])
