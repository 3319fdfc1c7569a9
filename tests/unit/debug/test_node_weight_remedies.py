"""node_info ``Weight: mse | bias_correction | adaround`` acts on that node only, through plain calibrate."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hbtool.config import config_from_dict
from hbtool.quant.calibrate import run_calibration
from tests.helpers import make_model, tensor, vinfo


def two_convs(path):
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w1[0, 0, 0, 0] = 30.0                      # an outlier weight: MSE clipping changes this channel's scale
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    m = make_model(nodes, [vinfo("x", [1, 3, 12, 12])], [vinfo("y", [1, 8, 12, 12])],
                   [tensor("w1", w1), tensor("b1", np.zeros(8, np.float32)), tensor("w2", w2), tensor("b2", np.zeros(8, np.float32))])
    import onnx

    onnx.save(m, path)
    return path


def calibrate(tmp, node_info, bias_correction=False):
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(two_convs(tmp / "m.onnx")), "working_dir": str(tmp / "wd"), "node_info": node_info or {}},
        "input_parameters": {"input_name": "x", "input_shape": "1x3x12x12", "input_type_train": "featuremap",
                             "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": 4, "bias_correction": bias_correction},
    }, base_dir=tmp)
    return run_calibration(cfg)


def test_mse_on_one_node(tmp_path):
    base = calibrate(tmp_path, None)
    got = calibrate(tmp_path, {"conv1": {"Weight": "mse"}})
    assert not np.array_equal(base.weight_scales["w1"][0], got.weight_scales["w1"][0])
    np.testing.assert_array_equal(base.weight_scales["w2"][0], got.weight_scales["w2"][0])


def _bias(result, node):
    n = result.quantized_source.node(node)
    return result.quantized_source.const(n.inputs[2])


def test_bias_correction_on_one_node(tmp_path):
    got = calibrate(tmp_path, {"conv2": {"Weight": "bias_correction"}})
    # the correction is folded into conv2's bias constant (the calibrated and quantized models carry the same float32 bias)
    assert np.abs(_bias(got, "conv2")).max() > 0 and not np.any(_bias(got, "conv1"))
    assert not got.plan.bias_delta
    everywhere = calibrate(tmp_path, None, bias_correction=True)
    assert np.abs(_bias(everywhere, "conv1")).max() > 0 and np.abs(_bias(everywhere, "conv2")).max() > 0
    np.testing.assert_array_equal(_bias(everywhere, "conv2"), _bias(got, "conv2"))
    conv2 = got.calibrated.node("conv2")
    np.testing.assert_array_equal(got.calibrated.const(conv2.inputs[2]), _bias(got, "conv2"))


def test_adaround_on_one_node(tmp_path):
    base = calibrate(tmp_path, None)
    got = calibrate(tmp_path, {"conv2": {"Weight": "adaround"}})
    # the learned weights differ from round-to-nearest for conv2 only: compare the calibrated models' weights
    def weight(r, name):
        return r.calibrated.const(name)
    np.testing.assert_array_equal(weight(base, "w1"), weight(got, "w1"))
    assert not np.array_equal(weight(base, "w2"), weight(got, "w2"))


def test_bad_weight_remedy_is_config_error(tmp_path):
    from hbtool.errors import ConfigError

    with pytest.raises(ConfigError, match="Weight"):
        calibrate(tmp_path, {"conv1": {"Weight": "magic"}})
