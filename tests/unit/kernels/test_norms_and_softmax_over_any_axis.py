"""LayerNorm over the channel axis and Softmax over any axis, in integers on the BPU.

ConvNeXt normalises the channels of NCHW feature maps (``x.mean(1, keepdim=True)`` ...), the
YOLOv8 box head's distribution focal loss takes a Softmax over axis 1 of (B, 16, 4, A), and
opset-11 Softmax flattens from its axis. Each case goes float ONNX -> calibrate -> compile ->
simulate and must be all-BPU, free of float fallbacks, one BPU subgraph, bit-exact against the
quantized ONNX model, and close to the float model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn
from onnx import TensorProto, helper

from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.ir.onnx_export import to_onnx
from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.passes import fuse_layernorm, optimize_float
from hbtool.kernels import LayerNorm, Softmax
from hbtool.costmodel.schedule import estimate
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.simulator.accel import accelerate
from hbtool.simulator.executor import Executor
from tests.helpers import featuremap_config, make_model, run_ort, tensor, vinfo
from tests.unit.kernels.test_numpy_and_onnx_forms_agree import run_onnx

RNG = np.random.default_rng(7)


# ----------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("axes,norm_shape", [((-3,), (24,)), ((-3, -2, -1), (24, 5, 7)), ((-2, -1), (5, 7)), ((-1,), (7,))])
def test_layernorm_over_axes_numpy_onnx_fast_agree_and_match_float(axes, norm_shape):
    q = RNG.integers(-32768, 32768, size=(2, 24, 5, 7))
    n = int(np.prod(norm_shape))
    gamma, beta = RNG.normal(1, 0.3, n), RNG.normal(0, 0.3, n)
    s_in, s_out = 1e-3, 4.0 / 127
    k = LayerNorm.build(s_in, gamma, beta, 1e-5, s_out, 16, 8, axes=axes, norm_shape=norm_shape)
    ref = k.apply_numpy(q)
    assert np.array_equal(run_onnx(k, q), ref)
    assert np.array_equal(accelerate(k)(q), ref)
    x = q * s_in
    ax = tuple(len(q.shape) + a for a in axes)
    bshape = norm_shape + (1,) * (-1 - axes[-1])
    y = (x - x.mean(ax, keepdims=True)) / np.sqrt(x.var(ax, keepdims=True) + 1e-5) * gamma.reshape(bshape) + beta.reshape(bshape)
    want = np.clip(np.floor(y / s_out + 0.5), -128, 127)
    assert np.abs(ref - want).max() <= 1 and np.mean(ref == want) > 0.999


@pytest.mark.parametrize("axis", [-1, -2, -3, -4])
@pytest.mark.parametrize("in_bits", [8, 16])
def test_softmax_over_any_axis_numpy_onnx_fast_agree_and_match_float(axis, in_bits):
    hi = 2 ** (in_bits - 1)
    q = RNG.integers(-hi + 1, hi, size=(2, 16, 4, 9))  # the minimum means a masked logit (e = 0)
    s = 8.0 / hi
    k = Softmax.build(s, in_bits, 16, axis=axis)
    ref = k.apply_numpy(q)
    assert np.array_equal(run_onnx(k, q), ref)
    assert np.array_equal(accelerate(k)(q), ref)
    x = q * s
    e = np.exp(x - x.max(axis, keepdims=True))
    assert np.abs(ref * 2.0**-15 - e / e.sum(axis, keepdims=True)).max() < 2**-13


@pytest.mark.parametrize("eps", [1e-6, 1e-2, 1.0])
def test_layernorm_eps_outside_the_root_matches_float(eps):
    q = RNG.integers(-3000, 3001, size=(2, 24, 5, 7))
    q[0, :, 0, 0] = 7  # a constant pixel: the root is eps alone
    gamma, beta = RNG.normal(1, 0.3, 24), RNG.normal(0, 0.3, 24)
    s_in, s_out = 1e-3, 4.0 / 127
    k = LayerNorm.build(s_in, gamma, beta, eps, s_out, 16, 8, axes=(-3,), eps_outside=True)
    ref = k.apply_numpy(q)
    assert np.array_equal(run_onnx(k, q), ref)
    assert np.array_equal(accelerate(k)(q) if accelerate(k) else k.apply_numpy(q), ref)
    x = q * s_in
    y = (x - x.mean(1, keepdims=True)) / (x.std(1, keepdims=True) + eps) * gamma.reshape(24, 1, 1) + beta.reshape(24, 1, 1)
    want = np.clip(np.floor(y / s_out + 0.5), -128, 127)
    assert np.abs(ref - want).max() <= 1 and np.mean(ref == want) > 0.999
    inside = LayerNorm.build(s_in, gamma, beta, eps, s_out, 16, 8, axes=(-3,)).apply_numpy(q)
    if eps >= 1e-2:  # the two placements of eps differ there: the kernel follows the model's
        assert not np.array_equal(inside, ref)


def test_layernorm_axes_refuse_ptf_and_bad_axes():
    with pytest.raises(ValueError, match="last axis"):
        LayerNorm.build(1e-3, np.ones(4), None, 1e-5, 0.1, 16, 8, ptf_alpha=[0, 1, 0, 1], axes=(-3,))
    with pytest.raises(ValueError, match="consecutive"):
        LayerNorm.build(1e-3, np.ones(4), None, 1e-5, 0.1, 16, 8, axes=(-3, -1))
    with pytest.raises(ValueError, match="negative"):
        Softmax.build(0.1, 8, 16, axis=1)


# ------------------------------------------------------------------------------ fusion
class ChannelsFirstLayerNorm(nn.Module):
    """ConvNeXt's LayerNorm for ``channels_first`` (NCHW) tensors, as HF and timm write it."""

    def __init__(self, c: int, eps: float = 1e-6):
        super().__init__()
        self.w = nn.Parameter(torch.rand(c) + 0.5)
        self.b = nn.Parameter(torch.randn(c) * 0.3)
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.w[:, None, None] * x + self.b[:, None, None]


