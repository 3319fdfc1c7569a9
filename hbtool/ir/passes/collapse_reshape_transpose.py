"""Simplify chains of layout ops so that later pattern matchers (and the BPU) see fewer of them.

* Squeeze / Unsqueeze / Flatten (static shapes) become Reshape to a constant shape.
* Reshape of a Reshape reads the first one's input (the first disappears when nobody else reads it).
* A Reshape to the shape it already has is removed.
* Transpose of a Transpose becomes one Transpose with the composed permutation, removed when
  that is the identity; an identity Transpose is removed.
* A Transpose that only moves size-1 axes is a Reshape.
* Identical Reshapes (same input, same shape) or Transposes (same input, same perm) become one.

Graph output names are kept: a node writing a graph output is only removed when its input can
take the name.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.patterns import remove_passthrough

_STD = ("", "ai.onnx")


def _std(node: Node, *ops: str) -> bool:
    return node.op_type in ops and node.domain in _STD


def _static(shape) -> bool:
    return shape is not None and all(int(d) > 0 for d in shape)


def _to_reshape(graph: Graph, node: Node) -> bool:
    """Turn Squeeze / Unsqueeze / Flatten with a static output shape into a Reshape."""
    out_shape = graph.shape(node.outputs[0])
    in_shape = graph.shape(node.inputs[0])
    if not _static(out_shape) or not _static(in_shape) or int(np.prod(out_shape)) != int(np.prod(in_shape)):
        return False
    if len(node.inputs) > 1 and node.inputs[1] and not graph.is_const(node.inputs[1]):
        return False
    shape = graph.add_const(np.asarray(out_shape, dtype=np.int64), hint=f"{node.name}_shape")
    node.op_type = "Reshape"
    node.inputs = [node.inputs[0], shape]
    node.attrs = {}
    return True


def _reshape_target_ok(graph: Graph, node: Node) -> bool:
    return _static(graph.shape(node.outputs[0])) and _static(graph.shape(node.inputs[0]))


def _const_shape(graph: Graph, node: Node) -> str:
    """Make the Reshape's shape input an explicit constant of its static output shape."""
    target = np.asarray(graph.shape(node.outputs[0]), dtype=np.int64)
    cur = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
    if cur is not None and cur.shape == target.shape and np.array_equal(cur, target):
        return node.inputs[1]
    return graph.add_const(target, hint=f"{node.name}_shape")


def _compose(p1: list[int], p2: list[int]) -> list[int]:
    """Permutation of ``transpose(transpose(x, p1), p2)``."""
    return [p1[i] for i in p2]


def _moves_only_unit_axes(perm: list[int], shape) -> bool:
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


def _dedup(graph: Graph) -> int:
    """Merge Reshapes (same target shape) / Transposes (same perm) that read the same tensor.

    onnxruntime's MatMul+Add fusion writes one input Reshape per Gemm, so the windows of a Swin
    block reach the q, k and v projections through three identical Reshapes.
    """
    seen: dict[tuple, Node] = {}
    dups: list[tuple[Node, Node]] = []
    for node in graph.nodes:
        if _std(node, "Reshape") and _static(graph.shape(node.outputs[0])):
            key = ("Reshape", node.inputs[0], tuple(graph.shape(node.outputs[0])))
        elif _std(node, "Transpose") and "perm" in node.attrs:
            key = ("Transpose", node.inputs[0], tuple(int(p) for p in node.attrs["perm"]))
        else:
            continue
        first = seen.setdefault(key, node)
        if first is not node and node.outputs[0] not in graph.outputs:
            dups.append((node, first))
    for dup, keep in dups:
        graph.nodes.remove(dup)
        graph.replace_uses(dup.outputs[0], keep.outputs[0])
    return len(dups)


def collapse_reshape_transpose(graph: Graph) -> int:
    """Collapse Reshape / Transpose / Squeeze / Unsqueeze / Flatten chains."""
    count = 0
    for node in list(graph.nodes):
        if node in graph.nodes and _std(node, "Squeeze", "Unsqueeze", "Flatten"):
            count += _to_reshape(graph, node)
    again = True
    while again:
        # sweep until nothing changes; in-place rewrites keep the producer map valid, a removed
        # node invalidates it and ends the sweep early
        again = False
        restart = False
        pm = graph.producer_map()
        for node in list(graph.nodes):
            if node not in graph.nodes:
                continue
            if _std(node, "Reshape") and _reshape_target_ok(graph, node):
                src = node.inputs[0]
                prev = pm.get(src)
                if graph.shape(src) == graph.shape(node.outputs[0]) and remove_passthrough(graph, node):
                    restart = True
                elif prev is not None and _std(prev, "Reshape") and _static(graph.shape(prev.inputs[0])):
                    node.inputs = [prev.inputs[0], _const_shape(graph, node)]
                    node.attrs.pop("allowzero", None)
                else:
                    continue
            elif _std(node, "Transpose"):
                shape = graph.shape(node.inputs[0])
                if shape is None:
                    continue
                rank = len(shape)
                perm = [int(p) for p in node.attrs.get("perm", list(range(rank))[::-1])]
                prev = pm.get(node.inputs[0])
                if perm == list(range(rank)):
                    if not remove_passthrough(graph, node):
                        continue
                    restart = True
                elif prev is not None and _std(prev, "Transpose") and "perm" in prev.attrs:
                    p1 = [int(p) for p in prev.attrs["perm"]]
                    node.inputs = [prev.inputs[0]]
                    node.attrs = {"perm": _compose(p1, perm)}
                elif _static(shape) and _moves_only_unit_axes(perm, shape) and _static(graph.shape(node.outputs[0])):
                    node.op_type = "Reshape"
                    node.attrs = {}
                    node.inputs = [node.inputs[0], graph.add_const(np.asarray(graph.shape(node.outputs[0]), dtype=np.int64), hint=f"{node.name}_shape")]
                else:
                    continue
            else:
                continue
            count += 1
            again = True
            if restart:
                break
        if again:
            graph.remove_unused()
    deduped = _dedup(graph)
    if deduped:
        graph.remove_unused()
    return count + deduped
