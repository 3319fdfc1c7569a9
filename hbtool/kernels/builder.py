"""A small ONNX node builder the kernels write their subgraphs with.

Every kernel emits its ONNX form through one :class:`OnnxBuilder`. The builder gives
every tensor and node a unique name under a prefix, so a kernel's subgraph can be pasted
into a bigger graph, and it writes constants either as ``Constant`` nodes (the default:
the subgraph is then self-contained and can be the body of a model-local function) or as
initializers. Integers travel as DOUBLE tensors; see :mod:`hbtool.kernels`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # the ONNX-writing methods import onnx when called (see ElemType)
    import onnx

DEFAULT_OPSET = 17


class ElemType:
    """ONNX ``TensorProto`` element types (fixed numbers of the ONNX spec).

    Spelled out here so that importing the kernels does not import ``onnx``: ``hbtool simulate``
    runs the kernels without writing ONNX, and ``import onnx`` (through ml_dtypes) cost it about
    a second of every process start. The ONNX-writing methods import ``onnx`` when called.
    """

    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    INT16 = 5
    INT32 = 6
    INT64 = 7
    BOOL = 9
    DOUBLE = 11


_NP_TO_ONNX = {
    np.dtype(np.float64): ElemType.DOUBLE,
    np.dtype(np.float32): ElemType.FLOAT,
    np.dtype(np.int64): ElemType.INT64,
    np.dtype(np.int32): ElemType.INT32,
    np.dtype(np.int16): ElemType.INT16,
    np.dtype(np.int8): ElemType.INT8,
    np.dtype(np.bool_): ElemType.BOOL,
}


def onnx_dtype(dtype: Any) -> int:
    """The TensorProto element type of a numpy dtype."""
    return _NP_TO_ONNX[np.dtype(dtype)]


class OnnxBuilder:
    """Collects ONNX nodes and constants for one kernel instance.

    ``prefix`` starts every name the builder makes (tensor and node names), so two kernels
    with different prefixes never collide. ``constants`` is ``"node"`` (``Constant`` nodes;
    usable inside a FunctionProto) or ``"initializer"``. ``opset`` is the default-domain
    opset the nodes are written for (17 and up; ReduceMax/ReduceMin change form at 18).
    """

    def __init__(self, prefix: str = "k", opset: int = DEFAULT_OPSET, constants: str = "node"):
        if constants not in ("node", "initializer"):
            raise ValueError(f"constants must be 'node' or 'initializer', not {constants!r}")
        if opset < 13:
            raise ValueError(f"the kernels need ONNX opset 13 or later, not {opset}")
        self.prefix = prefix
        self.opset = int(opset)
        self.constants = constants
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0
        self._const_cache: dict[tuple, str] = {}

    # ------------------------------------------------------------------ names
    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{self.prefix}/{hint}_{self._count}"

    # -------------------------------------------------------------- constants
    def const(self, value: Any, dtype: Any = np.float64, hint: str = "c") -> str:
        """A constant tensor (deduplicated by value within this builder)."""
        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key in self._const_cache:
            return self._const_cache[key]
        from onnx import helper, numpy_helper

        name = self.fresh(hint)
        tensor = numpy_helper.from_array(arr, name)
        if self.constants == "node":
            self.nodes.append(helper.make_node("Constant", [], [name], name=name + "/Constant", value=tensor))
        else:
            self.initializers.append(tensor)
        self._const_cache[key] = name
        return name

    # -------------------------------------------------------------------- ops
    def op(self, op_type: str, *inputs: str, hint: str | None = None, **attrs: Any) -> str:
        """Append one single-output node; returns the output tensor name."""
        from onnx import helper

        out = self.fresh(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out + "/" + op_type, **attrs))
        return out

    def add(self, a: str, b: str) -> str:
        return self.op("Add", a, b)

    def sub(self, a: str, b: str) -> str:
        return self.op("Sub", a, b)

    def mul(self, a: str, b: str) -> str:
        return self.op("Mul", a, b)

    def div(self, a: str, b: str) -> str:
        return self.op("Div", a, b)

    def floor(self, a: str) -> str:
        return self.op("Floor", a)

    def cast(self, a: str, dtype: Any) -> str:
        return self.op("Cast", a, to=onnx_dtype(dtype))

    def int_const(self, value: Any, to: Any = np.float64, hint: str = "w") -> str:
        """An integer constant stored in the narrowest of int8/int16/int32 and cast to ``to``.

        Keeps weights small in the file (one byte per int8 weight); onnxruntime folds the
        Cast once at session start.
        """
        arr = np.asarray(value)
        for dt in (np.int8, np.int16, np.int32):
            info = np.iinfo(dt)
            if arr.size == 0 or (arr.min() >= info.min and arr.max() <= info.max):
                return self.cast(self.const(arr, dt, hint), to)
        return self.const(arr, to, hint)

    def where(self, cond: str, a: str, b: str) -> str:
        return self.op("Where", cond, a, b)

    def clip(self, a: str, lo: float | None, hi: float | None, dtype: Any = np.float64) -> str:
        """Clamp with scalar bounds (either may be None) of the input's element type."""
        lo_name = self.const(lo, dtype) if lo is not None else ""
        hi_name = self.const(hi, dtype) if hi is not None else ""
        if not lo_name and not hi_name:
            return a
        ins = [a, lo_name] + ([hi_name] if hi_name else [])
        return self.op("Clip", *ins)

    def reduce(self, op_type: str, x: str, axes: Sequence[int] | None, keepdims: bool = True) -> str:
        """ReduceSum / ReduceMax / ReduceMin with the axes form of this builder's opset."""
        axes_in_input = op_type == "ReduceSum" or self.opset >= 18
        if axes is None:
            return self.op(op_type, x, keepdims=int(keepdims))
        axes = [int(a) for a in axes]
        if axes_in_input:
            return self.op(op_type, x, self.const(np.array(axes, np.int64), np.int64, "axes"), keepdims=int(keepdims))
        return self.op(op_type, x, axes=axes, keepdims=int(keepdims))

    # ---------------------------------------------------------------- binding
    def bind_output(self, tensor: str, output_name: str) -> None:
        """Make the kernel's result appear under ``output_name``.

        Renames the producing node's output when the builder made it (no extra node),
        otherwise (the result is a graph input or a cached constant) adds an Identity.
        """
        if tensor == output_name:
            return
        producer = None
        for node in self.nodes:
            if tensor in node.output and node.op_type != "Constant":
                producer = node
        if producer is None or tensor in self._const_cache.values():
            from onnx import helper

            self.nodes.append(helper.make_node("Identity", [tensor], [output_name], name=self.fresh("identity")))
            return
        for node in self.nodes:
            for i, name in enumerate(node.input):
                if name == tensor:
                    node.input[i] = output_name
            for i, name in enumerate(node.output):
                if name == tensor:
                    node.output[i] = output_name
