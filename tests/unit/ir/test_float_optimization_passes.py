"""Float optimization passes: each fires on the forms real exporters write and only on those.

Every positive case runs the original model and the rewritten IR (exported with ``to_onnx``) in
onnxruntime and requires max |a - b| / max |a| <= 1e-4. Negative cases change one constant or
share one intermediate tensor and require that nothing is fused.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import warnings
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from hbtool.ir import HBTOOL_DOMAIN, Graph, import_onnx, to_onnx
from hbtool.ir.passes import (
    FLOAT_PASSES,
    collapse_reshape_transpose,
    fold_batchnorm,
    fuse_activations,
    fuse_gelu,
    fuse_layernorm,
    fuse_linear,
    fuse_roll,
    fuse_window_ops,
    optimize_float,
    remove_identity,
)

TOL = 1e-4
RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------- helpers


def _run(model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, dict(feeds))))


def assert_same_as_onnxruntime(original_model_or_path, graph: Graph, feeds: Mapping[str, np.ndarray], tol: float = TOL) -> None:
    """The rewritten graph, exported, computes the original model's outputs (same names)."""
    exported = to_onnx(graph)
    onnx.checker.check_model(exported)
    ref = _run(original_model_or_path, feeds)
    got = _run(exported, feeds)
    assert list(ref) == list(got), f"output names changed: {list(ref)} -> {list(got)}"
    for name, r in ref.items():
        g = got[name]
        assert r.shape == g.shape, (name, r.shape, g.shape)
        err = float(np.abs(r.astype(np.float64) - g).max() / max(np.abs(r).max(), 1e-12))
        assert err <= tol, f"{name}: relative error {err:.3g}"


def _feeds(graph: Graph) -> dict[str, np.ndarray]:
    return {n: RNG.standard_normal(graph.shape(n)).astype(graph.dtype(n)) for n in graph.inputs}


def _export(module: nn.Module, args, path: Path, opset: int, dynamic_axes=None, input_names=("x",), output_names=None) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            args,
            str(path),
            opset_version=opset,
            dynamo=False,
            input_names=list(input_names),
            output_names=list(output_names) if output_names else None,
            dynamic_axes=dynamic_axes,
        )
    return path


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)  # fills output shapes left as None
    onnx.checker.check_model(m)
    return m


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _t(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _ops(graph: Graph) -> dict[str, int]:
    return graph.op_types()


def _nodes(graph: Graph, op: str):
    return [n for n in graph.nodes if n.op_type == op]


def _check(original, graph: Graph) -> None:
    assert_same_as_onnxruntime(original, graph, _feeds(graph))


def _unique_names(graph: Graph) -> None:
    names = [n.name for n in graph.nodes]
    assert len(names) == len(set(names))


# ------------------------------------------------------------------------ remove_identity


def test_remove_identity_keeps_output_names():
    nodes = [
        helper.make_node("Identity", ["x"], ["a"], name="id0"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Dropout", ["b"], ["c"], name="drop"),
        helper.make_node("Identity", ["c"], ["y"], name="id1"),
    ]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], opset=13)
    g = import_onnx(model, fold=False)
    assert remove_identity(g) == 3
    assert _ops(g) == {"Relu": 1}
    assert g.outputs == ["y"] and g.nodes[0].outputs == ["y"]
    _check(model, g)


def test_remove_identity_input_to_output_stays():
    """An Identity from a graph input to a graph output cannot go without renaming one of them."""
    model = _model([helper.make_node("Identity", ["x"], ["y"], name="id")], [_vi("x", [2])], [_vi("y", [2])])
    g = import_onnx(model, fold=False)
    assert remove_identity(g) == 0
    assert g.inputs == ["x"] and g.outputs == ["y"]


def test_remove_identity_noop_pad_slice_cast():
    """Swin's pad-to-window-multiple and crop become no-ops once H and W are fixed multiples."""
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Slice", ["p", "st", "en", "ax"], ["s"], name="crop"),
        helper.make_node("Cast", ["s"], ["c"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
        helper.make_node("Slice", ["x", "en", "st", "ax", "neg"], ["y2"], name="flip"),  # reverses: stays
    ]
    inits = [
        _t("pads", np.zeros(8, np.int64)),
        _t("st", np.array([0, 0], np.int64)),
        _t("en", np.array([4, 6], np.int64)),
        _t("ax", np.array([1, 2], np.int64)),
        _t("neg", np.array([-1, -1], np.int64)),
    ]
    model = _model(nodes, [_vi("x", [1, 4, 6, 2])], [_vi("y", [1, 4, 6, 2]), _vi("y2", [1, 3, 5, 2])], inits, opset=13)
    g = import_onnx(model, fold=False)
    assert remove_identity(g) == 3
    assert _ops(g) == {"Relu": 1, "Slice": 1}
    _check(model, g)


# ------------------------------------------------------------------------- fold_batchnorm


def _bn(name: str, inp: str, out: str, c: int, eps: float = 1e-5):
    inits = [
        _t(f"{name}.g", RNG.uniform(0.5, 1.5, c).astype(np.float32)),
        _t(f"{name}.b", _f32(c)),
        _t(f"{name}.m", _f32(c)),
        _t(f"{name}.v", RNG.uniform(0.5, 2.0, c).astype(np.float32)),
    ]
    node = helper.make_node("BatchNormalization", [inp, f"{name}.g", f"{name}.b", f"{name}.m", f"{name}.v"], [out], name=name, epsilon=eps)
    return node, inits


def _bn_case(kind: str) -> onnx.ModelProto:
    if kind == "conv":
        node = helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv", pads=[1, 1, 1, 1])
        inits = [_t("w", _f32(6, 3, 3, 3)), _t("b", _f32(6))]
        x, y, c = [1, 3, 8, 8], [1, 6, 8, 8], 6
    elif kind == "conv_nobias_grouped":
        node = helper.make_node("Conv", ["x", "w"], ["h"], name="conv", group=3)
        inits = [_t("w", _f32(6, 1, 3, 3))]
        x, y, c = [1, 3, 8, 8], [1, 6, 6, 6], 6
    elif kind == "convtranspose":
        node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["h"], name="deconv", group=2, strides=[2, 2])
        inits = [_t("w", _f32(4, 3, 2, 2)), _t("b", _f32(6))]
        x, y, c = [1, 4, 5, 5], [1, 6, 10, 10], 6
    elif kind == "gemm":
        node = helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1, alpha=0.5, beta=2.0)
        inits = [_t("w", _f32(7, 5)), _t("b", _f32(7))]
        x, y, c = [3, 5], [3, 7], 7
    else:  # matmul
        node = helper.make_node("MatMul", ["x", "w"], ["h"], name="mm")
        inits = [_t("w", _f32(5, 7))]
        x, y, c = [3, 5], [3, 7], 7
    bn, bn_inits = _bn("bn", "h", "y", c)
    return _model([node, bn], [_vi("x", x)], [_vi("y", y)], inits + bn_inits, opset=13)


