"""Window partition, window reverse and roll: one data-movement op each, or their primitive chains.

Swin's window partition is Reshape -> Transpose -> Reshape and its cyclic shift is two
Slices and a Concat per axis. Executed as written, each step is a separate pass over the
tensor through memory; as one op the data-movement unit reads each element once and writes
it to its final place. The float optimizer already fused them (``ir.passes.fuse_window_ops``,
``fuse_roll``); at O0 the compiler expands them back, which is what a compiler without the
transformer passes executes.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node

WINDOW_OPS = ("WindowPartition", "WindowReverse", "Roll")


def window_ops_as_one(program: Graph) -> int:
    """Keep window partition, window reverse and roll as one data-movement op each."""
    return sum(1 for n in program.nodes if n.op_type in WINDOW_OPS and n.meta.get("on") == "BPU")


def _add(program: Graph, node: Node, op: str, inputs: list[str], out_shape, attrs=None, out: str | None = None) -> str:
    name = out or program.unique_name(f"{node.name}_{op.lower()}")
    if out is None:
        program.set_value(name, tuple(int(d) for d in out_shape), np.float64)
    new = program.add_node(op, inputs, [name], attrs or {}, name=program.unique_name(f"{node.name}/{op}"), index=program.nodes.index(node))
    new.meta.update(on="BPU", subgraph=node.meta.get("subgraph"), expanded_from=node.op_type)
    return name


def _shape_const(program: Graph, shape) -> str:
    return program.add_const(np.asarray(shape, np.int64), hint="shape")


def _expand_window(program: Graph, node: Node) -> None:
    x, y = node.inputs[0], node.outputs[0]
    wh, ww = (int(v) for v in node.attrs["window_size"])
    if node.op_type == "WindowPartition":
        B, H, W, C = program.shape(x)
        six, perm = (B, H // wh, wh, W // ww, ww, C), [0, 1, 3, 2, 4, 5]
    else:
        B, H, W, C = program.shape(y)
        six, perm = (B, H // wh, W // ww, wh, ww, C), [0, 1, 3, 2, 4, 5]
    t1 = _add(program, node, "Reshape", [x, _shape_const(program, six)], six)
    t2 = _add(program, node, "Transpose", [t1], [six[p] for p in perm], {"perm": perm})
    _add(program, node, "Reshape", [t2, _shape_const(program, program.shape(y))], None, out=y)


def _expand_roll(program: Graph, node: Node) -> None:
    cur = node.inputs[0]
    shape = list(program.shape(cur))
    pairs = list(zip(node.attrs["shifts"], node.attrs["axes"]))
    for k, (shift, axis) in enumerate(pairs):
        axis = int(axis) % len(shape)
        n = shape[axis]
        s = int(shift) % n
        last = k == len(pairs) - 1
        if s == 0:
            if last:
                _add(program, node, "Identity", [cur], None, out=node.outputs[0])
            continue
        # out[i] = x[(i - s) mod n]: x[n-s:] then x[:n-s]
        head_shape = shape[:axis] + [s] + shape[axis + 1:]
        tail_shape = shape[:axis] + [n - s] + shape[axis + 1:]
        ax = program.add_const(np.asarray([axis], np.int64), hint="axes")
        a = _add(program, node, "Slice", [cur, program.add_const(np.asarray([n - s], np.int64), hint="starts"),
                                          program.add_const(np.asarray([n], np.int64), hint="ends"), ax], head_shape)
        b = _add(program, node, "Slice", [cur, program.add_const(np.asarray([0], np.int64), hint="starts"),
                                          program.add_const(np.asarray([n - s], np.int64), hint="ends"), ax], tail_shape)
        cur = _add(program, node, "Concat", [a, b], shape, {"axis": axis}, out=node.outputs[0] if last else None)


def expand_window_ops(program: Graph) -> int:
    """(O0) Expand window partition/reverse and roll into their reshape/transpose/slice/concat chains."""
    count = 0
    for node in [n for n in program.nodes if n.op_type in WINDOW_OPS and n.meta.get("on") == "BPU" and "kernel" not in n.meta]:
        if node.op_type == "Roll":
            _expand_roll(program, node)
        else:
            _expand_window(program, node)
        program.nodes.remove(node)
        count += 1
    return count
