"""Long reductions run on the tensor unit as a convolution with a ones kernel.

A mean (or sum) over C channels is a 1x1 convolution with weights 1 (the division is the
output requantization). The vector unit reduces a few lanes per cycle; the tensor unit does the same
sums at MAC-array rate. It pays once the reduction is long enough to amortise the tensor
unit's alignment padding.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph
from hbtool.kernels.units import TENSOR

MIN_COUNT = 16
#: the reductions a ones kernel computes (an L2 norm squares first: not a plain sum)
REDUCTIONS = ("mean", "sum")


def reduce_as_conv(program: Graph) -> int:
    """Run ReduceMean/ReduceSum/GlobalAveragePool reductions of at least 16 elements on the tensor unit."""
    count = 0
    for node in program.nodes:
        kernel = node.meta.get("kernel")
        if kernel is not None and kernel.reduction in REDUCTIONS and int(kernel.count) >= MIN_COUNT:
            node.meta["unit_override"] = TENSOR
            node.meta["as_conv"] = True
            count += 1
    return count
