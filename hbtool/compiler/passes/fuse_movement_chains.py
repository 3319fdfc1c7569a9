"""Consecutive reshapes and transposes become one rearrange.

Exports split and merge heads with chains like Reshape -> Transpose -> Reshape. Each step
executed alone is a pass through memory; the chain is one permutation of the elements, which
the data-movement unit performs in one pass (``HzRearrange`` with the chain's steps).
"""

from __future__ import annotations

from hbtool.compiler.passes.common import RESHAPE_LIKE, is_bpu_move, sole_user, transpose_perm
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.hz_ops import HZ_REARRANGE

_CHAINABLE = RESHAPE_LIKE | {"Transpose", HZ_REARRANGE}


def _steps(program: Graph, node: Node) -> list[list]:
    if node.op_type == HZ_REARRANGE:
        return [list(s) for s in node.attrs["steps"]]
    if node.op_type == "Transpose":
        return [["transpose", transpose_perm(program, node)]]
    return [["reshape", [int(d) for d in program.shape(node.outputs[0])]]]


def fuse_movement_chains(program: Graph) -> int:
    """Fuse chains of reshape/transpose (single reader each) into one HzRearrange."""
    count = 0
    changed = True
    while changed:
        changed = False
        consumers = program.consumer_map()
        for node in program.nodes:
            if not is_bpu_move(node, _CHAINABLE):
                continue
            nxt = sole_user(program, node.outputs[0], consumers)
            if nxt is None or not is_bpu_move(nxt, _CHAINABLE):
                continue
            steps = _steps(program, node) + _steps(program, nxt)
            idx = program.nodes.index(node)
            program.nodes.remove(node)
            program.nodes.remove(nxt)
            program.values.pop(node.outputs[0], None)
            new = Node(nxt.name, HZ_REARRANGE, [node.inputs[0]], [nxt.outputs[0]], {"steps": steps}, HBTOOL_DOMAIN)
            new.meta.update(on="BPU", subgraph=node.meta.get("subgraph"))
            program.nodes.insert(idx, new)
            count += 1
            changed = True
            break
    return count
