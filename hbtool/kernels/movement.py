"""Data-movement ops in numpy: they only rearrange integers, so any exact implementation will do.

One definition for the two readers: ``simulate`` runs them on the codes, and the cost model
(:mod:`hbtool.costmodel.access`) runs them on element addresses to see how each op walks memory.

Each function takes the node (attributes), the program (constant operands, static shapes)
and the input arrays, and returns the output arrays. Shapes come from the program where the
op is a pure reinterpretation (Reshape, Flatten, Squeeze, Unsqueeze): the program is
compiled for fixed shapes.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.hz_ops import HZ_REARRANGE, HZ_REORDER


def _const(program: Graph, name: str) -> np.ndarray | None:
    if not name:
        return None
    return program.const(name)


def _ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


def _reshape_like(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    return [x.reshape(program.shape(node.outputs[0]))]


def _transpose(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    perm = node.attrs.get("perm")
    return [np.transpose(x, None if perm is None else [int(p) for p in perm])]


def _rearrange(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    for kind, arg in node.attrs["steps"]:
        x = x.reshape([int(d) for d in arg]) if kind == "reshape" else np.transpose(x, [int(p) for p in arg])
    return [x]


def _slice(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    names = node.inputs[1:]
    starts = _ints(_const(program, names[0]))
    ends = _ints(_const(program, names[1]))
    axes = _ints(_const(program, names[2])) if len(names) > 2 and names[2] else list(range(len(starts)))
    steps = _ints(_const(program, names[3])) if len(names) > 3 and names[3] else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a % x.ndim] = slice(*slice(s, e, st).indices(x.shape[a % x.ndim]))
    return [x[tuple(index)]]


def _split(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    axis = int(node.attrs.get("axis", 0)) % x.ndim
    sizes = None
    if len(node.inputs) > 1 and node.inputs[1]:
        sizes = _ints(_const(program, node.inputs[1]))
    elif "split" in node.attrs:
        sizes = _ints(node.attrs["split"])
    if sizes is None:
        sizes = [int(program.shape(o)[axis]) for o in node.outputs]
    bounds = np.cumsum(sizes)[:-1]
    return list(np.split(x, bounds, axis=axis))


def _concat(node: Node, program: Graph, *xs) -> list[np.ndarray]:
    return [np.concatenate(xs, axis=int(node.attrs.get("axis", 0)))]


def _gather(node: Node, program: Graph, x: np.ndarray, idx: np.ndarray) -> list[np.ndarray]:
    axis = int(node.attrs.get("axis", 0)) % x.ndim
    idx = np.asarray(idx).astype(np.int64)
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take(x, idx, axis=axis)]


def _expand(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    return [np.broadcast_to(x, program.shape(node.outputs[0])).copy()]


def _tile(node: Node, program: Graph, x: np.ndarray, reps) -> list[np.ndarray]:
    return [np.tile(x, _ints(reps))]


def _pad(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    pads = _ints(rest[0]) if rest else _ints(node.attrs.get("pads"))
    axes = list(range(x.ndim))
    if len(node.inputs) > 3 and node.inputs[3]:
        axes = [a % x.ndim for a in _ints(_const(program, node.inputs[3]))]
    n = len(axes)
    width = [(0, 0)] * x.ndim
    for k, a in enumerate(axes):
        width[a] = (pads[k], pads[k + n])
    mode = node.attrs.get("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode == "constant":
        return [np.pad(x, width, mode="constant", constant_values=0)]
    return [np.pad(x, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _reduce(fn: Callable) -> Callable:
    def run(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
        axes = node.attrs.get("axes")
        if rest and rest[0] is not None and np.asarray(rest[0]).size:
            axes = _ints(rest[0])
        keep = bool(node.attrs.get("keepdims", 1))
        ax = None if axes is None else tuple(int(a) % x.ndim for a in axes)
        return [fn(x, axis=ax, keepdims=keep)]
    return run


def _global_max(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]


def _depth_to_space(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    b = int(node.attrs["blocksize"])
    n, c, h, w = x.shape
    mode = node.attrs.get("mode", "DCR")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


def _space_to_depth(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    b = int(node.attrs["blocksize"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return [y.reshape(n, c * b * b, h // b, w // b)]


def _window_partition(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    wh, ww = (int(v) for v in node.attrs["window_size"])
    B, H, W, C = x.shape
    y = x.reshape(B, H // wh, wh, W // ww, ww, C).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(program.shape(node.outputs[0]))]


def _window_reverse(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    wh, ww = (int(v) for v in node.attrs["window_size"])
    B, H, W, C = program.shape(node.outputs[0])
    y = x.reshape(B, H // wh, W // ww, wh, ww, C).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(B, H, W, C)]


def _roll(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    shifts = [int(s) for s in node.attrs["shifts"]]
    axes = [int(a) for a in node.attrs["axes"]]
    return [np.roll(x, shifts, axis=axes)]


def _resize(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    """Nearest Resize: every axis indexed by :func:`hbtool.kernels.resize.nearest_indices` (the ONNX rule)."""
    from hbtool.kernels.resize import axis_scales, nearest_indices

    if node.attr_text("mode", "nearest") != "nearest":
        raise ValueError(f"Resize {node.name}: only nearest Resize is data movement")
    scales = _const(program, node.inputs[2]) if len(node.inputs) > 2 else None
    out_shape = program.shape(node.outputs[0])
    per_axis = axis_scales(x.shape, out_shape, None if scales is None else np.asarray(scales).reshape(-1))
    coords = node.attr_text("coordinate_transformation_mode", "half_pixel")
    rounding = node.attr_text("nearest_mode", "round_prefer_floor")
    for axis, (n_in, n_out) in enumerate(zip(x.shape, out_shape)):
        idx = nearest_indices(int(n_in), int(n_out), per_axis[axis], coords, rounding)
        if n_in != n_out or np.any(idx != np.arange(n_in)):
            x = np.take(x, idx, axis=axis)
    return [x]


def _identity(node: Node, program: Graph, x: np.ndarray, *rest) -> list[np.ndarray]:
    return [x]


MOVEMENT: dict[str, Callable] = {
    "Reshape": _reshape_like, "Flatten": _reshape_like, "Squeeze": _reshape_like, "Unsqueeze": _reshape_like,
    "Transpose": _transpose, HZ_REARRANGE: _rearrange, "Slice": _slice, "Split": _split, "Concat": _concat,
    "Gather": _gather, "Expand": _expand, "Tile": _tile, "Pad": _pad,
    "ReduceMax": _reduce(np.max), "ReduceMin": _reduce(np.min), "GlobalMaxPool": _global_max,
    "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth,
    "WindowPartition": _window_partition, "WindowReverse": _window_reverse, "Roll": _roll,
    "Identity": _identity, HZ_REORDER: _identity, "Resize": _resize,
}

# ------------------------------------------------------------------------------ the op sets
# One definition of which ops are data movement, and the named subsets the stages differ by.
# Every stage that asks "does this op only move integers?" reads these; a new movement op is
# added to MOVEMENT (its exact numpy form) and every stage sees it.

#: every op that only moves integer codes (no arithmetic on them): each has its exact numpy form above
DATA_MOVEMENT_OPS: frozenset[str] = frozenset(MOVEMENT)
#: the data movement the compiler writes itself; the float and quantized models never hold these
COMPILER_MOVES: frozenset[str] = frozenset({HZ_REARRANGE, HZ_REORDER})
#: data movement only in its nearest mode: a linear Resize interpolates, an integer kernel
MODE_DEPENDENT_MOVES: frozenset[str] = frozenset({"Resize"})
#: movement that picks one value among several (max / min): the codes move, but not one to one
SELECTING_MOVES: frozenset[str] = frozenset({"ReduceMax", "ReduceMin", "GlobalMaxPool"})
#: a new shape over the same elements in the same order
RESHAPE_LIKE: frozenset[str] = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
#: the output holds exactly the input's values, each once, rearranged: its statistics are the input's
PERMUTATIONS: frozenset[str] = RESHAPE_LIKE | {"Transpose", "WindowPartition", "WindowReverse", "Roll", "Identity"}
#: every output element is a copy of one input element (or of a constant, for padding)
ELEMENT_COPIES: frozenset[str] = DATA_MOVEMENT_OPS - SELECTING_MOVES
