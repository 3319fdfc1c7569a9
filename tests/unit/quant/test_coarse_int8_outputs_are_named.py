"""An int8 model output that rounds its values away is named, with the setting that fixes it.

Found with Keras classifiers exported by tf2onnx (random weights, so the 1000 probabilities are
all near 0.001) calibrated for RDK X5, which keeps int8 by default: the BPU Softmax writes
probabilities with a fixed step of 1/128, every one rounded to 0 and the output cosine was 0,
with nothing but that number to say so.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hbtool.config import config_from_dict
from hbtool.quant.calibrate import option_lines, run_calibration
from tests.helpers import make_model, tensor, vinfo


def classifier(tmp_path, logit_scale: float, classes: int = 1000):
    """x (1, 16) -> MatMul -> Softmax over ``classes``; ``logit_scale`` sets how flat the probabilities are."""
    w = np.random.default_rng(0).standard_normal((16, classes)).astype(np.float32) * logit_scale
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"], name="fc"),
             helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1)]
    model = make_model(nodes, [vinfo("x", [1, 16])], [vinfo("prob", [1, classes])], [tensor("w", w)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    cal = tmp_path / "cal"
    cal.mkdir(exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(8):
        np.save(cal / f"{i}.npy", rng.standard_normal((1, 16)).astype(np.float32))
    return path, cal


def calibrate(tmp_path, model, cal, march="bayes-e", **calibration):
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(model), "working_dir": str(tmp_path / "wd"), "march": march},
        "input_parameters": {"input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max", **calibration},
    }, base_dir=tmp_path)
    return run_calibration(cfg)


def test_a_flat_softmax_output_in_int8_is_named_with_its_fix(tmp_path):
    model, cal = classifier(tmp_path, logit_scale=1e-3)
    result = calibrate(tmp_path, model, cal)
    (c,) = result.options["coarse_outputs"]
    assert (c["output"], c["node"], c["op_type"]) == ("prob", "softmax", "Softmax")
    assert c["sqnr_db"] < 0 and c["step"] == pytest.approx(2.0**-7)
    assert "set_model_output_int16" in c["fix"] and "{'softmax': {OutputType: int16}}" in c["fix"]
    line = next(x for x in option_lines(result) if x.startswith("warning: output 'prob'"))
    assert "all of it under one step" in line
    assert result.output_errors["prob"]["cosine"] < 0.5      # what the warning is about


def test_the_fix_it_names_works_and_silences_it(tmp_path):
    model, cal = classifier(tmp_path, logit_scale=1e-3)
    result = calibrate(tmp_path, model, cal, optimization="set_model_output_int16")
    assert "coarse_outputs" not in result.options
    assert result.plan.tensors["prob"].bits == 16
    assert result.output_errors["prob"]["cosine"] > 0.99


@pytest.mark.parametrize("setting", [{"optimization": "set_model_output_int8"}, "node_info"])
def test_an_output_pinned_to_int8_is_the_users_choice(tmp_path, setting):
    model, cal = classifier(tmp_path, logit_scale=1e-3)
    if setting == "node_info":
        cfg = config_from_dict({
            "model_parameters": {"onnx_model": str(model), "working_dir": str(tmp_path / "wd"), "march": "bayes-e",
                                 "node_info": {"softmax": {"OutputType": "int8"}}},
            "input_parameters": {"input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
            "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max"},
        }, base_dir=tmp_path)
        result = run_calibration(cfg)
    else:
        result = calibrate(tmp_path, model, cal, **setting)
    assert "coarse_outputs" not in result.options


def test_a_peaked_softmax_keeps_its_signal_and_no_warning(tmp_path):
    model, cal = classifier(tmp_path, logit_scale=3.0, classes=10)
    result = calibrate(tmp_path, model, cal)
    assert "coarse_outputs" not in result.options
