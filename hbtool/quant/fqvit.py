"""FQ-ViT's two quantizers for transformers (Lin et al. 2022), as plan options.

``ptf`` (power-of-two factor): a LayerNorm input with large differences between its channels
(the residual stream of a transformer) gets one scale per channel of its last axis,
``s 2**alpha_c`` with ``alpha_c`` in 0..3 and ``s = s_tensor / 8``: channels with a small range
are quantized 2x, 4x or 8x finer, while the widest ones keep the per-tensor step. Every integer
kernel touching such a tensor handles the factors exactly: the producer (a residual Add, a
LayerNorm, a Linear/MatMul with a constant weight) requantizes per channel (an Add or Linear
only adds ``alpha_c`` to that channel's shift), the LayerNorm starts from ``q << alpha_c``, and
a residual Add that reads it gets one multiplier pair and shift per channel. A tensor gets PTF
only when every consumer is such a kernel (LayerNorm over the last axis, Add/Sub) and the
tensor shares its scale with no other tensor; the others keep their per-tensor scale and
:func:`apply_ptf` says why.

``alpha_c`` is the smallest factor whose range holds the channel's calibration maximum (the
finest step that clips nothing of that channel more than the per-tensor scale does); a channel
beyond the tensor's threshold (percentile, KL, MSE) gets 3, the per-tensor step.

``softmax_log2``: a Softmax whose only consumer is the attention MatMul (probabilities @ V)
emits 4-bit log2 codes, ``P ~ 2**-k`` (``k`` = 15 means 0), and that MatMul becomes shifts of
V and additions (:class:`~hbtool.kernels.linear.Log2MatMul`).
"""

from __future__ import annotations

import logging
from typing import Mapping

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.quant.observers import TensorStats
from hbtool.quant.plan import QMAX, QuantPlan, TensorQuant

log = logging.getLogger(__name__)

#: the largest power-of-two factor: channel scales s, 2s, 4s, 8s
PTF_MAX_ALPHA = 3
#: bits of a log2-quantized Softmax output
LOG2_BITS = 4
LOG2_METHOD = "log2"

_PTF_PRODUCERS = {"Add", "Sub", "LayerNormalization", "Linear", "Gemm", "MatMul"}


def _last_axis(graph: Graph, node: Node) -> bool:
    shape = graph.shape(node.inputs[0])
    axis = int(node.attr("axis", -1))
    return shape is not None and axis in (-1, len(shape) - 1)


def _bpu(node: Node | None) -> bool:
    return node is not None and node.meta.get("on") == "BPU"


def _ptf_producer_ok(graph: Graph, node: Node, channels: int) -> str | None:
    """Why the producer cannot requantize per channel of the last axis (None: it can)."""
    if not _bpu(node) or node.op_type not in _PTF_PRODUCERS:
        return f"produced by {node.op_type}, which does not requantize per channel"
    if node.op_type == "LayerNormalization" and not (_last_axis(graph, node) and graph.is_const(node.inputs[1])):
        return "produced by a LayerNorm without an integer lowering"
    if node.op_type in ("Linear", "Gemm", "MatMul"):
        w = graph.const(node.inputs[1]) if len(node.inputs) > 1 else None
        if w is None or w.ndim != 2 or node.attr("transA", 0):
            return f"produced by a {node.op_type} without a constant 2-D weight"
        n = w.shape[0] if node.op_type == "Gemm" and node.attr("transB", 0) else w.shape[1]
        if n != channels:
            return f"produced by a {node.op_type} whose output channels are not the last axis"
    return None


def _ptf_consumer_ok(graph: Graph, node: Node, tensor: str, channels: int) -> str | None:
    if not _bpu(node):
        return f"read by {node.name} on the CPU"
    if node.op_type == "LayerNormalization":
        if node.inputs[0] != tensor or not _last_axis(graph, node) or not graph.is_const(node.inputs[1]):
            return f"read by LayerNorm {node.name} in a form without an integer lowering"
        return None
    if node.op_type in ("Add", "Sub"):
        out = graph.shape(node.outputs[0])
        others = [graph.shape(i) for i in node.inputs[:2] if i and i != tensor]
        if not out or out[-1] != channels or any(sh and sh[-1] not in (1, channels) for sh in others):
            return f"read by {node.op_type} {node.name}, which broadcasts over the channels"
        return None
    return f"read by {node.op_type} {node.name}, which takes one input scale"


def ptf_tensors(graph: Graph) -> tuple[list[str], dict[str, str]]:
    """LayerNorm inputs that can take per-channel power-of-two scales, and ``{tensor: why not}`` for the rest."""
    producers = graph.producer_map()
    consumers = graph.consumer_map()
    ok: list[str] = []
    skipped: dict[str, str] = {}
    for node in graph.nodes:
        if node.op_type != "LayerNormalization" or not _bpu(node):
            continue
        t = node.inputs[0]
        if t in ok or t in skipped or graph.is_const(t):
            continue
        shape = graph.shape(t)
        if not shape:
            continue
        channels = int(shape[-1])
        why = None
        if t in graph.outputs or t in graph.inputs or producers.get(t) is None:
            why = "a model input or output"
        else:
            why = _ptf_producer_ok(graph, producers[t], channels)
        for c in consumers.get(t, []):
            why = why or _ptf_consumer_ok(graph, c, t, channels)
        if why:
            skipped[t] = why
        else:
            ok.append(t)
    return ok, skipped


