"""Multiply-accumulate counts: one definition per kind of product, from static shapes.

The checker and calibration count a float node (:func:`node_macs`), the compiler records an
integer kernel's count in the program (``Kernel.macs``), and the cost model prices the array by
it; all three count with the functions below, so the three numbers cannot drift.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from hbtool.ir.graph import Graph, Node


def _prod(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def conv_macs(out_shape: Sequence[int], weight_shape: Sequence[int]) -> int:
    """A convolution: every output element is a dot product over ``Cin/group x prod(k)`` (weight ``[Cout, Cin/group, *k]``)."""
    return _prod(out_shape) * _prod(weight_shape[1:])


def conv_transpose_macs(in_shape: Sequence[int], weight_shape: Sequence[int]) -> int:
    """A transposed convolution: every input sample meets ``Cout/group x prod(k)`` weights (weight ``[Cin, Cout/group, *k]``)."""
    return _prod(in_shape) * _prod(weight_shape[1:])


def matmul_macs(out_shape: Sequence[int], k: int) -> int:
    """A matrix product (MatMul, Linear, Gemm): every output element is a dot product of length ``k``."""
    return _prod(out_shape) * int(k)


def node_macs(node: Node, graph: Graph) -> int:
    """MACs of one inference of ``node``; 0 for ops without multiply-accumulate work."""
    out = graph.shape(node.outputs[0]) if node.outputs else None
    if out is None:
        return 0
    if node.op_type == "Conv":
        w = graph.shape(node.inputs[1])
        return 0 if w is None else conv_macs(out, w)
    if node.op_type == "ConvTranspose":
        w = graph.shape(node.inputs[1])
        x = graph.shape(node.inputs[0])
        return 0 if w is None or x is None else conv_transpose_macs(x, w)
    if node.op_type in ("MatMul", "Linear"):
        a = graph.shape(node.inputs[0])
        return 0 if a is None else matmul_macs(out, a[-1])
    if node.op_type == "Gemm":
        a = graph.shape(node.inputs[0])
        if a is None:
            return 0
        return matmul_macs(out, a[0] if node.attr("transA", 0) else a[-1])
    return 0
