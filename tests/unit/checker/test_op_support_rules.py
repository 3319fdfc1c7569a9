"""Every BPU support rule of ``hbtool.march.op_rules``, one violating node each, and every op of
``OP_TABLE`` placed on the BPU in a typical valid form.

The violating cases are keyed by the rule function, and ``test_every_rule_has_a_violating_case``
enumerates the rule functions of ``op_rules`` (those in ``GENERIC_RULES`` or ``OP_TABLE`` and any
other public module-level function taking a ``RuleContext``): a new rule without a case here
breaks the suite.

Models are tiny ONNX graphs (opset 17) read with ``import_onnx``. Where ``import_onnx`` cannot
produce the node (it fills every shape, folds constant-only nodes, and rejects ops that are not in
ONNX opset 17 such as the hbtool-domain fusions), the IR ``Graph`` is built directly and
``place_node`` is called on it; those builders are marked ``ir=True`` with the reason beside them.

A few rules cannot be reached through ``place_node`` as written (an earlier rule always fires
first, or the rule never fires at all); their placement cases are strict xfails that explain why,
so that fixing the rule turns them into failures that ask for the mark to be removed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hbtool.checker.placement import Placement, integer_derived_tensors, place_graph, place_node
from hbtool.ir import import_onnx
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph
from hbtool.march import load_march
from hbtool.march import op_rules
from hbtool.march.op_rules import (
    CPU_BY_DESIGN,
    GENERIC_RULES,
    OP_TABLE,
    RuleContext,
    argmax_channels_within_limit,
    argmax_first_index_on_ties,
    clip_bounds_are_constant,
    conv_channels_within_limit,
    conv_is_1d_or_2d,
    conv_kernel_within_limit,
    conv_stride_dilation_pad_within_limit,
    convtranspose_within_limit,
    dims_within_limit,
    elementwise_rank_within_limit,
    gather_indices_are_constant,
    gemm_weight_is_constant,
    layernorm_size_within_limit,
    matmul_sizes_within_limit,
    min_max_takes_two_operands,
    needs_a_feature_map_input,
    pad_is_constant_mode,
    pool_is_2d,
    pool_kernel_within_limit,
    pow_exponent_is_constant,
    prelu_slope_is_constant,
    rank_at_most_max,
    reason_of,
    reduce_axes_are_constant,
    reshape_target_is_constant,
    split_sizes_are_constant,
    resize_coordinates_have_an_integer_form,
    resize_is_spatial,
    resize_scales_are_constant,
    shapes_are_static,
    slice_parameters_are_constant,
    tensors_are_floating_point,
    weights_are_constant,
)

from tests.helpers import make_model, tensor, vinfo

BAYES = load_march("bayes")
F32 = np.float32
NODE = "n"  # every builder names the node under test "n"
INTEGER_REASON_KEY = "derived only from integer model inputs"


# ------------------------------------------------------------------ model builders
class T(NamedTuple):
    """A run-time (graph input) tensor of a non-float type."""

    shape: Sequence[Any]
    elem: int = TensorProto.INT64


def _w(*shape: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 0.1).astype(F32)


def _i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@dataclass
class Build:
    """Builds the graph of a case lazily (so that collection stays cheap)."""

    make: Callable[[], Graph]
    ir: bool = False

    def __call__(self) -> Graph:
        return self.make()


def onnx_node(op: str, inputs: Sequence[str], *, feeds: dict[str, Any], consts: dict[str, np.ndarray] | None = None,
              outputs: Sequence[str] = ("y",), pre: Sequence[onnx.NodeProto] = (), **attrs: Any) -> Build:
    """A one-node opset-17 model (plus ``pre`` nodes feeding it) read with ``import_onnx``.

    ``feeds``: graph inputs, a shape (float32) or a :class:`T`. ``consts``: initializers.
    Output types are left to onnx's shape inference; ``import_onnx`` infers them again anyway.
    """

    def make() -> Graph:
        ins = [vinfo(k, list(v.shape), v.elem) if isinstance(v, T) else vinfo(k, list(v)) for k, v in feeds.items()]
        inits = [tensor(k, v) for k, v in (consts or {}).items()]
        node = helper.make_node(op, list(inputs), list(outputs), name=NODE, **attrs)
        outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
        model = onnx.shape_inference.infer_shapes(make_model([*pre, node], ins, outs, inits))
        for o in model.graph.output:  # the checker wants a typed, shaped output declaration
            tt = o.type.tensor_type
            if not tt.elem_type:
                tt.elem_type = TensorProto.FLOAT
            if not tt.HasField("shape"):
                tt.shape.dim.add().dim_param = "unknown"
        return import_onnx(model)

    return Build(make)


def ir_node(op: str, inputs: Sequence[str], *, feeds: dict[str, Sequence[int]], outputs: dict[str, Sequence[int] | None],
            consts: dict[str, np.ndarray] | None = None, domain: str = "", **attrs: Any) -> Build:
    """A one-node IR graph built directly (float32 feeds and outputs; ``None`` = no static shape)."""

    def make() -> Graph:
        g = Graph("g", 17)
        for k, shape in feeds.items():
            g.set_value(k, shape, F32)
        for k, data in (consts or {}).items():
            g.add_const(data, name=k)
        g.add_node(op, list(inputs), list(outputs), dict(attrs), name=NODE, domain=domain)
        for k, shape in outputs.items():
            g.set_value(k, shape, F32)
        g.inputs = list(feeds)
        g.outputs = list(outputs)
        return g

    return Build(make, ir=True)


def _placement(build: Build) -> tuple[Graph, Placement]:
    """Place the case's graph; read node ``n``'s placement (place_node for hand-built IR)."""
    g = build()
    if build.ir:
        return g, place_node(g.node(NODE), g, BAYES, integer_derived_tensors(g))
    place_graph(g, BAYES)
    m = g.node(NODE).meta
    return g, Placement(m["on"], m["bpu_type"], m["unit"], m["reason"])


def _rules_of(op_type: str) -> tuple:
    return GENERIC_RULES + OP_TABLE[op_type].rules


# ------------------------------------------------------------------ violating cases
@dataclass
class Violation:
    rule: Callable
    build: Build
    offending: str  # the offending value, as it must appear in the printed reason
    label: str = ""
    shadowed_by: Callable | None = None  # an earlier rule that fires first on every such node
    never_fires: str | None = None  # why no node can violate the rule


_X = [1, 8, 4, 4]

VIOLATIONS: list[Violation] = [
    # ---- generic rules
    # needs_a_feature_map_input: import_onnx folds a node whose inputs are all constant, so build the IR.
    Violation(needs_a_feature_map_input, ir_node("Relu", ["c"], feeds={}, consts={"c": np.ones((1, 4), F32)}, outputs={"y": (1, 4)}),
              "all inputs are constant"),
    # an int32 tensor computed from a float feature map (not integer-derived, so the rule is reached)
    Violation(tensors_are_floating_point,
              onnx_node("Reshape", ["xi", "s"], feeds={"x": [2, 4]}, consts={"s": _i64(8)},
                        pre=[helper.make_node("Cast", ["x"], ["xi"], name="cast", to=TensorProto.INT32)]),
              "int32"),
    # shapes_are_static: import_onnx gives every tensor a static shape, so build the IR.
    Violation(shapes_are_static, ir_node("Relu", ["x"], feeds={"x": (1, 4)}, outputs={"y": None}), "'y' has no static shape"),
    Violation(rank_at_most_max, onnx_node("Relu", ["x"], feeds={"x": [1] * 11}), "rank 11"),
    Violation(dims_within_limit, onnx_node("Relu", ["x"], feeds={"x": [1, 65537]}), "65537"),
    # ---- tensor unit
    Violation(weights_are_constant, onnx_node("Conv", ["x", "w"], feeds={"x": [1, 3, 4, 4], "w": [2, 3, 1, 1]}), "weight 'w'"),
    Violation(conv_is_1d_or_2d, onnx_node("Conv", ["x", "w"], feeds={"x": [1, 1, 2, 2, 2]}, consts={"w": _w(1, 1, 1, 1, 1)}),
              "input rank 5", "conv3d"),
    Violation(conv_is_1d_or_2d, onnx_node("ConvTranspose", ["x", "w"], feeds={"x": [1, 1, 2, 2, 2]}, consts={"w": _w(1, 1, 1, 1, 1)}),
              "input rank 5", "convtranspose3d"),
    Violation(conv_kernel_within_limit, onnx_node("Conv", ["x", "w"], feeds={"x": [1, 1, 40]}, consts={"w": _w(1, 1, 33)}), "kernel 33"),
    Violation(conv_channels_within_limit, onnx_node("Conv", ["x", "w"], feeds={"x": [1, 8193, 1, 1]}, consts={"w": _w(1, 8193, 1, 1)}),
              "8193 channels", "channels"),
    Violation(conv_channels_within_limit, onnx_node("Conv", ["x", "w"], feeds={"x": [1, 8000, 3, 3]}, consts={"w": _w(1, 8000, 3, 3)}),
              "72000", "volume"),
    Violation(conv_stride_dilation_pad_within_limit,
              onnx_node("Conv", ["x", "w"], feeds={"x": [1, 1, 1, 300]}, consts={"w": _w(1, 1, 1, 1)}, strides=[1, 257]), "257", "stride"),
    Violation(conv_stride_dilation_pad_within_limit,
              onnx_node("Conv", ["x", "w"], feeds={"x": [1, 1, 1, 40]}, consts={"w": _w(1, 1, 1, 2)}, dilations=[1, 17]), "17", "dilation"),
    Violation(conv_stride_dilation_pad_within_limit,
              onnx_node("Conv", ["x", "w"], feeds={"x": [1, 1, 1, 1]}, consts={"w": _w(1, 1, 1, 1)}, pads=[0, 257, 0, 257]), "257", "pad"),
    Violation(convtranspose_within_limit, onnx_node("ConvTranspose", ["x", "w"], feeds={"x": [1, 1, 2, 2]}, consts={"w": _w(1, 1, 15, 15)}),
              "kernel 15x15", "kernel"),
    Violation(convtranspose_within_limit, onnx_node("ConvTranspose", ["x", "w"], feeds={"x": [1, 2049, 1, 1]}, consts={"w": _w(2049, 1, 1, 1)}),
              "2049 channels", "channels"),
    Violation(matmul_sizes_within_limit, onnx_node("MatMul", ["x", "w"], feeds={"x": [1, 8193]}, consts={"w": _w(8193, 2)}), "K=8193", "k"),
    Violation(matmul_sizes_within_limit, onnx_node("MatMul", ["x", "w"], feeds={"x": [4097, 1, 1]}, consts={"w": _w(1, 1)}), "4097", "batch"),
    Violation(gemm_weight_is_constant, onnx_node("Gemm", ["x", "b"], feeds={"x": [2, 8], "b": [8, 4]}), "B is computed at run time"),
    # ---- vector unit
    Violation(elementwise_rank_within_limit, onnx_node("Add", ["x", "c"], feeds={"x": [1, 1, 1, 1, 1, 2]}, consts={"c": _w(2)}), "rank 6"),
    Violation(pow_exponent_is_constant, onnx_node("Pow", ["x", "e"], feeds={"x": [1, 4], "e": []}), "exponent is a feature map"),
    Violation(pow_exponent_is_constant, onnx_node("Pow", ["x", "e"], feeds={"x": [1, 2]}, consts={"e": np.array([2.0, 3.0], F32)}),
              "exponent has 2 values", "vector"),
    Violation(clip_bounds_are_constant, onnx_node("Clip", ["x", "lo", "hi"], feeds={"x": [1, 4], "lo": []}, consts={"hi": np.array(6, F32)}),
              "bounds are feature maps"),
    Violation(layernorm_size_within_limit,
              onnx_node("InstanceNormalization", ["x", "g", "b"], feeds={"x": [1, 1, 1025, 1024]}, consts={"g": np.ones(1, F32), "b": np.zeros(1, F32)}),
              "1049600 elements per row"),
    Violation(reduce_axes_are_constant, onnx_node("ReduceSum", ["x", "a"], feeds={"x": [2, 3, 4], "a": T([1])}), "'a'", "input"),
    Violation(pool_kernel_within_limit, onnx_node("MaxPool", ["x"], feeds={"x": [1, 1, 1, 300]}, kernel_shape=[1, 257]), "257"),
    Violation(pool_is_2d, onnx_node("MaxPool", ["x"], feeds={"x": [1, 1, 2, 2, 2]}, kernel_shape=[2, 2, 2]), "input rank 5", "maxpool"),
    Violation(pool_is_2d, onnx_node("GlobalAveragePool", ["x"], feeds={"x": [1, 1, 2, 2, 2]}), "input rank 5", "global"),
    Violation(argmax_channels_within_limit, onnx_node("ArgMax", ["x"], feeds={"x": [1, 65, 1, 1]}, axis=1), "65 channels", "channels"),
    Violation(argmax_channels_within_limit, onnx_node("ArgMin", ["x"], feeds={"x": [1, 4, 3, 3]}, axis=2), "axis 2", "axis"),
    Violation(argmax_first_index_on_ties, onnx_node("ArgMax", ["x"], feeds={"x": [1, 4, 3, 3]}, axis=1, select_last_index=1),
              "select_last_index=1"),
    Violation(prelu_slope_is_constant, onnx_node("PRelu", ["x", "s"], feeds={"x": [1, 4, 3, 3], "s": [4, 1, 1]}), "slope 's'"),
    Violation(min_max_takes_two_operands, onnx_node("Max", ["x", "x2", "x3"], feeds={"x": [1, 4], "x2": [1, 4], "x3": [1, 4]}),
              "3 operands", "three"),
    # ---- data movement
    Violation(resize_is_spatial, onnx_node("Resize", ["x", "", "s"], feeds={"x": [1, 1, 4, 4]}, consts={"s": np.array([1, 1, 2, 2], F32)}, mode="cubic"),
              "mode cubic", "mode"),
    Violation(resize_is_spatial, onnx_node("Resize", ["x", "", "s"], feeds={"x": [1, 2, 4, 4]}, consts={"s": np.array([1, 2, 2, 2], F32)}),
              "scales N or C", "channels"),
    Violation(resize_is_spatial, onnx_node("Resize", ["x", "", "s"], feeds={"x": [1, 2, 4, 4]}, consts={"s": np.array([2, 1, 1, 1], F32)}),
              "scales N or C", "batch"),
    Violation(resize_is_spatial, onnx_node("Resize", ["x", "", "s"], feeds={"x": [1, 4, 4]}, consts={"s": np.array([1, 1, 2], F32)}),
              "rank 3", "rank"),
    # run-time scales leave the output shape to ONNX Runtime, and antialias is opset 18: build the IR.
    Violation(resize_scales_are_constant, ir_node("Resize", ["x", "", "s"], feeds={"x": (1, 1, 4, 4), "s": (4,)}, outputs={"y": (1, 1, 8, 8)}),
              "'s' computed at run time"),
    Violation(resize_coordinates_have_an_integer_form, ir_node("Resize", ["x", "", "s"], feeds={"x": (1, 1, 4, 4)}, consts={"s": np.array([1, 1, 2, 2], F32)},
                                                               outputs={"y": (1, 1, 8, 8)}, coordinate_transformation_mode="tf_crop_and_resize"),
              "coordinate_transformation_mode tf_crop_and_resize", "crop"),
    Violation(resize_coordinates_have_an_integer_form, ir_node("Resize", ["x", "", "s"], feeds={"x": (1, 1, 4, 4)}, consts={"s": np.array([1, 1, 2, 2], F32)},
                                                               outputs={"y": (1, 1, 8, 8)}, mode="linear", antialias=1),
              "antialias=1", "antialias"),
    Violation(gather_indices_are_constant, onnx_node("Gather", ["x", "idx"], feeds={"x": [4, 3], "idx": T([2])}), "indices 'idx'"),
    Violation(pad_is_constant_mode, onnx_node("Pad", ["x", "p"], feeds={"x": [1, 4], "p": T([4])}), "pad sizes computed at run time", "sizes"),
    # mode 'wrap' exists from opset 19 only, so build the IR.
    Violation(pad_is_constant_mode, ir_node("Pad", ["x", "p"], feeds={"x": (1, 4)}, consts={"p": _i64(0, 1, 0, 1)}, outputs={"y": (1, 6)}, mode="wrap"),
              "mode wrap", "mode"),
    Violation(slice_parameters_are_constant, onnx_node("Slice", ["x", "s", "e"], feeds={"x": [4, 4], "s": T([1])}, consts={"e": _i64(2)}),
              "slice bounds computed at run time"),
    Violation(reshape_target_is_constant, onnx_node("Reshape", ["x", "s"], feeds={"x": [4, 4], "s": T([2])}), "target shape computed at run time"),
    # onnxruntime cannot infer a Split's outputs from run-time sizes at import: build the IR.
    Violation(split_sizes_are_constant, ir_node("Split", ["x", "s"], feeds={"x": (4, 4), "s": (2,)}, outputs={"y": (2, 4), "y2": (2, 4)}),
              "split sizes computed at run time"),
]


def _vid(v: Violation) -> str:
    return v.rule.__name__ + (f"-{v.label}" if v.label else "")


def _vparams(kind: str) -> list:
    """The cases, with strict xfails where the rule cannot do what the test asks (see Violation)."""
    out = []
    for v in VIOLATIONS:
        marks = []
        if v.never_fires:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=v.never_fires))
        elif v.shadowed_by is not None and kind == "placement":
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"{v.shadowed_by.__name__} always fires first on such a node"))
        out.append(pytest.param(v, id=_vid(v), marks=marks))
    return out


def _all_rule_functions() -> set:
    """The rules of op_rules: everything registered, plus any public function taking a RuleContext.

    The per-march rules (``MARCH_RULES``, where the X3 generation differs) are left out: they do
    not apply on ``bayes``, and tests/unit/checker/test_march_descriptions.py gives each its violating case."""
    march_only = {r for rules in op_rules.MARCH_RULES.values() for rs in rules.values() for r in rs}
    registered = set(GENERIC_RULES) | {r for s in OP_TABLE.values() for r in s.rules}
    defined = set()
    for name, f in vars(op_rules).items():
        if name.startswith("_") or not inspect.isfunction(f) or f.__module__ != op_rules.__name__:
            continue
        params = list(inspect.signature(f).parameters.values())
        if params and params[0].annotation in (RuleContext, "RuleContext"):
            defined.add(f)
    return (registered | defined) - march_only


def test_every_rule_has_a_violating_case():
    covered = {v.rule for v in VIOLATIONS}
    missing = sorted(r.__name__ for r in _all_rule_functions() - covered)
    assert not missing, f"op_rules has rules without a violating case in tests/unit/checker/test_op_support_rules.py: {missing}"


def test_every_rule_function_is_registered():
    registered = set(GENERIC_RULES) | {r for s in OP_TABLE.values() for r in s.rules}
    assert not sorted(r.__name__ for r in _all_rule_functions() - registered)


@pytest.mark.parametrize("rule", sorted(_all_rule_functions(), key=lambda r: r.__name__), ids=lambda r: r.__name__)
def test_rule_docstring_formats_with_every_limit_filled_in(rule):
    text = reason_of(rule, BAYES, None)
    assert rule.__doc__ and "{" not in text and "}" not in text, text


@pytest.mark.parametrize("case", _vparams("direct"))
def test_rule_detects_its_violation(case):
    g = case.build()
    node = g.node(NODE)
    assert case.rule in _rules_of(node.op_type), f"{case.rule.__name__} is not applied to {node.op_type}"
    detail = case.rule(RuleContext(node, g, BAYES))
    assert detail is not None
    assert case.offending in reason_of(case.rule, BAYES, detail)


@pytest.mark.parametrize("case", _vparams("only"))
def test_case_violates_only_its_rule(case):
    g = case.build()
    node = g.node(NODE)
    ctx = RuleContext(node, g, BAYES)
    fired = {r.__name__ for r in _rules_of(node.op_type) if r(ctx) is not None}
    assert fired == {case.rule.__name__} | ({case.shadowed_by.__name__} if case.shadowed_by else set())


@pytest.mark.parametrize("case", _vparams("placement"))
def test_violating_node_is_placed_on_cpu_with_the_rules_reason(case):
    g, p = _placement(case.build)
    assert p.on == "CPU" and p.bpu_type is None and p.unit is None
    assert p.reason.startswith(reason_of(case.rule, BAYES, None)), p.reason
    assert case.offending in p.reason
    assert p.reason == reason_of(case.rule, BAYES, case.rule(RuleContext(g.node(NODE), g, BAYES)))


# ------------------------------------------------------------------ valid nodes on the BPU
_LUT = ["Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "HardSigmoid",
        "Softplus", "Elu", "Selu", "Abs", "Neg", "Sin", "Cos", "Softsign", "Relu"]

VALID: dict[str, Build] = {
    "Conv": onnx_node("Conv", ["x", "w", "b"], feeds={"x": [1, 3, 8, 8]}, consts={"w": _w(8, 3, 3, 3), "b": _w(8)}, pads=[1, 1, 1, 1]),
    "ConvTranspose": onnx_node("ConvTranspose", ["x", "w"], feeds={"x": [1, 4, 4, 4]}, consts={"w": _w(4, 2, 2, 2)}, strides=[2, 2]),
    "MatMul": onnx_node("MatMul", ["q", "k"], feeds={"q": [1, 4, 8], "k": [1, 8, 6]}),
    # Linear is an hbtool-domain fusion (MatMul + bias), not an ONNX op: build the IR.
    "Linear": ir_node("Linear", ["x", "w", "b"], feeds={"x": (2, 8)}, consts={"w": _w(8, 4), "b": _w(4)}, outputs={"y": (2, 4)}, domain=HBTOOL_DOMAIN),
    "Gemm": onnx_node("Gemm", ["x", "w", "b"], feeds={"x": [2, 8]}, consts={"w": _w(8, 4), "b": _w(4)}),
    "Add": onnx_node("Add", ["x", "c"], feeds={"x": _X}, consts={"c": _w(1, 8, 1, 1)}),
    "Sub": onnx_node("Sub", ["x", "z"], feeds={"x": _X, "z": _X}),
    "Mul": onnx_node("Mul", ["x", "c"], feeds={"x": _X}, consts={"c": _w(8, 1, 1)}),
    "Div": onnx_node("Div", ["x", "z"], feeds={"x": _X, "z": _X}),
    "Max": onnx_node("Max", ["x", "z"], feeds={"x": _X, "z": _X}),
    "Min": onnx_node("Min", ["x", "z"], feeds={"x": _X, "z": _X}),
    **{op: onnx_node(op, ["x"], feeds={"x": _X}) for op in _LUT},
    "LeakyRelu": onnx_node("LeakyRelu", ["x"], feeds={"x": _X}, alpha=0.1),
    "PRelu": onnx_node("PRelu", ["x", "s"], feeds={"x": _X}, consts={"s": np.full((8, 1, 1), 0.1, F32)}),
    "Clip": onnx_node("Clip", ["x", "lo", "hi"], feeds={"x": _X}, consts={"lo": np.array(0, F32), "hi": np.array(6, F32)}),
    # Gelu (opset 20), Mish (opset 18) and Swish (hbtool domain) are not opset-17 ops: build the IR.
    "Gelu": ir_node("Gelu", ["x"], feeds={"x": _X}, outputs={"y": _X}, domain=HBTOOL_DOMAIN, approximate="none"),
    "Mish": ir_node("Mish", ["x"], feeds={"x": _X}, outputs={"y": _X}),
    "Swish": ir_node("Swish", ["x"], feeds={"x": _X}, outputs={"y": _X}, domain=HBTOOL_DOMAIN),
    # HardSwish is an opset-17 op, but onnxruntime's folding in import_onnx expands it into
    # HardSigmoid + Mul (fuse_activations puts it back later): build the IR.
    "HardSwish": ir_node("HardSwish", ["x"], feeds={"x": _X}, outputs={"y": _X}),
    "Pow": onnx_node("Pow", ["x", "e"], feeds={"x": _X}, consts={"e": np.array(2, F32)}),
    # HzPreprocess is inserted by hbtool.quant.preprocess (hbtool domain): build the IR.
    "HzPreprocess": ir_node("HzPreprocess", ["x"], feeds={"x": (1, 3, 8, 8)}, outputs={"y": (1, 3, 8, 8)}, domain=HBTOOL_DOMAIN,
                            mean=[0.0], scale=[1 / 255]),
    "Softmax": onnx_node("Softmax", ["x"], feeds={"x": [1, 4, 16]}, axis=-1),
    "LogSoftmax": onnx_node("LogSoftmax", ["x"], feeds={"x": [1, 4, 16]}, axis=-1),
    "LayerNormalization": onnx_node("LayerNormalization", ["x", "g", "b"], feeds={"x": [1, 4, 16]}, consts={"g": np.ones(16, F32), "b": np.zeros(16, F32)}),
    "BatchNormalization": onnx_node("BatchNormalization", ["x", "g", "b", "m", "v"], feeds={"x": _X},
                                    consts={"g": np.ones(8, F32), "b": _w(8), "m": _w(8, seed=1), "v": np.ones(8, F32)}),
    "InstanceNormalization": onnx_node("InstanceNormalization", ["x", "g", "b"], feeds={"x": _X}, consts={"g": np.ones(8, F32), "b": _w(8)}),
    # ChannelLayerNorm is the hbtool-domain fusion of a LayerNorm over a non-last axis: build the IR.
    "ChannelLayerNorm": ir_node("ChannelLayerNorm", ["x", "g", "b"], feeds={"x": _X}, consts={"g": np.ones((8, 1, 1), F32), "b": np.zeros((8, 1, 1), F32)},
                                outputs={"y": _X}, domain=HBTOOL_DOMAIN, axis=1, epsilon=1e-6),
    "ReduceMean": onnx_node("ReduceMean", ["x"], feeds={"x": [1, 4, 16]}, axes=[-1]),
    "ReduceSum": onnx_node("ReduceSum", ["x", "a"], feeds={"x": [1, 4, 16]}, consts={"a": _i64(-1)}),
    "ReduceL2": onnx_node("ReduceL2", ["x"], feeds={"x": [1, 4, 16]}, axes=[-1]),
    "ReduceMax": onnx_node("ReduceMax", ["x"], feeds={"x": _X}, axes=[2, 3]),
    "ReduceMin": onnx_node("ReduceMin", ["x"], feeds={"x": _X}, axes=[1]),
    "MaxPool": onnx_node("MaxPool", ["x"], feeds={"x": _X}, kernel_shape=[2, 2], strides=[2, 2]),
    "AveragePool": onnx_node("AveragePool", ["x"], feeds={"x": _X}, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    "GlobalAveragePool": onnx_node("GlobalAveragePool", ["x"], feeds={"x": _X}),
    "GlobalMaxPool": onnx_node("GlobalMaxPool", ["x"], feeds={"x": _X}),
    "ArgMax": onnx_node("ArgMax", ["x"], feeds={"x": _X}, axis=1),
    "ArgMin": onnx_node("ArgMin", ["x"], feeds={"x": _X}, axis=1),
    "Reshape": onnx_node("Reshape", ["x", "s"], feeds={"x": _X}, consts={"s": _i64(1, 8, 16)}),
    "Expand": onnx_node("Expand", ["x", "s"], feeds={"x": [1, 8, 1, 1]}, consts={"s": _i64(1, 8, 4, 4)}),
    "Tile": onnx_node("Tile", ["x", "r"], feeds={"x": [1, 8, 2, 2]}, consts={"r": _i64(1, 1, 2, 2)}),
    "Flatten": onnx_node("Flatten", ["x"], feeds={"x": _X}, axis=1),
    "Squeeze": onnx_node("Squeeze", ["x", "a"], feeds={"x": [1, 8, 1, 4]}, consts={"a": _i64(2)}),
    "Unsqueeze": onnx_node("Unsqueeze", ["x", "a"], feeds={"x": [8, 4]}, consts={"a": _i64(0)}),
    "Transpose": onnx_node("Transpose", ["x"], feeds={"x": _X}, perm=[0, 2, 3, 1]),
    "Concat": onnx_node("Concat", ["x", "z"], feeds={"x": _X, "z": _X}, axis=1),
    "Split": onnx_node("Split", ["x", "s"], feeds={"x": _X}, consts={"s": _i64(4, 4)}, outputs=("y0", "y1"), axis=1),
    "Slice": onnx_node("Slice", ["x", "s", "e", "a"], feeds={"x": _X}, consts={"s": _i64(0), "e": _i64(2), "a": _i64(1)}),
    "Pad": onnx_node("Pad", ["x", "p"], feeds={"x": _X}, consts={"p": _i64(0, 0, 1, 1, 0, 0, 1, 1)}),
    "Gather": onnx_node("Gather", ["x", "i"], feeds={"x": _X}, consts={"i": _i64(0, 2)}, axis=1),
    "Resize": onnx_node("Resize", ["x", "", "s"], feeds={"x": _X}, consts={"s": np.array([1, 1, 2, 2], F32)}, mode="nearest"),
    # Upsample is deprecated since opset 10 and rejected by the checker at 17: build the IR.
    "Upsample": ir_node("Upsample", ["x", "s"], feeds={"x": _X}, consts={"s": np.array([1, 1, 2, 2], F32)}, outputs={"y": (1, 8, 8, 8)}),
    "DepthToSpace": onnx_node("DepthToSpace", ["x"], feeds={"x": _X}, blocksize=2),
    "SpaceToDepth": onnx_node("SpaceToDepth", ["x"], feeds={"x": _X}, blocksize=2),
    # WindowPartition / WindowReverse / Roll are hbtool-domain fusions: build the IR.
    "WindowPartition": ir_node("WindowPartition", ["x"], feeds={"x": (1, 8, 8, 4)}, outputs={"y": (4, 4, 4, 4)}, domain=HBTOOL_DOMAIN, window_size=[4, 4]),
    "WindowReverse": ir_node("WindowReverse", ["x"], feeds={"x": (4, 4, 4, 4)}, outputs={"y": (1, 8, 8, 4)}, domain=HBTOOL_DOMAIN, window_size=[4, 4]),
    "Roll": ir_node("Roll", ["x"], feeds={"x": (1, 8, 8, 4)}, outputs={"y": (1, 8, 8, 4)}, domain=HBTOOL_DOMAIN, shifts=[-2, -2], axes=[1, 2]),
}

def test_every_op_of_the_table_has_a_valid_case():
    assert sorted(set(OP_TABLE) ^ set(VALID)) == []


@pytest.mark.parametrize("op", list(VALID))
def test_typical_node_is_placed_on_the_bpu_with_its_type(op):
    g, p = _placement(VALID[op])
    assert g.node(NODE).op_type == op
    assert (p.on, p.bpu_type, p.unit, p.reason) == ("BPU", OP_TABLE[op].bpu_type, OP_TABLE[op].unit, None)


# ------------------------------------------------------------------ CPU by design
def test_cpu_by_design_ops_are_not_in_the_table():
    assert not set(CPU_BY_DESIGN) & set(OP_TABLE)


@pytest.mark.parametrize("op", sorted(CPU_BY_DESIGN))
def test_cpu_by_design_op_gets_exactly_its_reason(op):
    # Placement of an op without a BPU form reads only its type: a generic one-node IR graph
    # covers every op, including If/Loop/NonMaxSuppression whose ONNX forms need much more.
    g, p = _placement(ir_node(op, ["x"], feeds={"x": (1, 4)}, outputs={"y": (1, 4)}))
    assert (p.on, p.bpu_type, p.unit, p.reason) == ("CPU", None, None, CPU_BY_DESIGN[op])


@pytest.mark.parametrize("op,build", [
    ("Equal", onnx_node("Equal", ["x", "z"], feeds={"x": [1, 4], "z": [1, 4]})),
    ("Where", onnx_node("Where", ["m", "x", "z"], feeds={"m": T([1, 4], TensorProto.BOOL), "x": [1, 4], "z": [1, 4]})),
    ("TopK", onnx_node("TopK", ["x", "k"], feeds={"x": [1, 8]}, consts={"k": _i64(2)}, outputs=("v", "i"))),
    ("CumSum", onnx_node("CumSum", ["x", "a"], feeds={"x": [1, 8]}, consts={"a": np.array(1, np.int64)})),
], ids=lambda v: v if isinstance(v, str) else "")
def test_cpu_by_design_reason_survives_import(op, build):
    g, p = _placement(build)
    assert g.node(NODE).op_type == op
    assert (p.on, p.reason) == ("CPU", CPU_BY_DESIGN[op])


# ------------------------------------------------------------------ integer-derived placement
def _mask_model() -> onnx.ModelProto:
    """scores (float) + (1 - float(mask)) * -1e4, then Softmax: the BERT attention-mask idiom."""
    nodes = [
        helper.make_node("Cast", ["mask"], ["mf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "mf"], ["inv"], name="invert"),
        helper.make_node("Mul", ["inv", "big"], ["bias"], name="to_bias"),
        helper.make_node("Add", ["scores", "bias"], ["s"], name="add_mask"),
        helper.make_node("Softmax", ["s"], ["y"], name="softmax", axis=-1),
    ]
    inits = [tensor("one", np.array(1, F32)), tensor("big", np.array(-1e4, F32))]
    return make_model(nodes, [vinfo("scores", [1, 6]), vinfo("mask", [1, 6], TensorProto.INT64)], [vinfo("y", [1, 6])], inits)


def test_mask_arithmetic_stays_on_the_cpu():
    g = import_onnx(_mask_model())
    assert {"mask", "mf", "inv", "bias"} <= integer_derived_tensors(g)
    assert not {"scores", "s", "y"} & integer_derived_tensors(g)
    place_graph(g, BAYES)
    assert g.node("cast").meta["reason"] == CPU_BY_DESIGN["Cast"]
    reasons = {g.node(n).meta["reason"] for n in ("invert", "to_bias")}
    assert {g.node(n).meta["on"] for n in ("invert", "to_bias")} == {"CPU"}
    assert len(reasons) == 1 and INTEGER_REASON_KEY in reasons.pop()
    for name in ("add_mask", "softmax"):  # a feature map plus the mask bias is BPU work again
        assert g.node(name).meta["on"] == "BPU", name


def test_op_with_a_table_entry_still_goes_to_the_cpu_on_integer_derived_inputs():
    # Relu has no rules at all; its float input comes only from an integer model input.
    model = make_model(
        [helper.make_node("Cast", ["ids"], ["f"], name="cast", to=TensorProto.FLOAT), helper.make_node("Relu", ["f"], ["y"], name=NODE)],
        [vinfo("ids", [1, 6], TensorProto.INT64)], [vinfo("y", [1, 6])],
    )
    g = import_onnx(model)
    place_graph(g, BAYES)
    assert g.node(NODE).meta["on"] == "CPU" and INTEGER_REASON_KEY in g.node(NODE).meta["reason"]


def test_embedding_gather_is_on_the_cpu_and_its_output_is_a_feature_map():
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
        helper.make_node("MatMul", ["e", "w"], ["y"], name="proj"),
    ]
    model = make_model(nodes, [vinfo("ids", [1, 6], TensorProto.INT64)], [vinfo("y", [1, 6, 8])],
                       [tensor("emb", _w(50, 8)), tensor("w", _w(8, 8, seed=1))])
    g = import_onnx(model)
    derived = integer_derived_tensors(g)
    assert "ids" in derived and "e" not in derived
    place_graph(g, BAYES)
    embed = g.node("embed").meta
    # the Gather reads only an integer input, yet gets the Gather rule's reason, not the integer one
    assert embed["on"] == "CPU"
    assert embed["reason"] == reason_of(gather_indices_are_constant, BAYES, "indices 'ids' come at run time")
    assert (g.node("proj").meta["on"], g.node("proj").meta["bpu_type"]) == ("BPU", "HzSQuantizedMatmul")


def test_gather_of_a_mask_derived_tensor_stays_on_the_cpu():
    nodes = [
        helper.make_node("Cast", ["mask"], ["mf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Gather", ["mf", "i"], ["gm"], name=NODE, axis=1),
        helper.make_node("Mul", ["gm", "big"], ["y"], name="to_bias"),
    ]
    model = make_model(nodes, [vinfo("mask", [1, 6], TensorProto.INT64)], [vinfo("y", [1, 2])],
                       [tensor("i", _i64(0, 1)), tensor("big", np.array(-1e4, F32))])
    g = import_onnx(model)
    assert "gm" in integer_derived_tensors(g)
    place_graph(g, BAYES)
    assert g.node("to_bias").meta["on"] == "CPU"
    assert g.node(NODE).meta["on"] == "CPU"
