"""Split ``Gemm(A, B, C)`` whose ``C`` is an activation into ``Gemm(A, B) + C``.

ONNX lets Gemm's ``C`` be any tensor that broadcasts to the product, and onnxruntime's
MatMulAddFusion writes one where a MatMul's result is added to another branch: torch_geometric's
GraphSAGE ``lin_r(x) + lin_l(mean of the neighbours)`` became ``Gemm(x, W_r, C=lin_l(...))``.
The integer lowering takes a constant ``C`` as the layer's bias; an activation ``C`` was dropped
with the whole branch behind it (the deployed model ignored the graph's edges, cosine 0.65, and
said nothing). As a Gemm followed by an Add, each part has its integer kernel.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph


def split_gemm_activation_bias(graph: Graph) -> int:
    """Rewrite every Gemm with a non-constant ``C`` as Gemm (no ``C``) + Add (``C`` times ``beta``)."""
    count = 0
    for node in list(graph.nodes):
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 3:
            continue
        c = node.inputs[2]
        if not c or graph.is_const(c):
            continue
        y = node.outputs[0]
        shape, dtype = graph.shape(y), graph.dtype(y)
        product = graph.unique_name(f"{node.name}_product")
        graph.set_value(product, shape, dtype)
        node.inputs = node.inputs[:2]
        node.outputs = [product]
        index = graph.nodes.index(node) + 1
        beta = float(node.attr("beta", 1.0))
        if beta != 1.0:
            scaled = graph.add_node("Mul", [c, graph.add_const(np.asarray(beta, np.float32), hint="gemm_beta")], 1,
                                    name=f"{node.name}_beta", index=index)
            graph.set_value(scaled.outputs[0], graph.shape(c), graph.dtype(c))
            c, index = scaled.outputs[0], index + 1
            node.attrs.pop("beta", None)
        graph.add_node("Add", [product, c], [y], name=f"{node.name}_add_c", index=index)
        count += 1
    if count:
        graph.toposort()
    return count
