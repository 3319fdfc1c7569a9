"""Fuse decomposed LayerNorm into the standard ONNX ``LayerNormalization``.

Recognised (Paddle2ONNX, torch's legacy exporter below opset 17, hand-written models)::

    mean = ReduceMean(x, axes)            # trailing axes, keepdims=1; axes attribute or input
    d    = Sub(x, mean)                   # one Sub, or two identical ones
    sq   = Pow(d, 2) | Mul(d, d)
    var  = ReduceMean(sq, axes)
    ve   = Add(var, eps)                  # eps > 0, either input order
    y    = Div(d, Sqrt(ve))
         | Mul(d, Reciprocal(Sqrt(ve)))   # either input order
         | Mul(d, Div(1, Sqrt(ve)))
         | Mul(d, Pow(ve, -0.5))
    y    = Mul(y, gamma)?                 # optional, constant, either order
    y    = Add(y, beta)?                  # optional, constant, either order

The result is ``LayerNormalization(x, scale, bias, axis=-k, epsilon=eps)`` with ones / zeros
for a missing gamma / beta. A ``LayerNormalization`` already in the model is left alone.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.patterns import (
    const_and_other,
    fused_name,
    other_input,
    reduce_axes,
    scalar,
    scalar_is,
    sole_consumer,
    trailing_axes,
    used_only_by,
)

_STD = ("", "ai.onnx")


def _is(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in _STD


def _keepdims(node: Node) -> bool:
    return int(node.attrs.get("keepdims", 1)) == 1


def _affine_param(graph: Graph, name: str, x_shape: tuple[int, ...], k: int) -> np.ndarray | None:
    """A gamma/beta constant as an array of the normalized shape, if it only varies over those axes."""
    data = graph.const(name)
    if data is None:
        return None
    rank = len(x_shape)
    if data.ndim > rank:
        return None
    full = data.reshape((1,) * (rank - data.ndim) + data.shape)
    if any(d != 1 for d in full.shape[: rank - k]):
        return None
    norm_shape = tuple(x_shape[rank - k :])
    trail = full.reshape(full.shape[rank - k :])
    try:
        return np.broadcast_to(trail, norm_shape).copy()
    except ValueError:
        return None


def _match(graph: Graph, cm: dict[str, list[Node]], pm: dict[str, Node], rm1: Node):
    """Match the pattern rooted at the mean ``rm1``: returns (nodes, x, k, eps, y_tensor) or None."""
    x = rm1.inputs[0]
    x_shape = graph.shape(x)
    if x_shape is None or not _keepdims(rm1):
        return None
    dtype = graph.dtype(x)
    if dtype is None or not np.issubdtype(dtype, np.floating):
        return None
    rank = len(x_shape)
    axes = reduce_axes(graph, rm1)
    k = trailing_axes(axes, rank)
    if k is None:
        return None
    mean = rm1.outputs[0]
    subs = cm.get(mean, [])
    if mean in graph.outputs or not subs or len(subs) > 2:
        return None
    if not all(_is(s, "Sub") and s.inputs == [x, mean] for s in subs):
        return None
    # find the square, the second mean and the normalization among the Subs' consumers
    sq = None
    div_like = None
    for s in subs:
        for c in cm.get(s.outputs[0], []):
            d = s.outputs[0]
            if (_is(c, "Pow") and c.inputs[0] == d and scalar_is(graph, c.inputs[1], 2.0)) or (_is(c, "Mul") and c.inputs == [d, d]):
                if sq is not None and sq is not c:
                    return None
                sq = c
            elif _is(c, "Div") and c.inputs[0] == d or _is(c, "Mul") and d in c.inputs and c.inputs != [d, d]:
                if div_like is not None and div_like is not c:
                    return None
                div_like = c
            else:
                return None
    if sq is None or div_like is None:
        return None
    d_sq = sq.inputs[0]
    d_norm = div_like.inputs[0] if _is(div_like, "Div") else next(i for i in div_like.inputs if i in {s.outputs[0] for s in subs})
    if {d_sq, d_norm} != {s.outputs[0] for s in subs}:
        return None
    for s in subs:
        if s.outputs[0] in graph.outputs:
            return None
    rm2 = sole_consumer(graph, cm, sq.outputs[0])
    if not _is(rm2, "ReduceMean") or rm2.inputs[0] != sq.outputs[0] or not _keepdims(rm2) or reduce_axes(graph, rm2) != axes:
        return None
    add_eps = sole_consumer(graph, cm, rm2.outputs[0])
    if not _is(add_eps, "Add"):
        return None
    ca = const_and_other(graph, add_eps)
    if ca is None or ca[1] != rm2.outputs[0]:
        return None
    eps = scalar(graph, ca[0])
    if eps is None or not eps > 0 or eps > 1.0:
        return None
    ve = add_eps.outputs[0]
    inv_nodes: list[Node] = []
    if _is(div_like, "Div"):
        sqrt = pm.get(div_like.inputs[1])
        if not _is(sqrt, "Sqrt") or sqrt.inputs[0] != ve:
            return None
        inv_nodes = [sqrt]
    else:
        r = other_input(div_like, d_norm)
        rp = pm.get(r) if r else None
        if _is(rp, "Pow") and rp.inputs[0] == ve and scalar_is(graph, rp.inputs[1], -0.5):
            inv_nodes = [rp]
        elif _is(rp, "Reciprocal") or (_is(rp, "Div") and scalar_is(graph, rp.inputs[0], 1.0)):
            sqrt = pm.get(rp.inputs[-1])
            if not _is(sqrt, "Sqrt") or sqrt.inputs[0] != ve:
                return None
            inv_nodes = [sqrt, rp]
        else:
            return None
    nodes = [rm1, *subs, sq, rm2, add_eps, *inv_nodes, div_like]
    for n in nodes[:-1]:
        if not used_only_by(graph, cm, n.outputs[0], nodes):
            return None
    return nodes, x, k, eps, div_like.outputs[0]


def fuse_layernorm(graph: Graph) -> int:
    """Replace decomposed LayerNorm sub-graphs by ``LayerNormalization``."""
    count = 0
    for rm1 in list(graph.nodes):
        if not _is(rm1, "ReduceMean") or rm1 not in graph.nodes:
            continue
        cm = graph.consumer_map()
        pm = graph.producer_map()
        m = _match(graph, cm, pm, rm1)
        if m is None:
            continue
        nodes, x, k, eps, y = m
        x_shape = graph.shape(x)
        dtype = graph.dtype(x)
        norm_shape = tuple(x_shape[len(x_shape) - k :])
        gamma = np.ones(norm_shape, dtype=dtype)
        beta = np.zeros(norm_shape, dtype=dtype)
        out = y
        nxt = sole_consumer(graph, cm, out)
        if _is(nxt, "Mul") and graph.shape(nxt.outputs[0]) == tuple(x_shape):
            ca = const_and_other(graph, nxt)
            g = _affine_param(graph, ca[0], x_shape, k) if ca and ca[1] == out else None
            if g is not None:
                gamma = g.astype(dtype)
                nodes.append(nxt)
                out = nxt.outputs[0]
                nxt = sole_consumer(graph, cm, out)
        if _is(nxt, "Add") and graph.shape(nxt.outputs[0]) == tuple(x_shape):
            ca = const_and_other(graph, nxt)
            b = _affine_param(graph, ca[0], x_shape, k) if ca and ca[1] == out else None
            if b is not None:
                beta = b.astype(dtype)
                nodes.append(nxt)
                out = nxt.outputs[0]
        name = fused_name(graph, nodes, "LayerNorm")
        scale_name = graph.add_const(gamma, hint=f"{name}.scale")
        bias_name = graph.add_const(beta, hint=f"{name}.bias")
        graph.fuse(
            nodes,
            "LayerNormalization",
            [x, scale_name, bias_name],
            [out],
            attrs={"axis": -k, "epsilon": float(eps)},
            domain="",
            name=name,
            keep_body=False,
        )
        count += 1
    if count:
        graph.remove_unused()
    return count