class ConvNeXtStem(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)  # the same weights whatever ran before
        self.stem = nn.Conv2d(3, 16, 2, stride=2)
        self.norm = ChannelsFirstLayerNorm(16)
        self.head = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.head(self.norm(self.stem(x)))


def _export(module: nn.Module, shape, path: Path, opset: int = 17) -> Path:
    torch.manual_seed(0)
    module = module.eval()
    torch.onnx.export(module, torch.randn(*shape), str(path), opset_version=opset, input_names=["x"], dynamo=False)
    return path


def _same_in_float(original, graph, shape, tol=1e-5):
    for k in range(3):
        x = np.random.default_rng(k).standard_normal(shape).astype(np.float32) * (1 + 3 * k)
        ref, got = run_ort(original, {"x": x})[0], run_ort(to_onnx(graph), {"x": x})[0]
        assert np.abs(ref - got).max() <= tol * max(1.0, float(np.abs(ref).max()))


@pytest.mark.parametrize("opset", [13, 17])
def test_torch_channels_first_layernorm_fuses_to_one_node(tmp_path, opset):
    path = _export(ConvNeXtStem(), (1, 3, 16, 16), tmp_path / "m.onnx", opset)
    g = import_onnx(path)
    optimize_float(g)
    assert [n.op_type for n in g.nodes] == ["Conv", "ChannelLayerNorm", "Conv"]
    ln = g.nodes[1]
    assert ln.domain == "hbtool" and ln.attrs["axis"] == 1 and abs(ln.attrs["epsilon"] - 1e-6) < 1e-12 and ln.body is not None
    assert g.shape(ln.inputs[1]) == (16, 1, 1)
    _same_in_float(path, g, (1, 3, 16, 16))
    again = import_onnx(to_onnx(g))  # the exported function maps back to the fused node
    assert [n.op_type for n in again.nodes] == ["Conv", "ChannelLayerNorm", "Conv"] and again.nodes[1].body is not None


