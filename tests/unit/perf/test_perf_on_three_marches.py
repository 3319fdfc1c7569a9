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
from hbtool.costmodel.cost import CPU, TENSOR, VECTOR, CostContext, cost_op
from hbtool.costmodel.hardware import hardware_for
from hbtool.perf.run import perf_fast
from tests.helpers import make_model, small_conv_model, tensor, vinfo
from tests.unit.perf.test_op_costs_schedule_and_cli import ceil_to, node, tiny_program


@pytest.mark.parametrize("march", ["bayes", "bayes-e", "bernoulli2"])
def test_depthwise_conv_fills_one_array_lane_per_group(march):
    """The array's c_out lanes share one input window: a depthwise conv uses one lane of c_out per pass
    (X5); J5 and X3 pack the groups side by side into their lanes (X3: its depthwise rows, costmodel3)."""
    hw = hardware_for(march)
    c, size = 64, 20
    dw = Conv.build(np.ones((c, 1, 3, 3), np.int64), None, 1.0, 1.0, 1.0, pads=[1] * 4, group=c)
    g, t = tiny_program({"x": (1, c, size, size), "y": (1, c, size, size)}, [node("HzConv", ["x"], ["y"], TENSOR, dw)])
    op = cost_op(g.nodes[0], CostContext(g, t, hw))
    assert op.macs == c * size * size * 9
    lanes = ceil_to(c, hw.array_c_out) if hw.groups_share_lanes else c * ceil_to(1, hw.array_c_out)
    assert op.padded_macs == size * ceil_to(size, hw.array_w) * lanes * ceil_to(9, hw.array_reduce)
    assert hw.groups_share_lanes == (march in ("bayes", "bernoulli2"))      # J5 and X3 pack the groups into their lanes
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


def _transpose_program(where: str):
    from hbtool.costmodel.cost import DATA_MOVEMENT

    shapes = {"x": (1, 256, 64), "y": (1, 64, 256)}           # int8; every output row reads a column: runs of 1 element
    n = node("Transpose", ["x"], ["y"], DATA_MOVEMENT, attrs={"perm": [0, 2, 1]}, in_sram=True)
    return tiny_program(shapes, [n], where={"x": where, "y": where})


def _transpose_on(march: str, where: str):
    from hbtool.costmodel.cost import DATA_MOVEMENT, SRAM

    g, t = _transpose_program(where)
    hw = hardware_for(march)
    return cost_op(g.nodes[0], CostContext(g, t, hw)), hw, DATA_MOVEMENT, SRAM


def test_x5_transpose_buffer_moves_each_sram_line_once_per_tile_and_ddr_in_whole_bursts():
    """X5's data-movement unit buffers ``transpose_lines`` SRAM lines: an element-granular transpose in SRAM
    moves about its own bytes; J5 (no buffer) moves a line per element; in DDR the reorder is staged in
    SRAM tiles (``ddr_tiled``): DDR moves each side's bytes once, in bursts, and the unit's time is the
    SRAM-side walk (layout case ``tiled via SRAM``)."""
    elements = 256 * 64
    x5, hw5, DM, SRAM = _transpose_on("bayes-e", "sram")
    j5, hw, _, _ = _transpose_on("bayes", "sram")
    assert hw5.dm_transpose_lines > 1 and hw.dm_transpose_lines == 1
    assert j5.components[DM] == pytest.approx(elements * hw.sram_access_bytes / hw.dm_bytes_per_cycle)
    line_waste = elements * hw5.sram_access_bytes
    assert x5.sram_bytes <= line_waste // hw5.dm_transpose_lines + 2 * elements      # strided side / buffer + in-order side
    assert x5.sram_bytes >= 2 * elements                                              # never below the bytes it moves
    unbuffered = line_waste / hw5.dm_bytes_per_cycle                                  # a line per element
    assert x5.components[DM] == pytest.approx(unbuffered / hw5.dm_transpose_lines)      # the strided side, per tile
    assert x5.components[DM] <= unbuffered / 8
    x5_ddr, _, _, _ = _transpose_on("bayes-e", "ddr")
    assert hw5.dm_ddr_tiled and x5_ddr.layout == "tiled via SRAM"
    assert x5_ddr.ddr_bytes == 2 * elements                                           # each side once, whole bursts
    assert x5_ddr.components[DM] == pytest.approx(x5.components[DM])                  # the same SRAM-side walk
    import dataclasses
    untiled = dataclasses.replace(hw5, dm_ddr_tiled=False)
    g, t = _transpose_program("ddr")
    burst = cost_op(g.nodes[0], CostContext(g, t, untiled))
    assert burst.layout == "gather in DDR" and burst.ddr_bytes == elements * hw5.ddr_burst_bytes + elements  # a burst per element


