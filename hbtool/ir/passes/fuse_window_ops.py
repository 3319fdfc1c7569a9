"""Fuse Swin's window partition and window reverse into ``WindowPartition`` / ``WindowReverse``.

Partition, ``(B, H, W, C)`` cut into ``wh x ww`` windows::

    Reshape -> (B, H/wh, wh, W/ww, ww, C) -> Transpose(0,1,3,2,4,5) -> Reshape(s) ->
        (B*nW, wh, ww, C) | (B*nW, wh*ww, C) | (B*nW*wh*ww, C)

Reverse, the inverse::

    Reshape -> (B, H/wh, W/ww, wh, ww, C) -> Transpose(0,1,3,2,4,5) -> Reshape(s) ->
        (B, H, W, C) | (B, H*W, C)

Real exports, once onnxruntime has folded them, merge neighbouring reshapes: the partition's
first Reshape often reads the ``(B, L, C)`` tokens directly and its last one is merged with the
``(N, C)`` reshape in front of a Gemm; the reverse reads the Gemm's 2-D output. The fused
``WindowPartition`` always reads ``(B, H, W, C)`` (a Reshape is put in front when the tokens come
as ``(B, L, C)``); the fused ``WindowReverse`` always writes ``(B, H, W, C)`` (a Reshape is put
after it when the model wants ``(B, L, C)``). Both are hbtool-domain ops with
``window_size=[wh, ww]`` and the matched Reshape/Transpose nodes as body.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.patterns import fused_name, sole_consumer

_STD = ("", "ai.onnx")
_PERM = [0, 1, 3, 2, 4, 5]


def _is(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in _STD


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _reshape_chain(graph: Graph, cm, start: str, limit: int = 2) -> list[Node]:
    """Up to ``limit`` Reshapes following ``start``, each the sole reader of the previous tensor."""
    chain: list[Node] = []
    t = start
    while len(chain) < limit:
        nxt = sole_consumer(graph, cm, t)
        if not _is(nxt, "Reshape") or nxt.inputs[0] != t or graph.shape(nxt.outputs[0]) is None:
            break
        chain.append(nxt)
        t = nxt.outputs[0]
    return chain


def _pin_shape(graph: Graph, node: Node, shape) -> None:
    """Give a Reshape a constant target ``shape`` (its own static output shape by default)."""
    target = np.asarray(shape, dtype=np.int64)
    cur = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
    if cur is None or cur.shape != target.shape or not np.array_equal(cur, target):
        node.inputs = [node.inputs[0], graph.add_const(target, hint=f"{node.name}_shape")]
    node.attrs.pop("allowzero", None)


def _partition_forms(B, nH, wh, nW, ww, C) -> list[tuple[int, ...]]:
    n = B * nH * nW
    return [(n, wh, ww, C), (n, wh * ww, C), (n * wh * ww, C)]


def _reverse_forms(B, nH, wh, nW, ww, C) -> list[tuple[int, ...]]:
    return [(B, nH * wh, nW * ww, C), (B, nH * wh * nW * ww, C)]


def _try(graph: Graph, tr: Node) -> bool:
    cm = graph.consumer_map()
    pm = graph.producer_map()
    r1 = pm.get(tr.inputs[0])
    if not _is(r1, "Reshape") or sole_consumer(graph, cm, tr.inputs[0]) is not tr:
        return False
    six = graph.shape(tr.inputs[0])
    src = r1.inputs[0]
    src_shape = graph.shape(src)
    if six is None or len(six) != 6 or src_shape is None or _numel(src_shape) != _numel(six):
        return False
    chain = _reshape_chain(graph, cm, tr.outputs[0])
    if not chain:
        return False
    B, a, b, c, d, C = six
    # partition: six = (B, nH, wh, nW, ww, C)
    ends = [k for k, r in enumerate(chain) if graph.shape(r.outputs[0]) in _partition_forms(B, a, b, c, d, C)]
    if ends:
        chain = chain[: ends[-1] + 1]
        nodes = [r1, tr, *chain]
        nH, wh, nW, ww = a, b, c, d
        hwc = (B, nH * wh, nW * ww, C)
        for r in nodes:
            if r is not tr:
                _pin_shape(graph, r, graph.shape(r.outputs[0]))
        x = src
        if tuple(src_shape) != hwc:
            x = graph.unique_name(f"{r1.name}_bhwc")
            graph.set_value(x, hwc, graph.dtype(src))
            graph.add_node("Reshape", [src, graph.add_const(np.asarray(hwc, dtype=np.int64), hint=f"{x}_shape")], [x], name=f"{r1.name}_to_bhwc", index=graph.nodes.index(r1))
            r1.inputs = [x, r1.inputs[1]]
        name = fused_name(graph, nodes, "WindowPartition")
        graph.fuse(nodes, "WindowPartition", [x], [chain[-1].outputs[0]], attrs={"window_size": [int(wh), int(ww)]}, domain=HBTOOL_DOMAIN, name=name, keep_body=True)
        return True
    # reverse: six = (B, nH, nW, wh, ww, C)
    nH, nW, wh, ww = a, b, c, d
    ends = [k for k, r in enumerate(chain) if graph.shape(r.outputs[0]) in _reverse_forms(B, nH, wh, nW, ww, C)]
    if not ends:
        return False
    chain = chain[: ends[-1] + 1]
    nodes = [r1, tr, *chain]
    hwc = (B, nH * wh, nW * ww, C)
    for r in nodes:
        if r is not tr:
            _pin_shape(graph, r, graph.shape(r.outputs[0]))
    last = chain[-1]
    out = last.outputs[0]
    fused_out = out
    if graph.shape(out) != hwc:
        fused_out = graph.unique_name(f"{last.name}_bhwc")
        graph.set_value(fused_out, hwc, graph.dtype(out))
        _pin_shape(graph, last, hwc)
        last.outputs = [fused_out]
        graph.add_node("Reshape", [fused_out, graph.add_const(np.asarray(graph.shape(out), dtype=np.int64), hint=f"{out}_shape")], [out], name=f"{last.name}_tokens", index=graph.nodes.index(last) + 1)
    name = fused_name(graph, nodes, "WindowReverse")
    graph.fuse(nodes, "WindowReverse", [src], [fused_out], attrs={"window_size": [int(wh), int(ww)]}, domain=HBTOOL_DOMAIN, name=name, keep_body=True)
    return True


def fuse_window_ops(graph: Graph) -> int:
    """Replace Swin window partition / reverse Reshape-Transpose-Reshape chains by fused ops."""
    count = 0
    for node in list(graph.nodes):
        if node not in graph.nodes or not _is(node, "Transpose") or [int(p) for p in node.attrs.get("perm", [])] != _PERM:
            continue
        count += _try(graph, node)
    if count:
        graph.remove_unused()
    return count
