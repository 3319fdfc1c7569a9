"""compile: passes per level, layout, memory plan, the artifact format, and hbtool compile/info."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from hbtool.cli import main
from hbtool.compiler.artifact import FORMAT_VERSION, MAGIC, ArtifactError, from_bytes, to_bytes
from hbtool.compiler.compile import compile_model
from hbtool.compiler.layout import padded_shape, plan_layout, storage_axes
from hbtool.compiler.memory import plan_memory
from hbtool.config import load_config
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph
from hbtool.kernels import Conv, Linear
from hbtool.march.description import March, load_march

ROOT = Path(__file__).resolve().parents[3]


def tiny_config(tmp: Path, name: str, **compiler) -> Path:
    data = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    data["model_parameters"]["onnx_model"] = str(ROOT / "samples" / "tiny" / f"{name}.onnx")
    data["model_parameters"]["working_dir"] = str(tmp / "wd")
    data["calibration_parameters"]["cal_data_dir"] = str(ROOT / "samples" / "data" / "digits_cal")
    data["calibration_parameters"]["num_samples"] = 16
    data.setdefault("compiler_parameters", {}).update(compiler)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def swin_compiled(tmp_path_factory):
    """tiny_swin calibrated and compiled through the CLI (compile calibrates first)."""
    tmp = tmp_path_factory.mktemp("swin")
    cfg = tiny_config(tmp, "tiny_swin")
    r = CliRunner().invoke(main, ["compile", "-c", str(cfg)])
    assert r.exit_code == 0, r.output
    return cfg, tmp / "wd", r.output


def test_compile_calibrates_first_and_writes_the_artifact(swin_compiled):
    cfg, wd, out = swin_compiled
    assert "calibrating first" in out
    assert (wd / "tiny_swin_calibrated_model.onnx").exists()
    assert (wd / "tiny_swin.bin").exists() and (wd / "hb_compile.log").exists()
    assert "DDR" in (wd / "hb_compile.log").read_text()


def test_compile_is_deterministic(swin_compiled):
    cfg, wd, _ = swin_compiled
    c = load_config(cfg)
    a, b = compile_model(c), compile_model(c)
    assert a.data == b.data
    assert (wd / "tiny_swin.bin").read_bytes() == a.data


def test_levels_change_the_program_not_the_numbers(swin_compiled):
    cfg, wd, _ = swin_compiled
    c = load_config(cfg)
    o0, o1, o3 = (compile_model(c, optimize_level=lvl) for lvl in ("O0", "O1", "O3"))
    ops0, ops3 = o0.program.op_types(), o3.program.op_types()
    # O0: window ops expanded to reshape/transpose/slice/concat, nothing absorbed, data movement in DDR
    assert "WindowPartition" not in ops0 and "Roll" not in ops0 and "HzRearrange" not in ops0
    assert ops0.get("Transpose", 0) > ops3.get("Transpose", 0)
    assert o0.memory.ddr_bytes["data_movement"] > 0 and o3.memory.ddr_bytes["data_movement"] == 0
    assert "WindowPartition" in o1.program.op_types()
    assert o3.passes["absorb_transpose_into_matmul"] > 0 and o3.passes["bmm_tiling"] > 0
    assert len(o3.program.nodes) < len(o0.program.nodes)
    # every level computes the same integers as the quantized model
    import onnxruntime as ort

    from hbtool.simulator.executor import Executor

    sess = ort.InferenceSession(str(wd / "tiny_swin_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    x = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")["images"][:4].astype(np.float32)
    ref = [sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))]
    for compiled in (o0, o1, o3):
        ex = Executor(from_bytes(compiled.data))
        for i in range(len(x)):
            got = ex.run({"input": x[i:i + 1]})["logits"]
            np.testing.assert_array_equal(got, ref[i])


def test_disabled_pass_is_recorded(swin_compiled):
    cfg, _, _ = swin_compiled
    r = compile_model(load_config(cfg), disabled_passes={"absorb_transpose_into_matmul"})
    assert "absorb_transpose_into_matmul" not in r.passes
    assert r.header["options"]["disabled_passes"] == ["absorb_transpose_into_matmul"]


def test_info_cli(swin_compiled):
    _, wd, _ = swin_compiled
    r = CliRunner().invoke(main, ["info", str(wd / "tiny_swin.bin"), "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["inputs"][0]["name"] == "input" and info["inputs"][0]["shape"] == [1, 3, 32, 32]
    assert info["inputs"][0]["norm_type"] == "data_mean_and_scale"
    assert info["outputs"][0]["name"] == "logits" and info["outputs"][0]["dequantize"]["scale"] > 0
    assert info["tool"]["name"] == "hbtool" and info["options"]["optimize_level"] == "O3"
    assert info["program"]["by_unit"]["tensor"] > 0 and info["program"]["macs"] > 0
    r = CliRunner().invoke(main, ["info", str(wd / "tiny_swin.bin")])
    assert r.exit_code == 0 and "logits" in r.output


def test_compile_rejects_an_unknown_pass(swin_compiled):
    cfg, _, _ = swin_compiled
    r = CliRunner().invoke(main, ["compile", "-c", str(cfg), "--disable-pass", "no_such_pass"])
    assert r.exit_code == 2 and "no such pass" in r.output and "Traceback" not in r.output


# ------------------------------------------------------------------ artifact format
def _sample_artifact() -> bytes:
    k = Linear.build(np.array([[1, -2], [3, 4]]), np.array([5, -6]), 0.1, np.array([0.01, 0.02]), 0.05)
    return to_bytes({"tool": {"version": "x"}, "kernel": k, "blob": np.arange(10, dtype=np.int64), "t": (1, 2)})


def test_artifact_round_trip_keeps_kernels_and_arrays():
    art = from_bytes(_sample_artifact())
    k = art.header["kernel"]
    assert isinstance(k, Linear)
    x = np.array([[3, -7]])
    ref = Linear.build(np.array([[1, -2], [3, 4]]), np.array([5, -6]), 0.1, np.array([0.01, 0.02]), 0.05)
    np.testing.assert_array_equal(k.apply_numpy(x), ref.apply_numpy(x))
    np.testing.assert_array_equal(art.header["blob"], np.arange(10))
    assert art.header["blob"].dtype == np.int64 and art.header["t"] == (1, 2)


def test_integer_arrays_are_stored_narrow():
    big = to_bytes({"w": np.zeros(10000, np.int64)})
    assert len(big) < 10000 + 2000  # int8 storage, not 80 kB


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: b[:20], "truncated"),
    (lambda b: b + b"\0", "trailing"),
    (lambda b: b[:100] + bytes([b[100] ^ 0x10]) + b[101:], "checksum"),
    (lambda b: b"NOTHBM!!" + b[8:], "not an hbtool artifact"),
])
def test_damaged_artifacts_are_one_line_errors(damage, message):
    with pytest.raises(ArtifactError) as err:
        from_bytes(damage(_sample_artifact()))
    assert message in str(err.value) and "fix:" in str(err.value) and "\n" not in str(err.value)


def test_artifact_from_a_newer_version():
    import hashlib

    data = bytearray(_sample_artifact()[:-32])
    struct.pack_into("<I", data, 8, FORMAT_VERSION + 1)
    data = bytes(data) + hashlib.sha256(bytes(data)).digest()
    with pytest.raises(ArtifactError, match="newer hbtool"):
        from_bytes(data)
    assert data[:8] == MAGIC


def test_cli_reports_a_damaged_artifact(tmp_path):
    path = tmp_path / "m.hbm"
    path.write_bytes(_sample_artifact()[:-5])
    for cmd in (["info", str(path)], ["simulate", str(path), "--input", "x=y.npy"]):
        r = CliRunner().invoke(main, cmd)
        assert r.exit_code == 2 and "truncated" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["info", str(tmp_path / "missing.hbm")])
    assert r.exit_code == 2 and "does not exist" in r.output


# ------------------------------------------------------------------ layout and memory
def _march(**memory) -> March:
    m = load_march("bayes")
    raw = json.loads(json.dumps(m.raw))
    for k, v in memory.items():
        raw["memory"][k]["value"] = v
    return March(m.name, raw)


def _conv_program(cin: int, hw: int, cout: int = 16) -> Graph:
    g = Graph("p")
    g.inputs, g.outputs = ["x"], ["y"]
    g.set_value("x", (1, cin, hw, hw), np.float32)
    g.set_value("xq", (1, cin, hw, hw), np.float64)
    g.set_value("y", (1, cout, hw, hw), np.float64)
    q = g.add_node("HzQuantize", ["x"], ["xq"], name="q", domain=HBTOOL_DOMAIN)
    q.meta.update(unit="cpu", on="CPU")
    w = np.ones((cout, cin, 3, 3), np.int64)
    conv = g.add_node("HzConv", ["xq"], ["y"], name="conv", domain=HBTOOL_DOMAIN)
    conv.meta.update(unit="tensor", on="BPU", kernel=Conv.build(w, None, 0.1, np.full(cout, 0.1), 0.1, pads=[1, 1, 1, 1]))
    return g


def test_storage_axes_and_padding():
    assert storage_axes((1, 3, 10, 10)) == (1, 3)
    assert storage_axes((1, 49, 96)) == (2, 1)
    assert padded_shape((1, 3, 10, 10), 8, 16) == (1, 8, 10, 16)
    assert padded_shape((1, 49, 96), 8, 16) == (1, 64, 96)


def test_a_three_channel_input_gets_a_reorder_to_the_conv_layout():
    g = _conv_program(3, 10)
    lay = plan_layout(g, load_march("bayes"), {"xq": 8, "y": 8})
    reorders = [n for n in g.nodes if n.op_type == "HzReorder"]
    assert len(reorders) == 1 and g.node("conv").inputs[0] == reorders[0].outputs[0]
    assert lay.tensors[reorders[0].outputs[0]].padded == (1, 8, 10, 16)
    assert lay.tensors["xq"].padded == (1, 3, 10, 10)
    # an aligned input needs none
    g2 = _conv_program(16, 16)
    assert plan_layout(g2, load_march("bayes"), {"xq": 8, "y": 8}).reorders == 0


def test_memory_plan_spills_what_does_not_fit():
    g = _conv_program(8, 64, cout=64)
    g.outputs = ["z"]
    g.set_value("z", (1, 64, 64, 64), np.float64)
    n2 = g.add_node("HzConv", ["y"], ["z"], name="conv2", domain=HBTOOL_DOMAIN)
    n2.meta.update(unit="tensor", on="BPU")
    lay = plan_layout(g, load_march("bayes"), {"xq": 8, "y": 8, "z": 8})
    y_bytes = lay.tensors["y"].padded_bytes
    roomy = plan_memory(g, lay, _march(sram_bytes_per_core=4 * 2**20), 1000)
    assert roomy.location("y") == "sram" and roomy.ddr_bytes["spill_write"] == 0
    tight = plan_memory(g, lay, _march(sram_bytes_per_core=y_bytes // 2), 1000)
    assert tight.location("y") == "ddr" and tight.ddr_bytes["spill_write"] == y_bytes and tight.ddr_bytes["spill_read"] == y_bytes
    assert tight.ddr_bytes_per_frame > roomy.ddr_bytes_per_frame
    assert roomy.ddr_bytes["weights"] == 1000


@pytest.mark.parametrize("options", [{"ptf": True}, {"softmax_log2": True}, {"bias_correction": True}])
def test_calibration_options_compile_to_the_quantized_models_integers(tmp_path, options):
    """Every plan a calibration option makes travels through the calibrated model into the artifact."""
    import onnxruntime as ort

    from hbtool.simulator.executor import Executor

    cfg_path = tiny_config(tmp_path, "tiny_vit")
    data = yaml.safe_load(cfg_path.read_text())
    data["calibration_parameters"].update(options, calibration_type="max", num_samples=8)
    cfg_path.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["calibrate", "-c", str(cfg_path), "--max-rows", "1"])
    assert r.exit_code == 0, r.output
    compiled = compile_model(load_config(cfg_path))
    wd = tmp_path / "wd"
    sess = ort.InferenceSession(str(wd / "tiny_vit_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    ex = Executor(from_bytes(compiled.data))
    x = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")["images"][:3].astype(np.float32)
    for i in range(len(x)):
        np.testing.assert_array_equal(ex.run({"input": x[i:i + 1]})["logits"], sess.run(None, {"input": x[i:i + 1]})[0])
