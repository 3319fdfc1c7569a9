"""Small helpers for writing pattern-matching passes over the IR.

The passes in ``hbtool.ir.passes`` match fixed sub-graphs by walking producers and consumers;
these helpers answer the questions every matcher asks: is this input a constant with this
value, which axes does a reduction use (attribute before opset 18, input from 18), is this
intermediate tensor read only inside the pattern, and what should the fused node be called.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from hbtool.ir.graph import Graph, Node

# ----------------------------------------------------------------------------- constants


def scalar(graph: Graph, name: str) -> float | None:
    """The value of a constant holding one element (any shape), else ``None``."""
    data = graph.const(name)
    if data is None or data.size != 1:
        return None
    try:
        return float(np.asarray(data).reshape(-1)[0])
    except (TypeError, ValueError):
        return None


def close(value: float | None, target: float, rtol: float = 1e-4, atol: float = 0.0) -> bool:
    """``value`` is a number within ``rtol`` (relative) or ``atol`` of ``target``."""
    if value is None or not np.isfinite(value):
        return False
    return abs(value - target) <= max(atol, rtol * abs(target))


def scalar_is(graph: Graph, name: str, target: float, rtol: float = 1e-4) -> bool:
    """``name`` is a one-element constant equal to ``target`` within ``rtol``."""
    return close(scalar(graph, name), target, rtol, atol=1e-12 if target == 0 else 0.0)


def ints(graph: Graph, name: str) -> list[int] | None:
    """The constant integer tensor ``name`` as a flat list, else ``None`` (also when omitted)."""
    data = graph.const(name)
    if data is None or not np.issubdtype(np.asarray(data).dtype, np.integer):
        return None
    return [int(v) for v in np.asarray(data).reshape(-1)]


def const_and_other(graph: Graph, node: Node) -> tuple[str, str] | None:
    """For a binary node with exactly one constant input: ``(constant, other)``."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if graph.is_const(b) and not graph.is_const(a):
        return b, a
    if graph.is_const(a) and not graph.is_const(b):
        return a, b
    return None