def _channel_ln(inv: str = "div", square: str = "pow", eps_first: bool = False, affine: bool = True, axis: int = 1,
                eps_outside: bool = False):
    """A hand-written channel LayerNorm on (1, 8, 4, 4) in one of its spellings."""
    c = 8
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[axis], keepdims=1, name="rm1"),
             helper.make_node("Sub", ["x", "m"], ["d"], name="sub")]
    nodes.append(helper.make_node("Pow", ["d", "two"], ["sq"], name="sq") if square == "pow" else helper.make_node("Mul", ["d", "d"], ["sq"], name="sq"))
    nodes.append(helper.make_node("ReduceMean", ["sq"], ["var"], axes=[axis], keepdims=1, name="rm2"))
    if eps_outside:  # d / (sqrt(var) + eps)
        nodes += [helper.make_node("Sqrt", ["var"], ["root"], name="sqrt"),
                  helper.make_node("Add", ["eps", "root"] if eps_first else ["root", "eps"], ["std"], name="add_eps")]
    else:
        nodes += [helper.make_node("Add", ["eps", "var"] if eps_first else ["var", "eps"], ["ve"], name="add_eps"),
                  helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt")]
    out = "y" if not affine else "n"
    if inv == "div":
        nodes.append(helper.make_node("Div", ["d", "std"], [out], name="div"))
    else:
        nodes += [helper.make_node("Reciprocal", ["std"], ["r"], name="recip"), helper.make_node("Mul", ["r", "d"], [out], name="mul_r")]
    inits = [tensor("two", np.array(2.0, np.float32)), tensor("eps", np.array(1e-6, np.float32))]
    if affine:
        nodes += [helper.make_node("Mul", ["g", "n"], ["gn"], name="mul_g"), helper.make_node("Add", ["gn", "b"], ["y"], name="add_b")]
        inits += [tensor("g", RNG.uniform(0.5, 1.5, (c, 1, 1)).astype(np.float32)), tensor("b", RNG.normal(0, 0.3, (c, 1, 1)).astype(np.float32))]
    return make_model(nodes, [vinfo("x", [1, c, 4, 4])], [vinfo("y", [1, c, 4, 4])], inits, opset=13)


@pytest.mark.parametrize("kwargs", [
    {}, {"inv": "reciprocal"}, {"square": "mul"}, {"eps_first": True}, {"affine": False}, {"axis": 2},
    {"eps_outside": True}, {"eps_outside": True, "inv": "reciprocal", "eps_first": True},
])
def test_channel_layernorm_spellings_fuse_exactly(kwargs):
    model = _channel_ln(**kwargs)
    g = import_onnx(model)
    assert fuse_layernorm(g) == 1
    # over axis 2 the (C, 1, 1) gamma/beta vary over another axis: they stay outside the LayerNorm
    assert [n.op_type for n in g.nodes] == (["ChannelLayerNorm"] if kwargs.get("axis", 1) == 1 else ["ChannelLayerNorm", "Mul", "Add"])
    assert g.nodes[0].attrs["axis"] == kwargs.get("axis", 1)
    assert g.nodes[0].attrs.get("eps_outside", 0) == int(kwargs.get("eps_outside", False))
    _same_in_float(model, g, (1, 8, 4, 4))


def test_layernorm_with_eps_outside_the_root_over_trailing_axes_stays_decomposed():
    model = _channel_ln(eps_outside=True, axis=3, affine=False)
    g = import_onnx(model)
    assert fuse_layernorm(g) == 0 and "ReduceMean" in g.op_types()


def test_channel_layernorm_with_eps_outside_runs_in_integers(tmp_path):
    model = _channel_ln(eps_outside=True)
    conv = helper.make_node("Conv", ["y", "w"], ["z"], name="conv")
    model.graph.node.append(conv)
    model.graph.initializer.append(tensor("w", np.random.default_rng(2).normal(0, 0.5, (4, 8, 1, 1)).astype(np.float32)))
    del model.graph.output[:]
    model.graph.output.append(vinfo("z", [1, 4, 4, 4]))
    model.graph.input[0].name = "x"
    path = tmp_path / "eo.onnx"
    onnx.save(model, str(path))
    result, compiled = _pipeline(path, (1, 8, 4, 4), tmp_path)
    ln = next(n for n in result.program.nodes if n.op_type == "HzLayerNorm")
    assert ln.meta["kernel"].eps_root > 0 and ln.meta["kernel"].E == 0
    _assert_integer_and_exact(result, compiled, path, (1, 8, 4, 4), "HzLayerNorm")
    _bit_exact_against_quantized_onnx(compiled, tmp_path, (1, 8, 4, 4))


# ---------------------------------------------------------------------------- pipeline
def _pipeline(model: Path, shape: tuple[int, ...], tmp: Path, level: str = "O3"):
    samples = [{"x": np.random.default_rng(100 + k).standard_normal(shape).astype(np.float32)} for k in range(6)]
    cfg = featuremap_config(tmp, model, samples, **{
        "input_parameters": {"input_shape": "x".join(map(str, shape)), "input_layout_train": "NCHW"},
        "calibration_parameters.calibration_type": "max", "compiler_parameters.optimize_level": level})
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    return result, compile_model(cfg)


def _assert_integer_and_exact(result, compiled, model: Path, shape, kernel_op: str, min_cosine: float = 0.99) -> list[float]:
    placed = {n.name: n.meta.get("on") for n in result.graph.nodes}
    assert set(placed.values()) == {"BPU"}, placed
    assert {n.meta.get("subgraph") for n in result.graph.nodes} == {0}
    assert not [n.name for n in result.program.nodes if n.meta.get("fallback")]
    assert compiled.header["fallbacks"] in ([], {}, None) and not compiled.header["cpu_subgraphs"]
    assert any(n.op_type == kernel_op for n in result.program.nodes)
    artifact = from_bytes(compiled.data)
    ex = Executor(artifact)
    cosines = []
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32)
        got = ex.run({"x": x})
        float_out = run_ort(model, {"x": x})
        for name, f in zip(ex.output_names, float_out):
            g = got[name].astype(np.float64).ravel()
            cosines.append(float(g @ f.ravel() / np.linalg.norm(g) / np.linalg.norm(f)))
    assert min(cosines) > min_cosine, cosines
    return cosines