def test_published_build_precision_goes_through_the_quick_path(tmp_path):
    """``fast_config(..., calibration=...)`` compiles at the precision a published config asked for:
    ``set_all_nodes_int16`` makes every BPU op 16-bit on X5 and costs more than the int8 default."""
    from hbtool.compiler.compile import compile_model
    from hbtool.perf.run import calibrate_to, fast_config
    from hbtool.costmodel.schedule import estimate_program

    p = tmp_path / "m.onnx"
    p.write_bytes(small_conv_model().SerializeToString())
    results = {}
    for tag, calib in (("int8", None), ("int16", {"optimization": "set_all_nodes_int16"})):
        work = tmp_path / tag
        work.mkdir()
        cfg = fast_config(p, {}, "bayes-e", work, calib)
        compiled = compile_model(cfg, optimize_level="O3", calibrated=calibrate_to(cfg, work / "cal.onnx"))
        results[tag] = estimate_program(compiled.program, compiled.header.get("tensors", {}), hardware_for("bayes-e"))
    int8, int16 = results["int8"], results["int16"]
    assert all(o.bits == 8 for o in int8.ops if o.unit != CPU)
    bpu16 = [o for o in int16.ops if o.unit in (TENSOR, VECTOR)]
    assert bpu16 and all(o.bits == 16 for o in bpu16)
    assert int16.bpu_cycles > int8.bpu_cycles


def _token_block(tokens: int = 49, dim: int = 32):
    """LayerNorm over the channels of a token matrix, a linear layer, and a Softmax over the tokens' logits."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1, epsilon=1e-5, name="ln"),
             helper.make_node("MatMul", ["n", "w"], ["l"], name="fc"),
             helper.make_node("Softmax", ["l"], ["y"], axis=-1, name="sm")]
    inits = [tensor("g", rng.uniform(0.5, 1.5, dim).astype(np.float32)), tensor("b", rng.normal(0, 0.1, dim).astype(np.float32)),
             tensor("w", rng.normal(0, 0.2, (dim, tokens)).astype(np.float32))]
    return make_model(nodes, [vinfo("x", [1, tokens, dim])], [vinfo("y", [1, tokens, tokens])], inits)


def test_x5_layernorm_and_softmax_pass_over_32_bit_intermediates_at_a_quarter_of_the_lanes(tmp_path):
    """On X5 every pass of the integer LayerNorm and Softmax works on 32-bit sums, squares and reciprocals, 16 of
    the 64 int8 lanes: 4x the cycles per element of J5's pass counts (4 and 5), through the real quick path."""
    p = tmp_path / "tokens.onnx"
    p.write_bytes(_token_block().SerializeToString())
    hw5, j5 = hardware_for("bayes-e"), hardware_for("bayes")
    assert (hw5.cpe_layernorm, hw5.cpe_softmax) == (4 * j5.cpe_layernorm, 4 * j5.cpe_softmax)
    res = perf_fast(p, {}, "bayes-e", None, None, False).result
    by_kernel = {o.kernel: o for o in res.ops if o.unit == VECTOR}
    assert {"LayerNorm", "Softmax"} <= set(by_kernel)
    assert not [o for o in res.ops if o.unit == CPU and o.kernel not in ("Quantize", "Dequantize")]   # all on the BPU
    for kernel, cpe in (("LayerNorm", hw5.cpe_layernorm), ("Softmax", hw5.cpe_softmax)):
        op = by_kernel[kernel]
        assert op.bits == 8 and op.elements >= 49 * 32
        assert op.components[VECTOR] == pytest.approx(op.elements * cpe / hw5.vector_lanes)
        # a requantizing elementwise pass over the same elements costs a sixteenth to a twentieth of it
        assert op.components[VECTOR] >= 16 * op.elements * hw5.cpe_elementwise / hw5.vector_lanes
