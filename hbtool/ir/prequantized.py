"""Models that arrive already quantized: turned into the float graph hbtool quantizes, with what they fix kept aside.

Three forms reach hbtool from other quantizers:

* **QDQ** (onnxruntime's ``quantize_static`` with ``QuantFormat.QDQ``, QAT exports, NNCF,
  TensorRT's modelopt): float ops between ``QuantizeLinear -> DequantizeLinear`` pairs on the
  activations and ``DequantizeLinear`` on integer weight initializers;
* **weight-only** (tf2onnx from a weight-quantized TFLite model): only the weights arrive as
  integers through ``DequantizeLinear``;
* **QOperator** (``QuantFormat.QOperator``): ``QLinearConv``, ``QLinearMatMul``, com.microsoft's
  ``QGemm``/``QLinearAdd``/... on integer tensors between one ``QuantizeLinear`` and the final
  ``DequantizeLinear``.

Left as they are, every ``DequantizeLinear`` on a weight is a CPU node that turns the layer's
weight into a run-time value (so the layer itself goes to the CPU), and every pair is a CPU island
inside the BPU part. So the import rewrites all three into one float graph, the graph the
quantizer's own "dequantized" reading of the model describes:

* a ``DequantizeLinear`` of a constant becomes the float constant it computes (as onnxruntime
  computes it: ``float(q - zp) * scale`` in float32), and its integers and scales are kept in a
  :class:`FixedWeight`;
* a ``QuantizeLinear`` on an activation, the ``DequantizeLinear`` that reads it back and every
  ``QLinear*`` op's quantized output leave the float tensor, its scale and zero point kept in a
  :class:`FixedActivation`. A quantizer that folds a ReLU into an unsigned range (onnxruntime
  removes Relu/Clip before a ``uint8`` tensor with zero point 0) leaves a tensor that cannot be
  negative: a ``Relu`` is put back there, or the float graph would compute what the quantized
  model never does;
* ``QLinear*`` ops become their float op, their integer weights and int32 biases float constants.

What to do with the kept scales is the calibration's business (:mod:`hbtool.quant.prequantized`):
the weights keep their integers, ``calibration_type: load`` takes the activation scales.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hbtool.errors import ModelError
from hbtool.ir.graph import Graph, Node

MICROSOFT_DOMAIN = "com.microsoft"

# op -> (float op, quantized inputs as (tensor, scale, zero point) positions, output (scale, zero point) positions,
#        bias position (int32, scaled by the first two inputs' scales) or None)
_QLINEAR: dict[str, tuple[str, list[tuple[int, int, int]], tuple[int, int] | None, int | None]] = {
    "QLinearConv": ("Conv", [(0, 1, 2), (3, 4, 5)], (6, 7), 8),
    "QLinearMatMul": ("MatMul", [(0, 1, 2), (3, 4, 5)], (6, 7), None),
    "QGemm": ("Gemm", [(0, 1, 2), (3, 4, 5)], (7, 8), 6),
    "QLinearAdd": ("Add", [(0, 1, 2), (3, 4, 5)], (6, 7), None),
    "QLinearMul": ("Mul", [(0, 1, 2), (3, 4, 5)], (6, 7), None),
    "QLinearGlobalAveragePool": ("GlobalAveragePool", [(0, 1, 2)], (3, 4), None),
    "QLinearAveragePool": ("AveragePool", [(0, 1, 2)], (3, 4), None),
    "QLinearSigmoid": ("Sigmoid", [(0, 1, 2)], (3, 4), None),
    "QLinearLeakyRelu": ("LeakyRelu", [(0, 1, 2)], (3, 4), None),
    "QLinearSoftmax": ("Softmax", [(0, 1, 2)], (3, 4), None),
}
#: com.microsoft ops the import reads (everything else in that domain stays an error)
MICROSOFT_QUANT_OPS = frozenset({"QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearAveragePool",
                                 "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearConcat",
                                 "QuantizeLinear", "DequantizeLinear"})
QUANT_OPS = frozenset(_QLINEAR) | {"QLinearConcat", "QuantizeLinear", "DequantizeLinear"}

# ops that only move, select or order values: on quantized integers they compute what they compute on the
# dequantized floats (the scale is positive), so in QOperator models they may sit between quantized ops
_ORDER_PRESERVING = {
    "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Split", "Concat", "Gather", "Identity",
    "DepthToSpace", "SpaceToDepth", "Tile", "Expand", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Resize",
    "Pad", "ArgMax", "ArgMin", "TopK",
}
# ops whose output cannot be negative when their inputs cannot (or never can be)
_NONNEG_OUT = {"Relu", "Sigmoid", "Softmax", "Exp", "Abs", "Sqrt"}
_NONNEG_KEEP = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize", "Concat", "Reshape", "Transpose",
                "Flatten", "Squeeze", "Unsqueeze", "Slice", "Split", "Identity", "DepthToSpace", "SpaceToDepth", "Pad",
                "ReduceMax", "ReduceMean"}

_CODE_DTYPES = {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16)}
_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int16): (-32768, 32767),
           np.dtype(np.uint16): (0, 65535), np.dtype(np.int32): (-(2**31), 2**31 - 1)}


@dataclass(frozen=True)
class FixedActivation:
    """The quantization a model fixes for an activation tensor: ``x ~ scale * (q - zero_point)``, q in [qmin, qmax]."""

    scale: np.ndarray          # float32, one value or one per channel of ``axis``
    zero_point: np.ndarray     # same shape as scale
    qmin: int
    qmax: int
    node: str                  # the node that quantized it (for messages)
    axis: int | None = None    # the channel axis of a per-channel scale

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    @property
    def symmetric(self) -> bool:
        """Zero point 0 and a signed range: what the BPU's activations are."""
        return bool(np.all(self.zero_point == 0)) and self.qmin < 0

    @property
    def bits(self) -> int:
        return 16 if self.qmax - self.qmin > 255 else 8

    def float_range(self) -> tuple[float, float]:
        """The smallest and largest values the quantized tensor can hold."""
        s = self.scale.astype(np.float64)
        zp = self.zero_point.astype(np.float64)
        return float(np.min(s * (self.qmin - zp))), float(np.max(s * (self.qmax - zp)))