def _bit_exact_against_quantized_onnx(compiled, tmp: Path, shape) -> None:
    ex = Executor(from_bytes(compiled.data))
    sess = ort.InferenceSession(str(tmp / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = (rng.standard_normal(shape) * 2).astype(np.float32)
        got = ex.run({"x": x})
        for name, ref in zip(ex.output_names, sess.run(None, {"x": x})):
            assert np.array_equal(got[name], ref), name


def test_convnext_channel_layernorm_runs_in_integers(tmp_path):
    shape = (1, 3, 16, 16)
    path = _export(ConvNeXtStem(), shape, tmp_path / "convnext.onnx")
    result, compiled = _pipeline(path, shape, tmp_path)
    cos = _assert_integer_and_exact(result, compiled, path, shape, "HzLayerNorm")
    _bit_exact_against_quantized_onnx(compiled, tmp_path, shape)
    ln = next(n for n in from_bytes(compiled.data).header["program"]["nodes"] if n["op_type"] == "HzLayerNorm")
    assert ln["meta"]["kernel"].axes == (-3,)  # the artifact round trip keeps the axis
    perf = estimate(from_bytes(compiled.data).header)
    op = next(o for o in perf.ops if o.op_type == "HzLayerNorm")
    assert op.unit == "vector" and "strided" in op.note
    assert not any(o.op_type == "Transpose" for o in perf.ops)
    assert min(cos) > 0.995


def _softmax_then_conv(shape, axis: int, opset: int = 17, conv_in: int = 16) -> onnx.ModelProto:
    """Softmax(axis) of the input followed by a 1x1 conv over axis 1 (DFL: the bins' expectation)."""
    w = np.arange(conv_in, dtype=np.float32).reshape(1, conv_in, 1, 1)
    nodes = [helper.make_node("Softmax", ["x"], ["p"], axis=axis, name="softmax"),
             helper.make_node("Conv", ["p", "w"], ["y"], name="dfl_conv")]
    out = [shape[0], 1, *shape[2:]]
    return make_model(nodes, [vinfo("x", list(shape))], [vinfo("y", out)], [tensor("w", w)], opset=opset)


@pytest.mark.parametrize("shape,axis", [((1, 16, 4, 64), 1), ((1, 16, 16, 8), -2)], ids=["dfl_axis1", "axis_minus2"])
def test_softmax_over_a_non_last_axis_runs_in_integers(tmp_path, shape, axis):
    path = tmp_path / "sm.onnx"
    onnx.save(_softmax_then_conv(shape, axis), str(path))
    result, compiled = _pipeline(path, shape, tmp_path)
    sm = next(n for n in result.program.nodes if n.op_type == "HzSoftmax")
    assert sm.meta["kernel"].axis == (axis if axis < 0 else axis - len(shape))
    _assert_integer_and_exact(result, compiled, path, shape, "HzSoftmax")
    _bit_exact_against_quantized_onnx(compiled, tmp_path, shape)


def test_yolov8_dfl_head_with_its_view_and_transpose_runs_in_integers(tmp_path):
    """The box head as exported: (1, 64, A) viewed as (1, 4, 16, A), transposed to (1, 16, 4, A), Softmax(1), 1x1 conv."""
    rng = np.random.default_rng(14)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], name="box_conv"),
             helper.make_node("Reshape", ["c", "s1"], ["r"], name="view"),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3], name="transpose"),
             helper.make_node("Softmax", ["t"], ["p"], axis=1, name="softmax"),
             helper.make_node("Conv", ["p", "w2"], ["d"], name="dfl_conv"),
             helper.make_node("Reshape", ["d", "s2"], ["y"], name="boxes")]
    inits = [tensor("w1", rng.normal(0, 0.3, (64, 8, 3, 3)).astype(np.float32)), tensor("s1", np.array([1, 4, 16, 64], np.int64)),
             tensor("w2", np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1)), tensor("s2", np.array([1, 4, 64], np.int64))]
    path = tmp_path / "dfl.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 8, 8, 8])], [vinfo("y", [1, 4, 64])], inits), str(path))
    result, compiled = _pipeline(path, (1, 8, 8, 8), tmp_path)
    assert next(n for n in result.program.nodes if n.op_type == "HzSoftmax").meta["kernel"].axis == -3
    _assert_integer_and_exact(result, compiled, path, (1, 8, 8, 8), "HzSoftmax", min_cosine=0.999)
    _bit_exact_against_quantized_onnx(compiled, tmp_path, (1, 8, 8, 8))


