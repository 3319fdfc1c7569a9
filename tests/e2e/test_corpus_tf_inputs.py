"""The corpus's TensorFlow rows are fed what their ONNX files take (``benchmarks/zoo``).

A Keras text CNN takes one int64 input of token ids (no attention mask), a fully int8 TFLite model
a uint8 NHWC image, MediaPipe's and fer's models float NHWC images (fer: one grey channel). The
runner's config must say so in a form hbtool's config loader accepts, and the samples must have
that dtype and layout; the float model gets ids and uint8 pixels unchanged. No model file needed.
"""

from __future__ import annotations

import numpy as np

from benchmarks.configs import corpus_config
from benchmarks.zoo.corpus import BY_NAME, SEQ_LEN
from benchmarks.zoo.data import float_samples, samples


def _config(spec, tmp_path):
    from hbtool.api import load_config

    cal = tmp_path / "cal"
    cal.mkdir()
    cfg = corpus_config(spec, tmp_path, [cal], "default", 2)
    return cfg, load_config(cfg, require_model=False)


def test_text_cnn_takes_one_int64_token_input(tmp_path):
    spec = BY_NAME["keras_textcnn_maxmin"]
    cfg, loaded = _config(spec, tmp_path)
    assert cfg["input_parameters"]["input_shape"] == f"1x{SEQ_LEN}"
    assert cfg["calibration_parameters"]["cal_data_type"] == "int64"
    assert [i.name for i in loaded.inputs] == ["input"]
    feeds = samples(spec, 3, 0)
    ids = feeds[0]["input"]
    assert list(feeds[0]) == ["input"] and ids.dtype == np.int64 and ids.shape == (1, SEQ_LEN)
    assert 0 <= ids.min() and ids.max() < spec.vocab and (ids > 0).sum() > 2      # words, then padding id 0
    assert float_samples(spec, feeds)[0]["input"] is ids


def test_full_int8_tflite_model_takes_uint8_nhwc_pixels(tmp_path):
    spec = BY_NAME["tflite_efficientnet_lite0_int8"]
    cfg, loaded = _config(spec, tmp_path)
    assert cfg["calibration_parameters"]["cal_data_type"] == "uint8"
    assert cfg["input_parameters"]["norm_type"] == "no_preprocess"
    assert cfg["input_parameters"]["input_shape"] == "1x224x224x3"
    assert loaded.inputs[0].cal_data_type == "uint8"
    feeds = samples(spec, 1, 0)
    assert feeds[0]["input"].dtype == np.uint8 and feeds[0]["input"].shape == (1, 224, 224, 3)
    assert float_samples(spec, feeds)[0]["input"] is feeds[0]["input"]


def test_grey_keras_file_is_fed_normalised_one_channel_nhwc(tmp_path):
    spec = BY_NAME["keras_h5_fer_emotion"]
    cfg, _ = _config(spec, tmp_path)
    assert cfg["input_parameters"]["input_shape"] == "1x64x64x1"
    assert cfg["input_parameters"]["input_type_train"] == "gray"
    raw = samples(spec, 1, 0)[0]["input"]
    fed = float_samples(spec, [{"input": raw}])[0]["input"]
    assert raw.dtype == np.float32 and raw.shape == (1, 64, 64, 1)
    np.testing.assert_allclose(fed, raw / 127.5 - 1, atol=1e-6)