@pytest.mark.parametrize("kind", ["conv", "conv_nobias_grouped", "convtranspose", "gemm", "matmul"])
def test_fold_batchnorm_into_layer(kind):
    model = _bn_case(kind)
    g = import_onnx(model, fold=False)
    assert fold_batchnorm(g) == 1
    ops = _ops(g)
    assert "BatchNormalization" not in ops and "Mul" not in ops
    assert g.outputs == ["y"]
    _check(model, g)


def test_fold_batchnorm_shared_conv_output_becomes_mul_add():
    conv = helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv")
    relu = helper.make_node("Relu", ["h"], ["z"], name="relu")  # second reader of the conv output
    bn, bn_inits = _bn("bn", "h", "y", 4)
    bn2, bn2_inits = _bn("bn2", "z", "y2", 4)  # after a Relu: nothing to fold into
    model = _model(
        [conv, relu, bn, bn2],
        [_vi("x", [1, 3, 6, 6])],
        [_vi("y", [1, 4, 4, 4]), _vi("y2", [1, 4, 4, 4])],
        [_t("w", _f32(4, 3, 3, 3)), _t("b", _f32(4))] + bn_inits + bn2_inits,
        opset=13,
    )
    g = import_onnx(model, fold=False)
    w_before = g.const(_nodes(g, "Conv")[0].inputs[1])
    assert fold_batchnorm(g) == 2
    assert _ops(g) == {"Conv": 1, "Relu": 1, "Mul": 2, "Add": 2}
    assert np.array_equal(g.const(_nodes(g, "Conv")[0].inputs[1]), w_before)
    _check(model, g)


def test_fold_batchnorm_torch_bn1d_after_relu(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 5)
            self.bn = nn.BatchNorm1d(5)
            with torch.no_grad():
                self.bn.running_mean.uniform_(-1, 1)
                self.bn.running_var.uniform_(0.5, 2)

        def forward(self, x):
            return self.bn(torch.relu(self.fc(x)))

    path = _export(M(), torch.randn(4, 6), tmp_path / "bn1d.onnx", 13)
    g = import_onnx(path)
    assert fold_batchnorm(g) == 1
    assert "BatchNormalization" not in _ops(g)
    _check(path, g)


# ------------------------------------------------------------- collapse_reshape_transpose


def test_collapse_chains_and_keep_output_name():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Transpose", ["r"], ["t1"], name="t1", perm=[0, 2, 1]),
        helper.make_node("Transpose", ["t1"], ["y"], name="t2", perm=[0, 2, 1]),  # identity overall
        helper.make_node("Unsqueeze", ["x", "ax0"], ["u"], name="unsq"),
        helper.make_node("Reshape", ["u", "s1"], ["v"], name="rs1"),
        helper.make_node("Flatten", ["v"], ["w"], name="flat", axis=2),
        helper.make_node("Squeeze", ["w", "ax0"], ["z"], name="sq"),
        helper.make_node("Reshape", ["z", "s_same"], ["z2"], name="rs_same"),  # to the same shape
        helper.make_node("Transpose", ["z2"], ["q"], name="t_unit", perm=[1, 0, 2]),  # moves a 1-axis only
        helper.make_node("Sigmoid", ["q"], ["y2"], name="sig"),
    ]
    inits = [
        _t("ax0", np.array([0], np.int64)),
        _t("s1", np.array([1, 1, 2, 3, 4], np.int64)),
        _t("s_same", np.array([1, 2, 12], np.int64)),
    ]
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4]), _vi("y2", [2, 1, 12])], inits, opset=13)
    g = import_onnx(model, fold=False)
    assert collapse_reshape_transpose(g) > 0
    ops = _ops(g)
    assert "Transpose" not in ops and "Squeeze" not in ops and "Unsqueeze" not in ops and "Flatten" not in ops
    assert ops["Reshape"] == 1
    assert g.outputs == ["y", "y2"]
    _check(model, g)
    assert collapse_reshape_transpose(g) == 0  # stable


def test_collapse_composes_transposes_and_keeps_shared_ones():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t1"], name="t1", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], name="t2", perm=[0, 2, 1, 3]),
        helper.make_node("Relu", ["t2"], ["y"], name="relu"),
        helper.make_node("Neg", ["t1"], ["y2"], name="neg"),  # t1 is read elsewhere: it stays
    ]
    model = _model(nodes, [_vi("x", [1, 2, 3, 4])], [_vi("y", None), _vi("y2", None)], opset=13)
    g = import_onnx(model, fold=False)
    assert collapse_reshape_transpose(g) == 1
    trs = _nodes(g, "Transpose")
    assert len(trs) == 2 and all(t.inputs == ["x"] for t in trs)
    assert {tuple(t.attrs["perm"]) for t in trs} == {(0, 2, 3, 1), (0, 3, 2, 1)}
    _check(model, g)


def test_collapse_merges_identical_reshapes():
    """onnxruntime's Gemm fusion writes one input Reshape per projection (q, k, v)."""
    nodes = [helper.make_node("Reshape", ["x", "s"], [f"r{k}"], name=f"rs{k}") for k in range(3)]
    nodes += [helper.make_node("Gemm", [f"r{k}", f"w{k}"], [f"y{k}"], name=f"gemm{k}") for k in range(3)]
    inits = [_t("s", np.array([12, 4], np.int64))] + [_t(f"w{k}", _f32(4, 5)) for k in range(3)]
    model = _model(nodes, [_vi("x", [2, 6, 4])], [_vi(f"y{k}", [12, 5]) for k in range(3)], inits, opset=13)
    g = import_onnx(model, fold=False)
    assert collapse_reshape_transpose(g) == 2
    assert _ops(g) == {"Reshape": 1, "Gemm": 3}
    _check(model, g)


def test_collapse_leaves_real_transposes():
    nodes = [helper.make_node("Transpose", ["x"], ["y"], name="t", perm=[0, 2, 1])]
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 4, 3])], opset=13)
    g = import_onnx(model, fold=False)
    assert collapse_reshape_transpose(g) == 0
    assert _ops(g) == {"Transpose": 1}


# ------------------------------------------------------------------------- fuse_layernorm


