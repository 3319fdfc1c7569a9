"""Fuse torch's GroupNorm with one group into a LayerNorm over (C, H, W) with per-channel affine.

torch exports ``GroupNorm(num_groups=G)`` of an ``[N, C, *spatial]`` tensor as::

    r = Reshape(x, [N, G, -1])                    # one row per group: C*H*W / G elements
    n = InstanceNormalization(r, ones(G), zeros(G), epsilon)
    y = Reshape(n, shape of x)
    y = Mul(y, gamma[C, 1, 1])?                   # optional, constant, either order
    y = Add(y, beta[C, 1, 1])?                    # optional, constant, either order

With ``G == 1`` (PoolFormer's ``GroupNorm(1, C)``) that is a LayerNorm over every axis but the
batch, with gamma/beta per channel: ``hbtool::ChannelLayerNorm(x, gamma, beta, axis=1,
axes=[1, .., r-1], epsilon)`` whose body is the matched nodes (exact in float by construction).
Left as it is, the reshaped ``1 x 1 x C*H*W`` row breaks the BPU's dimension limit and sends
the whole norm to the CPU. The InstanceNormalization's own scale and bias (one value each
with ``G == 1``) fold into gamma and beta. ``G > 1`` normalises channel groups, which the
LayerNorm kernel does not; it stays as it is.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.patterns import const_and_other, fused_name, ints, sole_consumer

_STD = ("", "ai.onnx")


def _is(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in _STD


def _channel_param(graph: Graph, name: str, x_shape: tuple[int, ...]) -> np.ndarray | None:
    """A Mul/Add constant as a ``(C, 1, ..)`` array when it varies over the channel axis only."""
    data = graph.const(name)
    rank = len(x_shape)
    if data is None or data.ndim > rank:
        return None
    full = np.asarray(data).reshape((1,) * (rank - data.ndim) + data.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != 1) or full.shape[1] not in (1, x_shape[1]):
        return None
    return np.broadcast_to(full.reshape(-1), (x_shape[1],)).reshape((x_shape[1],) + (1,) * (rank - 2)).copy()


def _match(graph: Graph, cm, reshape: Node):
    """(nodes, x, gamma, beta, eps, out) of the pattern rooted at the first Reshape, or None."""
    x = reshape.inputs[0]
    x_shape = graph.shape(x)
    if x_shape is None or len(x_shape) < 3 or graph.is_const(x) or len(reshape.inputs) < 2:
        return None
    target = ints(graph, reshape.inputs[1])
    r_shape = graph.shape(reshape.outputs[0])
    if target is None or r_shape is None or tuple(r_shape) != (x_shape[0], 1, int(np.prod(x_shape[1:]))):
        return None
    inorm = sole_consumer(graph, cm, reshape.outputs[0])
    if not _is(inorm, "InstanceNormalization") or inorm.inputs[0] != reshape.outputs[0]:
        return None
    s, b = graph.const(inorm.inputs[1]), graph.const(inorm.inputs[2])
    if s is None or b is None or s.size != 1 or b.size != 1:
        return None
    back = sole_consumer(graph, cm, inorm.outputs[0])
    if not _is(back, "Reshape") or graph.shape(back.outputs[0]) is None or tuple(graph.shape(back.outputs[0])) != tuple(x_shape):
        return None
    dtype = graph.dtype(x) or np.float32
    c_shape = (x_shape[1],) + (1,) * (len(x_shape) - 2)
    gamma = np.full(c_shape, float(s.reshape(-1)[0]), np.float64)
    beta = np.full(c_shape, float(b.reshape(-1)[0]), np.float64)
    nodes = [reshape, inorm, back]
    out = back.outputs[0]
    nxt = sole_consumer(graph, cm, out)
    if _is(nxt, "Mul") and graph.shape(nxt.outputs[0]) == tuple(x_shape):
        ca = const_and_other(graph, nxt)
        g = _channel_param(graph, ca[0], x_shape) if ca and ca[1] == out else None
        if g is not None:
            gamma, beta = gamma * g, beta * g
            nodes.append(nxt)
            out = nxt.outputs[0]
            nxt = sole_consumer(graph, cm, out)
    if _is(nxt, "Add") and graph.shape(nxt.outputs[0]) == tuple(x_shape):
        ca = const_and_other(graph, nxt)
        bb = _channel_param(graph, ca[0], x_shape) if ca and ca[1] == out else None
        if bb is not None:
            beta = beta + bb
            nodes.append(nxt)
            out = nxt.outputs[0]
    return nodes, x, gamma.astype(dtype), beta.astype(dtype), float(inorm.attrs.get("epsilon", 1e-5)), out


def fuse_group_norm(graph: Graph) -> int:
    """Replace ``GroupNorm(1, C)`` exports by ``hbtool::ChannelLayerNorm`` over axes 1..r-1."""
    count = 0
    for reshape in list(graph.nodes):
        if not _is(reshape, "Reshape") or reshape not in graph.nodes:
            continue
        m = _match(graph, graph.consumer_map(), reshape)
        if m is None:
            continue
        nodes, x, gamma, beta, eps, out = m
        name = fused_name(graph, nodes, "GroupNorm")
        g = graph.add_const(gamma, hint=f"{name}.scale")
        b = graph.add_const(beta, hint=f"{name}.bias")
        rank = len(graph.shape(x))
        graph.fuse(nodes, "ChannelLayerNorm", [x, g, b], [out], attrs={"axis": 1, "axes": list(range(1, rank)), "epsilon": eps},
                   domain=HBTOOL_DOMAIN, name=name, keep_body=True)
        count += 1
    if count:
        graph.remove_unused()
    return count
