"""Remove ``Where(IsNaN(x), c, x)`` guards.

Exporters of attention (transformers' SDPA path, for one) wrap the softmax in a guard that
turns the NaN of a fully masked row into a constant. On the BPU nothing is NaN: every tensor is
an integer, and a fully masked row of the integer softmax is finite. The guard is therefore an
identity on the accelerator, while left in place it is a boolean op that forces a CPU round trip
in every attention layer. For finite float inputs it is an identity too, so the optimized float
model still matches the original.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph
from hbtool.ir.patterns import remove_passthrough


def remove_nan_guards(graph: Graph) -> int:
    """Replace ``Where(IsNaN(x), c, x)`` by ``x``."""
    producers = graph.producer_map()
    count = 0
    for node in list(graph.nodes):
        if node.op_type != "Where" or len(node.inputs) != 3:
            continue
        cond, _, value = node.inputs
        guard = producers.get(cond)
        if guard is None or guard.op_type != "IsNaN" or guard.inputs[0] != value:
            continue
        if graph.shape(value) != graph.shape(node.outputs[0]):
            continue
        if remove_passthrough(graph, node, src=value):
            count += 1
    if count:
        graph.remove_unused()
    return count
