"""Learned rounding (``node_info Weight: adaround``) lowers the output error on held-out data, alone and in groups.

Round-to-nearest minimises each weight's own error; with correlated input channels and coarse
weight grids (a per-channel outlier makes every other weight a few steps wide) it is far from
output-optimal. The learned rounding must beat it on samples it was not learned on, through
plain calibrate and the quantized model it writes; layers learned together (sequentially, each
on the inputs of the already-rounded layers before it) must beat nearest at the model output.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from hbtool.config import config_from_dict
from hbtool.debug.session import run_outputs
from hbtool.quant.calibrate import run_calibration
from tests.helpers import make_model, run_ort, tensor, vinfo

SHAPE = (1, 8, 10, 10)


def awkward_weight(rng, out_ch, in_ch):
    """Laplace weights with one large outlier per output channel: the grid is coarse for all the others."""
    w = rng.laplace(0, 0.1, (out_ch, in_ch, 3, 3)).astype(np.float32)
    w[np.arange(out_ch), rng.integers(0, in_ch, out_ch), 1, 1] = 1.5
    return w


def correlated_inputs(rng, count):
    """Low-rank, smooth feature maps: the channels move together, so rounding errors add up coherently."""
    out = []
    for _ in range(count):
        base = rng.standard_normal((1, 2, 10, 10)).astype(np.float32)
        mix = np.abs(rng.standard_normal((8, 2))).astype(np.float32) + 0.5
        x = np.einsum("cb,nbhw->nchw", mix, base) + 0.05 * rng.standard_normal(SHAPE).astype(np.float32)
        out.append(x.astype(np.float32))
    return out


def build(tmp, convs: int):
    rng = np.random.default_rng(3)
    nodes, inits, src = [], {}, "x"
    for k in range(convs):
        inits[f"w{k}"] = awkward_weight(rng, 8, 8)
        inits[f"b{k}"] = np.zeros(8, np.float32)
        dst = "y" if k == convs - 1 else f"c{k}"
        nodes.append(helper.make_node("Conv", [src, f"w{k}", f"b{k}"], [dst], name=f"conv{k}", pads=[1, 1, 1, 1]))
        src = dst
    path = tmp / f"chain{convs}.onnx"
    onnx.save(make_model(nodes, [vinfo("x", list(SHAPE))], [vinfo("y", list(SHAPE))], [tensor(k, v) for k, v in inits.items()]), path)
    cal = tmp / f"cal{convs}"
    cal.mkdir()
    for k, x in enumerate(correlated_inputs(rng, 16)):
        np.save(cal / f"{k:02d}.npy", x)
    held_out = correlated_inputs(np.random.default_rng(99), 16)
    return path, cal, held_out


def output_error(tmp, path, cal, held_out, node_info, tag):
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(path), "working_dir": str(tmp / f"wd_{tag}"), "node_info": node_info},
        "input_parameters": {"input_name": "x", "input_shape": "1x8x10x10", "input_type_train": "featuremap",
                             "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        # int16 activations: the weight rounding is what is measured, not the activation grid
        "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max", "enable_int16": True},
    }, base_dir=tmp)
    r = run_calibration(cfg)
    feeds = [{"x": x} for x in held_out]
    q = run_outputs(r.quantized, feeds, ["y"])["y"]
    f = np.concatenate([run_ort(path, fd)[0] for fd in feeds])
    return float(np.mean((q - f) ** 2))


def test_adaround_on_a_conv_lowers_its_held_out_output_error(tmp_path):
    path, cal, held_out = build(tmp_path, 1)
    nearest = output_error(tmp_path, path, cal, held_out, {}, "nearest")
    learned = output_error(tmp_path, path, cal, held_out, {"conv0": {"Weight": "adaround"}}, "learned")
    assert learned < 0.8 * nearest, (nearest, learned)


def test_adaround_on_a_group_learns_sequentially_and_lowers_the_model_error(tmp_path):
    path, cal, held_out = build(tmp_path, 3)
    group = {f"conv{k}": {"Weight": "adaround"} for k in range(3)}
    nearest = output_error(tmp_path, path, cal, held_out, {}, "nearest")
    learned = output_error(tmp_path, path, cal, held_out, group, "group")
    assert learned < 0.8 * nearest, (nearest, learned)