@pytest.mark.parametrize("opset", [11, 13])
def test_layernorm_torch_legacy_export(tmp_path, opset):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(16)
            with torch.no_grad():
                self.ln.weight.uniform_(0.5, 1.5)
                self.ln.bias.uniform_(-1, 1)

        def forward(self, x):
            return self.ln(x) * 2.0

    path = _export(M(), torch.randn(2, 5, 16), tmp_path / "ln.onnx", opset)
    g = import_onnx(path)
    assert fuse_layernorm(g) == 1
    ln = _nodes(g, "LayerNormalization")[0]
    assert ln.name == "/ln/LayerNorm" and ln.domain == "" and ln.body is None
    assert ln.attrs["axis"] == -1 and math.isclose(ln.attrs["epsilon"], 1e-5, rel_tol=1e-6)
    assert set(_ops(g)) == {"LayerNormalization", "Mul"}
    _check(path, g)


def _paddle_ln(opset: int = 12, eps: float = 1e-5, pow_exp: float = 2.0, axes=(-1,), shape=(2, 4, 8), extra_use: bool = False):
    """Paddle2ONNX-style LayerNorm: ReduceMean with an axes attribute, p2o.* names."""
    c = shape[-1]
    ax = list(axes)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], name="p2o.ReduceMean.0", axes=ax, keepdims=1),
        helper.make_node("Sub", ["x", "m"], ["d"], name="p2o.Sub.0"),
        helper.make_node("Pow", ["d", "two"], ["sq"], name="p2o.Pow.0"),
        helper.make_node("ReduceMean", ["sq"], ["var"], name="p2o.ReduceMean.1", axes=ax, keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="p2o.Add.0"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="p2o.Sqrt.0"),
        helper.make_node("Div", ["d", "std"], ["n"], name="p2o.Div.0"),
        helper.make_node("Mul", ["n", "gamma"], ["nm"], name="p2o.Mul.0"),
        helper.make_node("Add", ["nm", "beta"], ["y"], name="p2o.Add.1"),
    ]
    outs = [_vi("y", list(shape))]
    if extra_use:
        nodes.append(helper.make_node("Relu", ["d"], ["y2"], name="p2o.Relu.0"))
        outs.append(_vi("y2", list(shape)))
    inits = [
        _t("two", np.array(pow_exp, np.float32)),
        _t("eps", np.array(eps, np.float32)),
        _t("gamma", RNG.uniform(0.5, 1.5, c).astype(np.float32)),
        _t("beta", _f32(c)),
    ]
    return _model(nodes, [_vi("x", list(shape))], outs, inits, opset=opset)


def test_layernorm_paddle_style_opset12():
    model = _paddle_ln()
    g = import_onnx(model)
    assert fuse_layernorm(g) == 1
    assert _ops(g) == {"LayerNormalization": 1}
    ln = g.nodes[0]
    assert ln.name == "p2o.Add.1"  # no shared scope: the last matched node's name
    assert np.allclose(g.const(ln.inputs[1]), numpy_helper.to_array(model.graph.initializer[2]))
    _check(model, g)


def _ln18(variant: str, axes=(-1,), shape=(2, 3, 8)):
    """Opset-18 LayerNorm variants (ReduceMean axes as an input)."""
    rank = len(shape)
    norm = shape[rank - len(axes) :]
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="/enc/ln/rm1"),
        helper.make_node("Sub", ["x", "m"], ["d"], name="/enc/ln/sub"),
        helper.make_node("Mul", ["d", "d"], ["sq"], name="/enc/ln/sq"),
        helper.make_node("ReduceMean", ["sq", "axes"], ["var"], name="/enc/ln/rm2"),
        helper.make_node("Add", ["eps", "var"], ["ve"], name="/enc/ln/add_eps"),
    ]
    if variant == "reciprocal":
        nodes += [
            helper.make_node("Sqrt", ["ve"], ["std"], name="/enc/ln/sqrt"),
            helper.make_node("Reciprocal", ["std"], ["inv"], name="/enc/ln/recip"),
            helper.make_node("Mul", ["inv", "d"], ["n"], name="/enc/ln/norm"),
            helper.make_node("Mul", ["gamma", "n"], ["nm"], name="/enc/ln/scale"),
            helper.make_node("Add", ["beta", "nm"], ["y"], name="/enc/ln/shift"),
        ]
    else:  # rsqrt as Pow(-0.5), no affine part
        nodes += [
            helper.make_node("Pow", ["ve", "mhalf"], ["inv"], name="/enc/ln/rsqrt"),
            helper.make_node("Mul", ["d", "inv"], ["y"], name="/enc/ln/norm"),
        ]
    inits = [
        _t("axes", np.array(axes, np.int64)),
        _t("eps", np.array([1e-6], np.float32)),
        _t("mhalf", np.array(-0.5, np.float32)),
        _t("gamma", RNG.uniform(0.5, 1.5, norm).astype(np.float32)),
        _t("beta", _f32(*norm)),
    ]
    used = {i for n in nodes for i in n.input}
    return _model(nodes, [_vi("x", list(shape))], [_vi("y", list(shape))], [i for i in inits if i.name in used], opset=18)


@pytest.mark.parametrize("variant,axes", [("reciprocal", (-1,)), ("rsqrt", (-1,)), ("reciprocal", (-2, -1)), ("rsqrt", (1, 2))])
def test_layernorm_opset18_axes_input(variant, axes):
    model = _ln18(variant, axes)
    g = import_onnx(model)
    assert g.opset == 18
    assert fuse_layernorm(g) == 1
    assert _ops(g) == {"LayerNormalization": 1}
    ln = g.nodes[0]
    assert ln.name == "/enc/ln/LayerNorm"
    assert ln.attrs["axis"] == -len(axes) and math.isclose(ln.attrs["epsilon"], 1e-6, rel_tol=1e-5)
    _check(model, g)


