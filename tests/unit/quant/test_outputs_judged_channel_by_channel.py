"""Every model output judged channel by channel; an output Concat of pieces of different ranges keeps their scales.

Issue 30: a YOLOv8 export concatenates 4 box channels in pixels with the sigmoid class scores in
one output; with one int8 scale (X5 and X3 by default) every score became 0, F1 against float 0.00,
and calibrate said nothing because the output's cosine, carried by the boxes, stayed 0.99.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.config import config_from_dict
from hbtool.quant.calibrate import option_lines, quant_info, run_calibration, write_outputs
from hbtool.io.metrics import channel_errors
from hbtool.quant.output_channels import CHANNEL_WARN_SNR_DB, channel_list
from hbtool.simulator.executor import Executor
from tests.helpers import make_model, tensor, vinfo


def boxes_and_scores(tmp_path, offset: float = 3.0):
    """x (1, 8, 50) -> boxes = 100 * relu(conv) (4 ch, pixels), scores = sigmoid(conv - offset) (6 ch) -> Concat -> y (1, 10, 50)."""
    rng = np.random.default_rng(0)
    wb = rng.standard_normal((4, 8, 1)).astype(np.float32)
    ws = rng.standard_normal((6, 8, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "wb"], ["b0"], name="box_conv"),
             helper.make_node("Relu", ["b0"], ["b1"], name="box_relu"),
             helper.make_node("Mul", ["b1", "px"], ["boxes"], name="to_pixels"),
             helper.make_node("Conv", ["x", "ws"], ["s0"], name="cls_conv"),
             helper.make_node("Sub", ["s0", "five"], ["s1"], name="cls_bias"),
             helper.make_node("Sigmoid", ["s1"], ["scores"], name="cls_sigmoid"),
             helper.make_node("Concat", ["boxes", "scores"], ["y"], name="head_concat", axis=1)]
    inits = [tensor("wb", wb), tensor("ws", ws), tensor("px", np.array(100.0, np.float32)), tensor("five", np.array(offset, np.float32))]
    model = make_model(nodes, [vinfo("x", [1, 8, 50])], [vinfo("y", [1, 10, 50])], inits)
    return _saved_with_calibration(model, tmp_path / "m.onnx", rng)


def config(tmp_path, model, cal, march, **calibration):
    return config_from_dict({
        "model_parameters": {"onnx_model": str(model), "working_dir": str(tmp_path / "wd"), "march": march, "output_model_file_prefix": "m"},
        "input_parameters": {"input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"cal_data_dir": str(cal), **calibration},
    }, base_dir=tmp_path)


@pytest.mark.parametrize("march", ["bayes-e", "bernoulli2"])
def test_output_concat_pieces_keep_their_scales_and_the_scores_survive(tmp_path, march):
    model, cal = boxes_and_scores(tmp_path)
    cfg = config(tmp_path, model, cal, march)
    result = run_calibration(cfg)
    y = result.plan.tensors["y"]
    assert y.axis_scales is not None and y.scale_axis == -2 and y.bits == 8
    assert np.all(y.axis_scales[:4] == result.plan.tensors["boxes"].scale)
    assert np.all(y.axis_scales[4:] == result.plan.tensors["scores"].scale)
    assert result.plan.tensors["scores"].scale < y.axis_scales[0] / 100    # their own, ~1/127 (one shared: ~1000/127)
    judged = result.options["output_channels"]["y"]
    assert judged["segments"] == [{"channels": [0, 3], "scale": y.axis_scales[0]}, {"channels": [4, 9], "scale": y.axis_scales[4]}]
    assert judged["worst_snr_db"] > CHANNEL_WARN_SNR_DB and "warning" not in judged
    assert any("2 concatenated pieces keep their own scales" in line for line in option_lines(result))
    # calibrated model -> compile (which reads the plan back) -> simulate: bit for bit with the quantized model
    write_outputs(cfg, result, "")
    compiled = compile_model(cfg)
    deq = compiled.header["outputs"][0]["dequantize"]
    assert deq["axis"] == -2 and deq["scales"] == [float(s) for s in y.axis_scales]
    x = np.random.default_rng(5).standard_normal((1, 8, 50)).astype(np.float32)
    got = Executor(from_bytes(compiled.data)).run({"x": x})["y"]
    sess = ort.InferenceSession(str(tmp_path / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    assert np.array_equal(got, sess.run(None, {"x": x})[0])
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert channel_errors(ref, got, 1).snr_db.min() > CHANNEL_WARN_SNR_DB
    info = json.loads(json.dumps(quant_info(result)))
    assert info["tensors"]["y"]["axis_scales"][4] == y.axis_scales[4]
    assert info["options"]["output_channels"]["y"]["worst_snr_db"] == judged["worst_snr_db"]


def test_one_shared_scale_zeroes_the_score_channels(tmp_path):
    """The cause, on the same model: a plan with one scale for boxes and scores (segment_outputs=False, the
    plan before issue 30) zeroes every score channel while the box channels stay exact."""
    from hbtool.quant.plan import build_plan

    model, cal = boxes_and_scores(tmp_path)
    cfg = config(tmp_path, model, cal, "bernoulli2")
    result = run_calibration(cfg)
    assert "warning" not in result.options["output_channels"]["y"]
    # the same statistics through a plan without segments: one scale of ~1000/127 for boxes and scores
    from hbtool.quant.calibrated_model import build_calibrated_graph
    from hbtool.quant.collect import collect_stats, float_session

    graph = result.graph
    stats = collect_stats(graph, list(result.plan.tensors), iter([{"x": np.load(cal / f"{i}.npy")} for i in range(8)]), None)
    plan = build_plan(graph, stats, "max", auto_int16=False, segment_outputs=False)
    assert plan.tensors["y"].axis_scales is None and plan.tensors["y"].scale == plan.tensors["scores"].scale
    fake, _ = build_calibrated_graph(graph, plan, result.weight_scales)
    x = {"x": np.load(cal / "0.npy")}
    ref = float_session(graph).run(["y"], x)[0]
    got = float_session(fake).run(["y"], x)[0]
    e = channel_errors(ref, got, 1)
    assert np.all(e.snr_db[4:] < 1.0) and np.all(e.snr_db[:4] > 30)


def test_low_channels_warn_with_the_piece_that_fixes_them(tmp_path):
    """Scores that are mostly ~1e-4 with a rare large one: their int8 piece keeps < 20 dB; the warning names
    the Sigmoid and int16 (X5 has it), not the whole output's int16 (which would share the boxes' scale)."""
    model, cal = boxes_and_scores(tmp_path, offset=9.0)
    result = run_calibration(config(tmp_path, model, cal, "bayes-e", calibration_type="max"))
    judged = result.options["output_channels"]["y"]
    assert judged.get("warning") and set(judged["low_channels"]) <= set(range(4, 10)) and judged["low_channels"]
    line = next(x for x in option_lines(result) if x.startswith("warning: output 'y' channel(s)"))
    assert "{'cls_sigmoid': {OutputType: int16}}" in line and "set_model_output_int16" not in line
    from hbtool.quant.report import render_report

    with_table = render_report(result).export_text()
    assert f"#{judged['worst_channel']} " in with_table and "(low)" in with_table   # the outputs table's worst channel
    # the fix it names works and silences it
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(model), "working_dir": str(tmp_path / "wd2"), "march": "bayes-e",
                             "node_info": {"cls_sigmoid": {"OutputType": "int16"}}},
        "input_parameters": {"input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max"},
    }, base_dir=tmp_path)
    fixed = run_calibration(cfg)
    assert fixed.plan.tensors["y"].bits == 16 and fixed.plan.tensors["boxes"].bits == 8
    assert "warning" not in fixed.options["output_channels"]["y"]


def test_channel_list_spells_runs():
    assert channel_list([4, 5, 6, 9]) == "4-6, 9"
    assert channel_list(list(range(20))) == "0-11 and 8 more"


@pytest.mark.parametrize("train_scales", [False, True])
def test_qat_runs_a_segmented_output_at_its_pieces_scales(tmp_path, train_scales):
    """QAT's program of the segmented output equals the quantized model (each piece at its own scale), and
    trained piece scales carry into the output's per-channel scales."""
    import torch

    from hbtool.qat.module import QatModel

    model, cal = boxes_and_scores(tmp_path)
    result = run_calibration(config(tmp_path, model, cal, "bernoulli2"))
    qat = QatModel(result.graph, result.plan, result.weight_scales, train_scales=train_scales)
    x = np.load(cal / "1.npy")
    with torch.no_grad():
        got = qat(torch.from_numpy(x))
    got = (got[0] if isinstance(got, (tuple, list)) else got).numpy()
    ref = ort.InferenceSession(to_quantized_bytes(result), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # QAT's torch emulation is not bit-exact (float32 requantization), but each channel is within 2 of its own LSBs;
    # at one scale for both pieces the scores would be 0 and this fails
    lsb = result.plan.tensors["y"].axis_scales.reshape(1, -1, 1)
    assert np.all(np.abs(got - ref) <= 2 * lsb + 1e-6) and np.abs(got[:, 4:]).max() > 0
    if train_scales:
        key = qat._scale_index[result.plan.tensors["scores"].group]
        with torch.no_grad():
            getattr(qat, key).mul_(2)
        qat.sync()
        assert qat.plan.tensors["y"].axis_scales[4] == pytest.approx(2 * result.plan.tensors["scores"].scale, rel=1e-6)
        assert not qat.report.fallbacks


def to_quantized_bytes(result) -> bytes:
    from hbtool.ir.onnx_export import to_onnx

    return to_onnx(result.quantized, stage="quantized").SerializeToString()


def wide_conv(tmp_path):
    """x (1, 8, 50) -> Conv with 2 channels ~100x the other 4 -> y (1, 6, 50): no Concat separates them."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 8, 1)).astype(np.float32)
    w[:2] *= 100
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="head")], [vinfo("x", [1, 8, 50])], [vinfo("y", [1, 6, 50])],
                       [tensor("w", w)])
    return _saved_with_calibration(model, tmp_path / "w.onnx", rng)


@pytest.mark.parametrize("march, bits", [("bayes-e", 16), ("bayes", 16), ("bernoulli2", 8)])
def test_an_output_of_wide_channel_ranges_is_int16_where_the_march_has_it(tmp_path, march, bits):
    model, cal = wide_conv(tmp_path)
    result = run_calibration(config(tmp_path, model, cal, march, calibration_type="max"))
    assert result.plan.tensors["y"].bits == bits
    judged = result.options["output_channels"]["y"]
    assert bool(judged.get("warning")) == (bits == 8)
    if bits == 8:
        assert "no int16" in judged["fix"] and set(judged["low_channels"]) <= {2, 3, 4, 5}


def test_an_output_pinned_to_int8_stays_int8(tmp_path):
    model, cal = wide_conv(tmp_path)
    result = run_calibration(config(tmp_path, model, cal, "bayes-e", calibration_type="max", optimization="set_model_output_int8"))
    assert result.plan.tensors["y"].bits == 8


def _saved_with_calibration(model, path, rng):
    """``model`` saved at ``path`` and a folder of 8 random 1x8x50 calibration samples beside it."""
    onnx.save(model, path)
    cal = path.parent / "cal"
    cal.mkdir(exist_ok=True)
    for i in range(8):
        np.save(cal / f"{i}.npy", rng.standard_normal((1, 8, 50)).astype(np.float32))
    return path, cal
