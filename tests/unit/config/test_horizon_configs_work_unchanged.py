"""Users' Horizon configs work unchanged (issue 17): each cause on a small model, through the real calls."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner
from onnx import helper

from hbtool.cli import main
from hbtool.config import config_from_dict
from hbtool.errors import ConfigError, InputError
from tests.helpers import make_model, run_ort, tensor, vinfo


# ----------------------------------------------------------------------------------------------- helpers
def conv_model(path: Path, h: int = 16, w: int = 16, tail_softmax: bool = False) -> Path:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["images", "w1"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    out = "r"
    if tail_softmax:
        nodes.append(helper.make_node("Softmax", ["r"], ["p"], name="softmax", axis=1))
        out = "p"
    nodes.append(helper.make_node("Transpose", [out], ["y"], name="tr", perm=[0, 2, 3, 1]))
    onnx.save(make_model(nodes, [vinfo("images", [1, 3, h, w])], [vinfo("y", [1, h, w, 8])], [tensor("w1", w1)]), path)
    return path


def image_cfg(tmp: Path, model: Path, cal: Path | None = None, **groups) -> dict:
    d = {
        "model_parameters": {"onnx_model": str(model), "march": "bayes-e", "working_dir": str(tmp / "wd"),
                             "output_model_file_prefix": "m"},
        "input_parameters": {"input_type_train": "rgb", "input_type_rt": "rgb", "input_layout_train": "NCHW",
                             "norm_type": "data_scale", "scale_value": 0.003921568627451},
        "calibration_parameters": {"cal_data_dir": str(cal), "cal_data_type": "float32"} if cal else {"calibration_type": "skip", "num_samples": 2},
    }
    for g, v in groups.items():
        d.setdefault(g, {}).update(v)
    return d


def raw_samples(folder: Path, n: int = 3, shape=(1, 3, 16, 16), suffix=".rgbchw", seed: int = 0) -> np.ndarray:
    folder.mkdir(parents=True, exist_ok=True)
    data = np.random.default_rng(seed).uniform(0, 255, (n, *shape)).astype(np.float32)
    for k in range(n):
        data[k].tofile(folder / f"{k:03d}{suffix}")
    return data


# ----------------------------------------------------------------------------------------- calibration data
def test_raw_rgbchw_float32_read_as_hb_mapper_reads_them(tmp_path):
    from hbtool.quant.data import load_calibration_data

    data = raw_samples(tmp_path / "cal")
    cfg = config_from_dict(image_cfg(tmp_path, conv_model(tmp_path / "m.onnx"), tmp_path / "cal",
                                     input_parameters={"input_shape": "1x3x16x16"}), base_dir=tmp_path)
    cal = load_calibration_data(cfg)
    assert cal.num_samples == 3
    np.testing.assert_array_equal(cal.sample(1)["input"], data[1])


def test_rgbchw_is_transposed_for_an_nhwc_model_and_rgb_is_not(tmp_path):
    from hbtool.quant.data import load_calibration_data

    chw = raw_samples(tmp_path / "a", n=1)
    hwc = raw_samples(tmp_path / "b", n=1, shape=(1, 16, 16, 3), suffix=".rgb", seed=1)
    for folder, want in (("a", chw[0].transpose(0, 2, 3, 1)), ("b", hwc[0])):
        cfg = config_from_dict({"model_parameters": {"onnx_model": "m.onnx"},
                                "input_parameters": {"input_type_train": "rgb", "input_layout_train": "NHWC",
                                                     "input_shape": "1x16x16x3"},
                                "calibration_parameters": {"cal_data_dir": str(tmp_path / folder), "cal_data_type": "float32"}},
                               base_dir=tmp_path)
        np.testing.assert_array_equal(load_calibration_data(cfg).sample(0)["input"], want)


def test_raw_file_of_the_wrong_size_names_file_and_byte_counts(tmp_path):
    from hbtool.quant.data import load_calibration_data

    (tmp_path / "cal").mkdir()
    np.zeros(100, np.float32).tofile(tmp_path / "cal" / "000.rgb")
    cfg = config_from_dict(image_cfg(tmp_path, tmp_path / "m.onnx", tmp_path / "cal",
                                     input_parameters={"input_shape": "1x3x16x16"}), base_dir=tmp_path)
    with pytest.raises(InputError) as info:
        load_calibration_data(cfg)
    text = str(info.value)
    assert "000.rgb" in text and "400 bytes" in text and f"{3 * 16 * 16 * 4} bytes" in text


def test_nv12_frames_are_converted_to_the_training_colour(tmp_path):
    """A gray NV12 frame (U = V = 128) is R = G = B = Y; a wrong size is refused with both byte counts."""
    from hbtool.quant.data import load_calibration_data

    (tmp_path / "cal").mkdir()
    y = np.arange(16 * 16, dtype=np.uint8).reshape(16, 16)
    frame = np.concatenate([y.reshape(-1), np.full(16 * 16 // 2, 128, np.uint8)])
    frame.tofile(tmp_path / "cal" / "0.nv12")
    d = image_cfg(tmp_path, tmp_path / "m.onnx", tmp_path / "cal", input_parameters={"input_shape": "1x3x16x16"})
    d["calibration_parameters"]["cal_data_type"] = "uint8"
    cfg = config_from_dict(d, base_dir=tmp_path)
    got = load_calibration_data(cfg).sample(0)["input"]
    assert got.shape == (1, 3, 16, 16)
    for c in range(3):
        np.testing.assert_array_equal(got[0, c], y.astype(np.float32))
    frame[:-1].tofile(tmp_path / "cal" / "0.nv12")
    with pytest.raises(InputError, match=r"0\.nv12: 383 bytes, but an nv12 sample .* takes 384 bytes"):
        load_calibration_data(cfg)


# ------------------------------------------------------------------------------------------ optimization
def test_optimization_values_horizon_documents_parse():
    cfg = config_from_dict({"model_parameters": {"onnx_model": "m.onnx"}, "calibration_parameters": {
        "optimization": "set_Softmax_input_int8,set_Softmax_output_int8;set_all_nodes_int16, set_Conv_output_int16"}})
    assert cfg.calibration.optimization == ["set_Softmax_input_int8", "set_Softmax_output_int8", "set_all_nodes_int16",
                                            "set_Conv_output_int16"]


@pytest.mark.parametrize("value,text", [("set_fast", "not an optimization value"), ("asymmetric", "symmetrically"),
                                        ("set_Softmax_input_int8,set_Softmax_input_int16", "contradict")])
def test_optimization_refusals_say_what_to_write(value, text):
    with pytest.raises(ConfigError) as info:
        config_from_dict({"model_parameters": {"onnx_model": "m.onnx"}, "calibration_parameters": {"optimization": value}})
    assert text in str(info.value) and "did you mean" not in str(info.value)


def _plan_bits(tmp_path, optimization: str | None, model: Path, march: str = "bayes-e") -> dict[str, int]:
    from hbtool.quant.calibrate import run_calibration

    extra = {"calibration_parameters": {"optimization": optimization}} if optimization else {}
    extra["model_parameters"] = {"march": march}
    cfg = config_from_dict(image_cfg(tmp_path, model, **extra), base_dir=tmp_path)
    res = run_calibration(cfg)
    return {t: q.bits for t, q in res.plan.tensors.items()}


def test_set_all_nodes_int16_puts_every_bpu_tensor_in_int16(tmp_path):
    model = conv_model(tmp_path / "m.onnx")
    assert set(_plan_bits(tmp_path, None, model).values()) != {16}
    assert set(_plan_bits(tmp_path, "set_all_nodes_int16", model).values()) == {16}


def test_set_softmax_int8_keeps_softmax_in_int8_where_auto_int16_chose_int16(tmp_path):
    model = conv_model(tmp_path / "m.onnx", tail_softmax=True)
    # J5: auto_int16 is on by default there (on X5 it is off unless asked for)
    auto = _plan_bits(tmp_path, None, model, "bayes")
    pinned = _plan_bits(tmp_path, "set_Softmax_input_int8,set_Softmax_output_int8", model, "bayes")
    assert auto["r"] == 16 and auto["p"] == 16  # auto_int16: Softmax in and out in int16
    assert pinned["r"] == 8 and pinned["p"] == 8


def test_mean_zero_with_data_scale_loads_and_changes_nothing():
    base = {"model_parameters": {"onnx_model": "m.onnx"},
            "input_parameters": {"input_type_train": "rgb", "input_layout_train": "NCHW", "norm_type": "data_scale",
                                 "scale_value": 0.003921568627451}}
    with_mean = json.loads(json.dumps(base))
    with_mean["input_parameters"]["mean_value"] = 0
    assert config_from_dict(with_mean).inputs == config_from_dict(base).inputs
    with_mean["input_parameters"]["mean_value"] = 5
    with pytest.raises(ConfigError, match="does not use mean_value"):
        config_from_dict(with_mean)


# ------------------------------------------------------------------------------------------- node_info
class _Net(torch.nn.Module):
    """A Linear on tokens (MatMul + Add, folded at import) and a LayerNorm exported decomposed (opset 11)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc1 = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        t = self.conv(x).flatten(2).transpose(1, 2)
        return self.norm(self.fc1(t) / 3.0)


