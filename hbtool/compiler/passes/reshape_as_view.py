"""Reshapes that keep the stored byte order are views: no data moves.

The BPU stores a tensor with its last axis innermost (channels of an NCHW feature map are
stored innermost, NHWC-style), padded to the unit's alignment. A reshape that keeps the
innermost axis (or whose innermost axes need no padding) and does not touch a channel-first
feature map leaves every byte where it is: the consumer reads the same memory with other
strides. Only the remaining reshapes cost a data-movement pass.
"""

from __future__ import annotations

import numpy as np

from hbtool.compiler.passes.common import RESHAPE_LIKE, is_bpu_move
from hbtool.ir.graph import Graph
from hbtool.ir.hz_ops import HZ_REARRANGE

INNER_ALIGN = 8


def _stored_as_rows(shape) -> bool:
    """Element order in memory equals the logical (row-major) order."""
    return len(shape) != 4 or int(np.prod(shape[2:])) == 1 or shape[1] == 1


def is_view(in_shape, out_shape) -> bool:
    if in_shape is None or out_shape is None or len(in_shape) == 0 or len(out_shape) == 0:
        return True
    if not (_stored_as_rows(in_shape) and _stored_as_rows(out_shape)):
        return False
    a, b = int(in_shape[-1]), int(out_shape[-1])
    return a == b or (a % INNER_ALIGN == 0 and b % INNER_ALIGN == 0)


def reshape_as_view(program: Graph) -> int:
    """Mark reshapes that keep the stored byte order as views (no data movement)."""
    count = 0
    for node in program.nodes:
        if is_bpu_move(node, RESHAPE_LIKE) or (node.op_type == HZ_REARRANGE and all(s[0] == "reshape" for s in node.attrs["steps"])):
            if is_view(program.shape(node.inputs[0]), program.shape(node.outputs[0])):
                node.meta["view"] = True
                count += 1
    return count
