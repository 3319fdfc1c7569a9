"""Two cost-model rules of perf8 (docs/perf.md): the exposed share of a layer's weight fetch, and an nv12
input converted straight into the layout of its first reader.

Hand numbers use the march's parameters by name (the formula is checked, not today's value); the nv12
test goes through the real calibrate -> compile -> cost path and compares against the same program
costed with the reorder kept as a copy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hbtool.kernels.conv import Conv
from hbtool.costmodel import access, schedule
from hbtool.costmodel.cost import TENSOR, VECTOR, CostContext, cost_op
from hbtool.costmodel.hardware import hardware_for, parameter_table
from hbtool.perf.report import op_json
from hbtool.perf.run import perf_fast
from tests.helpers import small_conv_model
from tests.unit.perf.test_op_costs_schedule_and_cli import node, tiny_program


def _conv(cin: int = 64, cout: int = 128, size: int = 16, tile: dict | None = None):
    kern = Conv.build(np.ones((cout, cin, 3, 3), np.int64), None, 1.0, 1.0, 1.0, pads=[1] * 4)
    extra = {"tile": tile} if tile else {}
    return tiny_program({"x": (1, cin, size, size), "y": (1, cout, size, size)},
                        [node("HzConv", ["x"], ["y"], TENSOR, kern, **extra)])


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_the_exposed_share_of_the_weight_fetch_adds_to_the_op(share):
    """cycles = max(resources) + dispatch + share x (weight bytes from DDR / DDR bytes per cycle)."""
    hw = dataclasses.replace(hardware_for("bayes-e"), weight_fetch_exposed=share)
    g, t = _conv()
    op = cost_op(g.nodes[0], CostContext(g, t, hw))
    weight_ddr = access.sequential_bytes(op.weight_bytes, hw.ddr_burst_bytes)
    assert op.weight_bytes >= 128 * 64 * 9
    assert op.exposed == pytest.approx(share * weight_ddr / hw.ddr_bytes_per_cycle)
    assert op.cycles == pytest.approx(op.busy + op.overhead + op.exposed)
    assert op_json(schedule.estimate_program(g, t, hw), op, 0.0)["weight_wait_cycles"] == pytest.approx(op.exposed, abs=0.05)


def test_weights_read_again_per_band_are_waited_for_per_read():
    hw = dataclasses.replace(hardware_for("bayes-e"), weight_fetch_exposed=0.3)
    g1, t1 = _conv()
    g3, t3 = _conv(tile={"bands": 3, "weight_reads": 3, "group": 0})
    once = cost_op(g1.nodes[0], CostContext(g1, t1, hw))
    thrice = cost_op(g3.nodes[0], CostContext(g3, t3, hw), g3.nodes[0].meta["tile"])
    assert once.exposed > 0
    assert thrice.exposed == pytest.approx(3 * once.exposed)


def test_an_op_without_weights_waits_for_none():
    hw = hardware_for("bayes-e")
    assert hw.weight_fetch_exposed > 0
    from hbtool.kernels.eltwise import Add

    g, t = tiny_program({"a": (1, 8, 4, 16), "b": (1, 8, 4, 16), "y": (1, 8, 4, 16)},
                        [node("HzAdd", ["a", "b"], ["y"], VECTOR, Add.build(1.0, 1.0, 1.0))])
    assert cost_op(g.nodes[0], CostContext(g, t, hw)).exposed == 0.0


def test_every_march_says_where_its_weight_fetch_share_comes_from():
    for march in ("bayes", "bayes-e", "bernoulli2"):
        row = next(r for r in parameter_table(march) if r["parameter"] == "memory.weight_fetch_exposed")
        assert 0.0 <= float(row["value"]) <= 1.0
        assert row["kind"] == "assumed" and len(row["source"]) > 80


def _quick(tmp_path, **kw):
    p = tmp_path / "m.onnx"
    p.write_bytes(small_conv_model().SerializeToString())
    return perf_fast(p, {}, "bayes-e", None, None, False, **kw).result


def test_an_nv12_input_is_converted_straight_into_its_readers_layout(tmp_path, monkeypatch):
    """A float input quantized on the CPU is written unpadded and the BPU copies it into the conv's
    layout (C 3 -> 8); the BPU's colour converter writes that layout itself, so the copy moves nothing."""
    plain = _quick(tmp_path)
    reorder = [o for o in plain.ops if o.op_type == "HzReorder"]
    assert len(reorder) == 1 and reorder[0].cycles > 0           # the copy a CPU-quantized input needs

    nv12 = _quick(tmp_path, input_type_rt="nv12")
    kept = [o for o in nv12.ops if o.op_type == "HzReorder"]
    assert len(kept) == 1 and kept[0].cycles == 0 and kept[0].ddr_bytes == kept[0].sram_bytes == 0
    convert = next(o for o in nv12.ops if o.kernel == "ColourConvert")
    assert convert.elements == 3 * 16 * 16                        # computes the 3 real channels ...
    nv12_in = access.sequential_bytes(16 * 16 * 3 // 2, hardware_for("bayes-e").ddr_burst_bytes)
    assert convert.sram_bytes + convert.ddr_bytes - nv12_in >= 8 * 16 * 16   # ... and writes the padded layout

    # the same program with the reorder costed as a copy is slower on the BPU by that copy
    monkeypatch.setattr(schedule, "absorb_image_reorders", lambda program, ops, ctx: ops)
    copied = _quick(tmp_path, input_type_rt="nv12")
    assert copied.bpu_cycles > nv12.bpu_cycles
    assert next(o for o in copied.ops if o.op_type == "HzReorder").cycles > 0


def test_the_report_says_what_an_op_waits_for_its_weights(tmp_path):
    hw = hardware_for("bayes-e")
    g, t = _conv()
    op = schedule.estimate_program(g, t, hw).ops[0]
    assert op.exposed > 0 and f"for {hw.weight_fetch_exposed:.0%} of its weight fetch" in op.note
    g0, t0 = _conv()
    none = schedule.estimate_program(g0, t0, dataclasses.replace(hw, weight_fetch_exposed=0.0)).ops[0]
    assert none.exposed == 0 and "weight fetch" not in none.note


def test_the_wait_for_weights_counts_as_ddr_time_in_the_bound_shares():
    hw = hardware_for("bayes-e")
    g, t = _conv()
    with_wait = schedule.estimate_program(g, t, hw)
    op = with_wait.ops[0]
    assert op.bound_by != "ddr" and op.exposed > 0
    assert with_wait.bound_share["ddr"] == pytest.approx(op.exposed / with_wait.latency_cycles)
    assert sum(with_wait.bound_share.values()) == pytest.approx(1.0)


def test_a_lut_in_the_conv_output_stage_waits_for_nothing():
    """The output stage moves no data of its own, its table fetch included."""
    from hbtool.kernels.lut import Lut

    hw = hardware_for("bayes-e")
    assert hw.output_stage_lut
    kern = Conv.build(np.ones((64, 64, 1, 1), np.int64), None, 1.0, 1.0, 1.0)
    lut = Lut.build(np.tanh, 0.05, 8, 1 / 127, 8)
    g, t = tiny_program({"x": (1, 64, 16, 16), "c": (1, 64, 16, 16), "y": (1, 64, 16, 16)},
                        [node("HzConv", ["x"], ["c"], TENSOR, kern), node("HzLut", ["c"], ["y"], VECTOR, lut)])
    act = schedule.estimate_program(g, t, dataclasses.replace(hw, weight_fetch_exposed=1.0)).ops[1]
    assert "output stage" in act.note and act.ddr_bytes == 0 and act.exposed == 0.0


@pytest.mark.parametrize("shape", [[1, 16], [1, 4, 16, 16], [1, 3, 15, 16]])
def test_nv12_is_refused_for_an_input_that_is_not_an_even_sized_3_channel_image(tmp_path, shape):
    """--input-type-rt nv12 on token ids or a feature map would be accepted and then ignored: a clear error."""
    from click.testing import CliRunner
    from onnx import helper

    from hbtool.cli import main
    from tests.helpers import make_model, vinfo

    p = tmp_path / "m.onnx"
    p.write_bytes(make_model([helper.make_node("Relu", ["x"], ["y"])], [vinfo("x", shape)], [vinfo("y", shape)]).SerializeToString())
    res = CliRunner().invoke(main, ["perf", "--model", str(p), "--fast", "--march", "bayes-e", "--input-type-rt", "nv12"])
    assert res.exit_code == 2, res.output
    assert "input 'x'" in res.output and "not a 3-channel image" in res.output and "Traceback" not in res.output
    ok = CliRunner().invoke(main, ["perf", "--model", str(p), "--fast", "--march", "bayes-e"])
    assert ok.exit_code == 0, ok.output
