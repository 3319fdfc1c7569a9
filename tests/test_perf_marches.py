"""``hbtool perf`` on the three marches: grouped convs, nv12 inputs, thread counts, the measurement class.

Hand computations use each march's parameters by name, so they check the formulas, not today's
values; the quick-path tests go through the real calibrate -> compile -> cost calls.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper

from hbtool.cli import main
from hbtool.kernels.conv import Conv
from hbtool.perf.cost import CPU, TENSOR, VECTOR, CostContext, cost_op
from hbtool.perf.hardware import hardware_for
from hbtool.perf.run import perf_fast
from tests.helpers import make_model, small_conv_model, tensor, vinfo
from tests.test_perf import ceil_to, node, tiny_program


@pytest.mark.parametrize("march", ["bayes", "bayes-e", "bernoulli2"])
def test_depthwise_conv_fills_one_array_lane_per_group(march):
    """The array's c_out lanes share one input window: a depthwise conv uses one lane of c_out per pass
    (X5, X3); J5 packs the groups side by side into its lanes."""
    hw = hardware_for(march)
    c, size = 64, 20
    dw = Conv.build(np.ones((c, 1, 3, 3), np.int64), None, 1.0, 1.0, 1.0, pads=[1] * 4, group=c)
    g, t = tiny_program({"x": (1, c, size, size), "y": (1, c, size, size)}, [node("HzConv", ["x"], ["y"], TENSOR, dw)])
    op = cost_op(g.nodes[0], CostContext(g, t, hw))
    assert op.macs == c * size * size * 9
    lanes = ceil_to(c, hw.array_c_out) if hw.groups_share_lanes else c * ceil_to(1, hw.array_c_out)
    assert op.padded_macs == size * ceil_to(size, hw.array_w) * lanes * ceil_to(9, hw.array_reduce)
    assert hw.groups_share_lanes == (march == "bayes")      # J5 packs the groups into its lanes
    assert op.components[TENSOR] == pytest.approx(op.padded_macs / hw.macs_per_cycle)
    dense = Conv.build(np.ones((c, c, 3, 3), np.int64), None, 1.0, 1.0, 1.0, pads=[1] * 4)
    g2, t2 = tiny_program({"x": (1, c, size, size), "y": (1, c, size, size)}, [node("HzConv", ["x"], ["y"], TENSOR, dense)])
    full = cost_op(g2.nodes[0], CostContext(g2, t2, hw))
    assert op.macs / op.padded_macs < full.macs / full.padded_macs     # per useful MAC, depthwise is the dearer


def _quick(tmp_path, march, **kw):
    p = tmp_path / "m.onnx"
    p.write_bytes(small_conv_model().SerializeToString())
    return perf_fast(p, {}, march, None, None, False, **kw).result


def test_nv12_input_is_converted_on_the_bpu_instead_of_quantized_on_the_cpu(tmp_path):
    hw = hardware_for("bayes-e")
    plain = _quick(tmp_path, "bayes-e")
    nv12 = _quick(tmp_path, "bayes-e", input_type_rt="nv12")
    quant = [o for o in plain.ops if o.unit == CPU and o.kernel == "Quantize"]
    assert len(quant) == 1 and quant[0].elements == 3 * 16 * 16
    assert not [o for o in nv12.ops if o.unit == CPU and o.kernel == "Quantize"]
    conv = [o for o in nv12.ops if o.kernel == "ColourConvert"]
    assert len(conv) == 1 and conv[0].unit == VECTOR
    assert conv[0].elements == 3 * 16 * 16
    assert conv[0].ddr_bytes >= 16 * 16 * 3 // 2                       # Y plane + half-size UV plane
    assert conv[0].components[VECTOR] == pytest.approx(3 * 16 * 16 * hw.cpe_colour_convert / hw.vector_lanes)
    assert nv12.cpu_cycles < plain.cpu_cycles


def test_fps_by_threads_is_bounded_by_latency_and_by_the_cores(tmp_path):
    r = _quick(tmp_path, "bayes-e")
    assert r.fps_threads(1) == pytest.approx(r.fps_1core)
    fps = [r.fps_threads(n) for n in (1, 2, 4, 8)]
    assert fps == sorted(fps) and fps[-1] <= r.fps * (1 + 1e-9)
    assert r.fps_bound_at(1) == "1 threads x latency"
    # host time per frame adds latency but not throughput: with enough threads the BPU binds
    hw = r.hw
    assert r.latency_cycles >= r.bpu_cycles + r.cpu_cycles + hw.host_per_frame_us * 1e-6 * hw.clock_hz - 1e-6


def test_int8_only_march_quick_path_is_all_int8_and_j5_keeps_its_int16_luts(tmp_path):
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                    helper.make_node("Sigmoid", ["c"], ["y"], name="sig")],
                   [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 8, 16, 16])],
                   [tensor("w", np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32))])
    p = tmp_path / "lut.onnx"
    p.write_bytes(m.SerializeToString())
    x5 = perf_fast(p, {}, "bayes-e", None, None, False).result
    x3 = perf_fast(p, {}, "bernoulli2", None, None, False).result
    j5 = perf_fast(p, {}, "bayes", None, None, False).result
    assert all(o.bits == 8 for o in x5.ops if o.unit != CPU)   # int16 only on request on X5
    assert all(o.bits == 8 for o in x3.ops if o.unit != CPU)
    assert any(o.bits == 16 for o in j5.ops if o.unit == VECTOR)


def test_cli_prints_the_measurement_class_and_fps_by_threads(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(small_conv_model().SerializeToString())
    out = tmp_path / "perf.json"
    res = CliRunner().invoke(main, ["perf", "--model", str(p), "--fast", "--march", "bernoulli2", "--input-type-rt", "nv12",
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "resembles: convolutional classifier" in res.output and "FPS by threads" in res.output
    doc = json.loads(out.read_text())
    assert doc["march"] == "bernoulli2" and doc["measurement_class"]["class"].startswith("convolutional")
    assert doc["fps_threads"]["1"] == pytest.approx(doc["fps_1core"], rel=1e-3)
    bad = CliRunner().invoke(main, ["perf", "--model", str(p), "--fast", "--march", "bayes-x"])
    assert bad.exit_code == 2 and "bernoulli2" in bad.output and "Traceback" not in bad.output
