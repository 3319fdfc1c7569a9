"""Transposes in front of a matmul become the order in which the tensor unit reads its operand.

Attention computes ``Q @ K^T``: exported models transpose K (and split heads with more
transposes) before the MatMul. The tensor unit fetches operand tiles with strided addresses
anyway, so reading K in transposed order costs nothing, while a separate transpose is a full
pass of the data-movement unit through memory.
"""

from __future__ import annotations

from hbtool.compiler.passes.common import drop_node, is_bpu_move, sole_user, transpose_perm
from hbtool.ir.graph import Graph
from hbtool.ir.hz_ops import HZ_LINEAR, HZ_MATMUL

_TARGETS = (HZ_MATMUL, HZ_LINEAR)


def absorb_transpose_into_matmul(program: Graph) -> int:
    """Absorb a transpose into the matmul/linear that is its only reader (operand read order)."""
    count = 0
    changed = True
    while changed:
        changed = False
        consumers = program.consumer_map()
        for node in list(program.nodes):
            if not is_bpu_move(node, ("Transpose",)):
                continue
            user = sole_user(program, node.outputs[0], consumers)
            if user is None or user.op_type not in _TARGETS:
                continue
            idx = user.inputs.index(node.outputs[0])
            perms = dict(user.meta.get("in_perms") or {})
            if idx in perms:
                continue
            perms[idx] = transpose_perm(program, node)
            user.meta["in_perms"] = perms
            drop_node(program, node, node.inputs[0])
            count += 1
            changed = True
            break
    return count
