"""The units that run a program node: the BPU's three kinds, and the CPU.

The J5-class BPU (see ``march/bayes.yaml``) has a tensor unit that multiplies (convolutions,
matmuls, linears), a vector unit for elementwise work, tables, reductions and the
LayerNorm/Softmax arithmetic, and a data-movement unit that rearranges bytes. Nodes left in
float run on the CPU (the A55 cluster), as do the quantize/dequantize at the model's boundary.
Each kernel class says which unit runs it (:attr:`hbtool.kernels.base.Kernel.unit`); the
compiler records it per node and the cost model prices each unit.
"""

from __future__ import annotations

TENSOR, VECTOR, DATA_MOVEMENT, CPU = "tensor", "vector", "data_movement", "cpu"
UNITS = (TENSOR, VECTOR, DATA_MOVEMENT, CPU)
