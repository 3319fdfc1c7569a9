"""Fold inference BatchNormalization into the preceding Conv / ConvTranspose / Gemm / MatMul.

``y = (x - mean) / sqrt(var + eps) * gamma + beta`` is a per-channel ``x * s + t``; when ``x``
comes from a layer with constant weights that nobody else reads, ``s`` scales the weights along
the output channels and ``t`` becomes (part of) the bias. A BatchNormalization that cannot be
folded becomes a per-channel ``Mul`` + ``Add`` with constants, an elementwise op the BPU runs.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.patterns import sole_consumer


def _bn_params(graph: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """``(s, t)`` per channel (float64), or ``None`` when the node is not a plain inference BN."""
    if bn.domain not in ("", "ai.onnx") or len(bn.inputs) < 5:
        return None
    if bn.attrs.get("training_mode", 0):
        return None
    if any(o for o in bn.outputs[1:]):
        return None
    consts = [graph.const(n) for n in bn.inputs[1:5]]
    if any(c is None for c in consts):
        return None
    gamma, beta, mean, var = (np.asarray(c, dtype=np.float64).reshape(-1) for c in consts)
    if not (gamma.size == beta.size == mean.size == var.size):
        return None
    eps = float(bn.attrs.get("epsilon", 1e-5))
    if np.any(var + eps <= 0):
        return None
    s = gamma / np.sqrt(var + eps)
    t = beta - mean * s
    return s, t


def _fold_into_conv(graph: Graph, conv: Node, s: np.ndarray, t: np.ndarray, bn: Node) -> bool:
    w = graph.const(conv.inputs[1]) if len(conv.inputs) > 1 else None
    if w is None or w.ndim < 3:
        return False
    b_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
    b = graph.const(b_name) if b_name else None
    if b_name and b is None:
        return False
    group = int(conv.attrs.get("group", 1))
    if conv.op_type == "Conv":
        m = w.shape[0]
        if s.size != m:
            return False
        w_new = w.astype(np.float64) * s.reshape((m,) + (1,) * (w.ndim - 1))
    else:  # ConvTranspose: weight (C_in, M / group, k...)
        cin, mg = w.shape[0], w.shape[1]
        m = mg * group
        if s.size != m or cin % group:
            return False
        wg = w.astype(np.float64).reshape((group, cin // group, mg) + w.shape[2:])
        wg = wg * s.reshape((group, 1, mg) + (1,) * (w.ndim - 2))
        w_new = wg.reshape(w.shape)
    b_old = np.zeros(m) if b is None else np.asarray(b, dtype=np.float64).reshape(-1)
    if b_old.size != m:
        return False
    b_new = b_old * s + t
    dtype = w.dtype
    w_name = graph.add_const(w_new.astype(dtype), hint=f"{conv.name}_weight_bnfold")
    b_name = graph.add_const(b_new.astype(dtype), hint=f"{conv.name}_bias_bnfold")
    conv.inputs = [conv.inputs[0], w_name, b_name]
    _take_output(graph, conv, bn)
    return True


def _fold_into_gemm(graph: Graph, gemm: Node, s: np.ndarray, t: np.ndarray, bn: Node) -> bool:
    b = graph.const(gemm.inputs[1])
    if b is None or b.ndim != 2:
        return False
    trans_b = int(gemm.attrs.get("transB", 0))
    n = b.shape[0] if trans_b else b.shape[1]
    if s.size != n:
        return False
    alpha = float(gemm.attrs.get("alpha", 1.0))
    beta = float(gemm.attrs.get("beta", 1.0))
    c_name = gemm.inputs[2] if len(gemm.inputs) > 2 else ""
    c = graph.const(c_name) if c_name else None
    if c_name and c is None:
        return False
    out_shape = graph.shape(gemm.outputs[0])
    b_new = b.astype(np.float64) * (s.reshape(n, 1) if trans_b else s.reshape(1, n))
    c_eff = np.zeros(n) if c is None else beta * np.asarray(c, dtype=np.float64)
    try:
        c_new = c_eff * s + t  # C broadcasts against (M, N); channels are its last axis
    except ValueError:
        return False
    if out_shape is not None and np.broadcast_shapes(c_new.shape, tuple(out_shape)) != tuple(out_shape):
        return False
    dtype = b.dtype
    gemm.inputs = [gemm.inputs[0], graph.add_const(b_new.astype(dtype), hint=f"{gemm.name}_B_bnfold"), graph.add_const(c_new.astype(dtype), hint=f"{gemm.name}_C_bnfold")]
    gemm.attrs["beta"] = 1.0
    gemm.attrs["alpha"] = alpha
    _take_output(graph, gemm, bn)
    return True


def _fold_into_matmul(graph: Graph, mm: Node, s: np.ndarray, t: np.ndarray, bn: Node) -> bool:
    w = graph.const(mm.inputs[1])
    out_shape = graph.shape(mm.outputs[0])
    # BN normalizes axis 1; that is the weight's output axis only for a 2-D product
    if w is None or w.ndim != 2 or out_shape is None or len(out_shape) != 2 or graph.is_const(mm.inputs[0]):
        return False
    n = w.shape[1]
    if s.size != n:
        return False
    dtype = w.dtype
    mm.inputs = [mm.inputs[0], graph.add_const((w.astype(np.float64) * s.reshape(1, n)).astype(dtype), hint=f"{mm.name}_weight_bnfold")]
    mid = graph.unique_name(f"{mm.name}_bnfold_out")
    graph.set_value(mid, out_shape, graph.dtype(mm.outputs[0]))
    bias = graph.add_const(t.astype(dtype), hint=f"{bn.name}_bias")
    old_out = mm.outputs[0]
    mm.outputs = [mid]
    graph.nodes.remove(bn)
    graph.values.pop(old_out, None)
    idx = graph.nodes.index(mm) + 1
    graph.add_node("Add", [mid, bias], [bn.outputs[0]], name=bn.name, index=idx)
    return True


def _take_output(graph: Graph, layer: Node, bn: Node) -> None:
    """The folded layer now writes the BN's output tensor; the BN goes."""
    old = layer.outputs[0]
    layer.outputs = [bn.outputs[0]] + layer.outputs[1:]
    graph.nodes.remove(bn)
    graph.values.pop(old, None)


