"""ConvTranspose as an integer kernel on the tensor unit: the kernel's numpy form equals a
direct scatter reference and onnxruntime's float ConvTranspose; its ONNX form is bit-exact;
stride-2 upsampling heads (+BN+ReLU, groups 1 and grouped) calibrate, compile and simulate with
no float fallback; perf costs them on the tensor unit."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.kernels import ConvTranspose
from hbtool.kernels.conv_transpose import resolve_pads
from hbtool.costmodel.schedule import estimate
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.simulator import accel
from hbtool.simulator.executor import Executor
from tests.helpers import featuremap_config, make_model, run_ort, tensor, vinfo


def scatter_reference(x, w, strides, pads, dilations, output_padding, group):
    """``conv_transpose(x, w)`` by its definition: every input sample adds ``x * w`` at ``i * s + t * d - pad``."""
    nd = w.ndim - 2
    cin, og = w.shape[:2]
    k = w.shape[2:]
    cg = cin // group
    out = [(x.shape[2 + i] - 1) * strides[i] + dilations[i] * (k[i] - 1) + 1 - pads[i] - pads[i + nd] + output_padding[i] for i in range(nd)]
    big = np.zeros((x.shape[0], og * group) + tuple(o + pads[i] + pads[i + nd] for i, o in enumerate(out)), np.int64)
    for c in range(cin):
        g = c // cg
        for pos in np.ndindex(*x.shape[2:]):
            for t in np.ndindex(*k):
                o = tuple(pos[i] * strides[i] + t[i] * dilations[i] for i in range(nd))
                if all(o[i] < big.shape[2 + i] for i in range(nd)):
                    big[(slice(None), slice(g * og, (g + 1) * og)) + o] += x[(slice(None), c) + pos][:, None] * w[(c, slice(None)) + t][None, :]
    return big[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + out[i]) for i in range(nd))]


# (kernel, stride, pad, dilation, output_padding, group)
GEOMETRIES = [(2, 2, 0, 1, 0, 1), (4, 2, 1, 1, 0, 1), (3, 2, 1, 1, 1, 1), (3, 1, 1, 2, 0, 2), (4, 2, 1, 1, 0, 4),
              (2, 3, 0, 1, 2, 2), (2, 2, 2, 1, 1, 1), (1, 1, 0, 1, 0, 1)]


@pytest.mark.parametrize("nd", [1, 2])
@pytest.mark.parametrize("geom", GEOMETRIES)
def test_conv_transpose_kernel_is_exact_in_both_forms(nd, geom):
    k, s, p, d, op, g = geom
    rng = np.random.default_rng(k * 31 + s * 7 + p + g)
    cin, og = 4, 3
    w = rng.integers(-127, 128, (cin, og) + (k,) * nd)
    bias = rng.integers(-1000, 1000, og * g)
    attrs = dict(strides=[s] * nd, pads=[p] * (2 * nd), dilations=[d] * nd, output_padding=[op] * nd, group=g)
    kern = ConvTranspose.build(w, bias, 0.02, rng.uniform(0.005, 0.02, og * g), 0.5, **attrs)
    x = rng.integers(-128, 128, (2, cin) + (5,) * nd)
    acc = kern.accumulate_numpy(x)
    want = scatter_reference(x, w, attrs["strides"], attrs["pads"], attrs["dilations"], attrs["output_padding"], g)
    assert np.array_equal(acc, want + bias.reshape((-1,) + (1,) * nd))
    float_ct = make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], [vinfo("x", list(x.shape))],
                          [vinfo("y", None)], [tensor("w", w.astype(np.float32))])
    assert np.array_equal(run_ort(float_ct, {"x": x.astype(np.float32)})[0].astype(np.int64), want)
    y = kern.apply_numpy(x)
    assert np.array_equal(y, run_ort(kern.onnx_model([list(x.shape)]), {"x0": x.astype(np.float64)})[0])
    assert len(np.unique(y)) > 10  # the requantized output is not saturated or constant


    fast = accel.accelerate(kern)
    assert fast is not None and np.array_equal(fast(x.astype(np.int16)), y)


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_int16_input_splits_digits_exactly(group):
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (8, 4, 4, 4))
    x = rng.integers(-32768, 32768, (1, 8, 6, 6))
    kern = ConvTranspose.build(w, None, 1e-3, 0.01, 0.5, strides=[2, 2], pads=[1] * 4, group=group, in_bits=16, out_bits=16)
    y = kern.apply_numpy(x)
    assert np.array_equal(y, run_ort(kern.onnx_model([list(x.shape)]), {"x0": x.astype(np.float64)})[0])
    assert np.array_equal(accel.accelerate(kern)(x.astype(np.int16)), y)


def test_conv_transpose_refuses_bad_geometry():
    w = np.ones((4, 2, 2, 2), np.int64)
    with pytest.raises(ValueError, match="output_padding"):
        ConvTranspose.build(w, None, 0.1, 0.1, 0.1, strides=[2, 2], output_padding=[2, 2])
    with pytest.raises(ValueError, match="group"):
        ConvTranspose.build(w, None, 0.1, 0.1, 0.1, group=3)


@pytest.mark.parametrize("attrs", [dict(auto_pad="SAME_UPPER"), dict(auto_pad="SAME_LOWER"), dict(auto_pad="VALID"),
                                   dict(output_shape=[9, 11]), dict(output_shape=[12, 10]),
                                   dict(auto_pad="SAME_UPPER", output_padding=[1, 1])])
@pytest.mark.parametrize("stride", [2, 3])
def test_auto_pad_and_output_shape_resolve_to_the_pads_onnxruntime_uses(attrs, stride):
    rng = np.random.default_rng(stride)
    x = rng.integers(-128, 128, (1, 4, 5, 5))
    w = rng.integers(-127, 128, (4, 3, 4, 4))
    attrs = dict(strides=[stride, stride], **attrs)
    op = attrs.get("output_padding", [0, 0])
    if "output_shape" in attrs and stride == 3:
        attrs["output_shape"] = [o + 3 for o in attrs["output_shape"]]
    float_ct = make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], [vinfo("x", list(x.shape))],
                          [vinfo("y", None)], [tensor("w", w.astype(np.float32))])
    want = run_ort(float_ct, {"x": x.astype(np.float32)})[0].astype(np.int64)
    pads = resolve_pads([5, 5], [4, 4], attrs["strides"], [1, 1], op, None, attrs.get("auto_pad", "NOTSET"), attrs.get("output_shape"))
    kern = ConvTranspose.build(w, None, 0.1, 0.1, 0.1, strides=attrs["strides"], pads=pads, output_padding=op)
    assert np.array_equal(kern.accumulate_numpy(x), want)


# ------------------------------------------------------------------ through the pipeline
def upsample_head(kernel: int, pad: int, group: int, seed: int = 0):
    """x (1, 8, 6, 6) -> ConvTranspose(stride 2; ``pad=None``: auto_pad SAME_UPPER) -> BN -> ReLU -> y (1, 8, 12, 12)."""
    rng = np.random.default_rng(seed)
    c = 8
    inits = {
        "w": (rng.standard_normal((c, c // group, kernel, kernel)) * 0.3).astype(np.float32),
        "b": (rng.standard_normal(c) * 0.1).astype(np.float32),
        "g": rng.uniform(0.5, 1.5, c).astype(np.float32), "be": (rng.standard_normal(c) * 0.1).astype(np.float32),
        "m": (rng.standard_normal(c) * 0.1).astype(np.float32), "v": rng.uniform(0.5, 1.5, c).astype(np.float32),
    }
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["u"], name="up", strides=[2, 2], group=group,
                         **({"auto_pad": "SAME_UPPER"} if pad is None else {"pads": [pad] * 4})),
        helper.make_node("BatchNormalization", ["u", "g", "be", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    return make_model(nodes, [vinfo("x", [1, c, 6, 6])], [vinfo("y", [1, c, 12, 12])], [tensor(k, v) for k, v in inits.items()])


@pytest.mark.parametrize("kernel,pad,group", [(2, 0, 1), (4, 1, 1), (2, 0, 2), (4, 1, 4), (3, None, 1)])
def test_upsampling_head_runs_integer_on_the_tensor_unit(tmp_path, kernel, pad, group):
    path = tmp_path / "up.onnx"
    onnx.save(upsample_head(kernel, pad, group), str(path))
    rng = np.random.default_rng(1)
    # max calibration: enough samples that the test inputs rarely saturate
    samples = [{"x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32)} for _ in range(8)]
    cfg = featuremap_config(tmp_path, path, samples, prefix="up", **{
        "input_parameters.input_layout_train": "NCHW", "calibration_parameters.calibration_type": "max"})
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    assert [n.name for n in result.program.nodes if n.meta.get("fallback")] == []
    compiled = compile_model(cfg)
    assert compiled.fallbacks == [] and compiled.cpu_subgraphs == []
    up = [n for n in compiled.program.nodes if type(n.meta.get("kernel")).__name__ == "ConvTranspose"]
    assert len(up) == 1 and up[0].meta["on"] == "BPU" and up[0].meta["unit"] == "tensor"
    assert up[0].meta["kernel"].requant.lo == 0  # the ReLU is fused
    # the artifact round trip keeps the kernel, and simulate equals the quantized ONNX model bit for bit
    art = from_bytes(compiled.data)
    ex = Executor(art)
    sess = ort.InferenceSession(str(tmp_path / "wd" / "up_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    cos = []
    for _ in range(3):
        x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
        got = ex.run({"x": x})["y"]
        assert np.array_equal(got, sess.run(None, {"x": x})[0])
        f = run_ort(str(path), {"x": x})[0].ravel().astype(np.float64)
        g = got.ravel().astype(np.float64)
        cos.append(float(f @ g / (np.linalg.norm(f) * np.linalg.norm(g))))
    assert min(cos) > 0.999, cos
    # perf: costed on the tensor unit with the transposed conv's MACs
    est = estimate(art.header)
    op = next(o for o in est.ops if o.name == "up")
    assert op.unit == "tensor"
    assert op.macs == 8 * 6 * 6 * (8 // group) * kernel * kernel
