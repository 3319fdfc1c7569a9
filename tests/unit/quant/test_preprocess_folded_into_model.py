"""hbtool.quant.preprocess: the mean/scale preprocessing folded into the model as HzPreprocess.

The model with HzPreprocess, given raw pixels x, must compute what the original model computes
given (x - mean) * scale (onnxruntime, through to_onnx, within 1e-5 absolute on outputs of
size ~1).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from hbtool.config import config_from_dict
from hbtool.errors import InputError
from hbtool.ir import HBTOOL_DOMAIN, import_onnx, to_onnx
from hbtool.io.colour import rgb_to_yuv, rgb_to_yuv444
from hbtool.quant.preprocess import find_preprocess, insert_preprocess
from tests.helpers import make_model, run_ort, tensor, vinfo

REPO = Path(__file__).resolve().parents[3]
TINY_CNN = REPO / "samples" / "tiny" / "tiny_cnn.onnx"
MEAN3 = (123.675, 116.28, 103.53)
SCALE3 = (0.01712, 0.01751, 0.01743)


def specs(**inp):
    base = {"input_name": "input", "input_type_train": "rgb", "input_layout_train": "NCHW",
            "input_shape": "1x3x32x32", "norm_type": "data_mean_and_scale",
            "mean_value": "127.5", "scale_value": str(1 / 127.5)}
    base.update({k: v for k, v in inp.items() if v is not None})
    for k in [k for k, v in inp.items() if v is None]:
        base.pop(k)
    cfg = config_from_dict({"model_parameters": {"onnx_model": "m.onnx"},
                            "input_parameters": base}, base_dir=REPO)
    return cfg.inputs


def raw_pixels(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape).astype(np.float32)


def normalise(x, mean, scale, axis):
    shape = [1] * x.ndim
    mean, scale = np.asarray(mean, np.float64), np.asarray(scale, np.float64)
    if mean.size > 1 or scale.size > 1:
        shape[axis] = -1
    return ((x.astype(np.float64) - mean.reshape(shape if mean.size > 1 else [1] * x.ndim))
            * scale.reshape(shape if scale.size > 1 else [1] * x.ndim)).astype(np.float32)


def assert_close(a, b, tol=1e-5):
    assert a.shape == b.shape
    assert float(np.abs(a - b).max()) <= tol, float(np.abs(a - b).max())


def nhwc_model():
    """x (1,8,8,3) NHWC -> Transpose -> Conv 3->4 -> y."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2], name="to_nchw"),
             helper.make_node("Conv", ["t", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    return make_model(nodes, [vinfo("x", [1, 8, 8, 3])], [vinfo("y", [1, 4, 8, 8])],
                      [tensor("w", w)])


# --------------------------------------------------------------------------------- basics
def test_tiny_cnn_raw_pixels_match_normalised_original():
    graph = import_onnx(TINY_CNN)
    original = to_onnx(graph)
    inp = specs()
    insert_preprocess(graph, inp)
    assert graph.inputs == ["input"] and graph.shape("input") == (1, 3, 32, 32)
    node = find_preprocess(graph, "input")
    assert node is not None and node.name == "HzPreprocess_input"
    assert node.domain == HBTOOL_DOMAIN and graph.nodes[0] is node
    assert node.attrs["mean"] == [127.5] and node.attrs["scale"] == [pytest.approx(1 / 127.5)]
    assert node.attrs["input_type"] == "rgb" and node.attrs["layout"] == "NCHW"
    assert [n.op_type for n in node.body.nodes] == ["Sub", "Mul"]
    assert graph.consumers("input") == [node]
    x = raw_pixels((1, 3, 32, 32))
    got = run_ort(to_onnx(graph), {"input": x})[0]
    ref = run_ort(original, {"input": (x - 127.5) * np.float32(1 / 127.5)})[0]
    assert_close(got, ref)


def test_metadata_describes_it():
    graph = import_onnx(TINY_CNN)
    insert_preprocess(graph, specs(mean_value=" ".join(map(str, MEAN3)),
                                   scale_value=" ".join(map(str, SCALE3))))
    meta = json.loads(graph.metadata["hbtool.preprocess.input"])
    assert meta["node"] == "HzPreprocess_input" and meta["formula"] == "(x - mean) * scale"
    assert meta["mean"] == list(MEAN3) and meta["scale"] == list(SCALE3)
    assert meta["input_type"] == "rgb" and meta["layout"] == "NCHW"
    exported = {p.key: p.value for p in to_onnx(graph).metadata_props}
    assert json.loads(exported["hbtool.preprocess.input"]) == meta


def test_per_channel_mean_and_scale_nchw():
    graph = import_onnx(TINY_CNN)
    original = to_onnx(graph)
    insert_preprocess(graph, specs(mean_value=" ".join(map(str, MEAN3)),
                                   scale_value=" ".join(map(str, SCALE3))))
    x = raw_pixels((1, 3, 32, 32), seed=2)
    got = run_ort(to_onnx(graph), {"input": x})[0]
    ref = run_ort(original, {"input": normalise(x, MEAN3, SCALE3, 1)})[0]
    assert_close(got, ref)


def test_per_channel_nhwc_uses_the_last_axis():
    model = nhwc_model()
    graph = import_onnx(model)
    insert_preprocess(graph, specs(input_name="x", input_layout_train="NHWC",
                                   input_shape="1x8x8x3", mean_value="10 100 200",
                                   scale_value="0.5 0.25 0.125"))
    x = raw_pixels((1, 8, 8, 3), seed=3)
    got = run_ort(to_onnx(graph), {"x": x})[0]
    ref = run_ort(model, {"x": normalise(x, (10, 100, 200), (0.5, 0.25, 0.125), 3)})[0]
    assert_close(got, ref, 1e-4)


@pytest.mark.parametrize("norm,extra,ops", [
    ("data_mean", {"mean_value": "100", "scale_value": None}, ["Sub"]),
    ("data_scale", {"mean_value": None, "scale_value": "0.02"}, ["Mul"]),
])
def test_mean_only_and_scale_only(norm, extra, ops):
    graph = import_onnx(TINY_CNN)
    original = to_onnx(graph)
    insert_preprocess(graph, specs(norm_type=norm, **extra))
    node = find_preprocess(graph, "input")
    assert [n.op_type for n in node.body.nodes] == ops
    mean = [100.0] if norm == "data_mean" else [0.0]
    scale = [0.02] if norm == "data_scale" else [1.0]
    assert node.attrs["mean"] == mean and node.attrs["scale"] == [pytest.approx(scale[0])]
    x = raw_pixels((1, 3, 32, 32), seed=4)
    got = run_ort(to_onnx(graph), {"input": x})[0]
    ref = run_ort(original, {"input": normalise(x, mean, scale, 1)})[0]
    assert_close(got, ref, 1e-4)


def test_no_preprocess_inserts_nothing():
    graph = import_onnx(TINY_CNN)
    before = graph.op_types()
    insert_preprocess(graph, specs(norm_type="no_preprocess", mean_value=None, scale_value=None))
    assert graph.op_types() == before and not any(k.startswith("hbtool.preprocess")
                                                   for k in graph.metadata)


# ---------------------------------------------------------------------------- idempotence
def test_inserting_twice_applies_once():
    graph = import_onnx(TINY_CNN)
    original = to_onnx(graph)
    inp = specs()
    insert_preprocess(graph, inp)
    insert_preprocess(graph, inp)
    assert graph.op_types()["HzPreprocess"] == 1
    # a model hbtool wrote, read back: still one, and still right
    again = import_onnx(to_onnx(graph))
    assert again.op_types()["HzPreprocess"] == 1 and find_preprocess(again, "input") is not None
    insert_preprocess(again, inp)
    assert again.op_types()["HzPreprocess"] == 1
    x = raw_pixels((1, 3, 32, 32), seed=5)
    ref = run_ort(original, {"input": (x - 127.5) * np.float32(1 / 127.5)})[0]
    assert_close(run_ort(to_onnx(again), {"input": x})[0], ref)
    # changed values rebuild the node in place
    insert_preprocess(again, specs(mean_value="0", scale_value="1"))
    assert again.op_types()["HzPreprocess"] == 1
    assert_close(run_ort(to_onnx(again), {"input": x})[0], run_ort(original, {"input": x})[0], 1e-4)


# --------------------------------------------------------------------------- run-time types
def test_runtime_bgr_swaps_channels_first():
    graph = import_onnx(TINY_CNN)
    original = to_onnx(graph)
    inp = specs(input_type_rt="bgr", mean_value=" ".join(map(str, MEAN3)),
                scale_value=" ".join(map(str, SCALE3)))
    default = graph.copy()
    insert_preprocess(default, inp)  # default: takes the training order (rgb)
    assert find_preprocess(default, "input").attrs["input_type"] == "rgb"
    insert_preprocess(graph, inp, runtime_input=True)
    node = find_preprocess(graph, "input")
    assert node.attrs["input_type"] == "bgr" and node.attrs["train_type"] == "rgb"
    assert [n.op_type for n in node.body.nodes] == ["Gather", "Sub", "Mul"]
    rgb = raw_pixels((1, 3, 32, 32), seed=6)
    ref = run_ort(original, {"input": normalise(rgb, MEAN3, SCALE3, 1)})[0]
    assert_close(run_ort(to_onnx(graph), {"input": np.ascontiguousarray(rgb[:, ::-1])})[0], ref)
    assert_close(run_ort(to_onnx(default), {"input": rgb})[0], ref)


def yuv_float(rgb_hwc: np.ndarray) -> np.ndarray:
    """rgb_to_yuv444 without the 8-bit rounding and clipping (hbtool's one RGB -> YUV)."""
    return rgb_to_yuv(rgb_hwc).astype(np.float32)


@pytest.mark.parametrize("layout,train", [("NCHW", "rgb"), ("NHWC", "bgr")])
def test_runtime_yuv444_converts_to_the_training_order(layout, train):
    if layout == "NCHW":
        model, name, shape = to_onnx(import_onnx(TINY_CNN)), "input", (1, 3, 32, 32)
    else:
        model, name, shape = nhwc_model(), "x", (1, 8, 8, 3)
    graph = import_onnx(model)
    insert_preprocess(graph, specs(input_name=name, input_type_train=train,
                                   input_type_rt="yuv444", input_layout_train=layout,
                                   input_shape="x".join(map(str, shape))),
                      runtime_input=True)
    node = find_preprocess(graph, name)
    assert node.attrs["input_type"] == "yuv444" and node.attrs["train_type"] == train
    pix = raw_pixels(shape, seed=7)                      # in the training order
    hwc = pix[0].transpose(1, 2, 0) if layout == "NCHW" else pix[0]
    rgb = hwc[..., ::-1] if train == "bgr" else hwc
    yuv = yuv_float(rgb)
    feed = yuv.transpose(2, 0, 1)[None] if layout == "NCHW" else yuv[None]
    got = run_ort(to_onnx(graph), {name: np.ascontiguousarray(feed)})[0]
    ref = run_ort(model, {name: (pix - 127.5) * np.float32(1 / 127.5)})[0]
    assert_close(got, ref, 1e-4)  # the body inverts the forward matrix exactly
    # and the 8-bit conversion the data loader makes is the same one, up to rounding
    q = rgb_to_yuv444(rgb)
    assert float(np.abs(q - yuv).max()) <= 0.5 + 1e-3


def test_runtime_nv12_is_a_clear_error_but_default_mode_works():
    inp = specs(input_type_rt="nv12")
    graph = import_onnx(TINY_CNN)
    with pytest.raises(InputError) as info:
        insert_preprocess(graph, inp, runtime_input=True)
    assert "input_type_rt" in str(info.value) and "nv12" in str(info.value)
    insert_preprocess(graph, inp)  # training-order model (calibrated/quantized): fine
    assert find_preprocess(graph, "input").attrs["input_type"] == "rgb"


def test_unknown_input_name_and_int_input():
    graph = import_onnx(TINY_CNN)
    with pytest.raises(InputError) as info:
        insert_preprocess(graph, specs(input_name="image"))
    assert "image" in str(info.value) and "input" in str(info.value)
    graph.values["input"].dtype = np.dtype(np.uint8)
    with pytest.raises(InputError) as info:
        insert_preprocess(graph, specs())
    assert "float" in str(info.value)


def test_unnamed_single_input_uses_the_model_input():
    graph = import_onnx(TINY_CNN)
    insert_preprocess(graph, specs(input_name=None))
    assert find_preprocess(graph, "input") is not None
