"""GroupNorm(1, C) as torch exports it (Reshape to [N, 1, C*H*W] -> InstanceNormalization ->
Reshape back -> Mul gamma -> Add beta) fuses into one LayerNorm over (C, H, W) with per-channel
affine. Before, the ``1 x 1 x C*H*W`` row broke the BPU's dimension limit (65536) and the whole
norm went to the CPU; a row past the vector unit's one-pass LayerNorm size runs (and is costed) in two passes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.passes import fuse_group_norm
from tests.helpers import cosine, make_model, run_pipeline, tensor, vinfo


def group_norm_one_model(c: int = 8, hw: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c", "rows"], ["r"], name="gn/Reshape"),
        helper.make_node("InstanceNormalization", ["r", "ones", "zeros"], ["n"], name="gn/InstanceNormalization", epsilon=1e-5),
        helper.make_node("Reshape", ["n", "back"], ["nb"], name="gn/Reshape_1"),
        helper.make_node("Mul", ["nb", "gamma"], ["g"], name="gn/Mul"),
        helper.make_node("Add", ["g", "beta"], ["y"], name="gn/Add"),
    ]
    inits = [tensor("w", w), tensor("rows", np.array([1, 1, -1], np.int64)), tensor("ones", np.ones(1, np.float32)),
             tensor("zeros", np.zeros(1, np.float32)), tensor("back", np.array([1, c, hw, hw], np.int64)),
             tensor("gamma", rng.uniform(0.5, 1.5, (c, 1, 1)).astype(np.float32)),
             tensor("beta", (rng.standard_normal((c, 1, 1)) * 0.2).astype(np.float32))]
    return make_model(nodes, [vinfo("x", [1, 3, hw, hw])], [vinfo("y", [1, c, hw, hw])], inits)


def test_group_norm_one_fuses_into_a_channel_layernorm_exact_in_float():
    model = group_norm_one_model()
    graph = import_onnx(model)
    assert fuse_group_norm(graph) == 1
    (norm,) = [n for n in graph.nodes if n.op_type == "ChannelLayerNorm"]
    assert norm.attrs["axes"] == [1, 2, 3] and graph.const(norm.inputs[1]).shape == (8, 1, 1)
    assert not [n for n in graph.nodes if n.op_type in ("InstanceNormalization", "Reshape", "Mul", "Add")]


def test_group_norm_one_runs_on_the_bpu_bit_exact(tmp_path):
    model = group_norm_one_model()
    calibration, compiled, feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 3, 16, 16))
    assert [n.name for n in calibration.program.nodes if n.meta.get("fallback")] == []
    assert compiled.fallbacks == [] and compiled.cpu_subgraphs == []
    norm = [n for n in compiled.program.nodes if type(n.meta.get("kernel")).__name__ == "LayerNorm"]
    assert len(norm) == 1 and norm[0].meta["kernel"].n == 8 * 16 * 16 and norm[0].meta["unit"] == "vector"
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.999


def test_group_norm_one_over_a_row_past_one_pass_runs_in_two(tmp_path):
    """16 x 48 x 48 = 36864 elements per row: past layernorm_max_size (8192), on main a CPU node."""
    model = group_norm_one_model(c=16, hw=48)
    calibration, compiled, _, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 3, 48, 48), samples=2)
    assert compiled.fallbacks == [] and compiled.cpu_subgraphs == []
    norm = next(n for n in compiled.program.nodes if type(n.meta.get("kernel")).__name__ == "LayerNorm")
    assert norm.meta["kernel"].n == 36864 and norm.meta["on"] == "BPU"
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.999


@pytest.mark.parametrize("hw,two_pass", [(16, False), (48, True)])
def test_long_layernorm_rows_cost_a_second_pass(hw, two_pass):
    from hbtool.kernels import LayerNorm
    from hbtool.costmodel.cost import VECTOR, CostContext, cost_op, layernorm_one_pass_size
    from tests.unit.perf.test_op_costs_schedule_and_cli import HW, node, tiny_program

    shape = (1, 16, hw, hw)
    n = 16 * hw * hw
    kernel = LayerNorm.build(0.05, np.ones(16), np.zeros(16), 1e-5, 0.01, 16, 16, axes=(-3, -2, -1),
                             norm_shape=(16, hw, hw), param_shape=(16, 1, 1))
    g, t = tiny_program({"x": shape, "y": shape}, [node("HzLayerNorm", ["x"], ["y"], VECTOR, kernel)], bits={"x": 16, "y": 16})
    op = cost_op(g.nodes[0], CostContext(g, t, HW, 1))
    elements = int(np.prod(t["x"]["padded"]))
    cpe = HW.cpe_layernorm + (HW.cpe_pool if two_pass else 0.0)
    assert op.components[VECTOR] == pytest.approx(elements * cpe / HW.vector_lanes / HW.vector_int16_rate)
    assert op.sram_bytes == (3 if two_pass else 2) * t["x"]["padded_bytes"]
    assert ("two passes" in op.note) == two_pass and layernorm_one_pass_size("bayes") == 8192
