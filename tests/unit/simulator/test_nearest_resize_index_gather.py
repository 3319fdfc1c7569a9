"""Nearest-neighbour Resize moves integers: the simulator's index gather equals onnxruntime's Resize."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hbtool.ir.graph import Graph
from hbtool.kernels.movement import MOVEMENT
from tests.helpers import make_model, run_ort, run_pipeline, tensor, vinfo

TRANSFORMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"]
ROUNDINGS = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 1.5, 0.75), (1, 2, 2, 1)])
def test_nearest_resize_matches_onnxruntime(transform, rounding, scales):
    x = np.random.default_rng(0).integers(-128, 128, (1, 3, 4, 8)).astype(np.float32)
    out_shape = [int(np.floor(d * s)) for d, s in zip(x.shape, scales)]
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="n", mode="nearest",
                            coordinate_transformation_mode=transform, nearest_mode=rounding)
    model = make_model([node], [vinfo("x", list(x.shape))], [vinfo("y", out_shape)], [tensor("s", np.array(scales, np.float32))])
    ref = run_ort(model, {"x": x})[0]
    program = Graph("g", 17)
    program.add_const(np.array(scales, np.float32), name="s")
    program.set_value("y", tuple(out_shape), np.float64)
    ir = program.add_node("Resize", ["x", "", "s"], ["y"], {"mode": "nearest", "coordinate_transformation_mode": transform,
                                                            "nearest_mode": rounding}, name="n")
    got = MOVEMENT["Resize"](ir, program, x.astype(np.int64), None, program.const("s"))[0]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_nearest_resize_runs_on_bpu_in_either_layout(tmp_path, layout):
    shape, scales = ((1, 4, 5, 6), (1, 1, 2, 2)) if layout == "NCHW" else ((1, 5, 6, 4), (1, 2, 2, 1))
    out_shape = [d * int(s) for d, s in zip(shape, scales)]
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="scale"),
             helper.make_node("Resize", ["m", "", "s"], ["y"], name="resize", mode="nearest")]
    w = np.linspace(0.5, 1.5, shape[-1]).astype(np.float32)
    model = make_model(nodes, [vinfo("x", list(shape))], [vinfo("y", out_shape)], [tensor("w", w), tensor("s", np.array(scales, np.float32))])
    calibration, compiled, _feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, shape)
    assert {n.name: n.meta.get("on") for n in calibration.graph.nodes}["resize"] == "BPU"
    assert compiled.fallbacks == []
    for sim, q in zip(simulated, quantized):
        np.testing.assert_array_equal(sim[0], q[0])
