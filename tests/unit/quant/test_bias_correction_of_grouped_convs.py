"""Bias correction reaches depthwise and grouped convs, and is on by default (issue 11's PP-OCRv5 recogniser).

The cause: a depthwise 3x3 conv's nine rounded weights shift its response to a flat region (the empty
margin of a text line, a page background) by ``m_c * sum_k (w - w_q)``. Nothing downstream can tell that
shift from signal; in PP-OCRv5's recogniser (PP-LCNetV3 blocks, a depthwise stem conv feeding a 1x1 conv
with weights up to ~1000) the shifts of its layers together made the deployed model read a leading space on
38% of the lines. Bias correction covered only groups of 1 (then 37% of lines still differed), and it was off
by default.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from hbtool.quant.calibrate import run_calibration
from hbtool.quant.weights import _grouped_conv_delta, quantize_weight
from hbtool.ir.onnx_export import to_onnx
from tests.helpers import featuremap_config, make_model, run_ort, tensor, vinfo

# per-channel value of the flat region, on the input's int8 grid (max |x| = 2.5, so the input adds no rounding)
BACKGROUND = (np.array([100, -76, 51, 127]) * (2.5 / 127)).astype(np.float32)


@pytest.mark.parametrize("groups, c_out", [(4, 4), (4, 8), (2, 6), (1, 3)])
def test_grouped_delta_is_the_rounding_error_of_the_response_to_a_constant_input(groups, c_out):
    """``(W - W_q) m`` per output channel equals the float minus the rounded conv's output on a constant input."""
    rng = np.random.default_rng(groups * 10 + c_out)
    c_in = 4
    w = rng.standard_normal((c_out, c_in // groups, 3, 3)).astype(np.float64)
    scales = np.abs(w).reshape(c_out, -1).max(1) / 127
    err = w - quantize_weight(w, scales, 0).astype(np.float64) * scales.reshape(-1, 1, 1, 1)
    delta = _grouped_conv_delta(err, BACKGROUND.astype(np.float64), groups)
    per_group = c_out // groups
    expected = [sum(err[o, j].sum() * BACKGROUND[(o // per_group) * (c_in // groups) + j] for j in range(c_in // groups))
                for o in range(c_out)]
    np.testing.assert_allclose(delta, expected, rtol=1e-12, atol=1e-12)
    assert _grouped_conv_delta(err, BACKGROUND[:3].astype(np.float64), groups) is None     # shapes that disagree


def _depthwise_model(path):
    """x (flat background + sparse strokes) -> depthwise 3x3 -> y; coarse per-channel steps (one large tap)."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((4, 1, 3, 3)) * 0.3).astype(np.float32)
    w[:, 0, 0, 0] = 4.0
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=4, pads=[1, 1, 1, 1])]
    onnx.save(make_model(nodes, [vinfo("x", [1, 4, 16, 16])], [vinfo("y", [1, 4, 16, 16])], [tensor("w", w)]), str(path))
    return w


def _page(rng) -> np.ndarray:
    x = np.broadcast_to(BACKGROUND.reshape(1, 4, 1, 1), (1, 4, 16, 16)).copy()
    strokes = rng.random((1, 1, 16, 16)) < 0.08
    return np.where(strokes, -BACKGROUND.reshape(1, 4, 1, 1), x).astype(np.float32)


def _flat_region_error(tmp_path, bias_correction: bool | None) -> float:
    path = tmp_path / "dw.onnx"
    _depthwise_model(path)
    rng = np.random.default_rng(0)
    samples = [{"x": _page(rng)} for _ in range(8)]
    cal = {"calibration_type": "max", "auto_int16": False}
    if bias_correction is not None:
        cal["bias_correction"] = bias_correction
    # int16 output: its rounding is far below the offset measured
    cfg = featuremap_config(tmp_path, path, samples, f"wd_{bias_correction}", prefix="dw", calibration_parameters=cal,
                            **{"model_parameters.node_info": {"dw": {"OutputType": "int16"}}})
    r = run_calibration(cfg)
    if bias_correction is not False:        # what it did is reported (quant_info.json options, the log line)
        from hbtool.quant.calibrate import option_lines

        assert r.options["bias_correction"] == {"applied": ["dw"], "grouped": ["dw"]}
        assert any(line.startswith("bias_correction: 1 layer") for line in option_lines(r))
    else:
        assert "bias_correction" not in r.options
    flat = np.broadcast_to(BACKGROUND.reshape(1, 4, 1, 1), (1, 4, 16, 16)).astype(np.float32).copy()
    got = run_ort(to_onnx(r.quantized), {"x": flat})[0]
    want = run_ort(str(path), {"x": flat})[0]
    int8_step = float(np.abs(want).max()) / 127
    # the interior (no padding): one constant error per channel, in steps of an int8 output of this range
    return float(np.abs((got - want)[:, :, 1:-1, 1:-1].mean(axis=(0, 2, 3))).max() / int8_step)


def test_depthwise_bias_correction_removes_the_flat_region_offset_and_is_the_default(tmp_path):
    plain = _flat_region_error(tmp_path, False)
    corrected = _flat_region_error(tmp_path, True)
    default = _flat_region_error(tmp_path, None)
    assert plain > 0.2, plain                      # a constant offset from weight rounding alone
    # the correction is for the mean input, and 8% of the pages' pixels are strokes (-background): the mean is
    # 0.84 of the flat value, so about 16% of the offset stays
    assert corrected < 0.25 * plain, (plain, corrected)
    assert default == corrected
