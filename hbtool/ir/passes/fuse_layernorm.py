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

Also TensorFlow's ``batch_normalization`` arrangement (Keras LayerNorm through tf2onnx)::

    r = 1/sqrt(ReduceMean((x - mean)^2) + eps) [* gamma];  y = x * r + (beta - mean * r)

and the form onnxruntime leaves when it pushes a Transpose into the LayerNorm
(``ReduceMean(x, axis 1) -> Sub -> Transpose -> ...``, from ``flatten(2).transpose(1, 2)``).

The result is ``LayerNormalization(x, scale, bias, axis=-k, epsilon=eps)`` with ones / zeros
for a missing gamma / beta. A ``LayerNormalization`` already in the model is left alone.

The same decomposition over one axis that is not the last (ConvNeXt's ``channels_first``
LayerNorm: ``ReduceMean(axes=[1])`` of NCHW, gamma and beta shaped ``(C, 1, 1)``) has no
standard op -- ``LayerNormalization(axis=1)`` would normalise over C, H and W together -- so
it becomes ``hbtool::ChannelLayerNorm(x, scale, bias, axis=a, epsilon=eps)`` whose body is
the matched nodes themselves (exact in float by construction); its scale and bias are the
model's gamma / beta constants (ones / zeros when missing, then unused by the body). There eps
may also sit outside the root, ``d / (Sqrt(var) + eps)`` (``eps_outside=1``); over trailing
axes that form has no standard op either and stays decomposed.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
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


def _affine_param(graph: Graph, name: str, x_shape: tuple[int, ...], k: int | list[int]) -> np.ndarray | None:
    """A gamma/beta constant as an array of the normalized shape, if it only varies over those axes.

    ``k``: the number of trailing normalised axes, or the list of normalised axes (non-negative).
    """
    data = graph.const(name)
    if data is None:
        return None
    rank = len(x_shape)
    if data.ndim > rank:
        return None
    axes = list(range(rank - k, rank)) if isinstance(k, int) else list(k)
    full = data.reshape((1,) * (rank - data.ndim) + data.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i not in axes):
        return None
    norm_shape = tuple(x_shape[i] for i in axes)
    trail = full.reshape(tuple(full.shape[i] for i in axes))
    try:
        return np.broadcast_to(trail, norm_shape).copy()
    except ValueError:
        return None


def _single_inner_axis(axes: list[int] | None, rank: int) -> int | None:
    """The axis when ``axes`` is one axis that is not the last (a channel LayerNorm), else ``None``."""
    return axes[0] if axes is not None and len(axes) == 1 and axes[0] < rank - 1 else None


def _match(graph: Graph, cm: dict[str, list[Node]], pm: dict[str, Node], rm1: Node):
    """Match the pattern rooted at the mean ``rm1``: (nodes, x, k or [axis], eps, y_tensor, eps_outside) or None."""
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
    if k is None and _single_inner_axis(axes, rank) is None:
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
    first = sole_consumer(graph, cm, rm2.outputs[0])
    root = first if _is(first, "Sqrt") and k is None else None  # eps outside the root (channel form only)
    add_eps = sole_consumer(graph, cm, root.outputs[0]) if root is not None else first
    if not _is(add_eps, "Add"):
        return None
    ca = const_and_other(graph, add_eps)
    if ca is None or ca[1] != (root.outputs[0] if root is not None else rm2.outputs[0]):
        return None
    eps = scalar(graph, ca[0])
    if eps is None or not eps > 0 or eps > 1.0:
        return None
    ve = add_eps.outputs[0]
    inv_nodes: list[Node] = []
    if root is not None:  # d / (sqrt(var) + eps), d * Reciprocal(...) or d * (1 / ...)
        if _is(div_like, "Div"):
            if div_like.inputs[1] != ve:
                return None
            inv_nodes = [root]
        else:
            rp = pm.get(other_input(div_like, d_norm) or "")
            if not (_is(rp, "Reciprocal") or (_is(rp, "Div") and scalar_is(graph, rp.inputs[0], 1.0))) or rp.inputs[-1] != ve:
                return None
            inv_nodes = [root, rp]
    elif _is(div_like, "Div"):
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
    return nodes, x, (k if k is not None else list(axes)), eps, div_like.outputs[0], root is not None