@dataclass(frozen=True)
class FixedWeight:
    """A constant that arrived as integers: ``value = float32(codes) * scale`` along ``axis`` (``codes = q - zero_point``).

    Only the codes' range is kept (the codes themselves follow from ``value`` and ``scale``): graphs are copied
    whole at several stages, and an int64 copy of every weight would cost eight times the model's size each time.
    """

    code_range: tuple[int, int]  # smallest and largest q - zero point
    scale: np.ndarray          # float32: one value, one per slice of ``axis``, or (blocked) the codes' shape
    axis: int | None           # None for one scale
    block: int                 # DequantizeLinear's block_size (0: one scale per slice of ``axis``)
    source_dtype: np.dtype     # the integers' type in the model (int8, uint8, int32 for a bias...)
    zero_point_nonzero: bool
    value: np.ndarray          # the float constant put in the graph (identity tells whether a pass replaced it)
    node: str


@dataclass
class Prequantized:
    """What an already-quantized model fixed, and what the import did with it."""

    form: str                                                         # "QDQ", "QOperator", "weight-only DequantizeLinear"
    activations: dict[str, list[FixedActivation]] = field(default_factory=dict)   # float tensor -> its quantizations
    weights: dict[str, FixedWeight] = field(default_factory=dict)    # float constant -> its integers
    relus_added: list[str] = field(default_factory=list)             # tensors a folded ReLU was restored on
    kept_nodes: list[str] = field(default_factory=list)              # Q/DQ nodes left in the graph (with why)

    def to_json(self) -> dict:
        return {"form": self.form, "weights": sorted(self.weights), "activation_scales": sorted(self.activations),
                "relus_restored": list(self.relus_added), "kept_on_cpu": list(self.kept_nodes)}

    def summary(self) -> str:
        parts = [f"{len(self.weights)} integer constant(s) dequantized into float weights"]
        if self.activations:
            parts.append(f"{len(self.activations)} activation scale(s) kept from QuantizeLinear / QLinear outputs")
        if self.relus_added:
            parts.append(f"{len(self.relus_added)} ReLU(s) the quantizer folded into an unsigned range restored")
        if self.kept_nodes:
            parts.append(f"{len(self.kept_nodes)} quantize node(s) left on the CPU ({'; '.join(self.kept_nodes[:3])})")
        return f"already-quantized model ({self.form}): " + ", ".join(parts)