def test_layernorm_after_transposed_patch_embedding(tmp_path):
    """onnxruntime pushes the (1, 2) Transpose of ``flatten(2).transpose(1, 2)`` into the LayerNorm."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Conv2d(3, 8, 2, 2)
            self.norm = nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(self.proj(x).flatten(2).transpose(1, 2))

    path = _export(M(), torch.randn(1, 3, 8, 8), tmp_path / "pe.onnx", 13)
    g = import_onnx(path)
    assert fuse_layernorm(g) == 1
    assert "ReduceMean" not in _ops(g) and _ops(g)["LayerNormalization"] == 1
    _check(path, g)


def _tf_ln(gamma: bool = True, eps: float = 1e-3, share: bool = False):
    """Keras LayerNorm through tf2onnx: moments, then ``x * r + (beta - mean * r)``."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], name="model/ln/moments/mean", axes=[-1], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["d"], name="model/ln/moments/SquaredDifference"),
        helper.make_node("Mul", ["d", "d"], ["sq"], name="model/ln/moments/SquaredDifference__1"),
        helper.make_node("ReduceMean", ["sq"], ["var"], name="model/ln/moments/variance", axes=[-1], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="model/ln/batchnorm/add"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="model/ln/batchnorm/Rsqrt__1"),
        helper.make_node("Reciprocal", ["std"], ["r"], name="model/ln/batchnorm/Rsqrt"),
    ]
    scale = "r"
    if gamma:
        nodes.append(helper.make_node("Mul", ["r", "gamma"], ["rg"], name="model/ln/batchnorm/mul"))
        scale = "rg"
    nodes += [
        helper.make_node("Mul", ["x", scale], ["m1"], name="model/ln/batchnorm/mul_1"),
        helper.make_node("Mul", ["mean", scale], ["m2"], name="model/ln/batchnorm/mul_2"),
        helper.make_node("Sub", ["beta", "m2"], ["b"], name="model/ln/batchnorm/sub"),
        helper.make_node("Add", ["m1", "b"], ["y"], name="model/ln/batchnorm/add_1"),
    ]
    outs = [_vi("y", [2, 5, 6])]
    if share:
        outs.append(_vi("m2", [2, 5, 6]))
    inits = [_t("eps", np.array(eps, np.float32)), _t("gamma", RNG.uniform(0.5, 1.5, 6).astype(np.float32)), _t("beta", _f32(6))]
    used = {i for n in nodes for i in n.input}
    return _model(nodes, [_vi("x", [2, 5, 6])], outs, [i for i in inits if i.name in used], opset=13)


@pytest.mark.parametrize("gamma", [True, False])
def test_layernorm_tf_batchnorm_form(gamma):
    model = _tf_ln(gamma)
    g = import_onnx(model)
    assert fuse_layernorm(g) == 1
    assert _ops(g) == {"LayerNormalization": 1}
    assert g.nodes[0].name == "model/ln/LayerNorm" and math.isclose(g.nodes[0].attrs["epsilon"], 1e-3, rel_tol=1e-6)
    _check(model, g)


def test_layernorm_tf_form_shared_intermediate():
    g = import_onnx(_tf_ln(share=True))
    assert fuse_layernorm(g) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"eps": 0.0},  # eps must be > 0
        {"pow_exp": 3.0},  # not a square
        {"axes": (0, 1)},  # two axes, not the trailing ones
        {"extra_use": True},  # x - mean read outside the pattern
    ],
)
def test_layernorm_negative(kwargs):
    model = _paddle_ln(**kwargs)
    g = import_onnx(model)
    before = _ops(g)
    assert fuse_layernorm(g) == 0
    assert _ops(g) == before


def test_layernorm_existing_op_stays(tmp_path):
    path = _export(nn.LayerNorm(8), torch.randn(2, 8), tmp_path / "ln17.onnx", 17)
    g = import_onnx(path)
    assert _ops(g) == {"LayerNormalization": 1}
    assert fuse_layernorm(g) == 0


def test_layernorm_and_gelu_dynamo_opset18(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.rand(8) + 0.5)
            self.b = nn.Parameter(torch.randn(8))

        def forward(self, x):
            mu = x.mean(-1, keepdim=True)
            d = x - mu
            var = (d * d).mean(-1, keepdim=True)
            y = d / torch.sqrt(var + 1e-5) * self.w + self.b
            return F.gelu(y)

    path = tmp_path / "dyn18.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(M().eval(), (torch.randn(2, 4, 8),), str(path), opset_version=18, dynamo=True, input_names=["x"])
    g = import_onnx(path)
    assert g.opset >= 18
    optimize_float(g)
    assert _ops(g) == {"LayerNormalization": 1, "Gelu": 1}
    _check(path, g)


# ------------------------------------------------------------------------------ fuse_gelu


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_torch_legacy(tmp_path, approximate):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.act = nn.GELU(approximate=approximate)

        def forward(self, x):
            return self.act(self.fc(x))

    path = _export(M(), torch.randn(3, 8), tmp_path / "gelu.onnx", 13)
    g = import_onnx(path)
    assert fuse_gelu(g) == 1
    gelu = _nodes(g, "Gelu")[0]
    assert gelu.attrs == {"approximate": approximate}
    assert gelu.domain == HBTOOL_DOMAIN and gelu.body is not None  # opset < 20: body kept
    assert gelu.name == "/act/Gelu"
    assert set(_ops(g)) == {"Gemm", "Gelu"}
    _check(path, g)


def _gelu_erf(form: str, opset: int = 17, div: float = math.sqrt(2.0), half: float = 0.5, share_erf: bool = False):
    nodes = []
    if form == "mul_inv_sqrt2":
        nodes.append(helper.make_node("Mul", ["k", "x"], ["s"], name="scale"))
        k = 1.0 / div
    else:
        nodes.append(helper.make_node("Div", ["x", "k"], ["s"], name="scale"))
        k = div
    nodes += [helper.make_node("Erf", ["s"], ["e"], name="erf"), helper.make_node("Add", ["one", "e"], ["a"], name="plus1")]
    if form == "half_first":  # (x * 0.5) * (1 + erf)
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"], name="half"), helper.make_node("Mul", ["h", "a"], ["y"], name="out")]
    else:  # x * ((1 + erf) * 0.5)
        nodes += [helper.make_node("Mul", ["a", "half"], ["h"], name="half"), helper.make_node("Mul", ["x", "h"], ["y"], name="out")]
    outs = [_vi("y", [2, 6])]
    if share_erf:
        nodes.append(helper.make_node("Neg", ["e"], ["y2"], name="neg"))
        outs.append(_vi("y2", [2, 6]))
    inits = [_t("k", np.array(k, np.float32)), _t("one", np.array(1.0, np.float32)), _t("half", np.array(half, np.float32))]
    return _model(nodes, [_vi("x", [2, 6])], outs, inits, opset=opset)


@pytest.mark.parametrize("form", ["mul_inv_sqrt2", "half_first", "half_of_sum"])
def test_gelu_erf_variants(form):
    model = _gelu_erf(form)
    g = import_onnx(model)
    assert fuse_gelu(g) == 1
    assert _ops(g) == {"Gelu": 1}
    _check(model, g)


def test_gelu_opset20_is_standard_op():
    model = _gelu_erf("half_first", opset=20)
    g = import_onnx(model, fold=False)  # onnxruntime itself fuses Gelu at opset 20
    assert fuse_gelu(g) == 1
    gelu = g.nodes[0]
    assert (gelu.op_type, gelu.domain, gelu.body) == ("Gelu", "", None)
    assert len(to_onnx(g).functions) == 0
    _check(model, g)


