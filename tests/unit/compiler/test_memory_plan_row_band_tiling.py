"""The memory plan runs a conv chain whose intermediates do not fit SRAM in row bands (compiler scope).

A tiny conv -> sigmoid -> conv model goes through the real quick path (calibrate, compile), then its
program is re-planned against an SRAM too small for either intermediate map: without tiling both
spill (each written once and read once), with tiling both stay in SRAM as band buffers and the
DDR bytes per frame drop by exactly those four transfers; the cost model reads the same plan.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

from hbtool.compiler.compile import bpu_weight_bytes, compile_model
from hbtool.compiler.memory import DDR, SRAM, TILED, plan_memory
from hbtool.march.description import March, load_march
from hbtool.costmodel.cost import TENSOR
from hbtool.costmodel.hardware import hardware_for
from hbtool.perf.run import calibrate_to, fast_config
from hbtool.costmodel.schedule import estimate_program
from tests.helpers import make_model, tensor, vinfo


def _march(name: str, sram: int) -> March:
    m = load_march(name)
    raw = json.loads(json.dumps(m.raw))
    raw["memory"]["sram_bytes_per_core"]["value"] = sram
    return March(m.name, raw)


def _chain_model(c: int = 8, mid: int = 32, size: int = 128):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Sigmoid", ["a"], ["s"], name="act"),
             helper.make_node("Conv", ["s", "w2", "b2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv2")]
    inits = [tensor("w1", rng.normal(0, 0.2, (mid, c, 3, 3)).astype(np.float32)), tensor("b1", np.zeros(mid, np.float32)),
             tensor("w2", rng.normal(0, 0.2, (c, mid, 3, 3)).astype(np.float32)), tensor("b2", np.zeros(c, np.float32))]
    return make_model(nodes, [vinfo("x", [1, c, size, size])], [vinfo("y", [1, c, size, size])], inits)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiling")
    p = tmp / "chain.onnx"
    p.write_bytes(_chain_model().SerializeToString())
    cfg = fast_config(p, {}, "bayes", tmp, None)
    return compile_model(cfg, optimize_level="O3", calibrated=calibrate_to(cfg, tmp / "cal.onnx"))


def _intermediates(c):
    """The two maps between the convs: the first conv's output and the activation's."""
    prog = c.program
    convs = [n for n in prog.nodes if n.meta.get("unit") == TENSOR]
    assert len(convs) == 2
    first, second = convs
    mid = [first.outputs[0], second.inputs[0]]
    assert mid[0] != mid[1]
    return prog, mid


@pytest.mark.parametrize("march", ["bayes", "bayes-e", "bernoulli2"])
def test_a_conv_chain_that_spills_runs_in_row_bands_with_its_intermediates_in_sram(compiled, march):
    """``compile_mode: bandwidth``: banded wherever it saves DDR bytes, on every march alike."""
    prog, mid = _intermediates(compiled)
    sizes = [compiled.layout.tensors[t].padded_bytes for t in mid]
    weights = bpu_weight_bytes(prog)
    small = _march(march, min(sizes) // 2)  # neither intermediate fits whole, a band of each does
    plain = plan_memory(prog, compiled.layout, small, weights, tiling=False)
    assert [plain.location(t) for t in mid] == [DDR, DDR]
    assert plain.ddr_bytes["spill_write"] == sum(sizes) and plain.ddr_bytes["spill_read"] == sum(sizes)

    tiled = plan_memory(prog, compiled.layout, small, weights, compile_mode="bandwidth")
    assert [tiled.location(t) for t in mid] == [SRAM, SRAM]
    assert all(tiled.tensors[t].why == TILED and tiled.tensors[t].size < s for t, s in zip(mid, sizes))
    assert tiled.ddr_bytes["spill_write"] == 0 and tiled.ddr_bytes["spill_read"] == 0
    (group,) = tiled.tiles
    assert group.bands >= 2 and group.weights_resident and group.extra == 0
    # exactly the two spilled maps' write and read leave the DDR traffic
    assert plain.ddr_bytes_per_frame - tiled.ddr_bytes_per_frame == 2 * sum(sizes)
    assert tiled.sram_peak <= small.param("memory.sram_bytes_per_core")
    banded = [n for n in prog.nodes if n.meta.get("tile")]
    assert len(banded) >= 3 and all(n.meta["tile"]["bands"] == group.bands for n in banded)


def test_the_cost_model_reads_the_banded_plan(compiled):
    """The same program costed with the plain and the banded plan (``bandwidth``: the whole chain banded):
    the DDR bytes drop by the spills, every banded op pays one dispatch per band."""
    prog, mid = _intermediates(compiled)
    weights = bpu_weight_bytes(prog)
    small = _march("bayes", min(compiled.layout.tensors[t].padded_bytes for t in mid) // 2)
    hw = hardware_for("bayes")

    def estimate(tiling: bool):
        plan = plan_memory(prog, compiled.layout, small, weights, tiling=tiling, compile_mode="bandwidth")
        tensors = {k: dict(v, memory=plan.tensors[k].to_json()) if k in plan.tensors else dict(v)
                   for k, v in compiled.header["tensors"].items()}
        return plan, estimate_program(prog, tensors, hw)

    plain_plan, plain = estimate(False)
    tiled_plan, tiled = estimate(True)
    bands = tiled_plan.tiles[0].bands
    saved = plain.ddr_bytes_per_frame - tiled.ddr_bytes_per_frame
    assert saved >= 2 * sum(compiled.layout.tensors[t].padded_bytes for t in mid)
    by_name = {o.name: o for o in tiled.ops}
    for n in prog.nodes:
        if n.meta.get("tile") and by_name[n.name].cycles > 0:
            assert by_name[n.name].overhead == pytest.approx(hw.per_op_cycles * bands)


def test_no_banding_where_the_intermediates_fit(compiled):
    prog, mid = _intermediates(compiled)
    plan = plan_memory(prog, compiled.layout, load_march("bayes"), 0)
    assert plan.tiles == [] and [plan.location(t) for t in mid] == [SRAM, SRAM]
    assert not any(n.meta.get("tile") for n in prog.nodes)


def test_latency_mode_bands_a_chain_only_where_its_cycles_drop(compiled):
    """``compile_mode: latency`` (the default) bands a chain only where its cycles, by the cost model,
    drop: on J5 the spilled maps make the ops wait on DDR, so it bands; with a dispatch so dear that
    the extra passes cost more than the DDR time saved it does not, where ``bandwidth`` still does."""
    prog, mid = _intermediates(compiled)
    weights = bpu_weight_bytes(prog)
    sram = min(compiled.layout.tensors[t].padded_bytes for t in mid) // 2
    for march in ("bayes", "bayes-e", "bernoulli2"):
        plan = plan_memory(prog, compiled.layout, _march(march, sram), weights)
        assert all(g.cycles_saved > 0 for g in plan.tiles)
    j5 = plan_memory(prog, compiled.layout, _march("bayes", sram), weights)
    # the chain (or the part of it whose bands pay) runs banded, its first map in SRAM
    assert j5.tiles and j5.tiles[0].cycles_saved > 0 and j5.location(mid[0]) == SRAM
    dear = _march("bayes", sram)
    dear.raw["overheads"]["per_op_cycles"]["value"] = 10**7
    assert plan_memory(prog, compiled.layout, dear, weights).tiles == []
    assert plan_memory(prog, compiled.layout, dear, weights, compile_mode="bandwidth").tiles != []
