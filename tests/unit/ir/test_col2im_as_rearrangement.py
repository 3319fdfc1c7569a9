"""MobileViTV2's F.fold (dynamo: Col2Im) with kernel == stride and no padding is a pure rearrangement.

On main every Col2Im went to the CPU; an edge-to-edge fold is now Reshape/Transpose/Reshape on
the BPU, and an overlapping fold still goes to the CPU with its reason while the rest runs.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.passes import optimize_float
from tests.helpers import assert_graph_matches, cosine, make_model, run_pipeline, tensor, vinfo


def _fold_model(block: int, stride: int, image: int = 8) -> "onnx.ModelProto":
    """x [1,16,4,4] -> Reshape [1,16,16] -> Col2Im(image, block, stride) -> Conv 3x3 -> y."""
    channels = 16 // (block * block)
    blocks = ((image - block) // stride + 1) ** 2
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, channels, 3, 3)).astype(np.float32) * 0.3
    nodes = [
        helper.make_node("Reshape", ["x", "cols_shape"], ["cols"], name="to_cols"),
        helper.make_node("Col2Im", ["cols", "image", "block"], ["img"], name="fold", strides=[stride, stride]),
        helper.make_node("Conv", ["img", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
    ]
    inits = [tensor("cols_shape", np.array([1, 16, blocks], np.int64)), tensor("image", np.array([image, image], np.int64)),
             tensor("block", np.array([block, block], np.int64)), tensor("w", w)]
    side = int(np.sqrt(blocks))
    return make_model(nodes, [vinfo("x", [1, 16, side, side])], [vinfo("y", [1, 6, image, image])], inits, opset=18)


def test_edge_to_edge_fold_is_a_rearrangement_matching_onnxruntime():
    model = _fold_model(block=2, stride=2)
    graph = import_onnx(model)
    optimize_float(graph)
    assert "Col2Im" not in graph.op_types()
    assert_graph_matches(model, graph, {"x": np.random.default_rng(0).standard_normal((1, 16, 4, 4)).astype(np.float32)}, tol=1e-6)


def test_edge_to_edge_fold_runs_on_the_bpu_bit_exact(tmp_path):
    model = _fold_model(block=2, stride=2)
    calibration, compiled, _feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 16, 4, 4))
    assert all(n.meta.get("on") == "BPU" for n in calibration.graph.nodes), [(n.name, n.meta.get("reason")) for n in calibration.graph.nodes]
    assert compiled.fallbacks == []
    for sim, q, f in zip(simulated, quantized, floats):
        np.testing.assert_array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.999, cosine(sim[0], f[0])


def test_overlapping_fold_stays_on_the_cpu_with_its_reason_and_the_rest_runs(tmp_path):
    model = _fold_model(block=2, stride=1, image=5)  # 4x4 blocks of 2x2 overlap on a 5x5 image: sums
    calibration, compiled, _feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 16, 4, 4))
    fold = calibration.graph.node("fold")
    assert fold.op_type == "Col2Im" and fold.meta.get("on") == "CPU" and "Col2Im" in (fold.meta.get("reason") or "")
    assert calibration.graph.node("conv").meta.get("on") == "BPU"
    assert compiled.fallbacks == []
    for sim, q, f in zip(simulated, quantized, floats):
        np.testing.assert_array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.999, cosine(sim[0], f[0])