def test_gelu_tanh_pow_form():
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["c"], name="/mlp/act/pow"),
        helper.make_node("Mul", ["c", "k1"], ["c1"], name="/mlp/act/mul_c"),
        helper.make_node("Add", ["c1", "x"], ["s"], name="/mlp/act/add"),
        helper.make_node("Mul", ["s", "k2"], ["u"], name="/mlp/act/mul_k"),
        helper.make_node("Tanh", ["u"], ["t"], name="/mlp/act/tanh"),
        helper.make_node("Add", ["t", "one"], ["a"], name="/mlp/act/plus1"),
        helper.make_node("Mul", ["x", "a"], ["xa"], name="/mlp/act/mul_x"),
        helper.make_node("Div", ["xa", "two"], ["y"], name="/mlp/act/half"),
    ]
    inits = [
        _t("three", np.array(3.0, np.float32)),
        _t("k1", np.array(0.044715, np.float32)),
        _t("k2", np.array(math.sqrt(2 / math.pi), np.float32)),
        _t("one", np.array(1.0, np.float32)),
        _t("two", np.array(2.0, np.float32)),
    ]
    model = _model(nodes, [_vi("x", [4, 5])], [_vi("y", [4, 5])], inits, opset=13)
    g = import_onnx(model)
    assert fuse_gelu(g) == 1
    assert g.nodes[0].attrs["approximate"] == "tanh" and g.nodes[0].name == "/mlp/act/Gelu"
    _check(model, g)


@pytest.mark.parametrize("kwargs", [{"div": 1.5}, {"half": 0.6}, {"share_erf": True}])
def test_gelu_negative(kwargs):
    model = _gelu_erf("half_of_sum", **kwargs)
    g = import_onnx(model)
    assert fuse_gelu(g) == 0
    assert "Gelu" not in _ops(g)


# ----------------------------------------------------------------------- fuse_activations


class _Acts(nn.Module):
    def forward(self, a, b, c, d, e, f):
        return (
            F.relu6(a + 3.0) / 6.0,  # HardSigmoid
            b * F.relu6(b + 3.0) / 6.0,  # HardSwish, raw MobileNetV3 form
            c * (F.relu6(c + 3.0) / 6.0),  # HardSigmoid, then x * HardSigmoid
            F.hardswish(d),  # legacy export: HardSigmoid + Mul
            F.silu(e),  # Swish
            F.relu6(f),  # ReLU6 stays a Clip
        )


@pytest.mark.parametrize("opset", [11, 13, 17])
def test_activations_torch(tmp_path, opset):
    names = list("abcdef")
    args = tuple(torch.randn(2, 3, 4, 4) * 4 for _ in names)
    path = _export(_Acts(), args, tmp_path / "acts.onnx", opset, input_names=names, output_names=[f"y{n}" for n in names])
    g = import_onnx(path)
    assert fuse_activations(g) == 6  # c: HardSigmoid, then HardSwish
    assert _ops(g) == {"HardSigmoid": 1, "HardSwish": 3, "Swish": 1, "Clip": 1}
    for n in g.nodes:
        if n.op_type in ("HardSigmoid", "HardSwish"):
            assert n.domain == "" and n.body is None
        if n.op_type == "HardSigmoid":
            assert math.isclose(n.attrs["alpha"], 1 / 6, rel_tol=1e-6) and n.attrs["beta"] == 0.5
        if n.op_type == "Swish":
            assert n.domain == HBTOOL_DOMAIN and n.body is not None
    _unique_names(g)
    _check(path, g)


def test_activations_keras_hard_sigmoid():
    nodes = [
        helper.make_node("Mul", ["x", "alpha"], ["m"], name="hs/mul"),
        helper.make_node("Add", ["m", "beta"], ["a"], name="hs/add"),
        helper.make_node("Clip", ["a", "zero", "one"], ["y"], name="hs/clip"),
    ]
    inits = [_t("alpha", np.array(0.2, np.float32)), _t("beta", np.array(0.5, np.float32)), _t("zero", np.array(0.0, np.float32)), _t("one", np.array(1.0, np.float32))]
    model = _model(nodes, [_vi("x", [3, 7])], [_vi("y", [3, 7])], inits, opset=13)
    g = import_onnx(model)
    assert fuse_activations(g) == 1
    assert g.nodes[0].op_type == "HardSigmoid" and math.isclose(g.nodes[0].attrs["alpha"], 0.2, rel_tol=1e-6)
    _check(model, g)


def test_activations_negative():
    nodes = [
        # Clip(x + 3, 0, 6) / 5: wrong divisor
        helper.make_node("Add", ["x", "three"], ["a"], name="add"),
        helper.make_node("Clip", ["a", "zero", "six"], ["c"], name="clip"),
        helper.make_node("Div", ["c", "five"], ["y1"], name="div"),
        # x * Sigmoid(z): not the same tensor
        helper.make_node("Sigmoid", ["z"], ["s"], name="sig"),
        helper.make_node("Mul", ["x", "s"], ["y2"], name="mul"),
        # z * Sigmoid(z) with the sigmoid also read elsewhere
        helper.make_node("Sigmoid", ["z"], ["s2"], name="sig2"),
        helper.make_node("Mul", ["z", "s2"], ["y3"], name="mul2"),
        helper.make_node("Neg", ["s2"], ["y4"], name="neg"),
        # ReLU6
        helper.make_node("Clip", ["z", "zero", "six"], ["y5"], name="relu6"),
    ]
    inits = [_t(n, np.array(v, np.float32)) for n, v in [("three", 3), ("zero", 0), ("six", 6), ("five", 5)]]
    model = _model(nodes, [_vi("x", [2, 3]), _vi("z", [2, 3])], [_vi(f"y{i}", [2, 3]) for i in range(1, 6)], inits, opset=13)
    g = import_onnx(model)
    before = _ops(g)
    assert fuse_activations(g) == 0
    assert _ops(g) == before


# --------------------------------------------------------------------------- fuse_linear


def _linear_model(bias_shape=(4,), bias_first=False, w_const=True, extra_use=False):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="/fc/MatMul")]
    nodes.append(helper.make_node("Add", ["b", "h"] if bias_first else ["h", "b"], ["y"], name="/fc/Add"))
    inputs = [_vi("x", [2, 5, 8])]
    inits = [_t("b", _f32(*bias_shape))]
    if w_const:
        inits.append(_t("w", _f32(8, 4)))
    else:
        inputs.append(_vi("w", [8, 4]))
    outs = [_vi("y", [2, 5, 4])]
    if extra_use:
        outs.append(_vi("h", [2, 5, 4]))
    return _model(nodes, inputs, outs, inits, opset=13)


