"""Fuse GELU written out in elementary ops into one ``Gelu`` node.

Erf form (torch's exporters, Paddle2ONNX)::

    a = Add(Erf(Div(x, 1.41421) | Mul(x, 0.70711)), 1)
    y = x * 0.5 * a        # any association: Mul(Mul(x, a), 0.5), Mul(x, Mul(a, 0.5)),
                           # Mul(Mul(x, 0.5), a); Div by 2 instead of Mul by 0.5

Tanh form (``approximate='tanh'``, "gelu_new")::

    c = x^3                # Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x)
    a = Add(Tanh(Mul(Add(x, Mul(c, 0.044715)), 0.79788)), 1)
    y = x * 0.5 * a        # as above

Result: ``Gelu(x, approximate="none"|"tanh")``; the standard ONNX op when the graph's opset is
20 or more, else an hbtool-domain op whose body is the matched sub-graph.
"""

from __future__ import annotations

import math

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.patterns import fused_name, other_input, scalar_is, sole_consumer, used_only_by

_STD = ("", "ai.onnx")
SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715


def _is(node: Node | None, *ops: str) -> bool:
    return node is not None and node.op_type in ops and node.domain in _STD


def _mul_by(graph: Graph, node: Node | None, x: str, value: float) -> bool:
    """``node`` is ``Mul(x, value)`` (either order) or ``Div(x, 1 / value)``."""
    if _is(node, "Mul") and x in node.inputs:
        return scalar_is(graph, other_input(node, x), value)
    if _is(node, "Div") and node.inputs[0] == x:
        return scalar_is(graph, node.inputs[1], 1.0 / value)
    return False


def _plus_one(graph: Graph, cm, t: str) -> Node | None:
    add = sole_consumer(graph, cm, t)
    if _is(add, "Add") and t in add.inputs and scalar_is(graph, other_input(add, t), 1.0):
        return add
    return None


def _half_x_times(graph: Graph, cm, pm, x: str, a: str) -> tuple[list[Node], str] | None:
    """``x * 0.5 * a`` in any association, starting from ``a``: (nodes, output)."""
    m1 = sole_consumer(graph, cm, a)
    if not _is(m1, "Mul") or a not in m1.inputs or m1.inputs == [a, a]:
        return None
    other = other_input(m1, a)
    if other == x:
        m2 = sole_consumer(graph, cm, m1.outputs[0])
        if m2 is not None and _mul_by(graph, m2, m1.outputs[0], 0.5):
            return [m1, m2], m2.outputs[0]
        return None
    if scalar_is(graph, other, 0.5):
        m2 = sole_consumer(graph, cm, m1.outputs[0])
        if _is(m2, "Mul") and other_input(m2, m1.outputs[0]) == x:
            return [m1, m2], m2.outputs[0]
        return None
    h = pm.get(other)
    if h is not None and _mul_by(graph, h, x, 0.5) and sole_consumer(graph, cm, other) is m1:
        return [h, m1], m1.outputs[0]
    return None


def _match_erf(graph: Graph, cm, pm, erf: Node):
    scaled = erf.inputs[0]
    d = pm.get(scaled)
    if d is None or sole_consumer(graph, cm, scaled) is not erf:
        return None
    x = None
    for cand in d.inputs:
        if not graph.is_const(cand) and _mul_by(graph, d, cand, 1.0 / SQRT2):
            x = cand
    if x is None:
        return None
    add = _plus_one(graph, cm, erf.outputs[0])
    if add is None:
        return None
    tail = _half_x_times(graph, cm, pm, x, add.outputs[0])
    if tail is None:
        return None
    return [d, erf, add, *tail[0]], x, tail[1]


def _cube(graph: Graph, cm, pm, c: str) -> tuple[list[Node], str] | None:
    """``c`` = x^3: (nodes, x)."""
    p = pm.get(c)
    if _is(p, "Pow") and scalar_is(graph, p.inputs[1], 3.0):
        return [p], p.inputs[0]
    if _is(p, "Mul"):
        a, b = p.inputs
        for sq_name, x in ((a, b), (b, a)):
            sq = pm.get(sq_name)
            if _is(sq, "Mul") and sq.inputs == [x, x] and sole_consumer(graph, cm, sq_name) is p:
                return [sq, p], x
    return None


def _match_tanh(graph: Graph, cm, pm, tanh: Node):
    k = pm.get(tanh.inputs[0])
    if not _is(k, "Mul") or sole_consumer(graph, cm, tanh.inputs[0]) is not tanh:
        return None
    for s_name in k.inputs:
        if _mul_by(graph, k, s_name, SQRT_2_OVER_PI) and not graph.is_const(s_name):
            break
    else:
        return None
    s = pm.get(s_name)
    if not _is(s, "Add") or sole_consumer(graph, cm, s_name) is not k:
        return None
    for c_name in s.inputs:
        cm_node = pm.get(c_name)
        if cm_node is None or sole_consumer(graph, cm, c_name) is not s or not _is(cm_node, "Mul"):
            continue
        for cube_name in cm_node.inputs:
            if graph.is_const(cube_name) or not _mul_by(graph, cm_node, cube_name, GELU_CUBIC):
                continue
            cube = _cube(graph, cm, pm, cube_name)
            if cube is None or sole_consumer(graph, cm, cube_name) is not cm_node:
                continue
            cube_nodes, x = cube
            if other_input(s, c_name) != x:
                continue
            add = _plus_one(graph, cm, tanh.outputs[0])
            if add is None:
                return None
            tail = _half_x_times(graph, cm, pm, x, add.outputs[0])
            if tail is None:
                return None
            return [*cube_nodes, cm_node, s, k, tanh, add, *tail[0]], x, tail[1]
    return None


def fuse_gelu(graph: Graph) -> int:
    """Replace Erf- and Tanh-form GELU sub-graphs by ``Gelu``."""
    count = 0
    standard = graph.opset >= 20
    for node in list(graph.nodes):
        if node not in graph.nodes or not _is(node, "Erf", "Tanh"):
            continue
        cm = graph.consumer_map()
        pm = graph.producer_map()
        if node.op_type == "Erf":
            m, approximate = _match_erf(graph, cm, pm, node), "none"
        else:
            m, approximate = _match_tanh(graph, cm, pm, node), "tanh"
        if m is None:
            continue
        nodes, x, out = m
        if not all(used_only_by(graph, cm, o, nodes) for n in nodes for o in n.outputs if o != out):
            continue
        nodes = [n for n in graph.nodes if any(n is m_ for m_ in nodes)]  # graph order
        graph.fuse(
            nodes,
            "Gelu",
            [x],
            [out],
            attrs={"approximate": approximate},
            domain="" if standard else HBTOOL_DOMAIN,
            name=fused_name(graph, nodes, "Gelu"),
            keep_body=not standard,
        )
        count += 1
    if count:
        graph.remove_unused()
    return count