def _to_mul_add(graph: Graph, bn: Node, s: np.ndarray, t: np.ndarray) -> bool:
    shape = graph.shape(bn.inputs[0])
    dtype = graph.dtype(bn.inputs[0]) or np.dtype(np.float32)
    if shape is None or len(shape) < 2 or shape[1] != s.size:
        return False
    bshape = (s.size,) + (1,) * (len(shape) - 2)
    s_name = graph.add_const(s.reshape(bshape).astype(dtype), hint=f"{bn.name}_scale")
    t_name = graph.add_const(t.reshape(bshape).astype(dtype), hint=f"{bn.name}_shift")
    idx = graph.nodes.index(bn)
    graph.nodes.remove(bn)
    mid = graph.unique_name(f"{bn.name}_mul_out")
    graph.set_value(mid, shape, dtype)
    graph.add_node("Mul", [bn.inputs[0], s_name], [mid], name=f"{bn.name}_mul", index=idx)
    graph.add_node("Add", [mid, t_name], [bn.outputs[0]], name=f"{bn.name}_add", index=idx + 1)
    return True


def fold_batchnorm(graph: Graph) -> int:
    """Fold BatchNormalization into Conv/ConvTranspose/Gemm/MatMul weights, else turn it into Mul+Add."""
    count = 0
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or bn not in graph.nodes:
            continue
        params = _bn_params(graph, bn)
        if params is None:
            continue
        s, t = params
        consumers = graph.consumer_map()
        prod = graph.producer(bn.inputs[0])
        done = False
        if prod is not None and prod.domain in ("", "ai.onnx") and sole_consumer(graph, consumers, bn.inputs[0]) is bn and len([o for o in prod.outputs if o]) == 1:
            if prod.op_type in ("Conv", "ConvTranspose"):
                done = _fold_into_conv(graph, prod, s, t, bn)
            elif prod.op_type == "Gemm":
                done = _fold_into_gemm(graph, prod, s, t, bn)
            elif prod.op_type == "MatMul":
                done = _fold_into_matmul(graph, prod, s, t, bn)
        if not done:
            done = _to_mul_add(graph, bn, s, t)
        count += int(done)
    if count:
        graph.remove_unused()
    return count
