"""``hbtool perf``: single-op costs against hand computations, the schedule, and the CLI end to end.

The hand computations use the march's parameters by name (array shape, lanes, granules,
bandwidths), so they check the formulas, not today's numbers in ``bayes.yaml``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from hbtool.cli import main
from hbtool.compiler.layout import padded_shape
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.kernels.conv import Conv
from hbtool.kernels.eltwise import Add
from hbtool.kernels.linear import Linear, MatMul
from hbtool.costmodel.cost import DATA_MOVEMENT, DDR, OVERHEAD, TENSOR, VECTOR, CostContext, cost_op
from hbtool.costmodel.hardware import hardware_for, parameter_table
from hbtool.costmodel.schedule import estimate_program

ROOT = Path(__file__).resolve().parents[3]
HW = hardware_for("bayes")


def ceil_to(v: int, q: int) -> int:
    return -(-v // q) * q


# ----------------------------------------------------------------------------- tiny programs


def tiny_program(shapes: dict[str, tuple[int, ...]], nodes: list[Node], bits: dict[str, int] | None = None,
                 where: dict[str, str] | None = None, padded: dict[str, tuple[int, ...]] | None = None):
    """A program of ``nodes`` and its per-tensor layout/memory records (all int8 in SRAM unless told)."""
    g = Graph("t")
    for name, shape in shapes.items():
        g.set_value(name, shape, np.int64)
    g.nodes = nodes
    produced = {o for n in nodes for o in n.outputs}
    g.inputs = [n for n in shapes if n not in produced]
    g.outputs = [nodes[-1].outputs[0]]
    tensors = {}
    for name, shape in shapes.items():
        eb = (bits or {}).get(name, 8) // 8
        pad = (padded or {}).get(name, padded_shape(shape, 8, 16))
        tensors[name] = {"shape": list(shape), "padded": list(pad), "element_bytes": eb,
                         "bytes": int(np.prod(shape)) * eb, "padded_bytes": int(np.prod(pad)) * eb,
                         "memory": {"location": (where or {}).get(name, "sram")}}
    return g, tensors


def node(op_type: str, inputs, outputs, unit: str, kernel=None, attrs=None, **meta) -> Node:
    n = Node(outputs[0] + "_op", op_type, list(inputs), list(outputs), dict(attrs or {}), HBTOOL_DOMAIN)
    n.meta.update(on="BPU", unit=unit, **meta)
    if kernel is not None:
        n.meta["kernel"] = kernel
    return n


def cost(g, tensors, k: int = 0, split: int = 1):
    return cost_op(g.nodes[k], CostContext(g, tensors, HW, split))


def conv_op(cin: int, cout: int, hw: int = 16, k: int = 1, in_bits: int = 8):
    w = np.ones((cout, cin, k, k), np.int64)
    kern = Conv.build(w, None, 1.0, 1.0, 1.0, pads=[k // 2] * 4, in_bits=in_bits)
    return tiny_program({"x": (1, cin, hw, hw), "y": (1, cout, hw, hw)}, [node("HzConv", ["x"], ["y"], TENSOR, kern)])


# ----------------------------------------------------------------------------- tensor unit


def test_aligned_conv_costs_its_macs_on_the_array():
    g, t = conv_op(64, 64)
    op = cost(g, t)
    macs = 16 * 16 * 64 * 64
    assert op.macs == macs
    assert HW.array_w == 16 and 64 % HW.array_c_out == 0 and 64 % HW.array_reduce == 0  # the hand case below
    assert op.padded_macs == macs
    assert op.components[TENSOR] == pytest.approx(macs / HW.macs_per_cycle)
    # the weights stream from DDR once: 64x64 int8 bytes
    assert op.weight_bytes == 64 * 64
    assert op.components[DDR] == pytest.approx(ceil_to(64 * 64, HW.ddr_burst_bytes) / HW.ddr_bytes_per_cycle)
    assert op.cycles == pytest.approx(max(op.components.values()) + HW.per_op_cycles)


def test_awkward_channel_conv_pays_for_its_padding():
    g, t = conv_op(65, 65)
    op = cost(g, t)
    reduction = ceil_to(ceil_to(65, HW.c_in_quantum), HW.array_reduce)      # 65 -> 72 (8-channel groups, 8 deep a pass)
    padded = 16 * ceil_to(16, HW.array_w) * ceil_to(65, HW.array_c_out) * reduction
    assert op.macs == 16 * 16 * 65 * 65
    assert op.padded_macs == padded
    assert op.components[TENSOR] == pytest.approx(padded / HW.macs_per_cycle)
    aligned = cost(*conv_op(64, 64))
    # 3 % more MACs, 2.25x the array time (C_out 65 -> 128 lanes, C_in 65 -> 72)
    assert op.components[TENSOR] / aligned.components[TENSOR] == pytest.approx(padded / (16 * 16 * 64 * 64))
    assert op.components[TENSOR] > 2.2 * aligned.components[TENSOR]


def test_narrow_width_pays_for_the_array_width():
    op = cost(*conv_op(64, 64, hw=17))
    assert op.padded_macs == 17 * ceil_to(17, HW.array_w) * 64 * 64
    assert op.padded_macs / op.macs == pytest.approx(32 / 17)


def test_int16_operands_are_slower_than_int8():
    x8 = cost(*conv_op(64, 64, in_bits=8))
    x16 = cost(*conv_op(64, 64, in_bits=16))
    assert x16.components[TENSOR] == pytest.approx(x8.components[TENSOR] / HW.tensor_int16_rate)
    # int16 x int8 (weights stay int8): three passes, one per signed-int8 digit of the int16 activation
    assert x16.components[TENSOR] == pytest.approx(3 * x8.components[TENSOR])
    # an Add on int16 tensors takes twice the vector time of the same Add on int8
    shapes = {"a": (1, 64, 16, 16), "b": (1, 64, 16, 16), "y": (1, 64, 16, 16)}
    add8 = cost(*tiny_program(shapes, [node("HzAdd", ["a", "b"], ["y"], VECTOR, Add.build(1.0, 1.0, 1.0))]))
    add16 = cost(*tiny_program(shapes, [node("HzAdd", ["a", "b"], ["y"], VECTOR, Add.build(1.0, 1.0, 1.0, 16, 16, 16))],
                               bits={"a": 16, "b": 16, "y": 16}))
    elements = 64 * 16 * 16
    assert add8.components[VECTOR] == pytest.approx(elements * HW.cpe_elementwise / HW.vector_lanes)
    assert add16.components[VECTOR] == pytest.approx(add8.components[VECTOR] / HW.vector_int16_rate)


def test_linear_and_untiled_batched_matmul():
    w = np.ones((96, 288), np.int64)
    g, t = tiny_program({"x": (3136, 96), "y": (3136, 288)}, [node("HzLinear", ["x"], ["y"], TENSOR, Linear.build(w, None, 1.0, 1.0, 1.0))])
    op = cost(g, t)
    assert op.padded_macs == ceil_to(3136, HW.array_w) * ceil_to(288, HW.array_c_out) * ceil_to(96, HW.array_reduce)
    # window attention: 192 matrices of 49x32 @ 32x49
    shapes = {"q": (64, 3, 49, 32), "k": (64, 3, 32, 49), "s": (64, 3, 49, 49)}
    mm = MatMul.build(1.0, 1.0, 1.0, 32)
    untiled = cost(*tiny_program(shapes, [node("HzMatMul", ["q", "k"], ["s"], TENSOR, mm)]))
    tiled = cost(*tiny_program(shapes, [node("HzMatMul", ["q", "k"], ["s"], TENSOR, mm, bmm_tiled=True)]))
    per = ceil_to(49, HW.array_w) * ceil_to(49, HW.array_c_out) * ceil_to(32, HW.array_reduce)
    assert untiled.calls == 192 and untiled.padded_macs == 192 * per
    assert untiled.overhead == 192 * HW.per_op_cycles          # one dispatch per batch entry
    assert tiled.calls == 1 and tiled.overhead == HW.per_op_cycles
    assert tiled.padded_macs == ceil_to(192 * 49, HW.array_w) * ceil_to(49, HW.array_c_out) * ceil_to(32, HW.array_reduce)
    assert tiled.cycles < untiled.cycles / 20


# ----------------------------------------------------------------------------- data movement


def _transpose(where: str, in_sram: bool = True):
    """A transpose the O3 pass ``data_movement_in_sram`` let use SRAM (``in_sram``), its tensors in ``where``."""
    shapes = {"x": (1, 256, 64), "y": (1, 64, 256)}
    n = node("Transpose", ["x"], ["y"], DATA_MOVEMENT, attrs={"perm": [0, 2, 1]}, **({"in_sram": True} if in_sram else {}))
    return tiny_program(shapes, [n], where={"x": where, "y": where})


def test_transpose_in_ddr_is_staged_through_sram_tiles():
    elements = 256 * 64                                  # int8; every output row reads a column: runs of 1 element
    sram = cost(*_transpose("sram"))
    ddr = cost(*_transpose("ddr"))
    # SRAM: each element read costs a whole SRAM line; the write is sequential
    assert sram.components[DATA_MOVEMENT] == pytest.approx(elements * HW.sram_access_bytes / HW.dm_bytes_per_cycle)
    assert sram.components[DDR] == 0
    assert sram.bound_by == DATA_MOVEMENT
    # DDR: the unit stages tiles in SRAM (units.data_movement.ddr_tiled): DDR moves each side once in
    # whole bursts, the reorder is the same SRAM-side walk, and the staged tile adds SRAM traffic
    assert HW.dm_ddr_tiled and ddr.layout == "tiled via SRAM"
    assert ddr.ddr_bytes == 2 * elements
    assert ddr.components[DATA_MOVEMENT] == pytest.approx(sram.components[DATA_MOVEMENT])
    assert ddr.cycles >= sram.cycles
    # without tiled staging (a march without it, or a move the compiler kept out of SRAM: below O3)
    # each element read is a whole burst
    import dataclasses
    g, t = _transpose("ddr")
    burst = cost_op(g.nodes[0], CostContext(g, t, dataclasses.replace(HW, dm_ddr_tiled=False)))
    assert burst.layout == "gather in DDR" and burst.ddr_bytes == elements * HW.ddr_burst_bytes + elements
    assert burst.bound_by == DDR and burst.cycles > 2 * sram.cycles
    unstaged = cost(*_transpose("ddr", in_sram=False))
    assert unstaged.layout == "gather in DDR" and unstaged.ddr_bytes == burst.ddr_bytes
    assert sram.overhead == ddr.overhead == HW.per_op_cycles


def test_contiguous_copy_is_cheaper_than_a_transpose_and_a_view_is_free():
    shapes = {"x": (1, 64, 32), "y": (1, 2048)}
    copy = tiny_program(shapes, [node("Reshape", ["x"], ["y"], DATA_MOVEMENT)], where={"x": "ddr", "y": "ddr"},
                        padded={"x": (1, 64, 32), "y": (1, 2048)})
    op = cost(*copy)
    assert op.ddr_bytes == 2 * 2048                   # one sequential read, one sequential write
    assert op.cycles < cost(*_transpose("ddr")).cycles
    view = tiny_program(shapes, [node("Reshape", ["x"], ["y"], DATA_MOVEMENT, view=True)])
    v = cost(*view)
    assert v.cycles == 0 and v.bound_by == "view"


# ----------------------------------------------------------------------------- schedule


def test_latency_sums_the_schedule_with_dispatch_and_frame_overheads():
    shapes = {"a": (1, 64, 16, 16), "b": (1, 64, 16, 16), "c": (1, 64, 16, 16), "y": (1, 64, 16, 16)}
    add = Add.build(1.0, 1.0, 1.0)
    g, t = tiny_program(shapes, [node("HzAdd", ["a", "b"], ["c"], VECTOR, add), node("HzAdd", ["c", "b"], ["y"], VECTOR, add)])
    r = estimate_program(g, t, HW)
    vector = 64 * 16 * 16 * HW.cpe_elementwise / HW.vector_lanes
    sram = 3 * 64 * 16 * 16 / HW.sram_bytes_per_cycle     # two reads and a write, all in SRAM
    busy = max(vector, sram)
    per_frame = HW.per_frame_us * 1e-6 * HW.clock_hz
    host = HW.host_per_frame_us * 1e-6 * HW.clock_hz      # the host's part of a frame: latency, not BPU time
    assert all(op.bound_by == OVERHEAD for op in r.ops)   # tiny ops: the dispatch dominates
    assert r.latency_cycles == pytest.approx(2 * (busy + HW.per_op_cycles) + per_frame + host)
    assert r.fps_1core == pytest.approx(HW.clock_hz / r.latency_cycles)
    # no DDR traffic, no CPU: both cores in throughput mode, each busy for the BPU part of the frame
    assert r.fps == pytest.approx(HW.cores * HW.clock_hz / (r.latency_cycles - host))
    assert r.fps_bound == "bpu cores"
    assert r.time_share[VECTOR] + r.time_share["runtime"] == pytest.approx(1.0)
    two = estimate_program(g, t, HW, core_num=2)
    assert two.ops[0].components[VECTOR] == pytest.approx(vector / 2)
    assert two.ops[0].overhead == HW.per_op_cycles + HW.dual_core_sync_cycles
    assert two.fps == pytest.approx(HW.clock_hz / two.latency_cycles)


def test_ddr_bound_fps_in_throughput_mode():
    w = np.ones((2048, 2048), np.int64)   # 4 MiB of weights streamed per frame
    g, t = tiny_program({"x": (16, 2048), "y": (16, 2048)}, [node("HzLinear", ["x"], ["y"], TENSOR, Linear.build(w, None, 1.0, 1.0, 1.0))])
    r = estimate_program(g, t, HW)
    assert r.fps_bound == "ddr bandwidth"
    assert r.fps == pytest.approx(HW.ddr_sustained_bytes_per_s / r.ddr_bytes_per_frame)
    assert r.ops[0].bound_by == DDR


def test_every_parameter_says_where_it_comes_from():
    rows = parameter_table("bayes")
    assert rows and all(r["kind"] in ("published", "derived", "assumed") and r["source"] for r in rows)
    assert HW.array_w * HW.array_c_out * HW.array_reduce == HW.macs_per_cycle
    assert 10e9 <= HW.ddr_bytes_per_s <= 70e9          # an LPDDR4/4X-class bus
    assert 0.5e9 <= HW.clock_hz <= 2e9


# ----------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def tiny_swin(tmp_path_factory):
    """configs/tiny_swin.yaml with its working_dir moved to a temporary folder, compiled once.

    Calibration on 2 random samples (``skip``) instead of the digits: speed does not depend on it.
    """
    folder = tmp_path_factory.mktemp("perf")
    cfg = yaml.safe_load((ROOT / "configs" / "tiny_swin.yaml").read_text())
    cfg["model_parameters"]["onnx_model"] = str(ROOT / "samples" / "tiny" / "tiny_swin.onnx")
    cfg["model_parameters"]["working_dir"] = str(folder / "work")
    cfg["calibration_parameters"].update(cal_data_dir=str(ROOT / "samples" / "data" / "digits_cal"), calibration_type="skip", num_samples=2)
    path = folder / "tiny_swin.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(main, ["compile", "-c", str(path)])
    assert res.exit_code == 0, res.output
    return path, folder / "work" / "tiny_swin.bin"


JSON_KEYS = {"latency_ms", "fps", "fps_1core", "ddr_bytes_per_frame", "gops_per_frame", "tensor_vector_ratio", "time_share", "ops",
             "utilisation", "bound_by", "fps_bound"}


def test_cli_artifact_json_and_html(tiny_swin, tmp_path):
    _, artifact = tiny_swin
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["perf", str(artifact), "--json", str(tmp_path / "p.json"), "--output-dir", str(out)])
    assert res.exit_code == 0, res.output
    assert "latency" in res.output and "FPS" in res.output and "tensor:vector" in res.output
    doc = json.loads((tmp_path / "p.json").read_text())
    assert JSON_KEYS <= set(doc)
    assert set(doc["time_share"]) >= {"tensor", "vector", "data_movement", "cpu"}
    assert sum(doc["time_share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert doc["fps"] >= doc["fps_1core"] > 0 and doc["latency_ms"] > 0
    assert doc["fps_1core"] == pytest.approx(1000 / doc["latency_ms"], rel=1e-3)
    op = doc["ops"][0]
    assert {"name", "unit", "cycles", "bound_by"} <= set(op)
    assert sum(o["cycles"] for o in doc["ops"]) < doc["latency_ms"] * 1e-3 * HW.clock_hz
    assert {p.name for p in out.iterdir()} >= {"perf.html", "perf_ops.png", "perf_timeline.png", "perf.json"}
    assert (out / "perf_ops.png").read_bytes()[:4] == b"\x89PNG"
    assert "perf_timeline.png" in (out / "perf.html").read_text()
    two = CliRunner().invoke(main, ["perf", str(artifact), "--core-num", "2", "--json", "-"])
    assert two.exit_code == 0
    assert json.loads(two.stdout)["core_num"] == 2


def test_cli_config_compare_levels(tiny_swin, tmp_path):
    cfg, artifact = tiny_swin
    res = CliRunner().invoke(main, ["perf", "-c", str(cfg), "--compare-levels", "--json", str(tmp_path / "l.json"), "--top", "3"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "l.json").read_text())
    levels = doc["levels"]
    assert [r["level"] for r in levels if r["level"]] == ["O0", "O1", "O2", "O3"]
    assert levels[0]["pass"] is None and levels[-1]["level"] == "O3"
    assert levels[-1]["fps"] > levels[0]["fps"]
    o3 = CliRunner().invoke(main, ["perf", str(artifact), "--json", "-"])
    assert json.loads(o3.stdout)["fps"] == pytest.approx(levels[-1]["fps"], rel=1e-6)


def test_cli_quick_path_and_usage_errors(tmp_path):
    model = ROOT / "samples" / "tiny" / "tiny_cnn.onnx"
    res = CliRunner().invoke(main, ["perf", "--model", str(model), "--fast", "--optimize-level", "O1", "--json", str(tmp_path / "q.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "q.json").read_text())
    assert doc["optimize_level"] == "O1" and doc["fps"] > 0
    for args, text in ((["--model", str(model)], "--fast"), ([], "exactly one"), (["x.hbm", "--compare-levels"], "already compiled"),
                       (["--model", str(model), "--fast", "--input-shape", "nope", "1x1"], "no input of that name"),
                       (["--model", str(model), "--fast", "--top", "-1"], "'--top': -1 is not in the range x>=1")):
        bad = CliRunner().invoke(main, ["perf", *args])
        assert bad.exit_code == 2, bad.output
        assert text in bad.output and "fix:" in bad.output


# ----------------------------------------------------------------------------- boards


def test_a_board_runs_the_same_program_at_its_own_clock():
    """RDK Ultra's J5 BPU is rated 96 TOPS, the automotive J5 128: the BPU's cycles are the same, its time 4/3
    longer; DDR and the A55s are not slowed, so a DDR-bound op takes the same time on both."""
    ultra = hardware_for("bayes", "rdk-ultra")
    assert (HW.board, ultra.board) == ("journey5", "rdk-ultra")
    assert ultra.clock_hz == pytest.approx(HW.clock_hz * 96 / 128) and ultra.peak_int8_tops == 96
    assert ultra.macs_per_cycle == HW.macs_per_cycle and ultra.ddr_bytes_per_s == HW.ddr_bytes_per_s
    g, t = conv_op(64, 64, hw=64, k=3)
    j5, rdk = estimate_program(g, t, HW), estimate_program(g, t, ultra)
    assert rdk.ops[0].components[TENSOR] == pytest.approx(j5.ops[0].components[TENSOR])   # cycles
    assert rdk.ops[0].bound_by == j5.ops[0].bound_by == TENSOR
    bpu_ms = lambda r, hw: sum(o.cycles for o in r.ops) / hw.clock_hz * 1e3  # noqa: E731
    assert bpu_ms(rdk, ultra) == pytest.approx(bpu_ms(j5, HW) * 128 / 96)
    w = np.ones((2048, 2048), np.int64)   # 4 MiB of weights from DDR: bandwidth-bound on both boards
    g, t = tiny_program({"x": (16, 2048), "y": (16, 2048)}, [node("HzLinear", ["x"], ["y"], TENSOR, Linear.build(w, None, 1.0, 1.0, 1.0))])
    j5, rdk = estimate_program(g, t, HW), estimate_program(g, t, ultra)
    assert rdk.ops[0].bound_by == j5.ops[0].bound_by == DDR
    assert rdk.fps == pytest.approx(j5.fps)


def test_every_march_names_its_boards_and_an_unknown_board_lists_them():
    from hbtool.errors import InputError

    assert {m: hardware_for(m).board for m in ("bayes", "bayes-e", "bernoulli2")} == \
        {"bayes": "journey5", "bayes-e": "rdk-x5", "bernoulli2": "rdk-x3"}
    with pytest.raises(InputError) as err:
        hardware_for("bayes-e", "rdk-ultra")
    text = str(err.value.problem) + str(err.value.fix)
    assert "rdk-ultra" in text and "rdk-x5" in text


def test_cli_board_option(tiny_swin, tmp_path):
    _, artifact = tiny_swin
    j5 = CliRunner().invoke(main, ["perf", str(artifact), "--json", "-"])
    ultra = CliRunner().invoke(main, ["perf", str(artifact), "--board", "rdk-ultra", "--json", "-"])
    assert j5.exit_code == 0 and ultra.exit_code == 0, ultra.output
    a, b = json.loads(j5.stdout), json.loads(ultra.stdout)
    assert (a["board"], b["board"]) == ("journey5", "rdk-ultra")
    assert b["latency_ms"] > a["latency_ms"]
    assert {p["parameter"]: p["value"] for p in b["parameters"]}["clock_hz"] == 0.75e9
    bad = CliRunner().invoke(main, ["perf", str(artifact), "--board", "rdk-x9"])
    assert bad.exit_code == 2 and "rdk-x9" in bad.output and "rdk-ultra" in bad.output and "Traceback" not in bad.output