def _export(path: Path) -> Path:
    torch.onnx.export(_Net().eval(), (torch.rand(1, 3, 8, 8),), str(path), opset_version=11, input_names=["images"],
                      dynamo=False)
    return path


def test_node_info_names_of_fused_and_generated_nodes_reach_the_fused_node(tmp_path, caplog):
    from hbtool.quant.calibrate import run_calibration

    model = _export(tmp_path / "net.onnx")
    names = {n.name for n in onnx.load(str(model)).graph.node}
    assert "/fc1/MatMul" in names and "/norm/Pow" in names and "/Div" in names
    info = {"/fc1/MatMul": {"OutputType": "int16"}, "/norm/Pow": {"InputType": "int16"},
            "/Div_mul": {"OutputType": "int16"}}  # Horizon's name for the Div by 3 it turns into a Mul
    d = {"model_parameters": {"onnx_model": str(model), "working_dir": str(tmp_path / "wd"), "node_info": info},
         "input_parameters": {"input_type_train": "featuremap", "norm_type": "no_preprocess"},
         "calibration_parameters": {"calibration_type": "skip", "num_samples": 2, "auto_int16": False}}
    with caplog.at_level("WARNING", logger="hbtool.checker.node_names"):
        res = run_calibration(config_from_dict(d, base_dir=tmp_path))
    said = caplog.text
    assert "'/fc1/MatMul' is fused into" in said and ("(Gemm)" in said or "(Linear)" in said)
    assert "'/norm/Pow' is fused into" in said and "LayerNormalization" in said
    assert "'/Div_mul' is Horizon's generated name for '/Div'" in said
    linear = next(n for n in res.graph.nodes if n.op_type in ("Linear", "Gemm"))
    ln = next(n for n in res.graph.nodes if n.op_type == "LayerNormalization")
    assert res.plan.bits(linear.outputs[0]) == 16          # OutputType int16 of /fc1/MatMul
    assert res.plan.bits(ln.inputs[0]) == 16               # InputType int16 of /norm/Pow
    d["model_parameters"]["node_info"] = {}
    base = run_calibration(config_from_dict(d, base_dir=tmp_path))
    assert base.plan.bits(linear.outputs[0]) == 8 and base.plan.bits(ln.inputs[0]) == 8


