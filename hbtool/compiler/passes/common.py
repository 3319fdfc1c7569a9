"""Small helpers the program passes share."""

from __future__ import annotations

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.kernels.movement import RESHAPE_LIKE


def is_bpu_move(node: Node, op_types: set[str] | tuple[str, ...]) -> bool:
    """A data-movement node of the BPU with one of ``op_types`` (standard or hbtool domain)."""
    return node.op_type in op_types and node.meta.get("on") == "BPU" and "kernel" not in node.meta


def sole_user(program: Graph, tensor: str, consumers: dict[str, list[Node]]) -> Node | None:
    """The only node reading ``tensor``, if it is not also a model output."""
    users = consumers.get(tensor, [])
    if len(users) != 1 or tensor in program.outputs:
        return None
    return users[0]


def transpose_perm(program: Graph, node: Node) -> list[int]:
    perm = node.attrs.get("perm")
    if perm is None:
        rank = len(program.shape(node.inputs[0]) or ())
        perm = list(range(rank))[::-1]
    return [int(p) for p in perm]


def drop_node(program: Graph, node: Node, replacement: str) -> None:
    """Remove a single-output node; its readers read ``replacement`` instead."""
    out = node.outputs[0]
    program.nodes.remove(node)
    for n in program.nodes:
        n.inputs = [replacement if i == out else i for i in n.inputs]
    if out in program.outputs:
        program.outputs = [replacement if o == out else o for o in program.outputs]


__all__ = ["HBTOOL_DOMAIN", "RESHAPE_LIKE", "drop_node", "is_bpu_move", "sole_user", "transpose_perm"]
