"""Fuse ``MatMul(x, W) + b`` with constant 2-D ``W`` and constant bias into one ``Linear``.

The bias may be stored as ``(N,)`` or with leading ones (``(1, N)``, ``(1, 1, N)``); it is
stored 1-D in the fused node. ``Linear(x, W, b)`` lives in the hbtool domain, its body is the
MatMul + Add. A MatMul without bias stays a MatMul; a Gemm stays a Gemm.
"""

from __future__ import annotations

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph
from hbtool.ir.patterns import fused_name, other_input, sole_consumer


def fuse_linear(graph: Graph) -> int:
    """Replace MatMul(const 2-D weight) + Add(const bias on the last axis) by ``Linear``."""
    count = 0
    for mm in list(graph.nodes):
        if mm not in graph.nodes or mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx"):
            continue
        x, w_name = mm.inputs
        w = graph.const(w_name)
        if w is None or w.ndim != 2 or graph.is_const(x):
            continue
        cm = graph.consumer_map()
        y = mm.outputs[0]
        add = sole_consumer(graph, cm, y)
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx") or add.inputs == [y, y]:
            continue
        b_name = other_input(add, y)
        b = graph.const(b_name)
        out_shape = graph.shape(y)
        if b is None or out_shape is None or b.dtype != w.dtype:
            continue
        n = w.shape[1]
        if b.size != n or b.ndim > max(len(out_shape), 1) or (b.ndim and b.shape[-1] != n) or graph.shape(add.outputs[0]) != out_shape:
            continue
        if b.ndim != 1:
            b_name = graph.add_const(b.reshape(n), hint=f"{b_name}_1d")
        add.inputs = [y, b_name]
        graph.fuse(
            [mm, add],
            "Linear",
            [x, w_name, b_name],
            [add.outputs[0]],
            domain=HBTOOL_DOMAIN,
            name=fused_name(graph, [mm, add], "Linear"),
            keep_body=True,
        )
        count += 1
    if count:
        graph.remove_unused()
    return count