def ptf_alphas(channel_absmax: np.ndarray, scale: float, qmax: int, max_alpha: int = PTF_MAX_ALPHA) -> np.ndarray:
    """Per channel, the smallest ``alpha`` in 0..max_alpha whose range ``(qmax + 0.5) scale 2**alpha`` holds the channel's max."""
    m = np.asarray(channel_absmax, np.float64)
    alpha = np.full(m.shape, max_alpha, np.int64)
    for a in range(max_alpha - 1, -1, -1):
        alpha = np.where(m <= (qmax + 0.5) * scale * 2.0**a, a, alpha)
    return alpha


def apply_ptf(graph: Graph, plan: QuantPlan, stats: Mapping[str, TensorStats]) -> tuple[list[str], dict[str, str]]:
    """Give eligible LayerNorm inputs per-channel power-of-two scales in ``plan`` (in place).

    Returns (tensors that got PTF, ``{tensor: why it kept one scale}``).
    """
    cands, skipped = ptf_tensors(graph)
    done: list[str] = []
    for t in cands:
        tq = plan.tensors.get(t)
        st = stats.get(t)
        if tq is None or tq.method == LOG2_METHOD:
            continue
        if len(plan.groups.get(tq.group, [t])) > 1:
            skipped[t] = "shares its scale with other tensors (data movement)"
            continue
        if st is None or st.channel_absmax is None:
            skipped[t] = "no per-channel statistics"
            continue
        if tq.ptf_alpha is not None:  # already set (a loaded plan)
            done.append(t)
            continue
        base = float(np.float32(tq.scale) / np.float32(2**PTF_MAX_ALPHA))
        alpha = ptf_alphas(st.channel_absmax, base, QMAX[tq.bits])
        if int(alpha.min()) == PTF_MAX_ALPHA:
            skipped[t] = "no channel is narrower than the tensor's range"
            continue
        tq.scale, tq.ptf_alpha, tq.method = base, alpha, f"{tq.method}+ptf"
        done.append(t)
    if done:
        log.debug("ptf: %d LayerNorm input(s) with per-channel power-of-two scales: %s", len(done), ", ".join(done))
    for t, why in skipped.items():
        log.debug("ptf: %s keeps one scale: %s", t, why)
    return done, skipped


def softmax_log2_tensors(graph: Graph) -> tuple[list[str], dict[str, str]]:
    """Softmax outputs whose only consumer is an attention MatMul (probabilities @ V), and why not for the rest."""
    consumers = graph.consumer_map()
    ok: list[str] = []
    skipped: dict[str, str] = {}
    for node in graph.nodes:
        if node.op_type != "Softmax" or not _bpu(node):
            continue
        out = node.outputs[0]
        users = consumers.get(out, [])
        if not _last_axis(graph, node):
            skipped[out] = "Softmax not over the last axis"
        elif out in graph.outputs or len(users) != 1:
            skipped[out] = "read by more than the attention MatMul"
        elif not (_bpu(users[0]) and users[0].op_type == "MatMul" and users[0].inputs[0] == out
                  and not graph.is_const(users[0].inputs[1]) and users[0].inputs[1] != out):
            skipped[out] = f"read by {users[0].op_type} {users[0].name}, not an attention MatMul (P @ V)"
        else:
            ok.append(out)
    return ok, skipped


def apply_softmax_log2(graph: Graph, plan: QuantPlan) -> tuple[list[str], dict[str, str]]:
    """Switch eligible Softmax outputs in ``plan`` to 4-bit log2 codes (in place)."""
    cands, skipped = softmax_log2_tensors(graph)
    done = []
    for t in cands:
        tq = plan.tensors.get(t)
        if tq is None:
            continue
        if len(plan.groups.get(tq.group, [t])) > 1:
            skipped[t] = "shares its scale with other tensors"
            continue
        plan.tensors[t] = TensorQuant(t, LOG2_BITS, 1.0, 1.0, LOG2_METHOD, tq.group)
        done.append(t)
    if done:
        log.debug("softmax_log2: %d Softmax output(s) as 4-bit log2 codes: %s", len(done), ", ".join(done))
    for t, why in skipped.items():
        log.debug("softmax_log2: %s stays linear: %s", t, why)
    return done, skipped


def log2_decode(codes: np.ndarray, bits: int = LOG2_BITS) -> np.ndarray:
    """The probabilities log2 codes stand for: ``2**-k``, and 0 for the top code."""
    k = np.asarray(codes, np.float64)
    return np.where(k >= 2**bits - 1, 0.0, np.exp2(-k))
