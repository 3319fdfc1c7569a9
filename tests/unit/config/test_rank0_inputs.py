"""A rank-0 model input (an audio model's sample rate) goes end to end with the shape syntax ``scalar``.

Issue 30: ``--input-shape sr 1`` was refused (the model's input has rank 0) and the message's fix had
no syntax for a scalar; ``perf --fast`` then failed inside the batch splitter (exit 3).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from hbtool.cli import main
from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.config import config_from_dict, parse_shape
from hbtool.config.values import format_shape
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.simulator.executor import Executor
from tests.helpers import make_model, tensor, vinfo


def audio_model(tmp_path):
    """audio (1, 1, 400) * (sr / 16000) -> Conv1d(8, k16, s8) -> Relu; sr is an int64 scalar."""
    w = np.random.default_rng(0).standard_normal((8, 1, 16)).astype(np.float32)
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["srf", "k"], ["gain"]),
             helper.make_node("Mul", ["audio", "gain"], ["a2"]),
             helper.make_node("Conv", ["a2", "w"], ["c"], strides=[8]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [vinfo("audio", [1, 1, 400]), vinfo("sr", [], TensorProto.INT64)], [vinfo("y", [1, 8, 49])],
                       [tensor("w", w), tensor("k", np.array(16000.0, np.float32))])
    path = tmp_path / "audio.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_scalar_is_the_rank0_shape():
    assert parse_shape("scalar") == () and parse_shape("SCALAR") == () and parse_shape([]) == ()
    assert format_shape(()) == "scalar" and parse_shape(format_shape((1, 3))) == (1, 3)


def test_a_rank0_input_end_to_end(tmp_path):
    model = audio_model(tmp_path)
    rng = np.random.default_rng(1)
    (tmp_path / "cal_audio").mkdir()
    (tmp_path / "cal_sr").mkdir()
    for i in range(4):
        np.save(tmp_path / "cal_audio" / f"{i}.npy", rng.standard_normal((1, 1, 400)).astype(np.float32))
        np.save(tmp_path / "cal_sr" / f"{i}.npy", np.array(16000, np.int64))
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(model), "working_dir": str(tmp_path / "wd"), "output_model_file_prefix": "a"},
        "input_parameters": {"input_name": "audio;sr", "input_shape": "1x1x400;scalar",
                             "input_type_train": "featuremap;featuremap", "input_type_rt": "featuremap;featuremap",
                             "norm_type": "no_preprocess;no_preprocess"},
        "calibration_parameters": {"cal_data_dir": f"{tmp_path / 'cal_audio'};{tmp_path / 'cal_sr'}"},
    }, base_dir=tmp_path)
    assert cfg.inputs[1].shape == ()
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    compiled = compile_model(cfg)
    feeds = {"audio": rng.standard_normal((1, 1, 400)).astype(np.float32), "sr": np.array(8000, np.int64)}
    got = Executor(from_bytes(compiled.data)).run(feeds)["y"]
    sess = ort.InferenceSession(str(tmp_path / "wd" / "a_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    assert np.array_equal(got, sess.run(None, feeds)[0])


@pytest.mark.parametrize("shape, code", [("scalar", 0), ("1", 2)])
def test_perf_fast_takes_the_scalar_syntax(tmp_path, shape, code):
    res = CliRunner().invoke(main, ["perf", "--model", str(audio_model(tmp_path)), "--fast", "--input-shape", "sr", shape, "--json", "-"])
    assert res.exit_code == code, res.output
    if code:
        assert "--input-shape sr scalar" in res.output


def test_simulate_cli_reads_rank0_samples(tmp_path):
    model = audio_model(tmp_path)
    cal = tmp_path / "cal_audio"
    cal.mkdir()
    rng = np.random.default_rng(2)
    for i in range(3):
        np.save(cal / f"{i}.npy", rng.standard_normal((1, 1, 400)).astype(np.float32))
    (tmp_path / "sr").mkdir()
    for i in range(3):
        np.save(tmp_path / "sr" / f"{i}.npy", np.array(16000 * (i + 1), np.int64))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""model_parameters: {{onnx_model: {model}, working_dir: {tmp_path / 'wd'}, output_model_file_prefix: a}}
input_parameters:
  input_name: audio;sr
  input_shape: 1x1x400;scalar
  input_type_train: featuremap;featuremap
  input_type_rt: featuremap;featuremap
  norm_type: no_preprocess;no_preprocess
calibration_parameters: {{cal_data_dir: '{cal};{tmp_path / 'sr'}'}}
""")
    for cmd in (["calibrate", "-c", str(cfg)], ["compile", "-c", str(cfg)]):
        res = CliRunner().invoke(main, cmd)
        assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["simulate", str(tmp_path / "wd" / "a.bin"), "-i", f"audio={cal}", "-i", f"sr={tmp_path / 'sr'}",
                                    "--compare", str(tmp_path / "wd" / "a_quantized_model.onnx")])
    assert res.exit_code == 0, res.output
    assert "simulated 3 samples" in res.output
