"""The probe models of the op table: each ONNX op, in its common attribute forms, between two convolutions.

A probe is the smallest model that puts one op where a network puts it: ``x (1x8x8x8) -> Conv ->
op -> Conv -> y``. Its helper nodes (a Sigmoid that keeps Log's input positive, a Reshape back to
4-D) are ordinary ops with probes of their own; the table reads the placement and the integer
kernel of the nodes of the probed op type only. An op whose output is not a feature map (ArgMax's
indices) ends the model instead of feeding the second convolution.

Tiny shapes keep every probe's calibrate -> compile -> simulate run near a tenth of a second (about
30 s of CPU for every form on the three marches), so the whole table is a default test
(tests/unit/kernels/test_op_table_every_op_every_march.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: the probe input: batch 1, 8 channels, 8 x 8
INPUT_SHAPE = (1, 8, 8, 8)
OPSET = 17


class _Body:
    """Collects a probe's nodes and constants; ``a`` is the first convolution's output (1x8x8x8)."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.inits, self.k = rng, [], [], 0

    def const(self, value, hint: str = "c") -> str:
        self.k += 1
        name = f"{hint}{self.k}"
        arr = np.asarray(value)
        arr = arr.astype(np.float32) if arr.dtype.kind == "f" else arr
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(self, op: str, inputs: list[str], n_out: int = 1, name: str | None = None, **attrs) -> str | list[str]:
        self.k += 1
        outs = [f"{op.lower()}{self.k}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name or f"{op}_{self.k}", **attrs))
        return outs[0] if n_out == 1 else outs

    def positive(self, x: str) -> str:
        """A feature map in (0, 1) for ops defined on positive numbers (Log, Sqrt, Reciprocal, Pow 0.5)."""
        return self.node("Sigmoid", [x], name="helper_sigmoid")

    def other(self, x: str) -> str:
        """A second feature map of the same shape, from a branch of its own (a binary op's run-time operand).

        The branch ends in a ReLU: a purely linear branch of ``x`` (a lone Conv) beside ``x`` itself is what
        ``fold_parallel_branches`` folds away, and the probe would then test the fold, not the op."""
        w = self.rng.standard_normal((8, 8, 1, 1)) * 0.3
        conv = self.node("Conv", [x, self.const(w, "wb")], name="helper_branch_conv")
        return self.node("Relu", [conv], name="helper_branch_relu")


@dataclass(frozen=True)
class Probe:
    """One op in one attribute form. ``build(body, a) -> output`` appends the op (and helpers) after ``a``."""

    op: str
    form: str
    build: Callable[[_Body, str], str]
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.op}[{self.form}]"


def _unary(op: str, positive: bool = False, **attrs) -> Callable[[_Body, str], str]:
    def build(b: _Body, a: str) -> str:
        return b.node(op, [b.positive(a) if positive else a], name="probe", **attrs)
    return build


def _with_const(op: str, const: Callable[[np.random.Generator], np.ndarray], **attrs) -> Callable[[_Body, str], str]:
    def build(b: _Body, a: str) -> str:
        return b.node(op, [a, b.const(const(b.rng))], name="probe", **attrs)
    return build


def _with_branch(op: str, reduce_other: bool = False) -> Callable[[_Body, str], str]:
    """``op(a, other)``; with ``reduce_other`` the other operand is its 1x8x1x1 mean (a broadcast feature map)."""
    def build(b: _Body, a: str) -> str:
        other = b.other(a)
        if reduce_other:
            other = b.node("GlobalAveragePool", [other], name="helper_gap")
        return b.node(op, [a, other], name="probe")
    return build


def _div_by_feature(b: _Body, a: str) -> str:
    d = b.node("Add", [b.positive(b.other(a)), b.const(np.float32(0.5))], name="helper_add")
    return b.node("Div", [a, d], name="probe")


def _matmul_ff(b: _Body, a: str) -> str:
    t = b.node("Transpose", [b.other(a)], name="helper_transpose", perm=[0, 1, 3, 2])
    return b.node("MatMul", [a, t], name="probe")


def _gemm(b: _Body, a: str) -> str:
    f = b.node("Flatten", [a], name="helper_flatten", axis=1)
    g = b.node("Gemm", [f, b.const(b.rng.standard_normal((512, 16)) * 0.05), b.const(b.rng.standard_normal(16) * 0.1)], name="probe")
    return b.node("Reshape", [g, b.const(np.array([1, 16, 1, 1], np.int64))], name="helper_reshape")


def _layernorm(b: _Body, a: str) -> str:
    return b.node("LayerNormalization", [a, b.const(b.rng.uniform(0.5, 1.5, 8)), b.const(b.rng.standard_normal(8) * 0.1)],
                  name="probe", axis=-1, epsilon=1e-5)


