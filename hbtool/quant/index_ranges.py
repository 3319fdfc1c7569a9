"""The valid range of an integer model input, read from the ops that use it as an index.

Why: generated data (``calibration_type: skip``, ``hbtool perf --fast``) must be data the model
accepts. A graph network's ``edge_index`` reaches a Gather of the node features and a
ScatterElements into the node table, often through Gather / Unsqueeze / Expand / Cast first; an
index past the table makes onnxruntime fail (it was an exit 3). The input is followed through ops
that only move or copy its values to every op that reads it as an index, and the smallest table
extent found bounds it. An integer input that reaches an index only through arithmetic (its
values are changed first) has no range hbtool can read: :class:`UnknownIndexRange` says so, and
the caller asks for calibration data.
"""

from __future__ import annotations

from typing import Any

# ops whose output holds (a selection or rearrangement of) the input's values, unchanged
_VALUE_PRESERVING = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Transpose", "Identity", "Slice",
                     "Concat", "Tile", "Split"}
# op -> (position of the index input, position of the indexed data input)
_INDEX_USES = {"Gather": (1, 0), "GatherElements": (1, 0), "ScatterElements": (1, 0), "Scatter": (1, 0),
               "GatherND": (1, 0), "ScatterND": (1, 0)}


class UnknownIndexRange(Exception):
    """An integer input used as an index after its values were changed: ``node`` is where the trail ends."""

    def __init__(self, node: str, op_type: str):
        super().__init__(node)
        self.node, self.op_type = node, op_type


def index_bound(graph: Any, name: str) -> int | None:
    """Exclusive upper bound of the values ``name`` may hold as an index; None when it indexes nothing.

    Raises :class:`UnknownIndexRange` when the input (or a copy of it) feeds an op that changes its
    values and that op's result is then used as an index, or when an indexed table has a dynamic extent.
    """
    consumers = graph.consumer_map()
    bound: int | None = None
    seen: set[str] = set()
    frontier = [name]
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        for node in consumers.get(t, []):
            positions = [k for k, i in enumerate(node.inputs) if i == t]
            if node.op_type in ("Shape", "Size"):   # reads the extent, not the values
                continue
            if node.op_type in _INDEX_USES and _INDEX_USES[node.op_type][0] in positions:
                size = _extent(graph, node)
                if size is None:
                    raise UnknownIndexRange(node.name, node.op_type)
                bound = size if bound is None else min(bound, size)
            if node.op_type in _VALUE_PRESERVING or (node.op_type in ("Gather", "GatherElements") and 0 in positions):
                frontier.extend(o for o in node.outputs if o)
            elif node.op_type == "OneHot" and 0 in positions:
                depth = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
                if depth is None:
                    raise UnknownIndexRange(node.name, node.op_type)
                bound = int(depth.reshape(-1)[0]) if bound is None else min(bound, int(depth.reshape(-1)[0]))
            elif node.op_type not in _INDEX_USES and _used_as_index(graph, node, consumers):
                raise UnknownIndexRange(node.name, node.op_type)
    return bound


def _extent(graph: Any, node: Any) -> int | None:
    """The indexed axis' size (for the ND forms, the smallest leading dimension)."""
    shape = graph.shape(node.inputs[_INDEX_USES[node.op_type][1]])
    if not shape:
        return None
    if node.op_type in ("GatherND", "ScatterND"):
        dims = [d for d in shape if isinstance(d, int)]
        return min(dims) if dims and len(dims) == len(shape) else None
    axis = int(node.attr("axis", 0))
    d = shape[axis]
    return int(d) if isinstance(d, int) and d > 0 else None


def _used_as_index(graph: Any, node: Any, consumers: dict) -> bool:
    """Whether any output of ``node`` (through value-preserving ops or further arithmetic) is read as an index."""
    frontier = [o for o in node.outputs if o]
    seen: set[str] = set()
    for _ in range(10_000):
        if not frontier:
            return False
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        for c in consumers.get(t, []):
            if c.op_type in _INDEX_USES and c.inputs[_INDEX_USES[c.op_type][0]] == t:
                return True
            if c.op_type == "OneHot" and c.inputs[0] == t:
                return True
            frontier.extend(o for o in c.outputs if o)
    return False
