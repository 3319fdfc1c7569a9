"""Fuse hard-sigmoid, hard-swish and swish written out in elementary ops.

* ``Clip(x + 3, 0, 6) / 6`` (or ``* 1/6``; Clip as ReLU6 with min/max inputs) ->
  ``HardSigmoid(alpha=1/6, beta=0.5)``; ``Clip(x * a + b, 0, 1)`` -> ``HardSigmoid(a, b)``.
* ``x * HardSigmoid(x)`` with alpha 1/6, beta 0.5 (also what the previous rewrite made), and
  the raw ``x * Clip(x + 3, 0, 6) / 6`` -> ``HardSwish``.
* ``x * Sigmoid(x)`` -> ``Swish`` (hbtool domain, body kept).

``Clip(x, 0, 6)`` alone is ReLU6 and stays a Clip.
"""

from __future__ import annotations

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.patterns import close, const_and_other, fused_name, other_input, scalar, scalar_is, sole_consumer, used_only_by

_STD = ("", "ai.onnx")
SIXTH = 1.0 / 6.0


def _is(node: Node | None, *ops: str) -> bool:
    return node is not None and node.op_type in ops and node.domain in _STD


def _clip_bounds(graph: Graph, clip: Node) -> tuple[float, float] | None:
    if "min" in clip.attrs or "max" in clip.attrs:  # opset < 11 form, in case it survived
        return float(clip.attrs.get("min", float("-inf"))), float(clip.attrs.get("max", float("inf")))
    lo = scalar(graph, clip.inputs[1]) if len(clip.inputs) > 1 and clip.inputs[1] else float("-inf")
    hi = scalar(graph, clip.inputs[2]) if len(clip.inputs) > 2 and clip.inputs[2] else float("inf")
    if lo is None or hi is None:
        return None
    return lo, hi


def _div_by_six(graph: Graph, node: Node | None, t: str) -> bool:
    """``node`` is ``t / 6`` or ``t * (1/6)``."""
    if _is(node, "Div") and node.inputs[0] == t:
        return scalar_is(graph, node.inputs[1], 6.0)
    if _is(node, "Mul") and t in node.inputs and node.inputs != [t, t]:
        return scalar_is(graph, other_input(node, t), SIXTH)
    return False


def _fuse(graph: Graph, nodes: list[Node], op: str, x: str, out: str, attrs=None, label=None) -> bool:
    cm = graph.consumer_map()
    for n in nodes:
        for o in n.outputs:
            if o != out and not used_only_by(graph, cm, o, nodes):
                return False
    std = op in ("HardSigmoid", "HardSwish")
    nodes = [n for n in graph.nodes if any(n is m for m in nodes)]
    graph.fuse(
        nodes,
        op,
        [x],
        [out],
        attrs=attrs or {},
        domain="" if std else HBTOOL_DOMAIN,
        name=fused_name(graph, nodes, label or op),
        keep_body=not std,
    )
    return True


def _clip_forms(graph: Graph) -> int:
    count = 0
    for clip in list(graph.nodes):
        if clip not in graph.nodes or not _is(clip, "Clip"):
            continue
        bounds = _clip_bounds(graph, clip)
        if bounds is None:
            continue
        cm = graph.consumer_map()
        pm = graph.producer_map()
        lo, hi = bounds
        c_out = clip.outputs[0]
        pre = pm.get(clip.inputs[0])
        if pre is None or not _is(pre, "Add") or sole_consumer(graph, cm, clip.inputs[0]) is not clip:
            continue
        ca = const_and_other(graph, pre)
        if ca is None:
            continue
        offset, x = scalar(graph, ca[0]), ca[1]
        if offset is None:
            continue
        if close(lo, 0.0, atol=1e-12) and close(hi, 6.0) and close(offset, 3.0):
            nxt = sole_consumer(graph, cm, c_out)
            if _div_by_six(graph, nxt, c_out):
                count += _fuse(graph, [pre, clip, nxt], "HardSigmoid", x, nxt.outputs[0], {"alpha": SIXTH, "beta": 0.5})
            elif _is(nxt, "Mul") and other_input(nxt, c_out) == x:
                last = sole_consumer(graph, cm, nxt.outputs[0])
                if _div_by_six(graph, last, nxt.outputs[0]):
                    count += _fuse(graph, [pre, clip, nxt, last], "HardSwish", x, last.outputs[0])
        elif close(lo, 0.0, atol=1e-12) and close(hi, 1.0):
            # Clip(x * alpha + beta, 0, 1): Keras / TF hard_sigmoid
            mul = pm.get(x)
            if not _is(mul, "Mul") or sole_consumer(graph, cm, x) is not pre:
                continue
            ma = const_and_other(graph, mul)
            alpha = scalar(graph, ma[0]) if ma else None
            if alpha is None or alpha == 0.0:
                continue
            count += _fuse(graph, [mul, pre, clip], "HardSigmoid", ma[1], c_out, {"alpha": alpha, "beta": offset})
    return count


def _times_x(graph: Graph, ops: tuple[str, ...], check, out_op: str) -> int:
    """``Mul(x, F(x))`` where F is a single node of ``ops`` accepted by ``check``."""
    count = 0
    for f in list(graph.nodes):
        if f not in graph.nodes or not _is(f, *ops) or not check(f):
            continue
        cm = graph.consumer_map()
        x = f.inputs[0]
        mul = sole_consumer(graph, cm, f.outputs[0])
        if _is(mul, "Mul") and other_input(mul, f.outputs[0]) == x and mul.inputs != [x, x]:
            count += _fuse(graph, [f, mul], out_op, x, mul.outputs[0])
    return count


def fuse_activations(graph: Graph) -> int:
    """HardSigmoid / HardSwish / Swish from their decompositions."""
    count = _clip_forms(graph)
    count += _times_x(
        graph,
        ("HardSigmoid",),
        lambda n: close(float(n.attrs.get("alpha", 0.2)), SIXTH) and close(float(n.attrs.get("beta", 0.5)), 0.5),
        "HardSwish",
    )
    count += _times_x(graph, ("Sigmoid",), lambda n: True, "Swish")
    if count:
        graph.remove_unused()
    return count