def _instancenorm(b: _Body, a: str) -> str:
    return b.node("InstanceNormalization", [a, b.const(b.rng.uniform(0.5, 1.5, 8)), b.const(b.rng.standard_normal(8) * 0.1)],
                  name="probe", epsilon=1e-5)


def _batchnorm(b: _Body, a: str) -> str:
    r = b.node("Relu", [a], name="helper_relu")  # a BatchNormalization right after a Conv folds into it
    c = lambda lo, hi: b.const(b.rng.uniform(lo, hi, 8))  # noqa: E731
    return b.node("BatchNormalization", [r, c(0.5, 1.5), c(-0.2, 0.2), c(-0.2, 0.2), c(0.5, 1.5)], name="probe")


def _reduce(op: str, axes: list[int]) -> Callable[[_Body, str], str]:
    def build(b: _Body, a: str) -> str:
        x = b.positive(a) if op == "ReduceL2" else a
        if op == "ReduceSum":  # opset 13 made ReduceSum's axes an input; the others follow at opset 18
            return b.node(op, [x, b.const(np.array(axes, np.int64))], name="probe", keepdims=1)
        return b.node(op, [x], name="probe", axes=axes, keepdims=1)
    return build


def _expand(b: _Body, a: str) -> str:
    g = b.node("GlobalAveragePool", [a], name="helper_gap")
    return b.node("Expand", [g, b.const(np.array([1, 8, 8, 8], np.int64))], name="probe")


def _squeeze_unsqueeze(b: _Body, a: str) -> str:
    u = b.node("Unsqueeze", [a, b.const(np.array([0], np.int64))], name="probe_unsqueeze")
    return b.node("Squeeze", [u, b.const(np.array([0], np.int64))], name="probe_squeeze")


def _flatten(b: _Body, a: str) -> str:
    f = b.node("Flatten", [a], name="probe", axis=2)
    return b.node("Reshape", [f, b.const(np.array([1, 8, 8, 8], np.int64))], name="helper_reshape")


def _concat(b: _Body, a: str) -> str:
    return b.node("Concat", [a, b.other(a)], name="probe", axis=1)


def _split(b: _Body, a: str) -> str:
    p, q = b.node("Split", [a, b.const(np.array([4, 4], np.int64))], n_out=2, name="probe", axis=1)
    return b.node("Concat", [q, p], name="helper_concat", axis=1)


def _slice(b: _Body, a: str) -> str:
    i64 = lambda v: b.const(np.array(v, np.int64))  # noqa: E731
    return b.node("Slice", [a, i64([0, 1]), i64([4, 7]), i64([1, 2])], name="probe")


def _pad(mode: str) -> Callable[[_Body, str], str]:
    def build(b: _Body, a: str) -> str:
        return b.node("Pad", [a, b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], name="probe", mode=mode)
    return build


def _resize(mode: str, coords: str = "half_pixel") -> Callable[[_Body, str], str]:
    def build(b: _Body, a: str) -> str:
        return b.node("Resize", [a, "", b.const(np.array([1, 1, 2, 2], np.float32))], name="probe", mode=mode,
                      coordinate_transformation_mode=coords)
    return build


def _gather(b: _Body, a: str) -> str:
    return b.node("Gather", [a, b.const(np.array([0, 2, 4, 6], np.int64))], name="probe", axis=1)


def _tile(b: _Body, a: str) -> str:
    return b.node("Tile", [a, b.const(np.array([1, 2, 1, 1], np.int64))], name="probe")


def _reshape(b: _Body, a: str) -> str:
    r = b.node("Reshape", [a, b.const(np.array([1, 8, 4, 16], np.int64))], name="probe")
    return r


def _convtranspose(b: _Body, a: str) -> str:
    return b.node("ConvTranspose", [a, b.const(b.rng.standard_normal((8, 8, 2, 2)) * 0.2)], name="probe", strides=[2, 2])