@pytest.mark.parametrize("bias_shape,bias_first", [((4,), False), ((1, 4), True), ((1, 1, 4), False)])
def test_fuse_linear(bias_shape, bias_first):
    model = _linear_model(bias_shape, bias_first)
    g = import_onnx(model, fold=False)  # onnxruntime's own folding would already make a Gemm
    assert fuse_linear(g) == 1
    lin = g.nodes[0]
    assert (lin.op_type, lin.domain, lin.name) == ("Linear", HBTOOL_DOMAIN, "/fc/Linear")
    assert g.const(lin.inputs[2]).shape == (4,) and g.const(lin.inputs[1]).shape == (8, 4)
    assert [n.op_type for n in lin.body.nodes] == ["MatMul", "Add"]
    _check(model, g)


@pytest.mark.parametrize("kwargs", [{"w_const": False}, {"extra_use": True}, {"bias_shape": (5, 4)}])
def test_fuse_linear_negative(kwargs):
    model = _linear_model(**kwargs)
    g = import_onnx(model, fold=False)
    assert fuse_linear(g) == 0
    assert "Linear" not in _ops(g)


def test_linear_leaves_bare_matmul_and_gemm():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        helper.make_node("Gemm", ["x", "w2", "b"], ["y2"], name="gemm", transB=1),
    ]
    inits = [_t("w", _f32(8, 4)), _t("w2", _f32(3, 8)), _t("b", _f32(3))]
    model = _model(nodes, [_vi("x", [2, 8])], [_vi("y", [2, 4]), _vi("y2", [2, 3])], inits, opset=13)
    g = import_onnx(model, fold=False)
    assert fuse_linear(g) == 0
    assert _ops(g) == {"MatMul": 1, "Gemm": 1}


# ------------------------------------------------------------------------------ fuse_roll


class _Roll2(nn.Module):
    def forward(self, x):
        return torch.roll(x, shifts=(2, -1), dims=(1, 2)) * 2.0


def test_roll_torch_opset11_dynamic(tmp_path):
    path = _export(_Roll2(), torch.randn(1, 6, 5, 3), tmp_path / "roll.onnx", 11, dynamic_axes={"x": {1: "H", 2: "W"}})
    g = import_onnx(path, input_shapes={"x": [1, 6, 5, 3]})
    assert fuse_roll(g) == 1
    roll = _nodes(g, "Roll")[0]
    assert roll.attrs == {"shifts": [2, -1], "axes": [1, 2]} and roll.domain == HBTOOL_DOMAIN
    assert _ops(g) == {"Roll": 1, "Mul": 1}
    _check(path, g)


def _slices_concat(first, second, axis=1, n=6, steps=(1, 1), extra_use=False):
    """Concat([x[first], x[second]]) along ``axis`` with Slice nodes; ``first``/``second`` = (start, end)."""
    nodes, inits = [], [_t("ax", np.array([axis], np.int64))]
    for k, ((s, e), st) in enumerate(zip((first, second), steps)):
        inits += [_t(f"s{k}", np.array([s], np.int64)), _t(f"e{k}", np.array([e], np.int64)), _t(f"st{k}", np.array([st], np.int64))]
        nodes.append(helper.make_node("Slice", ["x", f"s{k}", f"e{k}", "ax", f"st{k}"], [f"p{k}"], name=f"/blk/Slice_{k}"))
    nodes.append(helper.make_node("Concat", ["p0", "p1"], ["r"], name="/blk/Concat", axis=axis))
    nodes.append(helper.make_node("Relu", ["r"], ["y"], name="/blk/Relu"))
    outs = [_vi("y", None)]
    if extra_use:
        nodes.append(helper.make_node("Neg", ["p0"], ["y2"], name="/blk/Neg"))
        outs.append(_vi("y2", None))
    return _model(nodes, [_vi("x", [2, n, 4])], outs, inits, opset=13)


def test_roll_negative_index_form():
    model = _slices_concat((-2, 2**63 - 1), (0, -2))  # torch.roll(x, 2, 1)
    g = import_onnx(model, fold=False)
    assert fuse_roll(g) == 1
    assert _nodes(g, "Roll")[0].attrs == {"shifts": [2], "axes": [1]}
    assert _nodes(g, "Roll")[0].name == "/blk/Roll"
    _check(model, g)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"first": (2, 6), "second": (0, 3)},  # overlapping pieces
        {"first": (0, 2), "second": (2, 6)},  # identity, not a rotation
        {"first": (2, 6), "second": (0, 1)},  # a row is missing
        {"first": (0, 6), "second": (1, 6), "steps": (2, 2)},  # strided (patch merging)
        {"first": (2, 6), "second": (0, 2), "extra_use": True},  # piece read elsewhere
    ],
)
def test_roll_negative(kwargs):
    model = _slices_concat(**kwargs)
    g = import_onnx(model, fold=False)
    assert fuse_roll(g) == 0
    assert "Roll" not in _ops(g)


def test_roll_chain_not_merged_when_intermediate_shared(tmp_path):
    class M(nn.Module):
        def forward(self, x):
            h = torch.roll(x, 1, 1)
            return torch.roll(h, 2, 2), h

    path = _export(M(), torch.randn(1, 4, 5, 2), tmp_path / "roll2.onnx", 13)
    g = import_onnx(path)
    assert fuse_roll(g) == 2
    assert sorted((n.attrs["axes"], n.attrs["shifts"]) for n in _nodes(g, "Roll")) == [([1], [1]), ([2], [2])]
    _unique_names(g)
    _check(path, g)


# ----------------------------------------------------------------------- fuse_window_ops


def _window_partition(x, w):
    B, H, W, C = x.shape
    x = x.view(B, H // w, w, W // w, w, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, w, w, C)


def _window_reverse(win, w, H, W):
    B = int(win.shape[0] / (H * W / w / w))
    x = win.view(B, H // w, W // w, w, w, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class _TinySwinBlock(nn.Module):
    """LayerNorm, shifted-window roll, partition, per-window MLP with GELU, reverse, roll back."""

    def __init__(self, dim=8, window=4, shift=2):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)
        self.act = nn.GELU()
        self.window, self.shift = window, shift

    def forward(self, x):
        B, H, W, C = x.shape
        y = torch.roll(self.norm(x), shifts=(-self.shift, -self.shift), dims=(1, 2))
        win = _window_partition(y, self.window).view(-1, self.window * self.window, C)
        win = self.act(self.fc(win))
        y = _window_reverse(win.view(-1, self.window, self.window, C), self.window, H, W)
        return x + torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))


@pytest.fixture(scope="module")
def swin_block_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("swin") / "block11.onnx"
    return _export(_TinySwinBlock(), torch.randn(1, 8, 8, 8), path, 11, dynamic_axes={"x": {1: "H", 2: "W"}}, output_names=["y"])


