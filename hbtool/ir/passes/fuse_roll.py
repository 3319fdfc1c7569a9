"""Fuse ``torch.roll`` exported as Slice + Slice + Concat into one ``Roll`` node.

One roll along axis ``a`` of size ``n`` by ``-k`` is ``Concat([x[k:n], x[0:k]], axis=a)`` with
``0 < k < n`` and step 1 (the exporter writes the two Slices in either graph order; the
starts/ends may be negative or clamped like INT64_MAX). Rolls that follow each other along
different axes, each reading only the previous one (a 2-D shift in Swin), merge into one node:
``Roll(shifts=[...], axes=[...])`` in the hbtool domain with the Slices and Concats as body.
Shifts follow torch's sign convention: ``out[i] = x[(i - shift) mod n]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.patterns import fused_name, ints, sole_consumer

_STD = ("", "ai.onnx")


@dataclass
class _Roll:
    x: str
    out: str
    axis: int
    shift: int
    nodes: list[Node]


def _slice_ranges(graph: Graph, node: Node) -> dict[int, tuple[int, int, int]] | None:
    """``{axis: (start, stop, step)}`` of a Slice with constant parameters, clamped to the input."""
    shape = graph.shape(node.inputs[0])
    if shape is None or len(node.inputs) < 3:
        return None
    starts = ints(graph, node.inputs[1])
    ends = ints(graph, node.inputs[2])
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    rank = len(shape)
    axes = ints(graph, node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else list(range(len(starts)))
    steps = ints(graph, node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else [1] * len(starts)
    if axes is None or steps is None or len(axes) != len(starts) or len(steps) != len(starts):
        return None
    out: dict[int, tuple[int, int, int]] = {}
    for a, s, e, st in zip(axes, starts, ends, steps):
        if a < -rank or a >= rank or st == 0:
            return None
        a = a + rank if a < 0 else a
        if a in out:
            return None
        n = shape[a]
        out[a] = slice(s, e, st).indices(n)
    return out


def _piece(graph: Graph, node: Node) -> tuple[str, int, int, int] | None:
    """A Slice that cuts one contiguous range of one axis: (input, axis, start, stop)."""
    if node.op_type != "Slice" or node.domain not in _STD:
        return None
    ranges = _slice_ranges(graph, node)
    shape = graph.shape(node.inputs[0])
    if ranges is None:
        return None
    cut = [(a, r) for a, r in ranges.items() if r != (0, shape[a], 1)]
    if len(cut) != 1:
        return None
    axis, (start, stop, step) = cut[0]
    if step != 1 or stop <= start:
        return None
    return node.inputs[0], axis, start, stop


def _single_roll(graph: Graph, cm, pm, concat: Node) -> _Roll | None:
    if concat.op_type != "Concat" or concat.domain not in _STD or len(concat.inputs) != 2:
        return None
    pieces = []
    for t in concat.inputs:
        sl = pm.get(t)
        if sl is None or sole_consumer(graph, cm, t) is not concat:
            return None
        p = _piece(graph, sl)
        if p is None:
            return None
        pieces.append((sl, p))
    (s0, (x0, a0, b0, e0)), (s1, (x1, a1, b1, e1)) = pieces
    shape = graph.shape(x0)
    if x0 != x1 or a0 != a1 or shape is None:
        return None
    rank = len(shape)
    axis = int(concat.attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    n = shape[axis]
    if axis != a0 or not (e0 == n and b1 == 0 and e1 == b0 and 0 < b0 < n):
        return None
    k = b0  # out[i] = x[(i + k) mod n]
    shift = -k if k <= n // 2 else n - k
    return _Roll(x0, concat.outputs[0], axis, shift, [s0, s1, concat])


def fuse_roll(graph: Graph) -> int:
    """Replace Slice/Slice/Concat rotations (and chains of them) by ``Roll``."""
    cm = graph.consumer_map()
    pm = graph.producer_map()
    rolls: dict[str, _Roll] = {}
    for node in graph.nodes:
        r = _single_roll(graph, cm, pm, node)
        if r is not None:
            rolls[r.out] = r
    # chain rolls: a roll whose input is the previous roll's output, read by nothing else
    by_input: dict[str, list[_Roll]] = {}
    for r in rolls.values():
        by_input.setdefault(r.x, []).append(r)
    assigned: set[int] = set()
    count = 0
    for head in list(rolls.values()):  # graph order: predecessors first
        if id(head) in assigned:
            continue
        chain = [head]
        assigned.add(id(head))
        while chain[-1].out not in graph.outputs:
            cands = by_input.get(chain[-1].out, [])
            if len(cands) != 1:
                break
            nxt = cands[0]
            users = cm.get(chain[-1].out, [])
            if id(nxt) in assigned or any(nxt.axis == c.axis for c in chain) or not all(any(u is n for n in nxt.nodes) for u in users):
                break
            chain.append(nxt)
            assigned.add(id(nxt))
        nodes = [n for r in chain for n in r.nodes]
        nodes = [n for n in graph.nodes if any(n is m for m in nodes)]
        graph.fuse(
            nodes,
            "Roll",
            [head.x],
            [chain[-1].out],
            attrs={"shifts": [r.shift for r in chain], "axes": [r.axis for r in chain]},
            domain=HBTOOL_DOMAIN,
            name=fused_name(graph, nodes, "Roll"),
            keep_body=True,
        )
        count += 1
    if count:
        graph.remove_unused()
    return count
