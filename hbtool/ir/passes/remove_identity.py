"""Remove nodes that pass their input through unchanged, keeping the graph's output names.

Identity and inference-time Dropout, and what exports leave behind once shapes are fixed:
Pad with all-zero pads (Swin's pad-to-window-multiple when the map already is a multiple),
Slice that keeps everything (the matching crop), Cast to the type the tensor already has.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.patterns import ints, remove_passthrough


def _is_passthrough(graph: Graph, node: Node, used: set[str]) -> bool:
    if node.domain not in ("", "ai.onnx") or not node.inputs or not node.outputs:
        return False
    op = node.op_type
    if op == "Identity":
        return len(node.inputs) == 1 and len(node.outputs) == 1
    if op == "Dropout":
        # the mask output must be unused, and training_mode (input 2) absent or constant false
        if any(o in used for o in node.outputs[1:] if o):
            return False
        if len(node.inputs) > 2 and node.inputs[2]:
            flag = graph.const(node.inputs[2])
            if flag is None or bool(np.asarray(flag).reshape(-1)[0]):
                return False
        return True
    same_shape = graph.shape(node.inputs[0]) is not None and graph.shape(node.inputs[0]) == graph.shape(node.outputs[0])
    if op == "Pad":
        pads = ints(graph, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        return pads is not None and all(p == 0 for p in pads) and same_shape
    if op == "Slice":
        steps = ints(graph, node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else []
        if len(node.inputs) > 4 and node.inputs[4] and not graph.is_const(node.inputs[4]):
            return False
        return same_shape and all(s == 1 for s in steps)  # a reversing slice keeps the shape too
    if op == "Cast":
        dt = graph.dtype(node.inputs[0])
        return dt is not None and dt == graph.dtype(node.outputs[0]) and len(node.outputs) == 1
    return False


def remove_identity(graph: Graph) -> int:
    """Drop Identity / Dropout (inference) and no-op Pad / Slice / Cast; graph outputs keep their names."""
    count = 0
    for node in list(graph.nodes):
        used = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs) if node.op_type == "Dropout" else set()
        if not _is_passthrough(graph, node, used):
            continue
        if remove_passthrough(graph, node):
            count += 1
    if count:
        graph.remove_unused()
    return count
