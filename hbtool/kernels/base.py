"""The uniform kernel interface.

Every integer kernel is a frozen dataclass holding only integer parameters (plus the
few float facts kept for reports, such as output scales). It is made by a ``build``
classmethod that does the float work once (scales -> multipliers, shifts, tables) and
then offers two executable forms of one definition:

``apply_numpy(*q) -> np.ndarray``
    integer numpy arrays in (any integer dtype), int64 out. int64 arithmetic only; float
    appears only where a float64 / float32 matrix product is provably exact.
``emit(builder, *input_names) -> str``
    appends the ONNX form to an :class:`~hbtool.kernels.builder.OnnxBuilder`; inputs and
    output are DOUBLE tensors holding integers (Quantize takes FLOAT, Dequantize returns FLOAT).

and three wrappers around ``emit`` shared by all kernels: :meth:`Kernel.onnx_nodes`,
:meth:`Kernel.onnx_function` and :meth:`Kernel.onnx_model`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # the ONNX-writing methods import onnx when called (see ElemType)
    import onnx

from hbtool.kernels.builder import DEFAULT_OPSET, ElemType, OnnxBuilder


class Kernel:
    """Base class of the integer kernels (see the module docstring)."""

    #: number of tensor inputs ``apply_numpy`` / ``emit`` take
    n_inputs: int = 1
    #: ONNX element type of the inputs / output of the emitted subgraph
    onnx_input_type: int = ElemType.DOUBLE
    onnx_output_type: int = ElemType.DOUBLE

    # ---- facts the compiler, the cost model and the emulator read (one place: the class)
    #: the unit that runs it (:mod:`.units`); None: the vector unit on the BPU, else the CPU
    unit: str | None = None
    #: the vector unit's class of work (the march's ``units.vector.cycles_per_element.<class>``)
    vector_class: str = "elementwise"
    #: what a reduction kernel computes over its axes ("mean", "sum", "l2"); None: not a reduction
    reduction: str | None = None
    #: works on trailing axes or treats axis 0 as a batch: ``simulate`` may fold its samples into axis 0
    merges_samples: bool = False
    #: its last two axes are a matrix, so axis 0 must be a batch axis for samples to fold into it
    matrix_operands: bool = False

    def channel_arrays(self) -> tuple[np.ndarray, ...]:
        """Its constant arrays that broadcast against the activation (per-channel scales, multipliers, slopes).

        ``simulate`` folds a batch of samples into a kernel's axis 0 only where none of them varies along
        it: an output Concat along axis 0 (a recurrent state ``Concat(h, c)``) keeps one scale per
        piece on that axis, and folded samples would meet the wrong piece's scale."""
        return ()

    def macs(self, in_shape: Sequence[int] | None, out_shape: Sequence[int]) -> int:
        """Multiply-accumulates of one run on ``in_shape`` (first operand) to ``out_shape``; 0 for none
        (counted by :mod:`hbtool.ir.macs`)."""
        return 0

    def param_bytes(self) -> int:
        """Bytes of the kernel's constant arrays as the artifact stores them (see :func:`param_bytes`)."""
        return param_bytes(self)

    def apply_numpy(self, *inputs: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def emit(self, b: OnnxBuilder, *inputs: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ wrappers
    def onnx_nodes(
        self,
        input_names: str | Sequence[str],
        output_name: str,
        name_prefix: str,
        constants: str = "node",
        opset: int = DEFAULT_OPSET,
    ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
        """The kernel as ONNX nodes reading ``input_names`` and writing ``output_name``.

        Returns ``(nodes, initializers)``; ``initializers`` is empty when
        ``constants == "node"`` (the default), which keeps the nodes usable as a function body.
        All intermediate names start with ``name_prefix``.
        """
        names = [input_names] if isinstance(input_names, str) else list(input_names)
        if len(names) != self.n_inputs:
            raise ValueError(f"{type(self).__name__} takes {self.n_inputs} inputs, got {len(names)}")
        b = OnnxBuilder(name_prefix, opset=opset, constants=constants)
        out = self.emit(b, *names)
        b.bind_output(out, output_name)
        return b.nodes, b.initializers

    def onnx_function(self, domain: str, name: str, opset: int = DEFAULT_OPSET) -> onnx.FunctionProto:
        """The kernel as a model-local function ``domain::name`` (inputs x0.., output y)."""
        from onnx import helper

        ins = [f"x{i}" for i in range(self.n_inputs)]
        nodes, _ = self.onnx_nodes(ins, "y", name, constants="node", opset=opset)
        return helper.make_function(domain, name, ins, ["y"], nodes, [helper.make_opsetid("", opset)])

    def onnx_model(
        self,
        input_shapes: Sequence[Sequence[int | str | None]] | None = None,
        opset: int = DEFAULT_OPSET,
        constants: str = "node",
    ) -> onnx.ModelProto:
        """A standalone model running this kernel: inputs x0.., output y (for tests, debugging)."""
        import onnx
        from onnx import helper

        ins = [f"x{i}" for i in range(self.n_inputs)]
        shapes = list(input_shapes) if input_shapes is not None else [None] * self.n_inputs
        nodes, inits = self.onnx_nodes(ins, "y", "k", constants=constants, opset=opset)
        graph = helper.make_graph(
            nodes,
            type(self).__name__,
            [helper.make_tensor_value_info(n, self.onnx_input_type, s) for n, s in zip(ins, shapes)],
            [helper.make_tensor_value_info("y", self.onnx_output_type, None)],
            initializer=inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="hbtool.kernels")
        model.ir_version = 8
        if input_shapes is not None:  # fills the output's type for onnx.checker's full check
            model = onnx.shape_inference.infer_shapes(model)
        return model


def narrowest_int(a: np.ndarray) -> np.ndarray:
    """An integer array in the narrowest signed type holding its values (how the artifact stores constants)."""
    if a.dtype.kind not in "iu" or a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for dt in (np.int8, np.int16, np.int32, np.int64):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return a.astype(dt)
    return a


def param_bytes(kernel: Any) -> int:
    """Bytes of a kernel's constant arrays as stored (narrowest integer type): weights, biases, tables.

    The weights the BPU streams for the kernel every frame: the compiler's memory plan and the cost
    model's weight fetch both read this. int4 weights count two per byte (:mod:`.packing`); nested
    kernels (a fused requantize) count with their owner; scalars ride in the instruction, not here.
    """
    total = 0
    packed = getattr(kernel, "weight_bits", 8) == 4
    for f in dataclasses.fields(kernel):
        v = getattr(kernel, f.name)
        if packed and f.name == "weight" and isinstance(v, np.ndarray):
            total += (v.size + 1) // 2
        elif isinstance(v, np.ndarray) and v.size > 1:
            total += narrowest_int(v).nbytes
        elif dataclasses.is_dataclass(v):
            total += param_bytes(v)
    return total


class RangeError(ValueError):
    """An integer intermediate would leave the range where both forms are exact."""


def check(cond: bool, message: str) -> None:
    """Raise :class:`RangeError` unless ``cond`` (kept under ``python -O``, unlike assert)."""
    if not cond:
        raise RangeError(message)


def check_scales(kernel: str, **scales: Any) -> None:
    """Refuse a scale (scalar or per-channel array) that is not finite and > 0, naming the kernel and the scale.

    A zero scale (a tensor whose range is zero), a negative, infinite or NaN one would build a kernel
    that computes garbage; ``build`` raises ``ValueError`` instead.
    """
    for name, value in scales.items():
        s = np.asarray(value, np.float64)
        ok = np.isfinite(s) & (s > 0)
        if s.size == 0 or not bool(np.all(ok)):
            got = s[~ok].flat[0] if s.size else "no value"
            raise ValueError(f"{kernel}: {name} must be finite and > 0, got {got}")


def as_int(q: np.ndarray, name: str = "input") -> np.ndarray:
    """An integer array as int64; integer-valued float arrays are accepted too."""
    q = np.asarray(q)
    if q.dtype.kind in "iub":
        return q.astype(np.int64, copy=False)
    if q.dtype.kind == "f":
        r = q.astype(np.int64)
        check(bool(np.all(r == q)), f"{name} holds non-integer values")
        return r
    raise TypeError(f"{name} must be an integer array, not {q.dtype}")