def test_opset11_softmax_flattens_from_its_axis_and_runs_in_integers(tmp_path):
    """Opset-11 Softmax(axis=1) of (1, 8, 64) is one softmax over all 512 values (coerced to 2-D)."""
    c = 8
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Reshape", ["c1", "s3"], ["r"], name="to3d"),
             helper.make_node("Softmax", ["r"], ["p"], axis=1, name="softmax"),
             helper.make_node("Reshape", ["p", "s4"], ["p4"], name="to4d"),
             helper.make_node("Conv", ["p4", "w2"], ["y"], name="conv2")]
    # logits of a few units: a softmax over 512 values that is not one spike (whose peak a max calibration would clip)
    inits = [tensor("w1", rng.normal(0, 0.2, (c, 3, 3, 3)).astype(np.float32)), tensor("s3", np.array([1, c, 64], np.int64)),
             tensor("s4", np.array([1, c, 8, 8], np.int64)), tensor("w2", rng.normal(0, 0.5, (4, c, 1, 1)).astype(np.float32))]
    model = make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], inits, opset=11)
    model.ir_version = 6
    path = tmp_path / "sm11.onnx"
    onnx.save(model, str(path))
    g = import_onnx(path)
    assert "Shape" not in g.op_types()  # the converter's shape computation is folded
    sm = next(n for n in g.nodes if n.op_type == "Softmax")
    assert g.shape(sm.inputs[0])[int(sm.attrs["axis"])] == c * 64
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert np.abs(run_ort(path, {"x": x})[0] - run_ort(to_onnx(g), {"x": x})[0]).max() < 1e-5
    result, compiled = _pipeline(path, (1, 3, 8, 8), tmp_path)
    _assert_integer_and_exact(result, compiled, path, (1, 3, 8, 8), "HzSoftmax")
    _bit_exact_against_quantized_onnx(compiled, tmp_path, (1, 3, 8, 8))