def test_node_info_typo_is_still_refused(tmp_path):
    from hbtool.checker.run import run_checker

    model = conv_model(tmp_path / "m.onnx")
    with pytest.raises(InputError, match="'conv_typo', which is not in the model"):
        run_checker(model, "bayes", None, tmp_path / "chk", {"conv_typo": {"ON": "CPU"}})


# ------------------------------------------------------------------------------- makertbin and artifacts
def _write_yaml(tmp_path: Path, d: dict) -> Path:
    import yaml

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_makertbin_runs_checker_calibrate_compile_and_writes_the_bin(tmp_path):
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor

    model = conv_model(tmp_path / "m.onnx")
    raw_samples(tmp_path / "cal")
    cfg = _write_yaml(tmp_path, image_cfg(tmp_path, model, tmp_path / "cal"))
    r = CliRunner().invoke(main, ["makertbin", "-c", str(cfg), "--model-type", "onnx"])
    assert r.exit_code == 0, r.output
    wd = tmp_path / "wd"
    assert (wd / ".hb_check" / "checker.json").exists()
    assert (wd / "m_quantized_model.onnx").exists() and (wd / "m.bin").exists() and not (wd / "m.hbm").exists()
    (wd / "old.hbm").write_bytes((wd / "m.bin").read_bytes())      # the earlier name stays readable
    x = raw_samples(tmp_path / "x", n=1, seed=5)[0]
    ex = Executor(read_artifact(wd / "old.hbm"))
    got = ex.run({"images": x})["y"]
    np.testing.assert_array_equal(got, run_ort(str(wd / "m_quantized_model.onnx"), {"images": x})[0])
    r = CliRunner().invoke(main, ["makertbin", "-c", str(cfg), "--model-type", "caffe"])
    assert r.exit_code == 2 and "Caffe models are not supported" in r.output