def _conv(**attrs) -> Callable[[_Body, str], str]:
    def build(b: _Body, a: str) -> str:
        group = int(attrs.get("group", 1))
        w = b.rng.standard_normal((8, 8 // group, 3, 3)) * 0.2
        return b.node("Conv", [a, b.const(w, "w")], name="probe", **attrs)
    return build


def _swish(b: _Body, a: str) -> str:
    return b.node("Mul", [a, b.node("Sigmoid", [a], name="probe_sigmoid")], name="probe")


def _gelu(b: _Body, a: str) -> str:
    """torch's exact GELU export: x * 0.5 * (1 + erf(x / sqrt 2)), fused back into one Gelu."""
    e = b.node("Erf", [b.node("Div", [a, b.const(np.float32(np.sqrt(2.0)))], name="gelu_div")], name="gelu_erf")
    h = b.node("Add", [e, b.const(np.float32(1.0))], name="gelu_add")
    return b.node("Mul", [b.node("Mul", [a, h], name="gelu_mul0"), b.const(np.float32(0.5))], name="gelu_mul1")


def _scalar(v: float) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: np.float32(v)


def _per_channel(lo: float, hi: float) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(lo, hi, (1, 8, 1, 1)).astype(np.float32)


def _prelu_slopes(shape: tuple[int, ...]) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(0.05, 0.4, shape).astype(np.float32)


def _probes() -> list[Probe]:
    P = Probe
    lst = [
        P("Conv", "3x3 pad 1", _conv(pads=[1, 1, 1, 1])),
        P("Conv", "3x3 stride 2", _conv(pads=[1, 1, 1, 1], strides=[2, 2])),
        P("Conv", "depthwise 3x3", _conv(pads=[1, 1, 1, 1], group=8)),
        P("Conv", "3x3 dilation 2", _conv(pads=[2, 2, 2, 2], dilations=[2, 2])),
        P("ConvTranspose", "2x2 stride 2", _convtranspose),
        P("MatMul", "feature map x constant", _with_const("MatMul", lambda r: r.standard_normal((8, 8)) * 0.3)),
        P("MatMul", "feature map x feature map", _matmul_ff),
        P("Gemm", "after Flatten, constant B", _gemm),
        P("Add", "constant per channel", _with_const("Add", _per_channel(-1, 1))),
        P("Add", "feature maps", _with_branch("Add")),
        P("Sub", "constant per channel", _with_const("Sub", _per_channel(-1, 1))),
        P("Sub", "feature maps", _with_branch("Sub")),
        P("Mul", "constant per channel", _with_const("Mul", _per_channel(0.2, 2))),
        P("Mul", "feature maps", _with_branch("Mul")),
        P("Div", "by a constant", _with_const("Div", _per_channel(0.5, 2))),
        P("Div", "by a feature map", _div_by_feature),
        P("Max", "feature maps", _with_branch("Max")),
        P("Max", "constant scalar", _with_const("Max", _scalar(0.1))),
        P("Max", "broadcast feature map 1x8x1x1", _with_branch("Max", reduce_other=True)),
        P("Min", "feature maps", _with_branch("Min")),
        P("Min", "constant per channel", _with_const("Min", _per_channel(-0.5, 0.5))),
        P("Min", "broadcast feature map 1x8x1x1", _with_branch("Min", reduce_other=True)),
        P("Relu", "", _unary("Relu")),
        P("LeakyRelu", "alpha 0.1", _unary("LeakyRelu", alpha=0.1)),
        P("PRelu", "per-channel slopes 8x1x1", _with_const("PRelu", _prelu_slopes((8, 1, 1)))),
        P("PRelu", "one slope", _with_const("PRelu", _prelu_slopes((1,)))),
        P("Clip", "0..6", lambda b, a: b.node("Clip", [a, b.const(np.float32(0)), b.const(np.float32(6))], name="probe")),
        P("Clip", "-1..1", lambda b, a: b.node("Clip", [a, b.const(np.float32(-1)), b.const(np.float32(1))], name="probe")),
        P("Sigmoid", "", _unary("Sigmoid")),
        P("Tanh", "", _unary("Tanh")),
        P("Exp", "", _unary("Exp")),
        P("Log", "of a positive map", _unary("Log", positive=True)),
        P("Sqrt", "of a positive map", _unary("Sqrt", positive=True)),
        P("Reciprocal", "of a positive map", _unary("Reciprocal", positive=True)),
        P("Erf", "", _unary("Erf")),
        P("Gelu", "torch export (erf form)", _gelu),
        P("Swish", "x * Sigmoid(x)", _swish),
        P("HardSwish", "", _unary("HardSwish")),
        P("HardSigmoid", "alpha 0.2 beta 0.5", _unary("HardSigmoid")),
        P("Softplus", "", _unary("Softplus")),
        P("Elu", "alpha 1", _unary("Elu")),
        P("Selu", "", _unary("Selu")),
        P("Abs", "", _unary("Abs")),
        P("Neg", "", _unary("Neg")),
        P("Sin", "", _unary("Sin")),
        P("Cos", "", _unary("Cos")),
        P("Softsign", "", _unary("Softsign")),
        P("Pow", "exponent 2", _with_const("Pow", _scalar(2.0))),
        P("Pow", "exponent 0.5", lambda b, a: b.node("Pow", [b.positive(a), b.const(np.float32(0.5))], name="probe")),
        P("Softmax", "axis 1", _unary("Softmax", axis=1)),
        P("Softmax", "axis -1", _unary("Softmax", axis=-1)),
        P("LogSoftmax", "axis 1", _unary("LogSoftmax", axis=1)),
        P("LogSoftmax", "axis -1", _unary("LogSoftmax", axis=-1)),
        P("LayerNormalization", "axis -1", _layernorm),
        P("InstanceNormalization", "", _instancenorm),
        P("BatchNormalization", "after Relu", _batchnorm),
        P("ReduceMean", "axes [1]", _reduce("ReduceMean", [1])),
        P("ReduceMean", "axes [2, 3]", _reduce("ReduceMean", [2, 3])),
        P("ReduceSum", "axes [1]", _reduce("ReduceSum", [1])),
        P("ReduceMax", "axes [1]", _reduce("ReduceMax", [1])),
        P("ReduceMin", "axes [1]", _reduce("ReduceMin", [1])),
        P("ReduceL2", "axes [1]", _reduce("ReduceL2", [1])),
        P("MaxPool", "2x2 stride 2", _unary("MaxPool", kernel_shape=[2, 2], strides=[2, 2])),
        P("MaxPool", "3x3 stride 2 ceil_mode 1", _unary("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        P("AveragePool", "2x2 stride 2", _unary("AveragePool", kernel_shape=[2, 2], strides=[2, 2])),
        P("AveragePool", "3x3 pad 1 count_include_pad", _unary("AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
        P("AveragePool", "3x3 stride 2 ceil_mode 1", _unary("AveragePool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        P("AveragePool", "3x3 stride 2 pad 1 ceil_mode 1", _unary("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
        P("GlobalAveragePool", "", _unary("GlobalAveragePool")),
        P("GlobalMaxPool", "", _unary("GlobalMaxPool")),
        P("ArgMax", "axis 1", _unary("ArgMax", axis=1, keepdims=1)),
        P("ArgMin", "axis 1", _unary("ArgMin", axis=1, keepdims=1)),
        P("Reshape", "1x8x4x16", _reshape),
        P("Expand", "1x8x1x1 to 1x8x8x8", _expand),
        P("Tile", "channels x2", _tile),
        P("Unsqueeze", "then Squeeze", _squeeze_unsqueeze),
        P("Flatten", "axis 2, reshaped back", _flatten),
        P("Transpose", "H and W", _unary("Transpose", perm=[0, 1, 3, 2])),
        P("Concat", "channels", _concat),
        P("Split", "channels in two", _split),
        P("Slice", "channels 0..4, every other row", _slice),
        P("Pad", "constant 1 on H and W", _pad("constant")),
        P("Pad", "reflect", _pad("reflect")),
        P("Pad", "edge", _pad("edge")),
        P("Gather", "constant channel indices", _gather),
        P("Resize", "nearest x2", _resize("nearest", "asymmetric")),
        P("Resize", "linear x2 half_pixel", _resize("linear")),
        P("Resize", "cubic x2", _resize("cubic")),
        P("DepthToSpace", "blocksize 2", _unary("DepthToSpace", blocksize=2)),
        P("SpaceToDepth", "blocksize 2", _unary("SpaceToDepth", blocksize=2)),
    ]
    return lst


PROBES: list[Probe] = _probes()

#: op types whose probes stand for another name the checker knows (Squeeze is probed with Unsqueeze)
PROBED_WITH = {"Squeeze": "Unsqueeze"}


def build_model(probe: Probe, seed: int = 0) -> onnx.ModelProto:
    """``x -> Conv -> probe -> Conv -> y`` (or ``... -> probe -> y`` for a non-float output)."""
    rng = np.random.default_rng(seed)
    b = _Body(rng)
    w1 = rng.standard_normal((8, 8, 3, 3)) * 0.15
    a = b.node("Conv", ["x", b.const(w1, "w"), b.const(rng.standard_normal(8) * 0.1, "b")], name="first_conv", pads=[1, 1, 1, 1])
    out = probe.build(b, a)
    nodes, inits = b.nodes, b.inits
    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT_SHAPE)],
                              [helper.make_tensor_value_info(out, TensorProto.UNDEFINED, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    info = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}[out]
    elem = info.type.tensor_type.elem_type
    shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
    if elem == TensorProto.FLOAT:
        if len(shape) != 4:
            out = b.node("Reshape", [out, b.const(np.array([1, -1, 1, 1], np.int64))], name="helper_to_4d")
            shape = [1, int(np.prod(shape)), 1, 1]
        w2 = rng.standard_normal((8, shape[1], 1, 1)) * (0.5 / np.sqrt(shape[1]))
        out = b.node("Conv", [out, b.const(w2, "w")], name="second_conv")
        shape = [1, 8, shape[2], shape[3]]
    graph = helper.make_graph(b.nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, INPUT_SHAPE)],
                              [helper.make_tensor_value_info(out, elem, shape)], initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model
