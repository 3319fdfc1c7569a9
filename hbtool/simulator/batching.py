"""Many samples per pass through a program compiled for one: the sample axis.

The program's shapes are static, compiled for one sample (``(1, 3, 224, 224)``). To run
``S`` samples per call, every activation carries an extra leading *sample axis*:
``(S, *static_shape)``. Each step then runs all samples at once in one of three ways,
chosen when the executor is built from the node and its static shapes:

* **merged**: the kernel treats its first axis independently (a convolution's batch, the
  rows of a Linear, a LayerNorm over trailing axes...), so the sample axis is folded into it
  (``(S * n0, ...)``), the kernel runs once, and the result is split back. Per-call costs
  (thread start-up, onnxruntime dispatch, allocation) are paid once per batch, not per sample;
* **movement**: data-movement ops get their sample-axis form: reshapes prepend ``S``,
  transposes shift their permutation, Slice/Concat/Split shift their axis, and every other
  pure movement op (Pad, Expand, Roll, window ops, nearest Resize...) becomes one gather
  through an index map computed once from the op itself on integer codes;
* **per sample**: anything else (CPU subgraphs, whose onnxruntime sessions have fixed shapes,
  a MatMul of two rank-2 activations, a reduction over axis 0...) runs sample by sample and
  the results are stacked. Always correct, just not faster.

The samples never mix: each form computes exactly what the one-sample program computes on
each sample, so batched results are bit-identical to sample-by-sample ones (tested).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.hz_ops import HZ_REARRANGE, HZ_REORDER
from hbtool.kernels.movement import COMPILER_MOVES, ELEMENT_COPIES, RESHAPE_LIKE

Run = Callable[[list[Any]], list[np.ndarray]]


def _shifted(perm) -> list[int]:
    return [0] + [int(p) + 1 for p in perm]


def _axes_exclude_zero(kernel, rank: int) -> bool:
    """Whether the kernel's own axes (reductions, normalisation, softmax) leave axis 0 alone."""
    for field in ("axes", "axis"):
        value = getattr(kernel, field, None)
        if value is None:
            continue
        for a in np.atleast_1d(np.asarray(value, np.int64)):
            if int(a) % max(rank, 1) == 0:
                return False
    return True


def mergeable(node: Node, program: Graph) -> bool:
    """Whether a kernel node may fold the sample axis into its first axis.

    True when the kernel type works on trailing axes (or treats axis 0 as a batch), none of
    its axes is 0, every activation operand (after the read order ``in_perms``) has the
    output's rank and first dimension (no broadcasting along axis 0 between activations) and
    every constant operand broadcasts along axis 0 (size 1 there, or a lower rank).
    """
    kernel = node.meta["kernel"]
    if not kernel.merges_samples:  # a kernel fact (hbtool.kernels.base.Kernel)
        return False
    perms = node.meta.get("in_perms") or {}
    out_perm = node.meta.get("out_perm")
    out_shape = tuple(program.shape(node.outputs[0]))
    if out_perm is not None:  # the kernel computed the un-permuted shape
        inv = np.argsort(out_perm)
        out_shape = tuple(out_shape[int(i)] for i in inv)
    rank = len(out_shape)
    if rank < 2 or (kernel.matrix_operands and rank < 3):
        return False
    if not _axes_exclude_zero(kernel, rank):
        return False
    for arr in kernel.channel_arrays():   # per-channel constants along axis 0 would meet another sample's data
        if arr.ndim >= rank and arr.shape[arr.ndim - rank] != 1:
            return False
    for k, name in enumerate(node.inputs):
        if not name:
            continue
        shape = tuple(program.shape(name))
        if k in perms:
            shape = tuple(shape[int(p)] for p in perms[k])
        if program.is_const(name):
            if len(shape) >= rank and any(d != 1 for d in shape[: len(shape) - rank + 1]):
                return False
        elif len(shape) != rank or shape[0] != out_shape[0]:
            return False
    return True


