"""Remove Identity and inference-time Dropout nodes, keeping the graph's output names."""

from __future__ import annotations

from hbtool.ir.graph import Graph
from hbtool.ir.patterns import remove_passthrough


def _is_passthrough(graph: Graph, node) -> bool:
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Identity":
        return len(node.inputs) == 1 and len(node.outputs) == 1
    if node.op_type == "Dropout":
        # the mask output must be unused, and training_mode (input 2) absent or constant false
        if len(node.outputs) > 1 and any(node.outputs[1:]):
            users = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs)
            if any(o in users for o in node.outputs[1:] if o):
                return False
        if len(node.inputs) > 2 and node.inputs[2]:
            flag = graph.const(node.inputs[2])
            if flag is None or bool(flag.reshape(-1)[0]):
                return False
        return True
    return False


def remove_identity(graph: Graph) -> int:
    """Drop Identity / Dropout (inference) nodes; a graph output keeps its name."""
    count = 0
    for node in list(graph.nodes):
        if not _is_passthrough(graph, node):
            continue
        if remove_passthrough(graph, node):
            node.outputs = node.outputs[:1]
            count += 1
    if count:
        graph.remove_unused()
    return count
