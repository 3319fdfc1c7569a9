"""Lower the placed float graph and its quantization plan to the integer program of the BPU.

The result is again an IR :class:`~hbtool.ir.graph.Graph`. Every BPU node becomes an
hbtool-domain ``Hz*`` node whose ``meta["kernel"]`` is an integer kernel from
:mod:`hbtool.kernels` (its numpy form is what ``simulate`` runs, its ONNX form is the node's
body in ``*_quantized_model.onnx``); data-movement nodes stay as they are and move integers.
Integer tensors keep their float names, so a float tensor and its integer counterpart line up
for error analysis; they carry float64 values in ONNX (exact integers). Where a BPU region meets
the float world (model inputs, CPU nodes, model outputs) ``HzQuantize`` / ``HzDequantize``
nodes convert, on the CPU side.

A BPU node that has no integer lowering yet runs in float between a dequantize and a quantize,
and is reported (``meta["fallback"]``) rather than silently mis-computed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.hz_ops import (HZ_ADD, HZ_AVGPOOL, HZ_CONV, HZ_CONV_TRANSPOSE, HZ_DEQUANTIZE, HZ_DIV, HZ_INPUT_CONVERT, HZ_LAYERNORM,
                              HZ_LINEAR, HZ_LUT, HZ_MATMUL, HZ_MAXPOOL, HZ_MUL, HZ_QUANTIZE, HZ_REDUCE_L2, HZ_REDUCE_MEAN,
                              HZ_REDUCE_SUM, HZ_RESIZE, HZ_SOFTMAX, HZ_PRELU, HZ_MIN_MAX, HZ_ARG_MAX, HZ_LOG_SOFTMAX)
from hbtool.kernels import Add, Conv, ConvTranspose, LayerNorm, Linear, Log2MatMul, Lut, MatMul, Mul
from hbtool.kernels.movement import COMPILER_MOVES, DATA_MOVEMENT_OPS, MODE_DEPENDENT_MOVES
from hbtool.kernels.normalize import Div, ReduceL2
from hbtool.kernels.pool import AvgPool, MaxPool, ReduceMean, ReduceSum
from hbtool.kernels.quantize import Dequantize, Quantize
from hbtool.kernels.resize import COORDINATE_MODES, BilinearResize, axis_scales
from hbtool.kernels.softmax import Softmax
from hbtool.quant.plan import QuantPlan, check_plan_scales
from hbtool.quant.weights import WEIGHT_QMAX, quantize_weight, weight_scales

log = logging.getLogger(__name__)

# data movement: the node is copied and moves integers unchanged (a Resize is lowered by its mode:
# nearest moves, linear is a kernel; the compiler's own moves do not exist yet at this stage)
MOVE_OPS = DATA_MOVEMENT_OPS - COMPILER_MOVES - MODE_DEPENDENT_MOVES
# onnxruntime has no double kernel for these: the quantized model runs them on float32 (exact for int16)
NEEDS_FLOAT_CARRIER = {"Pad", "Resize", "DepthToSpace", "SpaceToDepth", "GlobalMaxPool"}

# int16-input tables: a knot every 64 codes (1025 entries) keeps interpolation error of GELU-like
# functions a fraction of an int8 LSB of the output, where 256-code spacing cost several int16 LSB
LUT_KNOT_BITS = 6

LUT_OF = {
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
    "Erf": "erf", "Swish": "swish", "HardSwish": "hardswish", "Softplus": "softplus", "Abs": "abs", "Neg": "neg",
    "Mish": "mish", "Relu": "relu", "Softsign": "softsign", "Sin": "sin", "Cos": "cos",
}


# kernels that take / make per-channel power-of-two scales (PTF)
_PTF_CONSUMERS = {"Add", "Sub", "LayerNormalization"}
_PTF_PRODUCERS = {"Add", "Sub", "LayerNormalization", "Linear", "Gemm", "MatMul"}


def stored_floats(values: Any) -> np.ndarray:
    """``values`` as an ONNX float attribute holds them (float32), in float64.

    Calibrate lowers from the in-memory graph and compile from the calibrated ONNX; a kernel built
    from attribute values must see the same numbers in both, or its multipliers can differ by one.
    """
    return np.asarray(values, np.float32).astype(np.float64)


@dataclass
class IntTensor:
    name: str
    scale: float
    bits: int
    alpha: np.ndarray | None = None  # PTF: channel c of the last axis at scale * 2**alpha_c
    log2: bool = False               # log2 codes of a Softmax (bits = code bits, scale unused)
    code_range: tuple[int, int] | None = None  # 4-bit codes, held there by the BPU kernel that wrote them
    index: bool = False              # ArgMax/ArgMin indices (scale unused): the CPU side casts them to int64
    #: a segmented model output (hbtool.quant.output_channels): per-channel scales along ``scale_axis`` (< 0)
    axis_scales: np.ndarray | None = None
    scale_axis: int | None = None

    @property
    def scales(self) -> float | np.ndarray:
        """The scale, or the per-channel scales of a PTF tensor or a segmented output."""
        if self.axis_scales is not None:
            return self.axis_scales
        return self.scale if self.alpha is None else self.scale * np.exp2(np.asarray(self.alpha, np.float64))

    @property
    def scales_axis(self) -> int | None:
        """The axis ``scales`` lie on: a segmented output's, the last for PTF, None for one scale."""
        if self.axis_scales is not None:
            return self.scale_axis
        return -1 if self.alpha is not None else None


def clamped_codes(kernel: Any, code_range: tuple[int, int] | None) -> tuple[int, int] | None:
    """``code_range`` when the kernel's requantization clamps its output inside it, else None.

    A 4-bit tensor is 4-bit because its producer clamps to the code range; a kernel without that
    clamp (a table, a float fallback's boundary Quantize) leaves int8 codes, and its readers must
    not take them for 4-bit ones.
    """
    rq = getattr(kernel, "requant", kernel)  # Add clamps itself (its own lo/hi)
    if code_range is None or not hasattr(rq, "lo") or not hasattr(rq, "hi"):
        return None
    return code_range if int(rq.lo) >= code_range[0] and int(rq.hi) <= code_range[1] else None


def clamped_table_function(f: Any, lo: float, hi: float) -> Any:
    """A LUT function (name, callable or ``(callable, domain)``) with its output clipped to ``[lo, hi]``.

    A table whose entries are clipped to a 4-bit output's real range holds only 4-bit codes (the
    int16-input tables interpolate between clipped knots, which stays inside): so HardSwish,
    Sigmoid and friends can write a uint4/int4 tensor (docs/int4.md).
    """
    from hbtool.kernels.lut import LUT_FUNCTIONS

    base = LUT_FUNCTIONS[f] if isinstance(f, str) else f
    base, domain = base if isinstance(base, tuple) else (base, None)

    def clipped(x: np.ndarray) -> np.ndarray:
        return np.clip(base(x), lo, hi)

    clipped.__name__ = f"{getattr(base, '__name__', 'f')}_4bit"
    return (clipped, domain)


