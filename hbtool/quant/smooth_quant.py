"""SmoothQuant-style scale migration (Xiao et al. 2023), folded into the float graph before planning.

A Linear/MatMul whose input X has outlier channels is hard to quantize per tensor, while its
weight is easy. With a per-input-channel factor ``s_j = max|X_j|**a / max|W_j|**(1-a)``
(``a`` = ``smooth_alpha``), ``X W = (X / s)(s W)``: the activation's channels are divided by
``s_j`` and the weight's input rows multiplied by it, moving part of the range from the
activation to the weight. Here the division is absorbed by the op that produces X, so the graph
keeps its ops and only its constants change:

* a LayerNorm producer: ``gamma / s``, ``beta / s``;
* a Linear/MatMul/Gemm producer (constant weight): its output channels' weight and bias ``/ s``.

X must reach only constant-weight Linear/MatMul/Gemm nodes (as their data input), directly or
through data movement that keeps the last axis (Reshape, Roll, window partition/reverse, ...);
each of those weights must belong to that node alone. A site is smoothed when X has outlier
channels: its largest channel maximum is at least :data:`OUTLIER_RATIO` times the median one.
Everything downstream (statistics, plan, lowering) sees an ordinary float graph.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from hbtool.ir.graph import Graph, Node

log = logging.getLogger(__name__)

#: a tensor has outlier channels when max_j max|X_j| >= OUTLIER_RATIO * median_j max|X_j|
OUTLIER_RATIO = 4.0
#: bounds of the migration factors
_S_MIN, _S_MAX = 1e-5, 1e5

# data movement that keeps every element in its channel of the last axis (checked further below)
_PATH_OPS = {"Reshape", "Identity", "Squeeze", "Unsqueeze", "WindowPartition", "WindowReverse", "Roll", "Transpose"}


@dataclass
class SmoothSite:
    tensor: str                      # X, the producer's output
    producer: Node
    # (node, weight tensor, True when the weight's rows are the input channels ([K, N]); False for Gemm transB [N, K])
    consumers: list[tuple[Node, str, bool]] = field(default_factory=list)


def _bpu(node: Node | None) -> bool:
    return node is not None and node.meta.get("on") == "BPU"


def _const_weight(graph: Graph, node: Node) -> np.ndarray | None:
    w = graph.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    return w if w is not None and w.ndim == 2 else None


def _keeps_channels(graph: Graph, node: Node, channels: int) -> bool:
    """Whether a data-movement node keeps every element in its channel of the last axis."""
    if node.op_type not in _PATH_OPS or not _bpu(node) or len(node.outputs) != 1:
        return False
    ins, outs = graph.shape(node.inputs[0]), graph.shape(node.outputs[0])
    if not ins or not outs or ins[-1] != channels or outs[-1] != channels:
        return False
    if node.op_type == "Transpose":
        perm = node.attr("perm")
        return perm is not None and int(perm[-1]) == len(ins) - 1
    if node.op_type == "Roll":
        return all(int(a) % len(ins) != len(ins) - 1 for a in (node.attr("axes") or []))
    return True


def _producer_ok(graph: Graph, node: Node) -> str | None:
    if not _bpu(node):
        return "not on the BPU"
    if node.op_type == "LayerNormalization":
        shape = graph.shape(node.inputs[0])
        if shape is None or int(node.attr("axis", -1)) not in (-1, len(shape) - 1) or not graph.is_const(node.inputs[1]):
            return "a LayerNorm over another axis or with a computed gamma"
        if len(node.inputs) > 2 and node.inputs[2] and not graph.is_const(node.inputs[2]):
            return "a LayerNorm with a computed beta"
        return None
    if node.op_type in ("Linear", "MatMul", "Gemm") and _const_weight(graph, node) is not None and not node.attr("transA", 0):
        if len(node.inputs) > 2 and node.inputs[2] and not graph.is_const(node.inputs[2]):
            return "a bias that is computed"
        return None
    return f"{node.op_type} cannot absorb per-channel factors"


def smooth_sites(graph: Graph) -> tuple[list[SmoothSite], dict[str, str]]:
    """Producers that can absorb a migration and the Linear/MatMul nodes their output feeds.

    Returns (sites, ``{tensor: why not}`` for LayerNorm outputs that feed a Linear but cannot be smoothed).
    """
    consumers = graph.consumer_map()
    weight_users = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i and graph.is_const(i):
                weight_users[i] = weight_users.get(i, 0) + 1
    sites: list[SmoothSite] = []
    skipped: dict[str, str] = {}
    for node in graph.nodes:
        if node.op_type not in ("LayerNormalization", "Linear", "MatMul", "Gemm") or not node.outputs:
            continue
        x = node.outputs[0]
        shape = graph.shape(x)
        if not shape or _producer_ok(graph, node) is not None:
            continue
        channels = int(shape[-1])
        site = SmoothSite(x, node)
        why = "a model output" if x in graph.outputs else None
        frontier = [x]
        while frontier and why is None:
            t = frontier.pop()
            for c in consumers.get(t, []):
                w = _const_weight(graph, c) if c.op_type in ("Linear", "MatMul", "Gemm") else None
                if _keeps_channels(graph, c, channels) and c.inputs[0] == t:
                    if c.outputs[0] in graph.outputs:
                        why = "reaches a model output"
                        break
                    frontier.append(c.outputs[0])
                elif w is not None and _bpu(c) and c.inputs[0] == t and not c.attr("transA", 0):
                    rows = not (c.op_type == "Gemm" and c.attr("transB", 0))
                    if (w.shape[0] if rows else w.shape[1]) != channels:
                        why = f"{c.name} does not contract over the channels"
                    elif weight_users.get(c.inputs[1], 0) != 1:
                        why = f"the weight of {c.name} is shared"
                    else:
                        site.consumers.append((c, c.inputs[1], rows))
                        continue
                    break
                else:
                    why = f"also read by {c.op_type} {c.name}"
                    break
        if why is None and site.consumers:
            sites.append(site)
        elif node.op_type == "LayerNormalization" and why is not None and any(
            c.op_type in ("Linear", "MatMul", "Gemm") or _keeps_channels(graph, c, channels) for c in consumers.get(x, [])
        ):
            skipped[x] = why
    return sites, skipped


def smoothing_factors(x_absmax: np.ndarray, w_absmax: np.ndarray, alpha: float) -> np.ndarray:
    """``s_j = max|X_j|**alpha / max|W_j|**(1 - alpha)``, 1 where either is 0, clipped to [1e-5, 1e5]."""
    xm = np.asarray(x_absmax, np.float64)
    wm = np.asarray(w_absmax, np.float64)
    ok = (xm > 0) & (wm > 0)
    s = np.ones_like(xm)
    s[ok] = xm[ok] ** alpha / wm[ok] ** (1.0 - alpha)
    return np.clip(s, _S_MIN, _S_MAX)


def _replace_const(graph: Graph, node: Node, index: int, value: np.ndarray, replaced: set[str]) -> None:
    old = node.inputs[index]
    dtype = graph.const(old).dtype
    node.inputs[index] = graph.add_const(np.asarray(value).astype(dtype), hint=f"{old}_smoothed")
    replaced.add(old)


def apply_smooth_quant(graph: Graph, sites: list[SmoothSite], channel_absmax: Mapping[str, np.ndarray], alpha: float = 0.5,
                       outlier_ratio: float = OUTLIER_RATIO) -> list[dict]:
    """Fold the migration of every site whose tensor has outlier channels into ``graph`` (in place).

    ``channel_absmax`` ``{tensor: per-channel max |x|}`` comes from the calibration data.
    Returns one record per smoothed site.
    """
    done = []
    replaced: set[str] = set()
    for site in sites:
        xm = channel_absmax.get(site.tensor)
        if xm is None or xm.size == 0:
            continue
        p = site.producer
        if p.op_type != "LayerNormalization" and len(p.inputs) > 2 and p.inputs[2] and graph.const(p.inputs[2]).size not in (1, xm.size):
            continue  # a bias that is not one value per output channel
        med = float(np.median(xm))
        ratio = float(xm.max() / med) if med > 0 else float("inf")
        if ratio < outlier_ratio:
            log.debug("smooth_quant: %s has no outlier channels (max/median %.2f)", site.tensor, ratio)
            continue
        wmax = np.zeros(xm.size)
        for c, wname, rows in site.consumers:
            w = np.abs(graph.const(wname).astype(np.float64))
            wmax = np.maximum(wmax, w.max(axis=1) if rows else w.max(axis=0))
        s = smoothing_factors(xm, wmax, alpha)
        if p.op_type == "LayerNormalization":
            _replace_const(graph, p, 1, graph.const(p.inputs[1]).astype(np.float64) / s, replaced)
            if len(p.inputs) > 2 and p.inputs[2]:
                _replace_const(graph, p, 2, graph.const(p.inputs[2]).astype(np.float64) / s, replaced)
        else:
            w = graph.const(p.inputs[1]).astype(np.float64)
            cols = not (p.op_type == "Gemm" and p.attr("transB", 0))
            _replace_const(graph, p, 1, w / s[None, :] if cols else w / s[:, None], replaced)
            if len(p.inputs) > 2 and p.inputs[2]:
                b = np.broadcast_to(graph.const(p.inputs[2]).astype(np.float64).reshape(-1), s.shape)
                _replace_const(graph, p, 2, b / s, replaced)
        for c, wname, rows in site.consumers:
            w = graph.const(wname).astype(np.float64)
            _replace_const(graph, c, 1, w * s[:, None] if rows else w * s[None, :], replaced)
        after = xm / s
        done.append({
            "tensor": site.tensor, "producer": p.name, "consumers": [c.name for c, _, _ in site.consumers],
            "channel_ratio": ratio if np.isfinite(ratio) else None,
            "channel_ratio_after": float(after.max() / max(float(np.median(after)), 1e-30)),
        })
    still_read = {i for n in graph.nodes for i in n.inputs}
    for name in replaced - still_read:
        graph.values.pop(name, None)
    if done:
        log.info("smooth_quant: %d site(s) smoothed (alpha %.2f): %s", len(done), alpha, ", ".join(d["tensor"] for d in done))
    return done