def test_layernormalization_axis1_on_nchw_runs_in_integers(tmp_path):
    """Opset-17 LayerNormalization(axis=1) of NCHW normalises C, H and W together (N = 512 here)."""
    c = 8
    rng = np.random.default_rng(12)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("LayerNormalization", ["c1", "g", "b"], ["n"], axis=1, epsilon=1e-5, name="ln"),
             helper.make_node("Conv", ["n", "w2"], ["y"], name="conv2")]
    inits = [tensor("w1", rng.normal(0, 0.5, (c, 3, 3, 3)).astype(np.float32)),
             tensor("g", rng.uniform(0.5, 1.5, (c, 8, 8)).astype(np.float32)), tensor("b", rng.normal(0, 0.3, (c, 8, 8)).astype(np.float32)),
             tensor("w2", rng.normal(0, 0.5, (4, c, 1, 1)).astype(np.float32))]
    path = tmp_path / "ln1.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], inits), str(path))
    result, compiled = _pipeline(path, (1, 3, 8, 8), tmp_path)
    ln = next(n for n in result.program.nodes if n.op_type == "HzLayerNorm")
    assert ln.meta["kernel"].axes == (-3, -2, -1) and ln.meta["kernel"].n == c * 64
    _assert_integer_and_exact(result, compiled, path, (1, 3, 8, 8), "HzLayerNorm")
    _bit_exact_against_quantized_onnx(compiled, tmp_path, (1, 3, 8, 8))


def test_instance_normalization_runs_in_integers(tmp_path):
    """InstanceNormalization: LayerNorm over H, W with gamma/beta per channel (the kernel's ``param_shape``)."""
    c = 8
    rng = np.random.default_rng(13)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("InstanceNormalization", ["c1", "g", "b"], ["n"], epsilon=1e-5, name="inorm"),
             helper.make_node("Conv", ["n", "w2"], ["y"], name="conv2")]
    inits = [tensor("w1", rng.normal(0, 0.5, (c, 3, 3, 3)).astype(np.float32)),
             tensor("g", rng.uniform(0.5, 1.5, c).astype(np.float32)), tensor("b", rng.normal(0, 0.3, c).astype(np.float32)),
             tensor("w2", rng.normal(0, 0.5, (4, c, 1, 1)).astype(np.float32))]
    path = tmp_path / "inorm.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], inits), str(path))
    result, compiled = _pipeline(path, (1, 3, 8, 8), tmp_path)
    k = next(n for n in result.program.nodes if n.op_type == "HzLayerNorm").meta["kernel"]
    assert k.axes == (-2, -1) and k.norm_dims == (8, 8) and k.G.shape == (c, 1, 1)
    _assert_integer_and_exact(result, compiled, path, (1, 3, 8, 8), "HzLayerNorm")
    _bit_exact_against_quantized_onnx(compiled, tmp_path, (1, 3, 8, 8))