def merged_kernel(node: Node, program: Graph, apply: Callable) -> Run:
    """The kernel on all samples at once, the sample axis folded into its first axis."""
    perms = {int(k): _shifted(p) for k, p in (node.meta.get("in_perms") or {}).items()}
    out_perm = node.meta.get("out_perm")
    out_perm = None if out_perm is None else _shifted(out_perm)
    active = [bool(name) and not program.is_const(name) for name in node.inputs]

    def run(xs: list[Any]) -> list[np.ndarray]:
        S = next(x.shape[0] for x, a in zip(xs, active) if a)
        args = []
        for k, (x, a) in enumerate(zip(xs, active)):
            if a:
                if k in perms:
                    x = np.transpose(x, perms[k])
                x = x.reshape((S * x.shape[1],) + x.shape[2:])
            args.append(x)
        y = apply(*args)
        y = y.reshape((S, y.shape[0] // S) + y.shape[1:])
        if out_perm is not None:
            y = np.ascontiguousarray(np.transpose(y, out_perm))
        return [y]

    return run


def per_sample(node: Node, program: Graph, run_one: Run) -> Run:
    """Any step, sample by sample, results stacked on the sample axis."""
    active = [bool(name) and not program.is_const(name) for name in node.inputs]

    def run(xs: list[Any]) -> list[np.ndarray]:
        S = next((x.shape[0] for x, a in zip(xs, active) if a), 1)
        if S == 1:
            return [np.asarray(y)[None] for y in run_one([x[0] if a else x for x, a in zip(xs, active)])]
        results = [run_one([x[s] if a else x for x, a in zip(xs, active)]) for s in range(S)]
        return [np.stack([np.asarray(r[k]) for r in results]) for k in range(len(results[0]))]

    return run


# ------------------------------------------------------------------------------ movement
def _ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


def _reshape(node: Node, program: Graph) -> Run:
    shape = tuple(program.shape(node.outputs[0]))

    def run(xs):
        return [xs[0].reshape((xs[0].shape[0],) + shape)]

    return run


def _transpose(node: Node, program: Graph) -> Run:
    perm = node.attrs.get("perm")
    rank = len(program.shape(node.inputs[0]))
    perm = _shifted(list(range(rank))[::-1] if perm is None else perm)

    def run(xs):
        return [np.transpose(xs[0], perm)]

    return run


def _rearrange(node: Node, program: Graph) -> Run:
    steps = [(kind, [int(d) for d in arg]) for kind, arg in node.attrs["steps"]]

    def run(xs):
        x = xs[0]
        S = x.shape[0]
        for kind, arg in steps:
            x = x.reshape([S] + arg) if kind == "reshape" else np.transpose(x, _shifted(arg))
        return [x]

    return run


def _identity(node: Node, program: Graph) -> Run:
    return lambda xs: [xs[0]]


def _slice(node: Node, program: Graph) -> Run:
    names = node.inputs[1:]
    shape = tuple(program.shape(node.inputs[0]))
    rank = len(shape)
    starts = _ints(program.const(names[0]))
    ends = _ints(program.const(names[1]))
    axes = _ints(program.const(names[2])) if len(names) > 2 and names[2] else list(range(len(starts)))
    steps = _ints(program.const(names[3])) if len(names) > 3 and names[3] else [1] * len(starts)
    index = [slice(None)] * (rank + 1)
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a % rank + 1] = slice(*slice(s, e, st).indices(shape[a % rank]))
    index = tuple(index)
    return lambda xs: [xs[0][index]]


def _concat(node: Node, program: Graph) -> Run | None:
    if any(program.is_const(i) for i in node.inputs if i):
        return None  # a constant part: the index map below handles it
    rank = len(program.shape(node.outputs[0]))
    axis = int(node.attrs.get("axis", 0)) % rank + 1
    return lambda xs: [np.concatenate(xs, axis=axis)]


def _split(node: Node, program: Graph) -> Run:
    rank = len(program.shape(node.inputs[0]))
    axis = int(node.attrs.get("axis", 0)) % rank
    sizes = [int(program.shape(o)[axis]) for o in node.outputs]
    bounds = list(np.cumsum(sizes)[:-1])
    return lambda xs: list(np.split(xs[0], bounds, axis=axis + 1))


_MOVEMENT_FORMS = {
    "Reshape": _reshape, "Flatten": _reshape, "Squeeze": _reshape, "Unsqueeze": _reshape,
    "Transpose": _transpose, HZ_REARRANGE: _rearrange, "Identity": _identity, HZ_REORDER: _identity,
    "Slice": _slice, "Concat": _concat, "Split": _split,
}
# ops that only copy input elements (or constants) to the output: an index map describes them; those
# whose sample-axis form above always applies (reshapes, Transpose, Identity, the compiler's) never need it
_PURE_MOVEMENT = ELEMENT_COPIES - RESHAPE_LIKE - COMPILER_MOVES - {"Transpose", "Identity"}
_DATA_INPUTS = {"Concat": None}  # inputs holding data (None: all); other ops: input 0 only


def _aligned_runs(idx: np.ndarray, size: int, shape: tuple) -> int:
    """The longest run length ``L`` dividing the output's last axis such that ``idx`` (a full index map over a
    source of ``size`` elements) moves whole aligned runs of ``L`` source elements: every ``idx[k*L : k*L + L]``
    is ``idx[k*L] + arange(L)`` with ``idx[k*L] % L == 0``; 1 when none does.

    Swin's Roll, WindowPartition and WindowReverse move whole channel rows (96-768 int16 codes): gathered as
    rows, each moves a contiguous block instead of one element per int64 index (0.13 ms a step on 3136 x 96)."""
    last = int(shape[-1]) if len(shape) else 1
    n = idx.size
    for L in sorted((d for d in range(2, last + 1) if last % d == 0), reverse=True):
        if n % L or size % L:
            continue
        rows = idx.reshape(-1, L)
        if np.all(rows[:, 0] % L == 0) and np.array_equal(rows, rows[:, :1] + np.arange(L, dtype=idx.dtype)):
            return L
    return 1


def _index_map(node: Node, program: Graph, run_one: Run) -> Run | None:
    """A pure movement op as one gather: the op run on integer codes says where each output element comes from.

    Every activation element gets a distinct code; the op runs twice with the codes offset by two
    different bases. Output elements that moved with the base are activation elements (their code
    is the source index); the others are constants or padding, copied as they are.
    """
    data = _DATA_INPUTS.get(node.op_type, {0})
    active = [bool(name) and not program.is_const(name) for name in node.inputs]
    for k, a in enumerate(active):
        if a and data is not None and k not in data:
            return None  # run-time indices or shapes: not a fixed rearrangement
    sizes = [int(np.prod(program.shape(n))) if a else 0 for n, a in zip(node.inputs, active)]
    offsets = np.cumsum([0] + sizes)
    bases = (np.int64(1) << 40, np.int64(1) << 41)
    runs = []
    for base in bases:
        xs = []
        for k, (name, a) in enumerate(zip(node.inputs, active)):
            if not name:
                xs.append(None)
            elif a:
                xs.append((base + offsets[k] + np.arange(sizes[k], dtype=np.int64)).reshape(program.shape(name)))
            else:
                xs.append(program.const(name))
        runs.append([np.asarray(y) for y in run_one(xs)])
    # constants joined with the data decide the output dtype, as they do in the one-sample op
    const_types = [np.asarray(program.const(n)).dtype for n, a in zip(node.inputs, active)
                   if n and not a and (data is None or node.inputs.index(n) in data)]
    maps = []
    for y0, y1 in zip(*runs):
        moved = (y1 - y0) == (bases[1] - bases[0])
        idx = np.where(moved, y0 - bases[0], 0).astype(np.int64).reshape(-1)
        fill = np.where(moved, 0, y0).reshape(-1)
        full = bool(np.all(moved))
        run_length = _aligned_runs(idx, int(offsets[-1]), y0.shape) if full else 1
        if run_length > 1:  # whole runs of the source move: gather them as rows
            idx = idx[::run_length] // run_length
        maps.append((np.ascontiguousarray(idx), moved.reshape(-1), fill, y0.shape, full, run_length))

    def run(xs: list[Any]) -> list[np.ndarray]:
        parts = [x for x, a in zip(xs, active) if a]
        S = parts[0].shape[0]
        src = parts[0].reshape(S, -1) if len(parts) == 1 else np.concatenate([p.reshape(S, -1) for p in parts], axis=1)
        outs = []
        for idx, moved, fill, shape, full, run_length in maps:
            if run_length > 1:
                outs.append(np.take(src.reshape(S, -1, run_length), idx, axis=1).reshape((S,) + shape))
                continue
            y = np.take(src, idx, axis=1)
            if not full:
                dtype = np.result_type(y.dtype, *const_types)
                if dtype.kind in "iu":
                    info = np.iinfo(dtype)
                    if fill.min(initial=0) < info.min or fill.max(initial=0) > info.max:
                        dtype = np.dtype(np.int64)
                y = np.where(moved, y.astype(dtype, copy=False), fill.astype(dtype))
            outs.append(y.reshape((S,) + shape))
        return outs

    return run


def movement_step(node: Node, program: Graph, run_one: Run) -> Run:
    """The sample-axis form of a data-movement node (``run_one``: its one-sample form)."""
    make = _MOVEMENT_FORMS.get(node.op_type)
    run = make(node, program) if make is not None else None
    if run is None and node.op_type in _PURE_MOVEMENT:
        try:
            run = _index_map(node, program, run_one)
        except Exception:  # an op form that does not take codes: sample by sample is always right
            run = None
    return run or per_sample(node, program, run_one)