def test_remove_node_type_cuts_the_edges_and_simulate_agrees(tmp_path):
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.simulator.executor import Executor

    model = conv_model(tmp_path / "m.onnx")
    full_cfg = config_from_dict(image_cfg(tmp_path, model), base_dir=tmp_path)
    write_outputs(full_cfg, run_calibration(full_cfg), "")
    full = compile_model(full_cfg)
    cut_cfg = config_from_dict(image_cfg(tmp_path, model, model_parameters={
        "remove_node_type": "Quantize;Dequantize;Transpose"}), base_dir=tmp_path)
    cut = compile_model(cut_cfg)
    kinds = [r["op_type"] for r in cut.header["removed_nodes"]]
    assert kinds == ["Quantize", "Dequantize", "Transpose"]
    (inp,), (out,) = cut.header["inputs"], cut.header["outputs"]
    assert inp["dtype"] in ("int8", "int16") and inp["quantize"] is None and out["dequantize"] is None
    assert [n.op_type for n in cut.program.nodes].count("HzQuantize") == 0
    q, dq = cut.header["removed_nodes"][0], cut.header["removed_nodes"][1]
    x = raw_samples(tmp_path / "x", n=1, seed=3)[0]
    ref = Executor(from_bytes(full.data)).run({"images": x})["y"]
    # the application's side of the cut: its preprocessing quantizes, its postprocessing dequantizes and permutes
    pre = Executor(from_bytes(full.data))
    pre_q = pre.run({"images": x}, keep={inp["name"]})[inp["name"]]
    codes = Executor(from_bytes(cut.data)).run({inp["name"]: pre_q.astype(inp["dtype"])})[out["name"]]
    got = (np.asarray(codes).astype(np.float32) * np.float32(dq["scale"][0])).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(got, ref)
    assert q["bits"] in (8, 16) and len(cut.program.nodes) < len(full.program.nodes)


def test_remove_node_name_refuses_a_node_inside_the_model(tmp_path):
    from hbtool.compiler.compile import compile_model
    from hbtool.quant.calibrate import run_calibration, write_outputs

    model = conv_model(tmp_path / "m.onnx")
    cfg = config_from_dict(image_cfg(tmp_path, model, model_parameters={"remove_node_name": "conv"}), base_dir=tmp_path)
    write_outputs(cfg, run_calibration(cfg), "")
    with pytest.raises(InputError, match="'conv' .* not at a model input or output"):
        compile_model(cfg)


def test_dump_calibration_data_writes_horizons_layout(tmp_path):
    from hbtool.quant.calibrate import run_calibration, write_outputs

    data = raw_samples(tmp_path / "cal")
    cfg = config_from_dict(image_cfg(tmp_path, conv_model(tmp_path / "m.onnx"), tmp_path / "cal",
                                     model_parameters={"debug_mode": "dump_calibration_data"}), base_dir=tmp_path)
    write_outputs(cfg, run_calibration(cfg), "")
    files = sorted((tmp_path / "wd" / "calibration_data" / "images").glob("*.npy"))
    assert [f.name for f in files] == ["0.npy", "1.npy", "2.npy"]
    for k, f in enumerate(files):
        np.testing.assert_array_equal(np.load(f), data[k])


def test_layer_out_dump_adds_dequantized_layer_outputs_and_keeps_the_model_output(tmp_path):
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.simulator.executor import Executor

    model = conv_model(tmp_path / "m.onnx")
    cfg = config_from_dict(image_cfg(tmp_path, model), base_dir=tmp_path)
    write_outputs(cfg, run_calibration(cfg), "")
    plain = compile_model(cfg)
    dump_cfg = config_from_dict(image_cfg(tmp_path, model, model_parameters={"layer_out_dump": True},
                                          compiler_parameters={"debug": True, "advice": 1}), base_dir=tmp_path)
    dumped = compile_model(dump_cfg)
    names = [o["name"] for o in dumped.header["outputs"]]
    assert names[0] == "y" and "r_layer_out" in names
    x = raw_samples(tmp_path / "x", n=1, seed=4)[0]
    a, b = Executor(from_bytes(plain.data)).run({"images": x}), Executor(from_bytes(dumped.data)).run({"images": x})
    np.testing.assert_array_equal(a["y"], b["y"])
    np.testing.assert_array_equal(b["r_layer_out"].transpose(0, 2, 3, 1), b["y"])  # relu's output, dequantized, before the Transpose
    from hbtool.compiler.compile import write_compile_outputs

    files = write_compile_outputs(dump_cfg, dumped, tmp_path / "wd" / "m.bin")
    details = json.loads((tmp_path / "wd" / "m_layer_details.json").read_text())
    assert tmp_path / "wd" / "m_layer_details.json" in files and any(op["name"] == "conv" for op in details["ops"])
