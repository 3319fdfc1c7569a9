"""Which unit of the BPU (or the CPU) runs each node of the integer program.

The units are those of :mod:`hbtool.kernels.units`; a kernel node runs on the unit its kernel
class names (``Kernel.unit``), a BPU node without a kernel is data movement, and the rest
(float subgraphs, the boundary quantize/dequantize) runs on the CPU.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph, Node
from hbtool.kernels.units import CPU, DATA_MOVEMENT, TENSOR, VECTOR

__all__ = ["CPU", "DATA_MOVEMENT", "TENSOR", "VECTOR", "assign_units", "unit_of"]


def unit_of(node: Node) -> str:
    """The unit of one program node: from its kernel, else data movement for BPU nodes, else CPU."""
    if node.meta.get("unit_override"):
        return node.meta["unit_override"]
    kernel = node.meta.get("kernel")
    if kernel is not None:
        return kernel.unit or (VECTOR if node.meta.get("on") == "BPU" else CPU)
    if node.meta.get("on") == "BPU":
        return DATA_MOVEMENT
    return CPU


def assign_units(program: Graph) -> None:
    for node in program.nodes:
        node.meta["unit"] = unit_of(node)
