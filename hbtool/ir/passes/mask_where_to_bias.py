"""Rewrite ``Where(mask, -inf, scores)`` before a Softmax as ``scores + Where(mask, -inf, 0)``.

Attention exporters mask logits by selection. Selection needs the boolean mask and the scores
in one op, so the scores leave the BPU for the CPU and come back: one CPU round trip per
attention layer. The additive form depends on the scores only through an Add: the bias
``Where(mask, -inf, 0)`` is computed from the integer mask on the CPU once, and the Add runs on
the BPU. After the softmax both forms give the same probabilities (a masked logit is -inf or
float-min either way; for a -1e4 mask it is -1e4 + score, whose exponent underflows just the same).
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph
from hbtool.ir.patterns import flows_into

MASK_LIKE = -1.0e4


_SCORE_PATH = {"Reshape", "Transpose", "Add", "Sub", "Div", "Mul", "Where", "Cast"}


def mask_where_to_bias(graph: Graph) -> int:
    """``Where(c, M, x)`` with a mask-like constant M feeding a Softmax -> ``x + Where(c, M, 0)``."""
    consumers = graph.consumer_map()
    count = 0
    for node in list(graph.nodes):
        if node.op_type != "Where" or len(node.inputs) != 3:
            continue
        cond, a, b = node.inputs
        ca, cb = graph.const(a), graph.const(b)
        if ca is not None and cb is None:
            const, data, const_is_true_branch = ca, b, True
        elif cb is not None and ca is None:
            const, data, const_is_true_branch = cb, a, False
        else:
            continue
        if not np.issubdtype(const.dtype, np.floating) or const.size != 1 or float(const.reshape(-1)[0]) > MASK_LIKE:
            continue
        if graph.dtype(data) is None or not np.issubdtype(graph.dtype(data), np.floating):
            continue
        if graph.shape(data) != graph.shape(node.outputs[0]) or not flows_into(graph, node.outputs[0], "Softmax", _SCORE_PATH, 6, consumers):
            continue
        zero = graph.add_const(np.zeros((), const.dtype), hint="mask_zero")
        bias = graph.unique_name(f"{node.name}_bias")
        graph.set_value(bias, graph.shape(cond), const.dtype)
        inputs = [cond, a, zero] if const_is_true_branch else [cond, zero, b]
        idx = graph.nodes.index(node)
        graph.add_node("Where", inputs, [bias], name=f"{node.name}_bias", index=idx)
        node.op_type = "Add"
        node.inputs = [data, bias]
        node.attrs = {}
        count += 1
    if count:
        graph.toposort()
    return count
