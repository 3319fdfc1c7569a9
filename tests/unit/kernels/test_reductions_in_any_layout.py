"""Reductions in any layout run on the BPU as integer kernels.

The head of a channels-last classifier (HF Swin-T, timm/ConvNeXt-style) is a ReduceMean over
axes [1, 2] of a (B, H, W, C) grid; the support rule knew only NCHW (one axis, or [2, 3]) and put
it on the CPU. Each case goes through calibrate -> compile -> simulate and perf.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hbtool.compiler.artifact import from_bytes
from hbtool.costmodel.schedule import estimate
from tests.helpers import cosine, run_pipeline

CASES = {
    # name: (op, input shape, axes, keepdims)
    "channels_last_hw_keepdims0": ("ReduceMean", (1, 7, 7, 96), [1, 2], 0),
    "channels_last_hw_keepdims1": ("ReduceMean", (1, 7, 7, 96), [1, 2], 1),
    "tokens": ("ReduceMean", (1, 49, 96), [1], 0),
    "nchw_hw": ("ReduceMean", (1, 96, 7, 7), [2, 3], 1),
    "not_contiguous": ("ReduceMean", (1, 6, 5, 8), [1, 3], 1),
    "sum_channels_last": ("ReduceSum", (1, 7, 7, 16), [1, 2], 0),
    "max_channels_last": ("ReduceMax", (1, 7, 7, 16), [1, 2], 1),
}


def reduce_model(op: str, shape, axes, keepdims: int) -> onnx.ModelProto:
    """x * w (a per-channel constant on the last axis, so the reduction reads a BPU tensor) -> reduce."""
    rng = np.random.default_rng(len(shape) + sum(axes))
    w = numpy_helper.from_array(rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32), "w")
    out_shape = [1 if k in axes else d for k, d in enumerate(shape) if keepdims or k not in axes]
    inits = [w]
    if op == "ReduceSum":  # axes an input from opset 13
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        reduce = helper.make_node(op, ["m", "axes"], ["y"], name="reduce", keepdims=keepdims)
    else:
        reduce = helper.make_node(op, ["m"], ["y"], name="reduce", axes=list(axes), keepdims=keepdims)
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="scale"), reduce]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_runs_on_bpu_as_integer_kernel(tmp_path, case):
    op, shape, axes, keepdims = CASES[case]
    calibration, compiled, _feeds, simulated, quantized, floats = run_pipeline(reduce_model(op, shape, axes, keepdims), tmp_path, shape)
    placed = {n.name: (n.meta.get("on"), n.meta.get("reason")) for n in calibration.graph.nodes}
    assert placed["reduce"] == ("BPU", None), placed
    assert compiled.fallbacks == []
    node = next(n for n in compiled.program.nodes if n.name == "reduce")
    assert node.meta.get("on") == "BPU"
    if op != "ReduceMax":  # ReduceMax moves integers unchanged (same scale in and out): no kernel
        assert type(node.meta["kernel"]).__name__ == op
    for sim, q, f in zip(simulated, quantized, floats):
        assert sim[0].shape == f[0].shape
        np.testing.assert_array_equal(sim[0], q[0])  # bit-exact with the quantized ONNX
        assert cosine(sim[0], f[0]) > 0.999, cosine(sim[0], f[0])
    costs = {c.name: c for c in estimate(from_bytes(compiled.data).header).ops}
    cost = costs["reduce"]
    assert cost.cycles > 0 and cost.unit != "cpu"
    assert ("transpose" in cost.note) == (case == "not_contiguous"), cost.note