@dataclass
class LoweringReport:
    fallbacks: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, why)
    #: ``{integer tensor name in the program: (scale, bits)}``
    tensors: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: ``{integer tensor name: 4-bit code range}`` of the uint4/int4 tensors (docs/int4.md)
    codes: dict[str, tuple[int, int]] = field(default_factory=dict)


class _Lowerer:
    def __init__(self, graph: Graph, plan: QuantPlan, weights: dict[str, tuple[np.ndarray, int]], rounding: str,
                 bias_delta: dict[str, np.ndarray] | None = None, runtime: dict[str, Any] | None = None):
        self.bias_delta = bias_delta or {}
        self.runtime = dict(runtime or {})        # model input -> InputSpec of its run-time format
        self.src = graph
        self.plan = plan
        self.weights = weights
        self.rounding = rounding
        self.out = Graph(graph.name, graph.opset)
        self.out.metadata = dict(graph.metadata)
        self.ints: dict[str, IntTensor] = {}      # float tensor -> its integer version
        self.floats: set[str] = set()             # float tensors available in the program
        self.report = LoweringReport()
        self.consumers = graph.consumer_map()

    # ------------------------------------------------------------ helpers
    def copy_value(self, name: str, as_int: bool = False, new_name: str | None = None) -> str:
        v = self.src.values.get(name)
        target = new_name or name
        self.out.set_value(target, v.shape if v else None, np.float64 if as_int else (v.dtype if v else None))
        return target

    def tq(self, tensor: str):
        t = self.plan.tensors.get(tensor)
        if t is None:
            raise KeyError(tensor)
        return t

    def int_input(self, tensor: str) -> IntTensor:
        """The integer version of ``tensor``, quantizing a float one at the boundary if needed."""
        if tensor in self.ints:
            return self.ints[tensor]
        tq = self.plan.tensors.get(tensor)
        if tq is None:
            raise KeyError(f"tensor {tensor!r} has no quantization parameters")
        if tq.is_log2:
            raise KeyError(f"tensor {tensor!r} is log2-coded and cannot be quantized at the boundary")
        name = self.out.unique_name(f"{tensor}_q")
        self.out.set_value(name, self.src.shape(tensor), np.float64)
        node = self.out.add_node(HZ_QUANTIZE, [tensor], [name], {"scale": tq.scale, "bits": tq.bits},
                                 name=f"{tensor}_HzQuantize", domain=HBTOOL_DOMAIN)
        per_channel = tq.ptf_alpha is not None
        node.meta.update(kernel=Quantize.build(tq.channel_scales(), tq.bits, axis=-1 if per_channel else None), on="CPU", boundary=True)
        it = IntTensor(name, tq.scale, tq.bits, tq.ptf_alpha)
        self.ints[tensor] = it
        return it

    def float_input(self, tensor: str) -> str:
        """The float version of ``tensor``, dequantizing an integer one at the boundary if needed."""
        if tensor in self.floats or self.src.is_const(tensor) or tensor in self.src.inputs or not tensor:
            return tensor
        it = self.ints[tensor]
        if it.log2:
            raise ValueError(f"log2 codes of {tensor!r} cannot leave the BPU")
        if it.index:
            name = self.out.unique_name(f"{tensor}_int64")
            self._index_to_int64(it, name)
            self.floats.add(name)
            return name
        name = self.out.unique_name(f"{tensor}_deq")
        self.out.set_value(name, self.src.shape(tensor), np.float32)
        node = self.out.add_node(HZ_DEQUANTIZE, [it.name], [name], {"scale": it.scale}, name=f"{tensor}_HzDequantize", domain=HBTOOL_DOMAIN)
        node.meta.update(kernel=Dequantize.build(it.scales, axis=it.scales_axis), on="CPU", boundary=True)
        self.floats.add(name)
        return name

    def const_int(self, tensor: str, bits: int = 16, zero_scale: float = 1.0) -> IntTensor:
        """A float constant operand quantized to its own symmetric scale.

        An all-zero constant (LeViT's attention biases, ConvNeXt-V2's GRN gamma and beta as
        initialised) has no range of its own: it takes ``zero_scale``, the other operand's
        scale, so an Add keeps a ratio of one for it instead of ``1 / s_out`` (which passes
        the kernel's exact range when the other operand's scale is tiny)."""
        data = np.asarray(self.src.const(tensor), np.float64)
        qmax = 32767 if bits == 16 else 127
        amax = float(np.abs(data).max()) if data.size else 0.0
        scale = float(np.float32(amax / qmax)) if amax > 0 else float(zero_scale)
        q = np.asarray(np.clip(np.round(data / scale), -qmax - 1, qmax), np.float64)  # an array even for a scalar
        name = self.out.add_const(q, hint=f"{tensor}_q")
        return IntTensor(name, scale, bits)

    def emit_kernel(self, node: Node, op_type: str, kernel, inputs: list[str], out_tensor: str, attrs: dict | None = None,
                    codes_clamped: bool = False) -> None:
        """``codes_clamped``: the kernel writes only the output's 4-bit codes (a table built clamped)."""
        tq = self.tq(out_tensor)
        out_name = self.copy_value(out_tensor, as_int=True)
        new = self.out.add_node(op_type, inputs, [out_name], attrs or {}, name=node.name, domain=HBTOOL_DOMAIN)
        new.meta.update(kernel=kernel, on="BPU", subgraph=node.meta.get("subgraph"), source_op=node.op_type)
        codes = tq.code_range if codes_clamped else clamped_codes(kernel, tq.code_range)
        self.ints[out_tensor] = IntTensor(out_name, tq.scale, tq.bits, tq.ptf_alpha, tq.is_log2, codes)

    def fused_activation(self, node: Node) -> tuple[str, dict[str, Any], Node | None]:
        """The tensor ``node`` writes and the clamps of its requantization: a fused Relu/Clip, and the
        4-bit code range of a uint4/int4 output (:mod:`hbtool.quant.int4`), which only a clamp produces."""
        out, extra, act = self._fused_clamp(node)
        tq = self.plan.tensors.get(out)
        if tq is not None and tq.code_range is not None:
            lo, hi = tq.code_range
            extra = dict(extra)
            extra["lo"] = max(lo, int(extra["lo"])) if extra.get("lo") is not None else lo
            extra["hi"] = min(hi, int(extra["hi"])) if extra.get("hi") is not None else hi
        return out, extra, act

    def weight_codes(self, wname: str, w: np.ndarray, scales: np.ndarray, axis: int) -> tuple[np.ndarray, int]:
        """(int64 codes, weight bits) of a tensor-unit weight: int4 in [-7, 7] where the plan says so."""
        bits = int(self.plan.weight_bits.get(wname, 8))
        return quantize_weight(w, scales, axis, 7 if bits == 4 else WEIGHT_QMAX).astype(np.int64), bits

    def _fused_clamp(self, node: Node) -> tuple[str, dict[str, Any], Node | None]:
        """A Relu/Clip(0, x) right after ``node`` that the kernel can apply as a clamp."""
        out = node.outputs[0]
        users = self.consumers.get(out, [])
        if len(users) != 1 or out in self.src.outputs or out not in self.plan.tensors:
            return out, {}, None
        act = users[0]
        if act.meta.get("on") != "BPU" or act.outputs[0] not in self.plan.tensors:
            return out, {}, None
        if act.op_type == "Relu":
            return act.outputs[0], {"relu": True}, act
        if act.op_type == "Clip":
            lo = self.src.const(act.inputs[1]) if len(act.inputs) > 1 and act.inputs[1] else None
            hi = self.src.const(act.inputs[2]) if len(act.inputs) > 2 and act.inputs[2] else None
            if lo is not None and float(lo) == 0.0:
                s = self.tq(act.outputs[0]).scale
                extra: dict[str, Any] = {"relu": True}
                if hi is not None:
                    extra["hi"] = int(np.floor(float(hi) / s + 0.5))
                return act.outputs[0], extra, act
        return out, {}, None

    # ------------------------------------------------------------ per op
    def _special_scales_ok(self, node: Node) -> bool:
        """PTF / log2 tensors only meet the kernels that take them; anything else runs in float."""
        op = node.op_type
        for i in node.inputs:
            it = self.ints.get(i)
            if it is not None and it.alpha is not None and op not in _PTF_CONSUMERS:
                return False
            if it is not None and it.log2 and op != "MatMul":
                return False
        for o in node.outputs:
            tq = self.plan.tensors.get(o)
            if tq is not None and tq.ptf_alpha is not None and op not in _PTF_PRODUCERS:
                return False
            if tq is not None and tq.is_log2 and op != "Softmax":
                return False
        return True

    def lower_node(self, node: Node) -> bool:
        op = node.op_type
        if not self._special_scales_ok(node):
            return False
        fn: Callable[[Node], bool] | None = getattr(self, f"_lower_{op}", None)
        if op in MOVE_OPS:
            return self._move(node)
        if op in LUT_OF:
            return self._lut(node, LUT_OF[op])
        if fn is None:
            return False
        return fn(node)

    def _move(self, node: Node) -> bool:
        data = [i for i in node.inputs if i and not self.src.is_const(i)]
        if not data:
            return False
        ints = [self.int_input(i) for i in data]
        mapping = {i: it.name for i, it in zip(data, ints)}
        segmented = self._segmented_concat(node, ints)
        if node.op_type == "Concat" and len({it.scale for it in ints}) > 1 and segmented is None:
            return False
        if node.op_type == "Pad" and len(node.inputs) > 2 and node.inputs[2]:
            value = float(np.asarray(self.src.const(node.inputs[2])).reshape(-1)[0]) if self.src.const(node.inputs[2]) is not None else 0.0
            if value != 0.0:
                return False
        for k, i in enumerate(node.inputs):
            if i and self.src.is_const(i):
                if node.op_type == "Concat":
                    # a constant piece of the concatenated data (a class token): same integers as the rest
                    it = ints[0]
                    qmax = 32767 if it.bits == 16 else 127
                    q = np.clip(np.round(np.asarray(self.src.const(i), np.float64) / it.scale), -qmax - 1, qmax)
                    mapping[i] = self.out.add_const(q.astype(np.float64), hint=f"{i}_q")
                else:
                    self.out.values[i] = self.src.values[i]
        outs = []
        for o in node.outputs:
            if not o:
                outs.append(o)
                continue
            outs.append(self.copy_value(o, as_int=True))
        new = self.out.add_node(node.op_type, [mapping.get(i, i) for i in node.inputs], outs, dict(node.attrs), name=node.name, domain=node.domain, body=node.body)
        new.meta.update(on="BPU", subgraph=node.meta.get("subgraph"), float_carrier=node.op_type in NEEDS_FLOAT_CARRIER)
        for o in node.outputs:
            if o:
                tq = self.plan.tensors.get(o)
                scale = tq.scale if tq else ints[0].scale
                bits = tq.bits if tq else ints[0].bits
                # moved codes keep a 4-bit range only when every moved input had it
                codes = ints[0].code_range if all(it.code_range == ints[0].code_range for it in ints) else None
                self.ints[o] = IntTensor(o, scale, bits, code_range=codes)
                if segmented is not None:
                    self.ints[o].axis_scales, self.ints[o].scale_axis = segmented
        return True

    def _segmented_concat(self, node: Node, ints: list[IntTensor]) -> tuple[np.ndarray, int] | None:
        """(per-channel scales, axis) when ``node`` is a Concat writing a segmented output whose pieces
        arrive at exactly the planned scales (hbtool.quant.output_channels), else None."""
        tq = self.plan.tensors.get(node.outputs[0]) if node.op_type == "Concat" and node.outputs else None
        if tq is None or tq.axis_scales is None or len(ints) != len(node.inputs):
            return None
        rank = len(self.src.shape(node.outputs[0]) or ())
        axis = int(node.attr("axis", 0))
        if (axis if axis < 0 else axis - rank) != tq.scale_axis:
            return None
        got = []
        for i, it in zip(node.inputs, ints):
            if it.alpha is not None or it.log2 or it.axis_scales is not None:
                return None
            got.append(np.full(int((self.src.shape(i) or [0] * rank)[axis]), float(np.float32(it.scale))))
        got = np.concatenate(got) if got else np.zeros(0)
        want = np.asarray(tq.axis_scales, np.float64)
        if got.shape != want.shape or not np.array_equal(got.astype(np.float32), want.astype(np.float32)):
            return None
        return want, int(tq.scale_axis)

    def _lut(self, node: Node, fname: str, f=None) -> bool:
        x = self.int_input(node.inputs[0])
        out = node.outputs[0]
        tq = self.tq(out)
        fn = f or fname
        if tq.code_range is not None:  # a 4-bit output: the table holds only 4-bit codes
            fn = clamped_table_function(fn, tq.code_range[0] * tq.scale, tq.code_range[1] * tq.scale)
        kernel = Lut.build(fn, x.scale, x.bits, tq.scale, tq.bits, rounding=self.rounding, knot_bits=LUT_KNOT_BITS)
        self.emit_kernel(node, HZ_LUT, kernel, [x.name], out, {"function": fname}, codes_clamped=tq.code_range is not None)
        return True

    def _lower_Gelu(self, node: Node) -> bool:
        return self._lut(node, "gelu_tanh" if node.attr("approximate", "none") == "tanh" else "gelu")

    def _lower_HardSigmoid(self, node: Node) -> bool:
        from hbtool.kernels.lut import hardsigmoid_fn

        return self._lut(node, "hardsigmoid", hardsigmoid_fn(float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))))

    def _lower_LeakyRelu(self, node: Node) -> bool:
        from hbtool.kernels.lut import leaky_relu_fn

        return self._lut(node, "leaky_relu", leaky_relu_fn(float(node.attr("alpha", 0.01))))

    def _lower_Elu(self, node: Node) -> bool:
        from hbtool.kernels.lut import elu_fn

        return self._lut(node, "elu", elu_fn(float(node.attr("alpha", 1.0))))

    def _lower_Selu(self, node: Node) -> bool:
        from hbtool.kernels.lut import selu_fn

        return self._lut(node, "selu", selu_fn(float(node.attr("alpha", 1.67326319217681884765625)),
                                               float(node.attr("gamma", 1.05070102214813232421875))))

    def _lower_PRelu(self, node: Node) -> bool:
        """Per-channel (or one) slope: :class:`~hbtool.kernels.select.PRelu`, slopes broadcast like the float op."""
        from hbtool.kernels.select import PRelu

        slope = self.src.const(node.inputs[1])
        shape = self.src.shape(node.inputs[0])
        if slope is None or shape is None or slope.ndim > len(shape):
            return False
        slope = np.asarray(slope, np.float64)
        slope = slope.reshape((1,) * (len(shape) - slope.ndim) + slope.shape)
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        kernel = PRelu.build(x.scale, slope, tq.scale, x.bits, tq.bits, rounding=self.rounding)
        self.emit_kernel(node, HZ_PRELU, kernel, [x.name], node.outputs[0])
        return True

    def _min_max(self, node: Node, mode: str) -> bool:
        """Two operands (feature maps or a constant, with broadcasting): :class:`~hbtool.kernels.select.MinMax`."""
        from hbtool.kernels.select import MinMax

        if len(node.inputs) != 2:
            return False
        live = {t: self.int_input(t) for t in node.inputs if not self.src.is_const(t)}
        if not live:
            return False
        zero_scale = next(iter(live.values())).scale
        a, b = (live[t] if t in live else self.const_int(t, zero_scale=zero_scale) for t in node.inputs)
        tq = self.tq(node.outputs[0])
        kernel = MinMax.build(a.scale, b.scale, tq.scale, a.bits, b.bits, tq.bits, mode=mode, rounding=self.rounding)
        self.emit_kernel(node, HZ_MIN_MAX, kernel, [a.name, b.name], node.outputs[0], {"mode": mode})
        return True

    def _lower_Max(self, node: Node) -> bool:
        return self._min_max(node, "max")

    def _lower_Min(self, node: Node) -> bool:
        return self._min_max(node, "min")

    def _arg(self, node: Node, mode: str) -> bool:
        """Indices of the largest/smallest code: :class:`~hbtool.kernels.select.ArgMax`; the CPU casts them to int64."""
        from hbtool.kernels.select import ArgMax

        shape = self.src.shape(node.inputs[0])
        if shape is None or int(node.attr("select_last_index", 0)):
            return False
        axis = int(node.attr("axis", 0))
        axis = axis - len(shape) if axis >= 0 else axis
        x = self.int_input(node.inputs[0])
        kernel = ArgMax.build(axis, bool(node.attr("keepdims", 1)), x.bits, mode)
        out = node.outputs[0]
        name = self.copy_value(out, as_int=True)
        new = self.out.add_node(HZ_ARG_MAX, [x.name], [name], {"mode": mode}, name=node.name, domain=HBTOOL_DOMAIN)
        new.meta.update(kernel=kernel, on="BPU", subgraph=node.meta.get("subgraph"), source_op=node.op_type)
        self.ints[out] = IntTensor(name, 1.0, 16, index=True)
        return True

    def _lower_ArgMax(self, node: Node) -> bool:
        return self._arg(node, "max")

    def _lower_ArgMin(self, node: Node) -> bool:
        return self._arg(node, "min")

    def _lower_Pow(self, node: Node) -> bool:
        from hbtool.kernels.lut import pow_fn

        e = self.src.const(node.inputs[1])
        if e is None or e.size != 1:
            return False
        return self._lut(node, f"pow{float(e.reshape(-1)[0]):g}", pow_fn(float(e.reshape(-1)[0])))

    def _lower_Clip(self, node: Node) -> bool:
        lo = self.src.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        hi = self.src.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        lo_v = -np.inf if lo is None else float(lo)
        hi_v = np.inf if hi is None else float(hi)
        return self._lut(node, f"clip[{lo_v:g},{hi_v:g}]", (lambda x, a=lo_v, b=hi_v: np.clip(x, a, b), None))

    def _linear_like(self, node: Node, x_tensor: str, w: np.ndarray, b: np.ndarray | None, axis: int) -> bool:
        """x @ W (+ b) with W [K, N] constant."""
        x = self.int_input(x_tensor)
        out, extra, act = self.fused_activation(node)
        tq = self.tq(out)
        wname = node.inputs[1]
        scales, _ = self.weights.get(wname, (None, None))
        if scales is None or scales.size != w.shape[1]:
            scales = weight_scales(w, 1)
        wq, wbits = self.weight_codes(wname, w, scales, 1)
        bias = np.zeros(w.shape[1]) if b is None else np.asarray(b, np.float64).reshape(-1)
        bias = bias + self.bias_delta.get(node.name, 0.0)
        bq = np.round(bias / (x.scale * scales.astype(np.float64))).astype(np.int64)
        kernel = Linear.build(wq, bq, x.scale, scales, tq.channel_scales(), in_bits=x.bits, out_bits=tq.bits, rounding=self.rounding,
                              weight_bits=wbits, input_range=x.code_range, **extra)
        self.emit_kernel(node, HZ_LINEAR, kernel, [x.name], out)
        if act is not None:
            self.skip.add(act.name)
        return True

    def _lower_Linear(self, node: Node) -> bool:
        w = self.src.const(node.inputs[1])
        b = self.src.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        return w is not None and w.ndim == 2 and self._linear_like(node, node.inputs[0], w, b, 1)

    def _lower_Gemm(self, node: Node) -> bool:
        w = self.src.const(node.inputs[1])
        if w is None or node.attr("transA", 0):
            return False
        w = w.T if node.attr("transB", 0) else w
        w = w * float(node.attr("alpha", 1.0))
        b = self.src.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if b is None and len(node.inputs) > 2 and node.inputs[2]:
            return False    # an activation C is no bias (split_gemm_activation_bias makes it an Add): never drop it
        if b is not None:
            b = np.broadcast_to(np.asarray(b) * float(node.attr("beta", 1.0)), (w.shape[1],))
        return self._linear_like(node, node.inputs[0], w, b, 1)

    def _lower_MatMul(self, node: Node) -> bool:
        w = self.src.const(node.inputs[1])
        if w is not None:
            return w.ndim == 2 and self._linear_like(node, node.inputs[0], w, None, 1)
        if self.src.is_const(node.inputs[0]):
            return False
        a, b = self.int_input(node.inputs[0]), self.int_input(node.inputs[1])
        out, extra, act = self.fused_activation(node)
        tq = self.tq(out)
        k = int(self.src.shape(node.inputs[0])[-1])
        if b.log2 or tq.ptf_alpha is not None:
            return False
        if a.log2:  # probabilities as log2 codes (softmax_log2): shifts of V and additions
            kernel = Log2MatMul.build(b.scale, tq.scale, k, a.bits, b.bits, tq.bits, rounding=self.rounding, **extra)
        else:
            kernel = MatMul.build(a.scale, b.scale, tq.scale, k, a.bits, b.bits, tq.bits, rounding=self.rounding, **extra)
        self.emit_kernel(node, HZ_MATMUL, kernel, [a.name, b.name], out)
        if act is not None:
            self.skip.add(act.name)
        return True

    def _lower_Conv(self, node: Node) -> bool:
        w = self.src.const(node.inputs[1])
        if w is None:
            return False
        x = self.int_input(node.inputs[0])
        out, extra, act = self.fused_activation(node)
        tq = self.tq(out)
        scales, _ = self.weights.get(node.inputs[1], (None, None))
        if scales is None:
            scales = weight_scales(w, 0)
        wq, wbits = self.weight_codes(node.inputs[1], w, scales, 0)
        b = self.src.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        bias = np.zeros(w.shape[0]) if b is None else np.asarray(b, np.float64)
        bias = bias + self.bias_delta.get(node.name, 0.0)
        bq = np.round(bias / (x.scale * scales.astype(np.float64))).astype(np.int64)
        nd = w.ndim - 2
        pads = node.attr("pads") or [0] * (2 * nd)
        if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return False
        kernel = Conv.build(
            wq, bq, x.scale, scales, tq.scale, strides=node.attr("strides") or [1] * nd, pads=pads,
            dilations=node.attr("dilations") or [1] * nd, group=int(node.attr("group", 1)),
            in_bits=x.bits, out_bits=tq.bits, rounding=self.rounding, weight_bits=wbits, input_range=x.code_range, **extra,
        )
        self.emit_kernel(node, HZ_CONV, kernel, [x.name], out)
        if act is not None:
            self.skip.add(act.name)
        return True

    def _lower_ConvTranspose(self, node: Node) -> bool:
        """Weights ``[Cin, Cout/group, *k]`` with scales along axis 1 (``plan_weights``): with groups,
        output channel ``g * Cout/group + j`` takes scale ``j``, the per-channel scale the calibrated
        model's fake quantization applies."""
        from hbtool.kernels.conv_transpose import resolve_pads

        w = self.src.const(node.inputs[1])
        shape = self.src.shape(node.inputs[0])
        if w is None or shape is None:
            return False
        group = int(node.attr("group", 1))
        nd = w.ndim - 2
        strides = node.attr("strides") or [1] * nd
        dilations = node.attr("dilations") or [1] * nd
        output_padding = node.attr("output_padding") or [0] * nd
        pads = resolve_pads(shape[2:], w.shape[2:], strides, dilations, output_padding, node.attr("pads"),
                            node.attr("auto_pad", "NOTSET"), node.attr("output_shape"))
        x = self.int_input(node.inputs[0])
        out, extra, act = self.fused_activation(node)
        tq = self.tq(out)
        scales, _ = self.weights.get(node.inputs[1], (None, None))
        if scales is None or scales.size != w.shape[1]:
            scales = weight_scales(w, 1)
        wq = quantize_weight(w, scales, 1).astype(np.int64)
        out_scales = np.tile(np.asarray(scales, np.float64), group)
        b = self.src.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        bias = np.zeros(out_scales.size) if b is None else np.asarray(b, np.float64)
        bias = bias + self.bias_delta.get(node.name, 0.0)
        bq = np.round(bias / (x.scale * out_scales)).astype(np.int64)
        kernel = ConvTranspose.build(
            wq, bq, x.scale, out_scales, tq.scale, strides=strides, pads=pads, dilations=dilations,
            output_padding=output_padding, group=group,
            in_bits=x.bits, out_bits=tq.bits, rounding=self.rounding, **extra,
        )
        self.emit_kernel(node, HZ_CONV_TRANSPOSE, kernel, [x.name], out)
        if act is not None:
            self.skip.add(act.name)
        return True

    def _binary(self, node: Node, cls) -> bool:
        a_t, b_t = node.inputs[0], node.inputs[1]
        live = {t: self.int_input(t) for t in (a_t, b_t) if not self.src.is_const(t)}
        zero_scale = next(iter(live.values())).scale if live else 1.0
        ints = [live[t] if t in live else self.const_int(t, zero_scale=zero_scale) for t in (a_t, b_t)]
        out, extra, act = self.fused_activation(node)
        tq = self.tq(out)
        a, b = ints
        if cls is Add:
            kernel = Add.build(a.scales, b.scales, tq.channel_scales(), a.bits, b.bits, tq.bits, sub=node.op_type == "Sub", rounding=self.rounding, **extra)
            op = HZ_ADD
        else:
            if a.alpha is not None or b.alpha is not None or tq.ptf_alpha is not None:
                return False
            kernel = Mul.build(a.scale, b.scale, tq.scale, a.bits, b.bits, tq.bits, rounding=self.rounding, **extra)
            op = HZ_MUL
        self.emit_kernel(node, op, kernel, [a.name, b.name], out)
        if act is not None:
            self.skip.add(act.name)
        return True

    def _lower_Add(self, node: Node) -> bool:
        return self._binary(node, Add)

    def _lower_Sub(self, node: Node) -> bool:
        return self._binary(node, Add)

    def _lower_Mul(self, node: Node) -> bool:
        return self._binary(node, Mul)

    def _lower_Div(self, node: Node) -> bool:
        """By a constant: Mul by its reciprocal; by a feature map: the integer division kernel."""
        d = self.src.const(node.inputs[1])
        if d is None:
            dv = self.int_input(node.inputs[1])
            a = self.const_int(node.inputs[0], zero_scale=dv.scale) if self.src.is_const(node.inputs[0]) else self.int_input(node.inputs[0])
            if a.alpha is not None or dv.alpha is not None:
                return False
            out, extra, act = self.fused_activation(node)
            tq = self.tq(out)
            kernel = Div.build(a.scale, dv.scale, tq.scale, a.bits, dv.bits, tq.bits, rounding=self.rounding, **extra)
            self.emit_kernel(node, HZ_DIV, kernel, [a.name, dv.name], out)
            if act is not None:
                self.skip.add(act.name)
            return True
        if np.any(d == 0):
            return False
        recip = self.src.unique_name(f"{node.inputs[1]}_reciprocal")
        self.src.add_const((1.0 / np.asarray(d, np.float64)).astype(np.float32), name=recip)
        shadow = Node(node.name, "Mul", [node.inputs[0], recip], list(node.outputs), {}, "", None, dict(node.meta))
        return self._binary(shadow, Mul)

    def _softmax_axis(self, node: Node) -> int | None:
        """The Softmax axis counted from the end (the kernel's ``axis``), or None without a static rank."""
        shape = self.src.shape(node.inputs[0])
        if shape is None:
            return None
        axis = int(node.attr("axis", -1))
        return axis - len(shape) if axis >= 0 else axis

    def _lower_Softmax(self, node: Node) -> bool:
        axis = self._softmax_axis(node)
        if axis is None:
            return False
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        if tq.is_log2:
            kernel = Softmax.build(x.scale, x.bits, 16, rounding=self.rounding, log2_bits=tq.bits, axis=axis)
        else:
            kernel = Softmax.build(x.scale, x.bits, tq.bits, rounding=self.rounding, axis=axis)
        self.emit_kernel(node, HZ_SOFTMAX, kernel, [x.name], node.outputs[0])
        return True

    def _lower_LogSoftmax(self, node: Node) -> bool:
        """x - max - log(sum exp(x - max)) as integers (:class:`~hbtool.kernels.softmax.LogSoftmax`)."""
        from hbtool.kernels.softmax import LogSoftmax

        axis = self._softmax_axis(node)
        if axis is None:
            return False
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        kernel = LogSoftmax.build(x.scale, tq.scale, x.bits, tq.bits, axis=axis, rounding=self.rounding)
        self.emit_kernel(node, HZ_LOG_SOFTMAX, kernel, [x.name], node.outputs[0])
        return True

    def _layernorm(self, node: Node, axes: list[int]) -> bool:
        """LayerNorm over the non-negative, consecutive ``axes`` of the input, gamma/beta over those axes."""
        shape = self.src.shape(node.inputs[0])
        rank = len(shape)
        norm_shape = tuple(int(shape[a]) for a in axes)
        gamma = self.src.const(node.inputs[1])
        beta = self.src.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        if gamma is None or (len(node.inputs) > 2 and node.inputs[2] and beta is None):
            return False
        params = []
        for p in (gamma, beta):
            if p is None:
                params.append(None)
                continue
            # broadcast like the float op: aligned on the right at full rank, varying over ``axes`` only
            p = np.asarray(p, np.float64)
            full = p.reshape((1,) * (rank - p.ndim) + p.shape)
            if p.ndim > rank or any(d != 1 for i, d in enumerate(full.shape) if i not in axes):
                return False
            params.append(np.broadcast_to(full.reshape(tuple(full.shape[a] for a in axes)), norm_shape).reshape(-1))
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        kernel = LayerNorm.build(x.scale, params[0], params[1], float(node.attr("epsilon", 1e-5)), tq.channel_scales(), x.bits, tq.bits,
                                 n=int(np.prod(norm_shape)), ptf_alpha=x.alpha, rounding=self.rounding,
                                 axes=tuple(a - rank for a in axes), norm_shape=norm_shape,
                                 eps_outside=bool(node.attr("eps_outside", 0)))
        self.emit_kernel(node, HZ_LAYERNORM, kernel, [x.name], node.outputs[0])
        return True

    def _lower_LayerNormalization(self, node: Node) -> bool:
        shape = self.src.shape(node.inputs[0])
        if shape is None:
            return False
        axis = int(node.attr("axis", -1))
        axis = axis + len(shape) if axis < 0 else axis
        return self._layernorm(node, list(range(axis, len(shape))))

    def _lower_InstanceNormalization(self, node: Node) -> bool:
        """LayerNorm over the spatial axes with gamma/beta per channel (axis 1): ``param_shape`` (C, 1, ..)."""
        shape = self.src.shape(node.inputs[0])
        gamma, beta = self.src.const(node.inputs[1]), self.src.const(node.inputs[2])
        if shape is None or len(shape) < 3 or gamma is None or beta is None:
            return False
        rank = len(shape)
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        if tq.ptf_alpha is not None:
            return False
        norm_shape = tuple(int(d) for d in shape[2:])
        kernel = LayerNorm.build(x.scale, np.asarray(gamma, np.float64), np.asarray(beta, np.float64), float(node.attr("epsilon", 1e-5)),
                                 tq.scale, x.bits, tq.bits, ptf_alpha=x.alpha, rounding=self.rounding,
                                 axes=tuple(range(2 - rank, 0)), norm_shape=norm_shape, param_shape=(int(shape[1]),) + (1,) * (rank - 2))
        self.emit_kernel(node, HZ_LAYERNORM, kernel, [x.name], node.outputs[0])
        return True

    def _lower_ChannelLayerNorm(self, node: Node) -> bool:
        shape = self.src.shape(node.inputs[0])
        if shape is None:
            return False
        axes = node.attr("axes")  # GroupNorm(1, C): consecutive axes 1..r-1 (fuse_group_norm)
        axes = [int(node.attr("axis"))] if axes is None else [int(a) for a in axes]
        return self._layernorm(node, [a + len(shape) if a < 0 else a for a in axes])

    def _lower_HzPreprocess(self, node: Node) -> bool:
        if node.inputs[0] in self.runtime:
            return self._input_conversion(node, self.runtime[node.inputs[0]])
        shape = self.src.shape(node.inputs[0])
        layout = node.attr("layout", "NCHW")
        mean = np.asarray(node.attr("mean"), np.float64)
        scale = np.asarray(node.attr("scale"), np.float64)
        if shape is None or len(shape) != 4 or node.attr("input_type") not in (None, node.attr("train_type", node.attr("input_type"))):
            return False
        c = shape[1] if layout == "NCHW" else shape[3]
        mean = np.broadcast_to(mean, (c,)) if mean.size in (1, c) else None
        scale = np.broadcast_to(scale, (c,)) if scale.size in (1, c) else None
        if mean is None or scale is None:
            return False
        if layout == "NCHW":
            # a depthwise 1x1 convolution: weight scale[c], bias -mean[c] * scale[c]
            w = self.src.add_const(scale.reshape(c, 1, 1, 1).astype(np.float32), hint=f"{node.name}_scale")
            b = self.src.add_const((-mean * scale).astype(np.float32), hint=f"{node.name}_shift")
            fake = Node(node.name, "Conv", [node.inputs[0], w, b], list(node.outputs), {"group": c}, "", None, dict(node.meta))
            return self._lower_Conv(fake)
        w = np.diag(scale).astype(np.float32)
        fake = Node(node.name, "Linear", [node.inputs[0], "__w"], list(node.outputs), {}, "", None, dict(node.meta))
        return self._linear_like(fake, node.inputs[0], w, -mean * scale, 1)

    def _input_conversion(self, node: Node, spec: Any) -> bool:
        """The preprocessing of an input fed in its run-time format: one InputConvert from the chip's buffer."""
        from hbtool.kernels.colour import InputConvert
        from hbtool.io.runtime_input import base_type, offset_of, runtime_layout, runtime_shape

        name = node.inputs[0]
        shape = tuple(int(d) for d in self.src.shape(name))
        layout = node.attr("layout", "NCHW")
        h, w = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
        tq = self.tq(node.outputs[0])
        if tq.ptf_alpha is not None or tq.is_log2:
            return False
        # mean/scale as the calibrated ONNX stores them (float32 attributes): calibrate, which lowers from the
        # in-memory graph, and compile, which lowers from the file, then build the same multipliers
        mean, scale = stored_floats(node.attr("mean")), stored_floats(node.attr("scale"))
        kernel = InputConvert.build(base_type(spec.type_rt), node.attr("train_type"), h, w, mean, scale,
                                    tq.channel_scales(), tq.bits, layout_in=runtime_layout(spec), layout_out=layout,
                                    offset=offset_of(spec.type_rt), video_range=spec.space_and_range == "bt601_video",
                                    rounding=self.rounding)
        self.out.set_value(name, runtime_shape(spec, shape), kernel.input_dtype)
        self.emit_kernel(node, HZ_INPUT_CONVERT, kernel, [name], node.outputs[0],
                         {"input_type_rt": spec.type_rt, "input_type_train": node.attr("train_type")})
        self.converted.add(name)
        return True

    def _lower_MaxPool(self, node: Node) -> bool:
        if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or len(node.outputs) > 1 and node.outputs[1]:
            return False
        x = self.int_input(node.inputs[0])
        kshape = list(node.attr("kernel_shape"))
        kernel = MaxPool.build(kshape, node.attr("strides") or [1] * len(kshape), node.attr("pads") or [0] * (2 * len(kshape)),
                               node.attr("dilations"), bool(node.attr("ceil_mode", 0)))
        out = node.outputs[0]
        name = self.copy_value(out, as_int=True)
        new = self.out.add_node(HZ_MAXPOOL, [x.name], [name], {}, name=node.name, domain=HBTOOL_DOMAIN)
        new.meta.update(kernel=kernel, on="BPU", subgraph=node.meta.get("subgraph"), source_op=node.op_type)
        self.ints[out] = IntTensor(name, x.scale, x.bits, code_range=x.code_range)
        return True

    def _lower_AveragePool(self, node: Node) -> bool:
        if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return False
        x = self.int_input(node.inputs[0])
        out, extra, act = self.fused_activation(node)
        tq = self.tq(out)
        shape = self.src.shape(node.inputs[0])
        kshape = list(node.attr("kernel_shape"))
        kernel = AvgPool.build(kshape, x.scale, tq.scale, shape[1], node.attr("strides") or [1] * len(kshape),
                               node.attr("pads") or [0] * (2 * len(kshape)), bool(node.attr("count_include_pad", 0)),
                               spatial_shape=shape[2:], in_bits=x.bits, out_bits=tq.bits, rounding=self.rounding,
                               ceil_mode=bool(node.attr("ceil_mode", 0)), **extra)
        self.emit_kernel(node, HZ_AVGPOOL, kernel, [x.name], out)
        if act is not None:
            self.skip.add(act.name)
        return True

    def _reduce_mean(self, node: Node, axes: list[int], keepdims: bool, kind: type = ReduceMean) -> bool:
        """A mean (or sum) over any axes, NCHW or channels-last: the integer sum works on any set."""
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        shape = self.src.shape(node.inputs[0])
        axes = sorted(a + len(shape) if a < 0 else a for a in axes)
        if not axes:  # noop_with_empty_axes: nothing reduced
            return False
        count = int(np.prod([shape[a] for a in axes]))
        kernel = kind.build(axes, count, x.scale, tq.scale, keepdims, x.bits, tq.bits, rounding=self.rounding)
        self.emit_kernel(node, HZ_REDUCE_SUM if kind is ReduceSum else HZ_REDUCE_MEAN, kernel, [x.name], node.outputs[0])
        return True

    def _lower_GlobalAveragePool(self, node: Node) -> bool:
        shape = self.src.shape(node.inputs[0])
        return self._reduce_mean(node, list(range(2, len(shape))), True)

    def _lower_ReduceMean(self, node: Node) -> bool:
        from hbtool.ir.patterns import reduce_axes

        axes = reduce_axes(self.src, node)
        if axes is None:
            return False
        return self._reduce_mean(node, axes, bool(node.attr("keepdims", 1)))

    def _resize_form(self, node: Node) -> tuple[str, str, np.ndarray | None]:
        """(mode, coordinate mode, constant scales or None) of a Resize the integer forms compute; ValueError if none does."""
        text = node.attr_text
        mode, coords = text("mode", "nearest"), text("coordinate_transformation_mode", "half_pixel")
        if coords not in COORDINATE_MODES:
            raise ValueError(f"coordinate_transformation_mode {coords} has no integer form")
        if int(node.attr("antialias", 0)) or node.attr("axes") is not None or text("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise ValueError("antialias, axes and keep_aspect_ratio_policy have no integer form")
        for k in (1, 2, 3):
            if len(node.inputs) > k and node.inputs[k] and self.src.const(node.inputs[k]) is None:
                raise ValueError("Resize roi/scales/sizes must be constants")
        scales = self.src.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        return mode, coords, None if scales is None or scales.size == 0 else np.asarray(scales, np.float32).reshape(-1)

    def _lower_Resize(self, node: Node) -> bool:
        """nearest: data movement of the codes; linear on H and W: the integer bilinear kernel (same scale in and out)."""
        mode, coords, scales = self._resize_form(node)
        if mode == "nearest":
            return self._move(node)
        shape, out_shape = self.src.shape(node.inputs[0]), self.src.shape(node.outputs[0])
        if mode != "linear" or len(shape) != 4 or tuple(shape[:2]) != tuple(out_shape[:2]):
            return False
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        if tq.scale != x.scale or tq.bits != x.bits:
            raise ValueError("bilinear Resize needs the input's scale and bits at its output (plan groups them)")
        per_axis = axis_scales(shape, out_shape, scales)
        kernel = BilinearResize.build(shape[2:], out_shape[2:], per_axis[2:], coords, x.bits, rounding=self.rounding)
        self.emit_kernel(node, HZ_RESIZE, kernel, [x.name], node.outputs[0],
                         {"mode": "linear", "coordinate_transformation_mode": coords})
        return True

    def _lower_ReduceL2(self, node: Node) -> bool:
        """sqrt of the integer sum of squares over any axes (the kernel's integer square root)."""
        from hbtool.ir.patterns import reduce_axes

        axes = reduce_axes(self.src, node)
        shape = self.src.shape(node.inputs[0])
        if axes is None or shape is None:
            return False
        axes = sorted(a + len(shape) if a < 0 else a for a in axes)
        if not axes:
            return False
        x = self.int_input(node.inputs[0])
        tq = self.tq(node.outputs[0])
        count = int(np.prod([shape[a] for a in axes]))
        kernel = ReduceL2.build(axes, count, x.scale, tq.scale, bool(node.attr("keepdims", 1)), x.bits, tq.bits, rounding=self.rounding)
        self.emit_kernel(node, HZ_REDUCE_L2, kernel, [x.name], node.outputs[0])
        return True

    def _lower_ReduceSum(self, node: Node) -> bool:
        from hbtool.ir.patterns import reduce_axes

        axes = reduce_axes(self.src, node)
        if axes is None:
            return False
        return self._reduce_mean(node, axes, bool(node.attr("keepdims", 1)), ReduceSum)

    # ------------------------------------------------------------ driver
    def float_node(self, node: Node, reason: str | None = None) -> None:
        """Copy a node that runs in float (CPU nodes, and BPU nodes without a lowering)."""
        inputs = [self.float_input(i) if i else i for i in node.inputs]
        for i in node.inputs:
            if i and (self.src.is_const(i)):
                v = self.src.values[i]
                self.out.values[i] = v
            elif i in self.src.inputs and i not in self.out.values:
                self.copy_value(i)
        outs = [self.copy_value(o) if o else o for o in node.outputs]
        new = self.out.add_node(node.op_type, inputs, outs, dict(node.attrs), name=node.name, domain=node.domain, body=node.body)
        new.meta.update(on="CPU" if reason is None else "CPU", subgraph=None)
        if reason:
            new.meta["fallback"] = reason
        self.floats.update(o for o in outs if o)

    def run(self) -> Graph:
        self.skip: set[str] = set()
        self.converted: set[str] = set()
        for name in self.src.inputs:
            self.copy_value(name)
            self.floats.add(name)
        self.out.inputs = list(self.src.inputs)
        for node in list(self.src.nodes):
            if node.name in self.skip:
                continue
            if node.meta.get("on") == "BPU" and all(o in self.plan.tensors or not o for o in node.outputs):
                why = ""
                try:
                    ok = self.lower_node(node)
                except (KeyError, ValueError) as exc:
                    log.debug("lowering %s failed: %s", node.name, exc)
                    ok, why = False, f" ({exc})"
                if ok:
                    continue
                reason = "no integer lowering for this form yet" + why
                self.report.fallbacks.append((node.name, node.op_type, reason))
                self.float_node(node, reason=reason)
                continue
            self.float_node(node)
        outputs = []
        for o in self.src.outputs:
            if o in self.floats:
                outputs.append(o)
                continue
            it = self.ints[o]
            # the integer tensor gives up the output's name to the dequantized one
            int_name = self.out.unique_name(f"{o}_int")
            self._rename(it.name, int_name)
            it.name = int_name
            if it.index:
                self._index_to_int64(it, o)
                outputs.append(o)
                continue
            self.out.set_value(o, self.src.shape(o), np.float32)
            node = self.out.add_node(HZ_DEQUANTIZE, [int_name], [o], {"scale": it.scale}, name=f"{o}_HzDequantize", domain=HBTOOL_DOMAIN)
            # a segmented output: each piece's channels at the piece's scale (free on the CPU)
            node.meta.update(kernel=Dequantize.build(it.axis_scales if it.axis_scales is not None else it.scale, axis=it.scale_axis),
                             on="CPU", boundary=True)
            outputs.append(o)
        self.out.outputs = outputs
        for name, spec in self.runtime.items():
            if name not in self.converted:
                from hbtool.errors import NotDeployableError

                raise NotDeployableError(
                    f"input '{name}': input_type_rt {spec.type_rt} needs the input's conversion on the BPU, but its "
                    "preprocessing node runs in float (on the CPU, or without an integer form)",
                    "keep the HzPreprocess node and its consumers on the BPU (node_info), or set input_type_rt to the training type")
        self.out.remove_unused()
        self.report.tensors = {it.name: (float(it.scale), int(it.bits)) for it in self.ints.values() if it.name in self.out.values}
        self.report.codes = {it.name: it.code_range for it in self.ints.values() if it.name in self.out.values and it.code_range}
        return self.out

    def _index_to_int64(self, it: IntTensor, name: str) -> None:
        """ArgMax indices leave the BPU as the float model has them: int64 (a Dequantize at scale 1, then a Cast)."""
        from onnx import TensorProto

        src = name if name in self.src.values else None
        shape = self.out.shape(it.name)
        deq = self.out.unique_name(f"{it.name}_deq")
        self.out.set_value(deq, shape, np.float32)
        node = self.out.add_node(HZ_DEQUANTIZE, [it.name], [deq], {"scale": 1.0}, name=f"{deq}_HzDequantize", domain=HBTOOL_DOMAIN)
        node.meta.update(kernel=Dequantize.build(1.0), on="CPU", boundary=True)
        self.out.set_value(name, shape if src is None else self.src.shape(src), np.int64)
        cast = self.out.add_node("Cast", [deq], [name], {"to": TensorProto.INT64}, name=f"{name}_Cast")
        cast.meta.update(on="CPU", subgraph=None)

    def _rename(self, old: str, new: str) -> None:
        v = self.out.values.pop(old)
        v.name = new
        self.out.values[new] = v
        for n in self.out.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
            n.outputs = [new if o == old else o for o in n.outputs]


def lower_to_integer(graph: Graph, plan: QuantPlan, weights: dict[str, tuple[np.ndarray, int]], rounding: str = "half_up",
                     bias_delta: dict[str, np.ndarray] | None = None, inputs: Any = None) -> tuple[Graph, LoweringReport]:
    """The integer program of ``graph`` under ``plan`` (see the module docstring).

    ``bias_delta`` ``{node: per-channel float delta}`` is added to biases before they are
    quantized (bias correction). ``inputs`` (the config's InputSpecs): image inputs with a
    run-time format of their own (:mod:`hbtool.io.runtime_input`) take that buffer, and
    their preprocessing node becomes an :class:`~hbtool.kernels.colour.InputConvert`.
    """
    from hbtool.io.runtime_input import runtime_specs

    if bias_delta is None:
        bias_delta = plan.bias_delta
    check_plan_scales(plan)  # loaded scales, PTF and log2 Softmax edit the plan after build_plan checked it
    low = _Lowerer(graph.copy(), plan, weights, rounding, bias_delta, runtime_specs(list(graph.inputs), inputs))
    prog = low.run()
    return prog, low.report