def other_input(node: Node, name: str) -> str | None:
    """The input of a binary node that is not ``name`` (``name`` itself for ``op(x, x)``)."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    a, b = node.inputs
    return b if a == name else a


# --------------------------------------------------------------------------------- axes


def normalize_axes(axes: Iterable[int], rank: int) -> list[int] | None:
    """Axes made non-negative and sorted; ``None`` when one is out of range or repeated."""
    out = []
    for a in axes:
        a = int(a)
        if a < -rank or a >= rank:
            return None
        out.append(a + rank if a < 0 else a)
    if len(set(out)) != len(out):
        return None
    return sorted(out)


def reduction_needs_transpose(shape: Sequence[int], axes: Iterable[int]) -> bool:
    """Whether reducing ``axes`` of ``shape`` needs a transpose to bring them together.

    Size-1 dimensions do not count (a reshape drops them for free), so a channels-last
    ``(1, 7, 7, 96)`` over ``[1, 2]`` and an NCHW ``(1, 96, 7, 7)`` over ``[2, 3]`` are both one
    contiguous run; ``(2, 3, 4, 5)`` over ``[1, 3]`` is not.
    """
    kept = [k for k in range(len(shape)) if int(shape[k]) != 1]
    reduced = [k for k, a in enumerate(kept) if a in set(int(x) for x in axes)]
    return bool(reduced) and reduced[-1] - reduced[0] + 1 != len(reduced)


def reduce_axes(graph: Graph, node: Node) -> list[int] | None:
    """The axes a Reduce* node reduces, non-negative and sorted, or ``None`` when unknown.

    Up to opset 17 (ReduceSum: 12) the axes are an attribute, from 18 an optional input; no axes
    means all axes unless ``noop_with_empty_axes`` is set (then the node reduces nothing, and
    this returns ``[]``).
    """
    shape = graph.shape(node.inputs[0]) if node.inputs else None
    if shape is None:
        return None
    rank = len(shape)
    if "axes" in node.attrs:
        axes = node.attrs["axes"]
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    elif len(node.inputs) > 1 and node.inputs[1]:
        axes = ints(graph, node.inputs[1])
        if axes is None:
            return None
    else:
        axes = []
    if not axes:
        if node.attrs.get("noop_with_empty_axes", 0):
            return []
        return list(range(rank))
    return normalize_axes(axes, rank)


def trailing_axes(axes: Sequence[int] | None, rank: int) -> int | None:
    """``k`` when ``axes`` are exactly the last ``k`` axes of a rank-``rank`` tensor, else ``None``."""
    if not axes:
        return None
    k = len(axes)
    return k if list(axes) == list(range(rank - k, rank)) else None


# -------------------------------------------------------------------------------- usage


def used_only_by(graph: Graph, consumers: dict[str, list[Node]], tensor: str, allowed: Iterable[Node]) -> bool:
    """``tensor`` is not a graph output and every node reading it is in ``allowed``."""
    if tensor in graph.outputs:
        return False
    ids = {id(n) for n in allowed}
    users = consumers.get(tensor, [])
    return bool(users) and all(id(n) in ids for n in users)


def sole_consumer(graph: Graph, consumers: dict[str, list[Node]], tensor: str) -> Node | None:
    """The one node reading ``tensor`` (possibly on several of its inputs), if it is not a graph output."""
    if tensor in graph.outputs:
        return None
    users = consumers.get(tensor, [])
    if not users:
        return None
    first = users[0]
    return first if all(n is first for n in users) else None


# -------------------------------------------------------------------------------- names


def fused_name(graph: Graph, nodes: Sequence[Node], label: str) -> str:
    """A name for the node replacing ``nodes``, recognisable to the user who named them.

    The common scope (``/blocks.0/norm1/``) of the matched names that have one, plus ``label``;
    without a shared scope, the last matched node's name. Never a name another node already has.
    """
    scoped = [n.name for n in nodes if "/" in n.name.strip("/")]
    scope = ""
    if scoped:
        parts = [s.split("/")[:-1] for s in scoped]
        common: list[str] = []
        for level in zip(*parts):
            if all(p == level[0] for p in level):
                common.append(level[0])
            else:
                break
        scope = "/".join(common)
    if scope.strip("/"):
        base = f"{scope}/{label}"
    else:
        base = nodes[-1].name
    matched = {id(n) for n in nodes}
    taken = {n.name for n in graph.nodes if id(n) not in matched}
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


# ---------------------------------------------------------------------- removing nodes


def remove_passthrough(graph: Graph, node: Node, src: str | None = None) -> bool:
    """Remove a node whose output equals ``src`` (default: its first input), keeping output names.

    When the node's output is a graph output and ``src`` cannot take its name (a graph input,
    a constant, another graph output), the node is kept and ``False`` returned.
    """
    src = node.inputs[0] if src is None else src
    dst = node.outputs[0]
    if dst in graph.outputs:
        if src in graph.inputs or graph.is_const(src) or src in graph.outputs:
            return False
        if graph.producer(src) is None:
            return False
        # ``bypass`` renames the producer's output to the graph output name
        if node.inputs[0] != src:
            node.inputs = [src] + node.inputs[1:]
        graph.bypass(node)
        return True
    graph.nodes.remove(node)
    graph.replace_uses(dst, src)
    return True


def flows_into(graph: Graph, tensor: str, op_type: str, through: set[str] | None = None, depth: int = 8,
               consumers: dict[str, list[Node]] | None = None) -> bool:
    """Whether ``tensor`` reaches an ``op_type`` node within ``depth`` hops.

    With ``through`` the path may only pass ops of those types (e.g. the reshapes and
    elementwise ops between attention scores and their Softmax).
    """
    consumers = consumers if consumers is not None else graph.consumer_map()
    frontier = [tensor]
    for _ in range(depth):
        nxt = []
        for t in frontier:
            for c in consumers.get(t, []):
                if c.op_type == op_type:
                    return True
                if through is None or c.op_type in through:
                    nxt.extend(o for o in c.outputs if o)
        frontier = nxt
        if not frontier:
            break
    return False