def _rsqrt_chain(graph: Graph, cm, sq: Node, axes):
    """From the square: ReduceMean -> Add eps -> 1/sqrt, as (nodes, eps, inverse tensor)."""
    rm2 = sole_consumer(graph, cm, sq.outputs[0])
    if not _is(rm2, "ReduceMean") or rm2.inputs[0] != sq.outputs[0] or not _keepdims(rm2) or reduce_axes(graph, rm2) != axes:
        return None
    add_eps = sole_consumer(graph, cm, rm2.outputs[0])
    ca = const_and_other(graph, add_eps) if _is(add_eps, "Add") else None
    if ca is None or ca[1] != rm2.outputs[0]:
        return None
    eps = scalar(graph, ca[0])
    if eps is None or not 0 < eps <= 1.0:
        return None
    ve = add_eps.outputs[0]
    nxt = sole_consumer(graph, cm, ve)
    if _is(nxt, "Pow") and nxt.inputs[0] == ve and scalar_is(graph, nxt.inputs[1], -0.5):
        return [rm2, add_eps, nxt], eps, nxt.outputs[0]
    if _is(nxt, "Sqrt"):
        inv = sole_consumer(graph, cm, nxt.outputs[0])
        if _is(inv, "Reciprocal") or (_is(inv, "Div") and inv.inputs[1] == nxt.outputs[0] and scalar_is(graph, inv.inputs[0], 1.0)):
            return [rm2, add_eps, nxt, inv], eps, inv.outputs[0]
    return None


def _match_folded(graph: Graph, cm, rm1: Node):
    """TensorFlow's ``batch_normalization`` form of LayerNorm (Keras, exported by tf2onnx)::

        r = rsqrt(var + eps) [* gamma];  y = x * r + (beta - mean * r)

    Returns (nodes, x, k, eps, y, gamma, beta) or None.
    """
    x = rm1.inputs[0]
    x_shape = graph.shape(x)
    if x_shape is None or not _keepdims(rm1):
        return None
    rank = len(x_shape)
    axes = reduce_axes(graph, rm1)
    k = trailing_axes(axes, rank)
    dtype = graph.dtype(x)
    if k is None or dtype is None or not np.issubdtype(dtype, np.floating):
        return None
    mean = rm1.outputs[0]
    users = cm.get(mean, [])
    subs = [u for u in users if _is(u, "Sub") and u.inputs == [x, mean]]
    mean_muls = [u for u in users if _is(u, "Mul") and mean in u.inputs and u.inputs != [mean, mean]]
    if mean in graph.outputs or len(users) != 2 or len(subs) != 1 or len(mean_muls) != 1:
        return None
    sub, m2 = subs[0], mean_muls[0]
    d = sub.outputs[0]
    sq = sole_consumer(graph, cm, d)
    if not ((_is(sq, "Pow") and sq.inputs[0] == d and scalar_is(graph, sq.inputs[1], 2.0)) or (_is(sq, "Mul") and sq.inputs == [d, d])):
        return None
    chain = _rsqrt_chain(graph, cm, sq, axes)
    if chain is None:
        return None
    chain_nodes, eps, r = chain
    gamma = None
    nodes = [rm1, sub, sq, *chain_nodes]
    scale = r
    gm = sole_consumer(graph, cm, r)
    if _is(gm, "Mul") and not (other_input(gm, r) in (x, mean)):
        ca = const_and_other(graph, gm)
        if ca is None or ca[1] != r:
            return None
        gamma = _affine_param(graph, ca[0], x_shape, k)
        if gamma is None:
            return None
        nodes.append(gm)
        scale = gm.outputs[0]
    scale_users = cm.get(scale, [])
    m1s = [u for u in scale_users if _is(u, "Mul") and other_input(u, scale) == x]
    if len(scale_users) != 2 or len(m1s) != 1 or other_input(m2, mean) != scale or scale in graph.outputs:
        return None
    m1 = m1s[0]
    bsub = sole_consumer(graph, cm, m2.outputs[0])
    if not _is(bsub, "Sub") or bsub.inputs[1] != m2.outputs[0]:
        return None
    beta = _affine_param(graph, bsub.inputs[0], x_shape, k)
    out_add = sole_consumer(graph, cm, m1.outputs[0])
    if beta is None or not _is(out_add, "Add") or set(out_add.inputs) != {m1.outputs[0], bsub.outputs[0]}:
        return None
    if sole_consumer(graph, cm, bsub.outputs[0]) is not out_add or graph.shape(out_add.outputs[0]) != tuple(x_shape):
        return None
    nodes += [m1, m2, bsub, out_add]
    for n in nodes[:-1]:
        if not used_only_by(graph, cm, n.outputs[0], nodes):
            return None
    return nodes, x, k, eps, out_add.outputs[0], gamma, beta


