"""An all-zero constant operand (LeViT's attention biases, initialised to zeros) added to a
feature map with a tiny scale: the constant takes the feature map's scale, so the Add's ratios
stay near one. It used to get scale 1.0, a ratio of ``1 / s_out`` (2**53 and more), and the Add
ran in float ("Add ratios too large for exact integer arithmetic")."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tests.helpers import cosine, make_model, run_pipeline, tensor, vinfo


def tiny_logits_with_zero_bias(heads: int = 2, tokens: int = 16, dim: int = 8):
    """x * 1e-4 -> logits = t @ t^T -> + zero attention bias -> Softmax: logits of scale ~1e-9."""
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["t"], name="shrink"),
        helper.make_node("Transpose", ["t"], ["tt"], name="tr", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["t", "tt"], ["logits"], name="qk"),
        helper.make_node("Add", ["logits", "bias"], ["biased"], name="add_bias"),
        helper.make_node("Softmax", ["biased"], ["y"], name="softmax", axis=-1),
    ]
    inits = [tensor("k", np.array(1e-4, np.float32)), tensor("bias", np.zeros((heads, tokens, tokens), np.float32))]
    return make_model(nodes, [vinfo("x", [1, heads, tokens, dim])], [vinfo("y", [1, heads, tokens, tokens])], inits)


def test_zero_constant_added_to_a_tiny_scale_stays_integer(tmp_path):
    model = tiny_logits_with_zero_bias()
    calibration, compiled, _, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 2, 16, 8))
    assert [n.name for n in calibration.program.nodes if n.meta.get("fallback")] == []
    assert compiled.fallbacks == []
    add = next(n for n in compiled.program.nodes if n.name == "add_bias")
    assert add.meta.get("on") == "BPU" and type(add.meta["kernel"]).__name__ == "Add"
    assert abs(int(add.meta["kernel"].A)) < 2**20  # a ratio near one, not 1 / s_out
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.999
