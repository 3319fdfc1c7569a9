"""Multiply-accumulate counts per node, from static shapes (used by checker and perf)."""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node


def node_macs(node: Node, graph: Graph) -> int:
    """MACs of one inference of ``node``; 0 for ops without multiply-accumulate work."""
    out = graph.shape(node.outputs[0]) if node.outputs else None
    if out is None:
        return 0
    out_elems = int(np.prod(out, dtype=np.int64))
    if node.op_type == "Conv":
        w = graph.shape(node.inputs[1])
        if w is None:
            return 0
        return out_elems * int(np.prod(w[1:], dtype=np.int64))
    if node.op_type == "ConvTranspose":
        w = graph.shape(node.inputs[1])
        x = graph.shape(node.inputs[0])
        if w is None or x is None:
            return 0
        group = int(node.attr("group", 1))
        return int(np.prod(x, dtype=np.int64)) * (w[1] * group // group) * int(np.prod(w[2:], dtype=np.int64))
    if node.op_type in ("MatMul", "Linear"):
        a = graph.shape(node.inputs[0])
        if a is None:
            return 0
        return out_elems * int(a[-1])
    if node.op_type == "Gemm":
        a = graph.shape(node.inputs[0])
        if a is None:
            return 0
        k = a[0] if node.attr("transA", 0) else a[-1]
        return out_elems * int(k)
    return 0