def _set_axes(graph: Graph, node: Node, axes: list[int]) -> None:
    if "axes" in node.attrs or graph.opset < 18:
        node.attrs["axes"] = list(axes)
    else:
        node.inputs = [node.inputs[0], graph.add_const(np.asarray(axes, dtype=np.int64), hint=f"{node.name}_axes")]


def _lift_transpose(graph: Graph, cm, pm, rm1: Node):
    """Undo onnxruntime's transpose push-down in front of a LayerNorm.

    ``ReduceMean(x, A) -> Sub(x, mean) -> Transpose(p)``, where ``p`` moves the axes ``A`` to the
    end, is rewritten as ``Transpose(x, p) -> ReduceMean(trailing) -> Sub``, which is the same
    computation in the canonical LayerNorm order. Returns a function that reverts the rewrite,
    or ``None`` when the form is not there.
    """
    x = rm1.inputs[0]
    shape = graph.shape(x)
    axes = reduce_axes(graph, rm1)
    if shape is None or not axes or not _keepdims(rm1):
        return None
    mean = rm1.outputs[0]
    sub = sole_consumer(graph, cm, mean)
    if not _is(sub, "Sub") or sub.inputs != [x, mean]:
        return None
    tr = sole_consumer(graph, cm, sub.outputs[0])
    if not _is(tr, "Transpose") or "perm" not in tr.attrs:
        return None
    perm = [int(p) for p in tr.attrs["perm"]]
    rank = len(shape)
    new_axes = sorted(i for i, p in enumerate(perm) if p in axes)
    if trailing_axes(new_axes, rank) is None:
        return None
    saved = [(n, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in (rm1, sub, tr)]
    order = list(graph.nodes)
    mean_shape = graph.shape(mean)
    xt = graph.unique_name(f"{tr.name}_lifted")
    t_shape = tuple(shape[p] for p in perm)
    graph.set_value(xt, t_shape, graph.dtype(x))
    d = tr.outputs[0]
    tr.inputs, tr.outputs = [x], [xt]
    rm1.inputs = [xt] + rm1.inputs[1:]
    _set_axes(graph, rm1, new_axes)
    graph.set_value(mean, tuple(1 if i in new_axes else t_shape[i] for i in range(rank)), graph.dtype(x))
    sub.inputs, sub.outputs = [xt, mean], [d]
    graph.nodes.remove(tr)
    graph.nodes.insert(graph.nodes.index(rm1), tr)

    def undo() -> None:
        for n, ins, outs, attrs in saved:
            n.inputs, n.outputs, n.attrs = ins, outs, attrs
        graph.nodes[:] = order
        graph.set_value(mean, mean_shape, graph.dtype(x))
        graph.values.pop(xt, None)

    return undo


def _replace(graph: Graph, nodes: list[Node], x: str, k: int, eps: float, out: str, gamma: np.ndarray, beta: np.ndarray) -> None:
    name = fused_name(graph, nodes, "LayerNorm")
    scale_name = graph.add_const(gamma, hint=f"{name}.scale")
    bias_name = graph.add_const(beta, hint=f"{name}.bias")
    nodes = [n for n in graph.nodes if any(n is m for m in nodes)]
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


def _fuse_channel(graph: Graph, cm, nodes: list[Node], x: str, axes: list[int], eps: float, y: str, eps_outside: bool) -> None:
    """Take the optional per-channel gamma Mul and beta Add after a channel LayerNorm core, then fuse."""
    x_shape = tuple(graph.shape(x))
    gamma = beta = None
    out = y
    nxt = sole_consumer(graph, cm, out)
    if _is(nxt, "Mul") and graph.shape(nxt.outputs[0]) == x_shape:
        ca = const_and_other(graph, nxt)
        if ca and ca[1] == out and _affine_param(graph, ca[0], x_shape, axes) is not None:
            gamma = ca[0]
            nodes.append(nxt)
            out = nxt.outputs[0]
            nxt = sole_consumer(graph, cm, out)
    if _is(nxt, "Add") and graph.shape(nxt.outputs[0]) == x_shape:
        ca = const_and_other(graph, nxt)
        if ca and ca[1] == out and _affine_param(graph, ca[0], x_shape, axes) is not None:
            beta = ca[0]
            nodes.append(nxt)
            out = nxt.outputs[0]
    _replace_channel(graph, nodes, x, axes[0], eps, out, gamma, beta, eps_outside)


def _replace_channel(graph: Graph, nodes: list[Node], x: str, axis: int, eps: float, out: str, gamma: str | None, beta: str | None,
                     eps_outside: bool = False) -> None:
    """``hbtool::ChannelLayerNorm`` over ``axis`` with the matched nodes as its body (module docstring)."""
    name = fused_name(graph, nodes, "LayerNorm")
    x_shape = graph.shape(x)
    dtype = graph.dtype(x)
    param_shape = (x_shape[axis],) + (1,) * (len(x_shape) - 1 - axis)
    if gamma is None:
        gamma = graph.add_const(np.ones(param_shape, dtype), hint=f"{name}.scale")
    if beta is None:
        beta = graph.add_const(np.zeros(param_shape, dtype), hint=f"{name}.bias")
    nodes = [n for n in graph.nodes if any(n is m for m in nodes)]
    attrs = {"axis": int(axis), "epsilon": float(eps)}
    if eps_outside:
        attrs["eps_outside"] = 1
    graph.fuse(nodes, "ChannelLayerNorm", [x, gamma, beta], [out], attrs=attrs, domain=HBTOOL_DOMAIN, name=name, keep_body=True)


def fuse_layernorm(graph: Graph) -> int:
    """Replace decomposed LayerNorm sub-graphs by ``LayerNormalization``."""
    count = 0
    for rm1 in list(graph.nodes):
        if not _is(rm1, "ReduceMean") or rm1 not in graph.nodes:
            continue
        cm = graph.consumer_map()
        pm = graph.producer_map()
        folded = _match_folded(graph, cm, rm1)
        if folded is not None:
            nodes, x, k, eps, out, gamma, beta = folded
            dtype = graph.dtype(x)
            norm_shape = tuple(graph.shape(x)[-k:])
            gamma = np.ones(norm_shape, dtype) if gamma is None else gamma.astype(dtype)
            _replace(graph, nodes, x, k, eps, out, gamma, beta.astype(dtype))
            count += 1
            continue
        m = _match(graph, cm, pm, rm1)
        if m is None:
            undo = _lift_transpose(graph, cm, pm, rm1)
            if undo is None:
                continue
            cm = graph.consumer_map()
            pm = graph.producer_map()
            m = _match(graph, cm, pm, rm1)
            if m is None:
                undo()
                continue
        nodes, x, k, eps, y, eps_outside = m
        x_shape = graph.shape(x)
        dtype = graph.dtype(x)
        if not isinstance(k, int):
            _fuse_channel(graph, cm, nodes, x, k, eps, y, eps_outside)
            count += 1
            continue
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
        _replace(graph, nodes, x, k, eps, out, gamma, beta)
        count += 1
    if count:
        graph.remove_unused()
    return count
