"""Which unit of the BPU (or the CPU) runs each node of the integer program.

The J5 BPU has three kinds of units (see ``march/bayes.yaml``): the tensor unit multiplies
(convolutions, matmuls, linears), the vector unit does elementwise work, tables, reductions
and the LayerNorm/Softmax arithmetic, and the data-movement unit rearranges bytes. Nodes
left in float run on the CPU (the A55 cluster); the quantize/dequantize at the model's
boundary also run there.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph, Node

TENSOR, VECTOR, DATA_MOVEMENT, CPU = "tensor", "vector", "data_movement", "cpu"

_KERNEL_UNIT = {
    "Conv": TENSOR, "ConvTranspose": TENSOR, "Linear": TENSOR, "MatMul": TENSOR, "Log2MatMul": TENSOR,
    "Add": VECTOR, "Mul": VECTOR, "Lut": VECTOR, "Softmax": VECTOR, "LayerNorm": VECTOR,
    "AvgPool": VECTOR, "ReduceMean": VECTOR, "ReduceSum": VECTOR, "MaxPool": VECTOR, "Requantize": VECTOR,
    "BilinearResize": VECTOR, "Div": VECTOR, "ReduceL2": VECTOR, "InputConvert": VECTOR,
    "Quantize": CPU, "Dequantize": CPU,
}


def unit_of(node: Node) -> str:
    """The unit of one program node: from its kernel, else data movement for BPU nodes, else CPU."""
    if node.meta.get("unit_override"):
        return node.meta["unit_override"]
    kernel = node.meta.get("kernel")
    if kernel is not None:
        return _KERNEL_UNIT.get(type(kernel).__name__, VECTOR if node.meta.get("on") == "BPU" else CPU)
    if node.meta.get("on") == "BPU":
        return DATA_MOVEMENT
    return CPU


def assign_units(program: Graph) -> None:
    for node in program.nodes:
        node.meta["unit"] = unit_of(node)