@pytest.mark.parametrize("hw", [(8, 8), (8, 12)])
def test_swin_block_opset11_dynamic(swin_block_path, hw):
    g = import_onnx(swin_block_path, input_shapes={"x": [1, *hw, 8]})
    results = {r.name: r.rewrites for r in optimize_float(g)}
    ops = _ops(g)
    assert ops["WindowPartition"] == 1 and ops["WindowReverse"] == 1 and ops["Roll"] == 2
    assert ops["LayerNormalization"] == 1 and ops["Gelu"] == 1
    assert "Transpose" not in ops and "Slice" not in ops and "Concat" not in ops
    part, rev = _nodes(g, "WindowPartition")[0], _nodes(g, "WindowReverse")[0]
    assert part.attrs == {"window_size": [4, 4]} and rev.attrs == {"window_size": [4, 4]}
    assert g.shape(part.inputs[0]) == (1, *hw, 8) and g.shape(rev.outputs[0]) == (1, *hw, 8)
    rolls = sorted(tuple(n.attrs["shifts"]) for n in _nodes(g, "Roll"))
    assert rolls == [(-2, -2), (2, 2)]
    assert all(v >= 0 for v in results.values())
    _unique_names(g)
    _check(swin_block_path, g)
    assert sum(r.rewrites for r in optimize_float(g)) == 0  # idempotent


class _TokenWindowBlock(nn.Module):
    """Swin block as in the reference code: (B, L, C) tokens, no shift, per-window linear."""

    def __init__(self, res=8, dim=8, window=4):
        super().__init__()
        self.res, self.window = res, window
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        B, L, C = x.shape
        h = x.view(B, self.res, self.res, C)
        win = _window_partition(h, self.window).view(-1, self.window * self.window, C)
        win = self.fc(win)
        h = _window_reverse(win.view(-1, self.window, self.window, C), self.window, self.res, self.res)
        return x + h.view(B, self.res * self.res, C)


def test_window_ops_token_form_opset13(tmp_path):
    """onnxruntime merges the token reshapes into the window reshapes; the fused ops still see (B, H, W, C)."""
    path = _export(_TokenWindowBlock(), torch.randn(2, 64, 8), tmp_path / "tok.onnx", 13, output_names=["y"])
    g = import_onnx(path)
    assert fuse_window_ops(g) == 2
    part, rev = _nodes(g, "WindowPartition")[0], _nodes(g, "WindowReverse")[0]
    assert g.shape(part.inputs[0]) == (2, 8, 8, 8) and g.shape(rev.outputs[0]) == (2, 8, 8, 8)
    _check(path, g)


def _window_model(six, final_shapes, perm=(0, 1, 3, 2, 4, 5), x_shape=(1, 8, 8, 3), extra_use=False):
    nodes = [
        helper.make_node("Reshape", ["x", "s6"], ["r6"], name="/wp/Reshape"),
        helper.make_node("Transpose", ["r6"], ["t6"], name="/wp/Transpose", perm=list(perm)),
    ]
    inits = [_t("s6", np.array(six, np.int64))]
    prev = "t6"
    for k, shape in enumerate(final_shapes):
        inits.append(_t(f"s{k}", np.array(shape, np.int64)))
        nodes.append(helper.make_node("Reshape", [prev, f"s{k}"], [f"o{k}"], name=f"/wp/Reshape_{k + 1}"))
        prev = f"o{k}"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="relu"))
    outs = [_vi("y", None)]
    if extra_use:
        outs.append(_vi("t6", None))
    return _model(nodes, [_vi("x", list(x_shape))], outs, inits, opset=13)


def test_window_partition_two_reshapes():
    model = _window_model((1, 2, 4, 2, 4, 3), [(4, 4, 4, 3), (4, 16, 3)])
    g = import_onnx(model, fold=False)
    assert fuse_window_ops(g) == 1
    part = _nodes(g, "WindowPartition")[0]
    assert part.name == "/wp/WindowPartition" and part.attrs == {"window_size": [4, 4]}
    assert g.shape(part.outputs[0]) == (4, 16, 3) and len(part.body.nodes) == 4
    _check(model, g)


def test_window_partition_rectangular_windows():
    model = _window_model((1, 4, 2, 2, 4, 3), [(8, 8, 3)])
    g = import_onnx(model, fold=False)
    assert fuse_window_ops(g) == 1
    assert _nodes(g, "WindowPartition")[0].attrs == {"window_size": [2, 4]}
    _check(model, g)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"six": (1, 2, 4, 2, 4, 3), "final_shapes": [(4, 4, 4, 3)], "extra_use": True},  # transpose read elsewhere
        {"six": (1, 2, 4, 2, 4, 3), "final_shapes": [(2, 32, 3)]},  # not windows
        {"six": (1, 2, 4, 2, 4, 3), "final_shapes": [(1, 2, 64, 3)], "perm": (0, 1, 3, 2, 4, 5)},  # not windows
        {"six": (1, 2, 4, 2, 4, 3), "final_shapes": [(4, 4, 4, 3)], "perm": (0, 3, 1, 2, 4, 5)},  # other permutation
    ],
)
def test_window_ops_negative(kwargs):
    model = _window_model(**kwargs)
    g = import_onnx(model, fold=False)
    assert fuse_window_ops(g) == 0
    assert "WindowPartition" not in _ops(g) and "WindowReverse" not in _ops(g)


# --------------------------------------------------------------------------- optimize_float


def test_float_passes_order_and_names():
    names = [p.name for p in FLOAT_PASSES]
    assert names[0] == "remove_identity"
    assert names.index("fold_batchnorm") < names.index("collapse_reshape_transpose") < names.index("fuse_window_ops")
    assert names.index("fold_conv_bias") < names.index("fold_batchnorm")   # the BN after a bias Add folds once the Add is gone
    assert names.index("collapse_reshape_transpose") < names.index("fuse_roll")
    assert names.index("explicit_pads") < names.index("pool_to_global")  # the global test reads explicit pads
    assert names.index("explicit_pads") < names.index("fold_pad_into_maxpool")  # it adds to explicit pads
    assert names.index("col2im_to_rearrange") < names.index("collapse_reshape_transpose")
    assert names.index("split_gemm_activation_bias") < names.index("fold_batchnorm")  # C split off before a pattern reads the Gemm
    assert names.index("explicit_pads") < names.index("fold_parallel_branches") < names.index("fold_batchnorm")  # reads pads; a BN after the sum folds next
    assert set(names) == {
        "fold_parallel_branches",
        "split_gemm_activation_bias",
        "explicit_pads",
        "pool_to_global",
        "fold_pad_into_maxpool",
        "col2im_to_rearrange",
        "remove_identity",
        "fold_batchnorm",
        "fold_conv_bias",
        "fuse_layernorm",
        "fuse_gelu",
        "fuse_group_norm",
        "fuse_activations",
        "fuse_linear",
        "collapse_reshape_transpose",
        "fuse_window_ops",
        "fuse_roll",
        "remove_nan_guards",
        "mask_where_to_bias",
        "einsum_to_matmul",
    }
    assert names.index("einsum_to_matmul") < names.index("fuse_linear")
    assert all(p.purpose for p in FLOAT_PASSES)