def _range_of(dtype: np.dtype, where: str) -> tuple[int, int]:
    rng = _RANGES.get(np.dtype(dtype))
    if rng is None:
        raise ModelError(f"{where} quantizes to {np.dtype(dtype)}, a type hbtool does not read",
                         "quantize to int8, uint8, int16 or uint16 (int4 and float8 are not supported)")
    return rng


def _broadcast(param: np.ndarray, rank: int, axis: int, size: int, block: int) -> np.ndarray:
    """A DequantizeLinear parameter shaped to broadcast against its rank-``rank`` input."""
    param = np.asarray(param)
    if param.size == 1:
        return param.reshape(())
    if block:
        return np.repeat(param, block, axis=axis).take(np.arange(size), axis=axis)
    shape = [1] * rank
    shape[axis] = param.size
    return param.reshape(shape)


def dequantize_constant(codes: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int,
                        block: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(float32 value as onnxruntime's DequantizeLinear computes it, int64 codes ``q - zero point``)."""
    rank = max(codes.ndim, 1)
    axis = axis % rank if codes.ndim else 0
    size = codes.shape[axis] if codes.ndim else 1
    zp = np.zeros((), np.int64) if zero_point is None else _broadcast(zero_point, codes.ndim, axis, size, block).astype(np.int64)
    centred = codes.astype(np.int64) - zp
    s = _broadcast(scale, codes.ndim, axis, size, block).astype(np.float32)
    return (centred.astype(np.float32) * s).astype(np.float32), centred


def quantize_constant(value: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int,
                      out_dtype: np.dtype) -> np.ndarray:
    """QuantizeLinear of a constant (a fake-quantized float weight in a QAT export): round half to even, saturate."""
    qmin, qmax = _range_of(out_dtype, "QuantizeLinear")
    axis = axis % max(value.ndim, 1) if value.ndim else 0
    size = value.shape[axis] if value.ndim else 1
    s = _broadcast(scale, value.ndim, axis, size, 0).astype(np.float32)
    zp = np.zeros((), np.int64) if zero_point is None else _broadcast(zero_point, value.ndim, axis, size, 0).astype(np.int64)
    q = np.rint(value.astype(np.float32) / s).astype(np.int64) + zp
    return np.clip(q, qmin, qmax).astype(out_dtype)


class _Rewrite:
    """One pass over the nodes in order; quantized-integer tensors become the floats they stand for."""

    def __init__(self, graph: Graph):
        self.g = graph
        self.info = Prequantized("")
        # tensor holding quantized integers -> how they dequantize (only tensors this rewrite turned float)
        self.codes: dict[str, FixedActivation] = {}
        self.nonneg: set[str] = set()
        self.identities: list[Node] = []
        self.relus: list[Node] = []
        self.new_nodes: list[Node] = []

    # ----------------------------------------------------------------- helpers
    def _const(self, name: str) -> np.ndarray | None:
        return self.g.const(name) if name else None

    def _param(self, node: Node, k: int) -> np.ndarray | None:
        return self._const(node.inputs[k]) if len(node.inputs) > k and node.inputs[k] else None

    def _float(self, name: str) -> None:
        v = self.g.value(name)
        v.dtype = np.dtype(np.float32)

    def _emit(self, op: str, inputs: list[str], outputs: list[str], attrs: dict | None = None, name: str = "",
              replaces: Node | None = None) -> Node:
        """A new node (``replaces``: the quantized node it stands for, whose name it takes)."""
        node = Node(replaces.name if replaces is not None else self.g.unique_name(name or op), op, list(inputs), list(outputs), dict(attrs or {}))
        for o in outputs:
            self.g.value(o)
        self.new_nodes.append(node)
        return node

    def _float_twin(self, name: str) -> str:
        """A new float tensor of ``name``'s shape: a QLinear op's float result before its output quantization."""
        twin = self.g.unique_name(f"{name}_float")
        self.g.set_value(twin, self.g.shape(name), np.float32)
        return twin

    def _fixed(self, node: Node, k_scale: int, k_zp: int, out_dtype: np.dtype | None = None) -> FixedActivation | None:
        scale = self._param(node, k_scale)
        if scale is None:
            return None
        zp = self._param(node, k_zp)
        dtype = zp.dtype if zp is not None else np.dtype(out_dtype or np.uint8)
        qmin, qmax = _range_of(dtype, f"node '{node.name}'")
        zp = np.zeros_like(scale, dtype=np.int64) if zp is None else zp.astype(np.int64)
        axis = None if scale.size == 1 else int(node.attr("axis", 1))
        return FixedActivation(scale.astype(np.float32).reshape(-1) if scale.size > 1 else scale.astype(np.float32).reshape(()),
                               zp.reshape(-1) if zp.size > 1 else zp.reshape(()), qmin, qmax, node.name, axis)

    def _record(self, tensor: str, fixed: FixedActivation) -> None:
        self.info.activations.setdefault(tensor, []).append(fixed)

    def _settle(self, src: str, dst: str, fixed: FixedActivation, node: Node) -> None:
        """``dst`` holds ``src`` quantized by ``fixed``: an identity, or a Relu where the range cuts off negatives."""
        self.codes[dst] = fixed
        self._float(dst)
        lo, _ = fixed.float_range()
        if lo >= 0 and src not in self.nonneg:
            self.relus.append(self._emit("Relu", [src], [dst], name=f"{node.name}_folded_relu"))
            self.info.relus_added.append(dst)
        else:
            self.identities.append(self._emit("Identity", [src], [dst], name=f"{node.name}_as_float"))
        if lo >= 0:
            self.nonneg.add(dst)

    def _weight(self, node: Node, k_x: int, k_s: int, k_zp: int, axis: int, block: int = 0,
                scale: np.ndarray | None = None) -> str:
        """The float constant for the integer constant at input ``k_x`` (a new constant; the integers recorded)."""
        codes = self._const(node.inputs[k_x])
        scale = self._param(node, k_s) if scale is None else scale
        zp = self._param(node, k_zp) if k_zp >= 0 else None
        value, centred = dequantize_constant(codes, scale, zp, axis, block)
        name = self.g.add_const(value, hint=f"{node.inputs[k_x]}_dequantized")
        self._keep_weight(name, codes, centred, scale, zp, axis, block, value, node)
        return name

    def _keep_weight(self, name: str, codes: np.ndarray, centred: np.ndarray, scale: np.ndarray, zp: np.ndarray | None,
                     axis: int, block: int, value: np.ndarray, node: Node) -> None:
        scale = np.asarray(scale, np.float32)
        self.info.weights[name] = FixedWeight(
            (int(centred.min(initial=0)), int(centred.max(initial=0))), scale, None if scale.size == 1 else axis % max(codes.ndim, 1), block, np.dtype(codes.dtype),
            zp is not None and bool(np.any(np.asarray(zp) != 0)), value, node.name)

    # ----------------------------------------------------------------- ops
    def dequantize(self, node: Node) -> bool:
        src, dst = node.inputs[0], node.outputs[0]
        if src in self.codes:
            self.identities.append(self._emit("Identity", [src], [dst], name=f"{node.name}_as_float"))
            if src in self.nonneg:
                self.nonneg.add(dst)
            self._float(dst)
            return True
        codes, scale = self._const(src), self._param(node, 1)
        if codes is None or scale is None or (len(node.inputs) > 2 and node.inputs[2] and self._param(node, 2) is None):
            self.info.kept_nodes.append(f"{node.name}: reads a run-time integer tensor")
            return False
        zp = self._param(node, 2)
        axis, block = int(node.attr("axis", 1)), int(node.attr("block_size", 0) or 0)
        value, centred = dequantize_constant(codes, scale, zp, axis, block)
        v = self.g.value(dst)
        v.data, v.dtype, v.shape = value, np.dtype(np.float32), tuple(value.shape)
        self._keep_weight(dst, codes, centred, scale, zp, axis, block, value, node)
        return True

    def quantize(self, node: Node) -> bool:
        src, dst = node.inputs[0], node.outputs[0]
        out_dtype = node.attr("output_dtype")
        zp = self._param(node, 2)
        dtype = zp.dtype if zp is not None else (np.dtype(np.uint8) if not out_dtype else _onnx_dtype(int(out_dtype)))
        fixed = self._fixed(node, 1, 2, dtype)
        if fixed is None:
            self.info.kept_nodes.append(f"{node.name}: its scale is computed at run time")
            return False
        if dst in self.g.outputs:
            self.info.kept_nodes.append(f"{node.name}: the model outputs the integers")
            return False
        value = self._const(src)
        if value is not None:  # a fake-quantized float constant (QAT exports): its integers, then DequantizeLinear folds them
            v = self.g.value(dst)
            v.data = quantize_constant(value, self._param(node, 1), zp, int(node.attr("axis", 1)), dtype)
            v.dtype, v.shape = v.data.dtype, tuple(v.data.shape)
            return True
        self._record(dst, fixed)
        self._settle(src, dst, fixed, node)
        return True

    def qlinear(self, node: Node) -> None:
        op = node.op_type
        if op == "QLinearConcat":
            return self._qlinear_concat(node)
        float_op, quantized, out, bias = _QLINEAR[op]
        if op in ("QLinearGlobalAveragePool", "QLinearAveragePool") and int(node.attr("channels_last", 0) or 0):
            raise ModelError(f"node '{node.name}' ({op}) works channels-last", "quantize the model in QDQ format (QuantFormat.QDQ)")
        inputs = []
        for kx, ks, kz in quantized:
            name = node.inputs[kx]
            if self.g.is_const(name):
                axis = 0 if (op == "QLinearConv" or (op == "QGemm" and int(node.attr("transB", 0) or 0))) else -1
                inputs.append(self._weight(node, kx, ks, kz, axis))
            elif name in self.codes:
                inputs.append(name)
            else:
                raise ModelError(f"node '{node.name}' ({op}) reads '{name}', which no quantize node produced",
                                 "quantize the model in QDQ format (QuantFormat.QDQ)")
        if bias is not None and len(node.inputs) > bias and node.inputs[bias]:
            s_x = self._param(node, quantized[0][1]).astype(np.float32)
            s_w = self._param(node, quantized[1][1]).astype(np.float32).reshape(-1)
            alpha = np.float32(node.attr("alpha", 1.0)) if op == "QGemm" else np.float32(1.0)  # QGemm's C: scale alpha s_a s_b
            inputs.append(self._weight(node, bias, -1, -1, 0, scale=(alpha * s_x * s_w).astype(np.float32)))
        attrs = {k: v for k, v in node.attrs.items() if k not in ("channels_last",)}
        if op == "QLinearSoftmax":
            attrs = {"axis": int(node.attr("axis", -1))}
        fixed = self._fixed(node, *out) if out is not None and len(node.inputs) > out[0] and node.inputs[out[0]] else None
        dst = node.outputs[0]
        if fixed is None:  # QGemm without an output scale: a float output
            self._emit(float_op, inputs, [dst], attrs, replaces=node)
            self._float(dst)
            return
        mid = self._float_twin(dst)
        self._emit(float_op, inputs, [mid], attrs, replaces=node)
        if float_op in _NONNEG_OUT:
            self.nonneg.add(mid)
        self._record(dst, fixed)
        self._settle(mid, dst, fixed, node)

    def _qlinear_concat(self, node: Node) -> None:
        fixed = self._fixed(node, 0, 1)
        inputs = []
        for k in range(2, len(node.inputs), 3):
            name = node.inputs[k]
            if self.g.is_const(name):
                inputs.append(self._weight(node, k, k + 1, k + 2, 0))
            elif name in self.codes:
                inputs.append(name)
            else:
                raise ModelError(f"node '{node.name}' (QLinearConcat) reads '{name}', which no quantize node produced",
                                 "quantize the model in QDQ format (QuantFormat.QDQ)")
        mid = self._float_twin(node.outputs[0])
        self._emit("Concat", inputs, [mid], {"axis": int(node.attr("axis", 0))}, replaces=node)
        if all(i in self.nonneg for i in inputs):
            self.nonneg.add(mid)
        self._record(node.outputs[0], fixed)
        self._settle(mid, node.outputs[0], fixed, node)

    def passthrough(self, node: Node, coded: list[str]) -> None:
        """An order-preserving op on quantized integers (QOperator): the same op on the floats."""
        first = self.codes[coded[0]]
        if len({(float(np.max(self.codes[c].scale)), int(np.max(self.codes[c].zero_point))) for c in coded}) > 1:
            raise ModelError(f"node '{node.name}' ({node.op_type}) combines quantized integers of different scales",
                             "quantize the model in QDQ format (QuantFormat.QDQ)")
        if node.op_type == "Pad" and len(node.inputs) > 2 and node.inputs[2]:
            cv = self._const(node.inputs[2])
            if cv is None:
                raise ModelError(f"Pad '{node.name}' pads quantized integers with a run-time value",
                                 "quantize the model in QDQ format (QuantFormat.QDQ)")
            value = (float(np.asarray(cv).reshape(-1)[0]) - float(np.asarray(first.zero_point).reshape(-1)[0])) \
                * float(np.asarray(first.scale).reshape(-1)[0])
            node.inputs[2] = self.g.add_const(np.array(value, np.float32), hint=f"{node.name}_pad_value")
        for name in node.inputs:
            if name and self.g.is_const(name) and np.dtype(self.g.const(name).dtype) in _CODE_DTYPES:
                raise ModelError(f"node '{node.name}' ({node.op_type}) mixes quantized integers with an integer constant",
                                 "quantize the model in QDQ format (QuantFormat.QDQ)")
        for o in node.outputs:  # values keep being quantized integers; indices (ArgMax, TopK's second output) do not
            if o and np.dtype(self.g.dtype(o) or np.int64) in _CODE_DTYPES:
                self.codes[o] = first
                self._float(o)
                self._record(o, first)  # the same integers: the model's scale holds for them
        if node.op_type in _NONNEG_KEEP and all(i in self.nonneg for i in coded):
            self.nonneg.update(o for o in node.outputs if o)


def _onnx_dtype(elem_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _form(graph: Graph) -> str:
    ops = {n.op_type for n in graph.nodes}
    if ops & (set(_QLINEAR) | {"QLinearConcat"}):
        return "QOperator"
    activation_q = any(n.op_type == "QuantizeLinear" and not graph.is_const(n.inputs[0]) for n in graph.nodes)
    return "QDQ" if activation_q else "weight-only DequantizeLinear"


def dequantize_graph(graph: Graph) -> Prequantized | None:
    """Rewrite an already-quantized model in place into its float graph; None when it has no quantize node."""
    if not any(n.op_type in QUANT_OPS for n in graph.nodes):
        return None
    graph.toposort()
    rw = _Rewrite(graph)
    rw.info.form = _form(graph)
    kept: list[Node] = []
    for node in graph.nodes:
        op = node.op_type
        rw.new_nodes = []
        if op == "DequantizeLinear":
            if not rw.dequantize(node):
                kept.append(node)
        elif op == "QuantizeLinear":
            if not rw.quantize(node):
                kept.append(node)
        elif op in _QLINEAR or op == "QLinearConcat":
            rw.qlinear(node)
        else:
            coded = [i for i in node.inputs if i in rw.codes]
            if coded:
                if op not in _ORDER_PRESERVING:
                    raise ModelError(f"node '{node.name}' ({op}) computes on the quantized integers of '{coded[0]}', "
                                     "which hbtool cannot read as floats",
                                     "quantize the model in QDQ format (QuantFormat.QDQ), or export the float model")
                rw.passthrough(node, coded)
            elif op in _NONNEG_OUT or (op == "Clip" and _clip_min(graph, node) >= 0) or \
                    (op in _NONNEG_KEEP and _nonneg_inputs(graph, node, rw.nonneg)):
                rw.nonneg.update(o for o in node.outputs if o)
            kept.append(node)
        kept.extend(rw.new_nodes)
    graph.nodes = kept
    for name in graph.outputs:
        if name in rw.codes:
            _requantize_output(graph, name, rw.codes[name])
    aliases = _remove_identities(graph, rw.identities)
    info = rw.info
    info.activations = _merge_keys(info.activations, aliases)
    info.relus_added = [_chase(aliases, t) for t in info.relus_added]
    _share_relu_scales(graph, rw.relus, info)
    graph.remove_unused()
    info.weights = {k: w for k, w in info.weights.items() if k in graph.values}
    graph.toposort()
    return info


def _share_relu_scales(graph: Graph, relus: list[Node], info: Prequantized) -> None:
    """A restored ReLU's input, read by that ReLU alone, takes its output's fixed scale.

    The quantizer never saw that tensor (it quantized the layer's output with the ReLU folded
    in), but only its non-negative part matters, and the model fixes that part's range.
    """
    consumers = graph.consumer_map()
    for relu in relus:
        src, dst = relu.inputs[0], relu.outputs[0]
        if relu in graph.nodes and dst in info.activations and src not in info.activations and src not in graph.inputs \
                and len(consumers.get(src, [])) == 1 and src not in graph.outputs:
            info.activations[src] = list(info.activations[dst])


def _nonneg_inputs(graph: Graph, node: Node, nonneg: set[str]) -> bool:
    """Whether every value a node passes on is >= 0 (every input of a Concat, constants included; the first of the others)."""
    names = [i for i in node.inputs if i] if node.op_type == "Concat" else node.inputs[:1]
    return bool(names) and all(i in nonneg or (graph.is_const(i) and bool(np.all(graph.const(i) >= 0))) for i in names)


def _clip_min(graph: Graph, node: Node) -> float:
    if len(node.inputs) > 1 and node.inputs[1]:
        c = graph.const(node.inputs[1])
        return float(np.asarray(c).reshape(-1)[0]) if c is not None else float("-inf")
    return float(node.attr("min", float("-inf")))


def _requantize_output(graph: Graph, name: str, fixed: FixedActivation) -> None:
    """A model output that stays integer (a QOperator op wrote it): quantize the float tensor back for it."""
    inner = graph.unique_name(f"{name}_float")
    prod = graph.producer(name)
    prod.outputs = [inner if o == name else o for o in prod.outputs]
    graph.value(inner).shape = graph.shape(name)
    graph.value(inner).dtype = np.dtype(np.float32)
    for n in graph.nodes:
        n.inputs = [inner if i == name else i for i in n.inputs]
    s = graph.add_const(np.asarray(fixed.scale, np.float32), hint=f"{name}_scale")
    dtype = np.int8 if fixed.qmin < 0 else np.uint8
    z = graph.add_const(np.asarray(fixed.zero_point).astype(dtype), hint=f"{name}_zero_point")
    graph.value(name).dtype = np.dtype(dtype)
    graph.add_node("QuantizeLinear", [inner, s, z], [name], name=f"{name}_requantize")


def _remove_identities(graph: Graph, identities: list[Node]) -> dict[str, str]:
    """Bypass the identities this rewrite wrote; returns ``{removed or renamed tensor: the name it goes by now}``."""
    aliases: dict[str, str] = {}
    for node in identities:
        if node not in graph.nodes:
            continue
        src, dst = node.inputs[0], node.outputs[0]
        graph.nodes.remove(node)
        prod = graph.producer(src)
        if dst in graph.outputs and src not in graph.inputs and src not in graph.outputs and prod is not None and not graph.is_const(src):
            prod.outputs = [dst if o == src else o for o in prod.outputs]
            for n in graph.nodes:
                n.inputs = [dst if i == src else i for i in n.inputs]
            graph.value(dst).shape = graph.shape(dst) or graph.shape(src)
            aliases[src] = dst
        else:
            graph.replace_uses(dst, src)
            aliases[dst] = src
    return aliases


def _chase(aliases: dict[str, str], name: str) -> str:
    for _ in range(len(aliases) + 1):
        if name not in aliases:
            return name
        name = aliases[name]
    return name


def _merge_keys(records: dict[str, list], aliases: dict[str, str]) -> dict[str, list]:
    out: dict[str, list] = {}
    for k, v in records.items():
        out.setdefault(_chase(aliases, k), []).extend(v)
    return out
