"""The program interpreter behind ``hbtool simulate``.

BPU nodes run their integer kernel's numpy form (int64 arithmetic; float BLAS only where a
product is provably exact, see :mod:`hbtool.kernels`) or an equivalent faster form from
:mod:`.accel` (``fast=True``, the default), after the operand read orders the
compiler's passes recorded (``in_perms``/``out_perm``); data-movement nodes run
:mod:`.movement`; CPU subgraphs run in onnxruntime, as on the A55 cluster. Integer tensors
are int16 arrays where a fast form wrote them and int64 where a numpy form did (every form
accepts any integer dtype); a tensor is freed as soon as its last reader has run. A Mul by a constant
scalar whose one reader is an Add of a constant scalar runs with it as one step
(:func:`_fuse_scalar_affine_pairs`).

``run`` takes any number of samples stacked on each input's first axis and runs them in passes
of up to :attr:`Executor.micro_batch` samples (the few steps with larger tensors in sub-chunks),
every tensor carrying a leading sample axis (:mod:`.batching`); the results are those of one
sample at a time, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hbtool.compiler.artifact import Artifact
from hbtool.compiler.cpu import CPU_SUBGRAPH_OP
from hbtool.errors import InputError
from hbtool.ir.graph import Graph, Node
from hbtool.ir.program_io import program_from_section
from hbtool.kernels.movement import MOVEMENT
from hbtool.simulator import accel
from hbtool.simulator.accel import accelerate, narrowable, numpy_until_compiled, reader_dtype, writes_through
from hbtool.simulator.batching import mergeable, merged_kernel, movement_step, per_sample
from hbtool.simulator.cores import SMALL_PRODUCT_MACS_ENV, one_core, small_product_macs
from hbtool.simulator.table_chains import merge_table_chains


# Samples per pass are capped so that a step's largest activation within a pass holds about this many
# elements (4 MB as the float32 accumulators of a product): past the caches every pass over a
# tensor goes to memory. Measured on 2 shared cores: MobileNetV2 at 16 samples per pass ran
# 3.5x slower per sample than at 1 uncapped, and as fast capped; DeiT-Tiny gains 1.5x capped.
# The pass is sized by the 90th percentile of the steps' sizes, and the few larger steps run their
# share of a pass in sub-chunks that fit (:func:`_chunk_sizes`): then a recogniser's 18,385-class
# logits or a Swin MLP's hidden layer no longer hold the whole program to one sample per pass.
# (The 90th percentile without the sub-chunks let CNNs take twice the samples per pass in their
# largest layers too and measured slower at batch 16 on MobileNetV2 and EfficientNet-B0.)
# Measured 2026-12-06 at batch 16, one thread, CPU seconds (the machine loaded): PP-OCRv5's
# recogniser 4 samples per pass 5 % faster than 1, MobileNetV2 (2 per pass) 10 %, Swin-T (3) 4 %.
MICRO_BATCH_ELEMENTS = 1 << 20


@dataclass
class _Step:
    node: Node
    run: Callable[[list[Any]], list[np.ndarray]]
    inputs: list[str]
    outputs: list[str]
    free_after: list[str]
    # no input carries the sample axis (a CPU subgraph computing from constants only): its one result
    # holds for every sample, so it is broadcast to the batch's S before any sampled step indexes it
    sampleless: bool = False
    # samples per call inside a pass (None: the whole pass at once): set for steps whose tensors are
    # larger than the pass was sized for, see _chunk_sizes
    chunk: int | None = None
    # the accelerated form of its kernel (None: a numpy form, a movement op or a CPU subgraph)
    fast: Callable | None = None


def _kernel_step(node: Node, program: Graph, fast: bool, threads: int | None) -> tuple[Callable, Callable | None]:
    """The kernel on a batch (merged into its first axis where :func:`.batching.mergeable`, else sample by
    sample), and its accelerated form (None: the numpy form runs)."""
    kernel = node.meta["kernel"]
    shape = program.shape(node.inputs[0]) if node.inputs and node.inputs[0] and not node.meta.get("in_perms") else None
    in_shape = tuple(shape) if shape is not None else None
    accelerated = accelerate(kernel, threads, in_shape) if fast else None
    apply = numpy_until_compiled(accelerated, kernel.apply_numpy) if accelerated is not None else kernel.apply_numpy
    if mergeable(node, program):
        return merged_kernel(node, program, apply), accelerated
    return per_sample(node, program, _one_sample_kernel(node, apply)), accelerated


def _narrow_handoffs(steps: list["_Step"], program: Graph) -> set[str]:
    """Have a requantizing loop write its result in the dtype every reader converts it to first.

    A float32 product (a depthwise or full convolution, a float Linear or MatMul) converts its int16
    input to float32, an int8 GEMM to int8: that is one more pass over the tensor after the loop that
    wrote it. Where every reader of a tensor converts it to the same dtype, and that dtype holds the
    requantizer's clamp range exactly, the loop writes that dtype instead (the same integers: float32
    holds every int16, int8 every 8-bit clamp). Program outputs keep their int16. Returns the names
    so written (:meth:`Executor.run` hands them back as int16 where they are asked for).
    """
    readers: dict[str, list[tuple[_Step, int]]] = {}
    for step in steps:
        for k, name in enumerate(step.inputs):
            if name:
                readers.setdefault(name, []).append((step, k))
    narrowed = set()
    for step in steps:
        rq = writes_through(step.fast)
        if rq is None or len(step.outputs) != 1 or step.outputs[0] in program.outputs or step.sampleless:
            continue
        name = step.outputs[0]
        wants = {reader_dtype(reader.fast, k) for reader, k in readers.get(name, [])}
        if len(wants) == 1:
            dtype = wants.pop()
            if dtype is not None and narrowable(rq, dtype):
                rq.out_dtype = dtype
                narrowed.add(name)
    return narrowed


def _scalar_operand(step: "_Step", program: Graph) -> tuple[str, int, np.ndarray] | None:
    """``(computed input, constant's index, constant)`` of a two-input elementwise step whose other operand is a
    one-element constant and whose result has the computed input's shape (else None)."""
    if len(step.inputs) != 2 or len(step.outputs) != 1 or not all(step.inputs) or step.sampleless:
        return None
    if step.node.meta.get("in_perms") or step.node.meta.get("out_perm") is not None:
        return None
    const = [program.is_const(name) for name in step.inputs]
    if const.count(True) != 1:
        return None
    k = const.index(True)
    value, x = program.values[step.inputs[k]].data, step.inputs[1 - k]
    x_shape, y_shape = program.shape(x), program.shape(step.outputs[0])
    if value is None or np.size(value) != 1 or x_shape is None or tuple(x_shape) != tuple(y_shape or ()):
        return None
    if np.ndim(value) > len(x_shape) or int(np.prod(x_shape)) < 2:
        return None
    return x, k, value


def _stored_constants(steps: list["_Step"], program: Graph, consts: dict[str, np.ndarray]) -> None:
    """Give each accelerated Add / Mul a constant operand that is not int16 (the compiler folds Swin's attention
    bias and shifted-window mask into one float64 tensor) as the int16 its fast form converts it to, once.

    The fast forms read every operand through :func:`.accel.as_stored`: a ``(64, 3, 49, 49)`` float64 constant
    was converted again on every call (3.7 MB read, about 0.2 ms), the biggest part of the step. The copy is a
    new constant of the program (so its shape and dtype read as any other's) and in ``consts``; the step reads it. Only integer values in the operand's range are
    converted, so the numpy forms see the same integers and their range check holds."""
    from hbtool.kernels.fixedpoint import int_range

    for step in steps:
        kernel = step.node.meta.get("kernel")
        if step.fast is None or type(kernel).__name__ not in ("Add", "Mul"):
            continue
        for k, name in enumerate(step.inputs):
            value = consts.get(name) if name and program.is_const(name) else None
            if value is None or np.asarray(value).dtype == np.int16 or np.size(value) < 2:
                continue
            value = np.asarray(value)
            lo, hi = int_range(int(kernel.b_bits if k else kernel.a_bits))
            if value.dtype.kind not in "iuf" or not np.all(np.isfinite(value)) or value.min() < lo or value.max() > hi \
                    or not np.array_equal(np.round(value), value):
                continue
            stored = program.add_const(np.ascontiguousarray(value, np.int16), name=f"{name}#int16")
            consts[stored] = program.const(stored)
            step.inputs[k] = stored


def _fuse_scalar_affine_pairs(steps: list["_Step"], program: Graph) -> tuple[list["_Step"], set[str]]:
    """The steps with each Mul by a constant scalar whose only reader is an Add of a constant scalar run as one
    step (:func:`.accel.scalar_affine_pair`), and the names of the Mul results no longer computed.

    A learnable affine block (``x * s + b``: 60 per line in the PP-OCRv5 recogniser) was two passes over
    the tensor, the second reading back what the first just wrote; one pass computes both in registers,
    the same int64 expressions, so the same bits. The pair runs where the Mul ran (its input is alive
    there; the Add's other operand is a constant and its readers come later). A ``keep`` that asks for a
    Mul result runs the steps unpaired (:meth:`Executor.run`).
    """
    readers: dict[str, list[int]] = {}
    for k, step in enumerate(steps):
        for name in step.inputs:
            if name:
                readers.setdefault(name, []).append(k)
    out, away, paired = [], set(), set()
    for k, mul in enumerate(steps):
        if k in paired:
            continue
        pair = None
        if type(mul.node.meta.get("kernel")).__name__ == "Mul":
            pair = _affine_pair(mul, steps, readers, program)
        if pair is None:
            out.append(mul)
            continue
        step, j = pair
        out.append(step)
        paired.add(j)
        away.add(mul.outputs[0])
    return out, away


def _affine_pair(mul: "_Step", steps: list["_Step"], readers: dict[str, list[int]], program: Graph) -> tuple["_Step", int] | None:
    """The one step doing ``mul`` and its Add reader (:func:`_fuse_scalar_affine_pairs`) and the Add's index, or None."""
    first_op = _scalar_operand(mul, program)
    mid = mul.outputs[0]
    if first_op is None or mid in program.outputs or len(readers.get(mid, [])) != 1:
        return None
    j = readers[mid][0]
    add = steps[j]
    if type(add.node.meta.get("kernel")).__name__ != "Add":
        return None
    second_op = _scalar_operand(add, program)
    if second_op is None or second_op[0] != mid:
        return None
    first = accel.scalar_affine_stage(mul.node.meta["kernel"], first_op[2], first_op[1])
    second = accel.scalar_affine_stage(add.node.meta["kernel"], second_op[2], second_op[1])
    if first is None or second is None:
        return None
    mk, ak = mul.node.meta["kernel"], add.node.meta["kernel"]
    (_, i1, c1), (_, i2, c2) = first_op, second_op

    def numpy_form(x: np.ndarray) -> np.ndarray:  # the kernels' own forms, while the loop compiles
        y = mk.apply_numpy(*((c1, x) if i1 == 0 else (x, c1)))
        return ak.apply_numpy(*((c2, y) if i2 == 0 else (y, c2)))

    apply = numpy_until_compiled(accel.scalar_affine_pair(first, second), numpy_form)

    def run(xs: list[Any]) -> list[np.ndarray]:
        return [apply(xs[0])]

    step = _Step(add.node, run, [first_op[0]], list(add.outputs), list(dict.fromkeys(mul.free_after + add.free_after)),
                 chunk=mul.chunk)
    return step, j


def _one_sample_kernel(node: Node, apply: Callable) -> Callable:
    perms = node.meta.get("in_perms") or {}
    out_perm = node.meta.get("out_perm")

    def run(xs: list[Any]) -> list[np.ndarray]:
        if perms:
            xs = [np.transpose(x, perms[k]) if k in perms else x for k, x in enumerate(xs)]
        y = apply(*xs)
        if out_perm is not None:
            y = np.ascontiguousarray(np.transpose(y, out_perm))
        return [y]

    return run


def _movement_step(node: Node, program: Graph) -> Callable:
    fn = MOVEMENT.get(node.op_type)
    if fn is None:
        return per_sample(node, program, _reference_step(node, program))

    def run(xs: list[Any]) -> list[np.ndarray]:
        return fn(node, program, *xs)

    return movement_step(node, program, run)


def _reference_step(node: Node, program: Graph) -> Callable:
    """Ops without a numpy form here: onnx's reference evaluator, on the exact integers."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    ins = [f"x{k}" if i else "" for k, i in enumerate(node.inputs)]
    outs = [f"y{k}" for k in range(len(node.outputs))]
    proto = helper.make_node(node.op_type, ins, outs, domain=node.domain, **dict(node.attrs))
    graph = helper.make_graph([proto], "single", [helper.make_tensor_value_info(i, onnx.TensorProto.UNDEFINED, None) for i in ins if i],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", program.opset)])
    evaluator = ReferenceEvaluator(model)

    def run(xs: list[Any]) -> list[np.ndarray]:
        feeds = {f"x{k}": x for k, x in enumerate(xs) if node.inputs[k]}
        return [np.asarray(y) for y in evaluator.run(None, feeds)]

    return run


def _cpu_step(node: Node, subgraph: dict[str, Any], threads: int | None) -> Callable:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = threads
    session = ort.InferenceSession(subgraph["onnx"], opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    types = {i.name: i.type for i in session.get_inputs()}
    outs = list(subgraph["outputs"])

    def run(xs: list[Any]) -> list[np.ndarray]:
        feeds = {}
        for name, x in zip(node.inputs, xs):
            if name in names:
                want = types[name]
                x = np.asarray(x)
                if want == "tensor(float)" and x.dtype != np.float32:
                    x = x.astype(np.float32)
                elif want == "tensor(int64)" and x.dtype != np.int64:
                    x = x.astype(np.int64)
                feeds[name] = x
        return list(session.run(outs, feeds))

    return run


def _step_size(program: Graph, node: Node) -> int:
    """Elements of a step's largest activation (inputs and outputs, constants aside) at one sample."""
    sizes = [int(np.prod(program.values[name].shape)) for name in list(node.inputs) + list(node.outputs)
             if name and name in program.values and not program.is_const(name) and program.values[name].shape is not None]
    return max(sizes, default=1)


def _chunk_sizes(program: Graph, nodes: list[Node]) -> tuple[int, list[int | None]]:
    """Samples per pass, and per step the samples per call inside a pass (None: the whole pass).

    The pass holds as many samples as keep the 90th percentile of the steps' largest activations
    within :data:`MICRO_BATCH_ELEMENTS`; a step whose share of a pass would exceed it runs
    ``max(1, MICRO_BATCH_ELEMENTS // size)`` samples per call. Only the loop order changes: every
    sample goes through the same kernels, so the results are the same bits at any split (tested).
    """
    sizes = [_step_size(program, n) for n in nodes]
    typical = int(np.percentile(sizes, 90)) if sizes else 1
    per_pass = max(1, MICRO_BATCH_ELEMENTS // max(typical, 1))
    chunks = [max(1, MICRO_BATCH_ELEMENTS // s) for s in sizes]
    return per_pass, [None if c >= per_pass else c for c in chunks]


class Executor:
    """Runs one artifact's program on batches of samples."""

    def __init__(self, artifact: Artifact, threads: int | None = None, fast: bool = True,
                 parallel_passes: bool | None = None):
        """``threads``: cores for onnxruntime and the integer loops (None: all); the loops' count is process-wide.

        ``parallel_passes``: run the passes of a batch on ``threads`` threads at once, each pass's steps on its
        own thread (:func:`.cores.one_core`); None: on, unless ``HBTOOL_SIM_PARALLEL_PASSES=0``. On by default
        since 2026-12-07: with the steps no longer split inside a pass, two passes kept both cores busy where
        one pass split over both did not (docs/simulate.md, "Speed in one process")."""
        import os

        from hbtool.simulator.accel import fused

        if fused is not None:
            fused.set_threads(threads)
        if parallel_passes is None:
            parallel_passes = os.environ.get("HBTOOL_SIM_PARALLEL_PASSES", "") != "0"
        try:  # read here once, so that a bad value is an error and not a silent fallback of every product session
            small_product_macs()
        except ValueError as exc:
            raise InputError(str(exc), f"set {SMALL_PRODUCT_MACS_ENV} to a number of multiply-adds such as 2e7, or 0 (off)") from None
        cores = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        self.pass_workers = max(1, int(cores)) if parallel_passes else 1
        self.header = artifact.header
        self.program = program_from_section(artifact.header["program"])
        subgraphs = artifact.header.get("cpu_subgraphs", [])
        nodes = self.program.nodes
        last_use: dict[str, int] = {}
        for k, n in enumerate(nodes):
            for i in n.inputs:
                if i:
                    last_use[i] = k
        keep = set(self.program.outputs)
        self.steps: list[_Step] = []
        for k, n in enumerate(nodes):
            accelerated = None
            if n.op_type == CPU_SUBGRAPH_OP:
                run = per_sample(n, self.program, _cpu_step(n, subgraphs[int(n.attrs["index"])], threads))
            elif "kernel" in n.meta:
                run, accelerated = _kernel_step(n, self.program, fast, threads)
            else:
                run = _movement_step(n, self.program)
            free = [i for i in dict.fromkeys(n.inputs) if i and last_use.get(i) == k and i not in keep and not self.program.is_const(i)]
            sampleless = not any(i and not self.program.is_const(i) for i in n.inputs)
            self.steps.append(_Step(n, run, list(n.inputs), list(n.outputs), free, sampleless, fast=accelerated))
        self.narrowed = _narrow_handoffs(self.steps, self.program)
        self.consts = {name: v.data for name, v in self.program.values.items() if v.data is not None}
        if fast:
            _stored_constants(self.steps, self.program, self.consts)
        self.micro_batch, chunks = _chunk_sizes(self.program, [s.node for s in self.steps])
        for step, chunk in zip(self.steps, chunks):
            step.chunk = None if step.sampleless else chunk
        # every step on its own, for a keep that asks for a tensor a paired step does not write
        self.unpaired_steps = self.steps
        self.paired_away: set[str] = set()
        if fast and accel.AFFINE_PAIRS and accel.fused is not None:
            self.steps, tabled = merge_table_chains(self.steps, self.program, _scalar_operand)
            self.steps, self.paired_away = _fuse_scalar_affine_pairs(self.steps, self.program)
            self.paired_away |= tabled

    @property
    def input_names(self) -> list[str]:
        return list(self.program.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.program.outputs)

    def samples_in(self, feeds: dict[str, np.ndarray]) -> int:
        """How many samples ``feeds`` stack (each input's first axis holds ``S`` times the program's)."""
        counts = set()
        for name in self.program.inputs:
            shape = tuple(self.program.shape(name))
            x = feeds[name]
            if not shape and x.ndim <= 1:   # a rank-0 input: one scalar, or S of them side by side
                counts.add(1 if x.ndim == 0 else x.shape[0])
                continue
            if x.ndim != len(shape) or tuple(x.shape[1:]) != shape[1:] or not shape or x.shape[0] % shape[0]:
                raise InputError(f"simulate: input '{name}' has shape {tuple(x.shape)}, the program takes {shape}"
                                 " (or samples stacked on its first axis)", "give arrays of the input's shape")
            counts.add(x.shape[0] // shape[0])
        if len(counts) != 1:
            raise InputError("simulate: the inputs stack different numbers of samples", "give every input the same number")
        return counts.pop()

    def run(self, feeds: dict[str, np.ndarray], keep: set[str] | None = None) -> dict[str, np.ndarray]:
        """Outputs (dequantized float32) of ``S`` samples stacked on each input's first axis, stacked the same way.

        One sample is the program's own shapes; ``S`` samples run as one batch (see
        :mod:`.batching`). ``keep`` also returns these tensors.
        """
        S = self.samples_in(feeds)
        per_pass = self.micro_batch
        workers = min(self.pass_workers, S)
        if workers > 1:  # passes in a multiple of the workers, as even as the cap allows
            passes = -(-S // per_pass)
            passes = -(-passes // workers) * workers
            per_pass = -(-S // passes)
        if S > per_pass:
            bounds = [(start, min(start + per_pass, S)) for start in range(0, S, per_pass)]

            def one_pass(bound: tuple[int, int]) -> dict[str, np.ndarray]:
                start, stop = bound
                chunk = {name: x[start * (x.shape[0] // S): stop * (x.shape[0] // S)] for name, x in feeds.items()}
                if workers > 1:  # the passes keep the cores busy: each runs its steps on its own thread
                    with one_core():
                        return self._run(chunk, stop - start, keep)
                return self._run(chunk, stop - start, keep)

            if workers > 1:
                # the samples of different passes never meet, so passes may run at once, each on its own
                # thread (onnxruntime and the numba loops release the GIL); results stay in pass order
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(workers, thread_name_prefix="hbtool-pass") as pool:
                    parts = list(pool.map(one_pass, bounds))
            else:
                parts = [one_pass(b) for b in bounds]
            return {name: np.concatenate([p[name] for p in parts]) if parts[0][name].ndim else parts[0][name]
                    for name in parts[0]}
        return self._run(feeds, S, keep)

    def _run_chunked(self, step: _Step, xs: list[Any], S: int) -> list[np.ndarray]:
        """``step`` on ``step.chunk`` samples at a time (the sample axis is axis 0 of every computed input)."""
        sampled = [bool(name) and name not in self.consts for name in step.inputs]
        parts = []
        for start in range(0, S, step.chunk):
            stop = min(start + step.chunk, S)
            parts.append(step.run([x[start:stop] if on else x for x, on in zip(xs, sampled)]))
        return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]

    def _run(self, feeds: dict[str, np.ndarray], S: int, keep: set[str] | None) -> dict[str, np.ndarray]:
        values: dict[str, Any] = {}
        for name in self.program.inputs:
            shape = tuple(self.program.shape(name))
            values[name] = feeds[name].reshape((S,) + shape)
        keep = keep or set()
        for step in (self.unpaired_steps if keep & self.paired_away else self.steps):
            xs = []
            for name in step.inputs:
                if not name:
                    xs.append(None)
                elif name in values:
                    xs.append(values[name])
                elif name in self.consts:
                    xs.append(self.consts[name])
                else:
                    raise InputError(f"simulate: tensor '{name}' is needed by node '{step.node.name}' but was never computed",
                                     "the artifact is inconsistent; compile the model again")
            ys = step.run(xs) if step.chunk is None or S <= step.chunk else self._run_chunked(step, xs, S)
            if step.sampleless and S > 1:
                ys = [np.broadcast_to(y, (S,) + y.shape[1:]) for y in ys]
            for name, y in zip(step.outputs, ys):
                if name:
                    values[name] = y
            for name in step.free_after:
                if name not in keep:
                    values.pop(name, None)
        out = {}
        for name in list(self.program.outputs) + sorted(keep):
            if name in values:
                y = values[name]
                if name in self.narrowed:  # written as its reader's dtype: the int16 every other tensor is stored as
                    y = y.astype(np.int16)
                out[name] = y.reshape(()) if y.ndim == 1 and S == 1 else y.reshape((S * y.shape[1],) + y.shape[2:]) if y.ndim > 1 else y
        return out