def test_fused_names_are_unique_per_scope():
    """Two LayerNorms in one scope must not get the same name."""
    m1 = _paddle_ln()
    nodes = []
    for k, suffix in enumerate(("a", "b")):
        for n in m1.graph.node:
            new = onnx.NodeProto()
            new.CopyFrom(n)
            new.name = f"/enc/{n.name}.{suffix}"
            consts = ("two", "eps", "gamma", "beta")
            src = "x" if k == 0 else "ya"
            new.input[:] = [i if i in consts else (src if i == "x" else f"{i}{suffix}") for i in n.input]
            new.output[:] = [f"{o}{suffix}" for o in n.output]
            nodes.append(new)
    model = _model(nodes, [_vi("x", [2, 4, 8])], [_vi("yb", [2, 4, 8])], list(m1.graph.initializer), opset=12)
    g = import_onnx(model)
    assert fuse_layernorm(g) == 2
    assert sorted(n.name for n in g.nodes) == ["/enc/LayerNorm", "/enc/LayerNorm_1"]
    _check(model, g)


# ---------------------------------------------------------------------- samples/warts.py

_WART_EXPECT = {
    "paddle_style_ln": {"LayerNormalization", "Gelu"},
    "bert_style": {"LayerNormalization", "Gelu"},
    "swin_block_dynamic": {"WindowPartition", "WindowReverse", "Roll", "LayerNormalization"},
    "cnn_warts": {"HardSwish", "HardSigmoid", "Swish"},
    "tf_style": set(),
    "unsupported_op": set(),
}


@pytest.mark.parametrize("name", sorted(_WART_EXPECT))
def test_warts_models(tmp_path, name):
    """Each real-export wart model imports at its example shapes, fuses, and still matches onnxruntime."""
    from samples.warts import WARTS, example_feed

    builder = WARTS[name][0]
    path = Path(builder(tmp_path / f"{name}.onnx"))
    feeds = example_feed(name)
    g = import_onnx(path, input_shapes={k: v.shape for k, v in feeds.items()})
    optimize_float(g)
    ops = _ops(g)
    assert not {"Shape", "Constant", "Identity", "Dropout", "BatchNormalization"} & set(ops), ops
    missing = _WART_EXPECT[name] - set(ops)
    assert not missing, f"{name}: expected fused ops {missing} not in {ops}"
    assert_same_as_onnxruntime(path, g, feeds)  # the original, dynamic dims and all


def test_nan_guard_around_softmax_is_removed():
    from onnx import helper as oh
    from hbtool.ir.passes import remove_nan_guards
    from tests.helpers import make_model, vinfo, tensor, assert_graph_matches

    nodes = [
        oh.make_node("Softmax", ["x"], ["s"], name="softmax", axis=-1),
        oh.make_node("IsNaN", ["s"], ["nan"], name="isnan"),
        oh.make_node("Where", ["nan", "zero", "s"], ["g"], name="guard"),
        oh.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    model = make_model(nodes, [vinfo("x", [1, 4, 8])], [vinfo("y", [1, 4, 8])], [tensor("zero", np.array(0.0, np.float32))])
    g = import_onnx(model)
    assert remove_nan_guards(g) == 1
    assert "Where" not in g.op_types() and "IsNaN" not in g.op_types()
    x = np.random.default_rng(0).standard_normal((1, 4, 8)).astype(np.float32)
    assert_graph_matches(model, g, {"x": x})


def test_where_that_is_not_a_nan_guard_stays():
    from onnx import TensorProto, helper as oh
    from hbtool.ir.passes import remove_nan_guards
    from tests.helpers import make_model, vinfo, tensor

    nodes = [
        oh.make_node("Greater", ["x", "zero"], ["pos"], name="gt"),
        oh.make_node("Where", ["pos", "x", "zero"], ["y"], name="relu_where"),
    ]
    model = make_model(nodes, [vinfo("x", [1, 4])], [vinfo("y", [1, 4])], [tensor("zero", np.array(0.0, np.float32))])
    g = import_onnx(model)
    assert remove_nan_guards(g) == 0


def test_where_mask_before_softmax_becomes_additive_bias():
    from onnx import TensorProto, helper as oh
    from hbtool.ir.passes import mask_where_to_bias
    from tests.helpers import make_model, vinfo, tensor, assert_graph_matches

    nodes = [
        oh.make_node("Equal", ["m", "zero_i"], ["masked"], name="eq"),
        oh.make_node("Where", ["masked", "ninf", "x"], ["s"], name="where"),
        oh.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1),
    ]
    inits = [tensor("zero_i", np.array(0, np.int64)), tensor("ninf", np.array(-np.inf, np.float32))]
    model = make_model(nodes, [vinfo("x", [1, 2, 4, 4]), vinfo("m", [1, 1, 1, 4], TensorProto.INT64)], [vinfo("y", [1, 2, 4, 4])], inits)
    g = import_onnx(model)
    assert mask_where_to_bias(g) == 1
    add = g.node("where")
    assert add.op_type == "Add" and "x" in add.inputs
    feeds = {"x": RNG.standard_normal((1, 2, 4, 4)).astype(np.float32), "m": np.array([[[[1, 1, 0, 1]]]], np.int64)}
    assert_graph_matches(model, g, feeds)


def test_where_with_a_data_constant_is_not_a_mask():
    from onnx import TensorProto, helper as oh
    from hbtool.ir.passes import mask_where_to_bias
    from tests.helpers import make_model, vinfo, tensor

    nodes = [
        oh.make_node("Equal", ["m", "zero_i"], ["masked"], name="eq"),
        oh.make_node("Where", ["masked", "c", "x"], ["s"], name="where"),
        oh.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1),
    ]
    inits = [tensor("zero_i", np.array(0, np.int64)), tensor("c", np.array(-5.0, np.float32))]
    model = make_model(nodes, [vinfo("x", [1, 4]), vinfo("m", [1, 4], TensorProto.INT64)], [vinfo("y", [1, 4])], inits)
    g = import_onnx(model)
    assert mask_where_to_bias(g) == 0
