"""Learned rounding of int8 weights (AdaRound, Nagel et al. 2020), per layer, on calibration data.

Rounding each weight to the nearest integer minimises the weight error, not the layer's output
error. AdaRound learns, per weight, whether to round up or down so that the layer's output on
real inputs changes least: a continuous variable V with h(V) = clip(sigmoid(V) (zeta - gamma)
+ gamma, 0, 1) replaces the rounding, the loss is the output MSE plus a regulariser that pushes
h(V) to 0 or 1 (its exponent beta anneals from 20 to 2), and the final weights round by h(V) >= 0.5.
Scales stay those of the weight plan; only the integers change, so the result is an ordinary
int8 weight (the chip sees nothing special).

The result is returned as float weights on the quantization grid (integer x scale): the
calibrated and quantized models built from them contain exactly the learned integers.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from hbtool.ir.graph import Graph, Node
from hbtool.quant.collect import float_session
from hbtool.quant.weights import WEIGHT_QMAX, weight_input_and_axis

ZETA, GAMMA = 1.1, -0.1


def _rectified_sigmoid(v: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


def _init_v(rest: torch.Tensor) -> torch.Tensor:
    """V such that h(V) equals the fractional part (start from round-to-nearest's neighbourhood)."""
    p = ((rest - GAMMA) / (ZETA - GAMMA)).clamp(1e-4, 1 - 1e-4)
    return torch.log(p / (1 - p))


def _learn(w_over_s: torch.Tensor, forward: Callable[[torch.Tensor], torch.Tensor], target: torch.Tensor,
           iters: int, reg: float = 0.01, lr: float = 0.01) -> torch.Tensor:
    """Learned integer weights (as a float tensor) for ``forward(w_int_like) ~ target``."""
    floor = torch.floor(w_over_s)
    v = _init_v(w_over_s - floor).requires_grad_(True)
    opt = torch.optim.Adam([v], lr=lr)
    warm = int(0.2 * iters)
    for it in range(iters):
        h = _rectified_sigmoid(v)
        out = forward(torch.clamp(floor + h, -WEIGHT_QMAX, WEIGHT_QMAX))
        loss = F.mse_loss(out, target)
        if it >= warm:
            beta = 20.0 + (2.0 - 20.0) * (it - warm) / max(iters - warm, 1)
            loss = loss + reg * (1 - (2 * h - 1).abs().pow(beta)).sum() / h.numel()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return torch.clamp(floor + (_rectified_sigmoid(v) >= 0.5).to(floor.dtype), -WEIGHT_QMAX, WEIGHT_QMAX)


def _layers(graph: Graph, weights: Mapping[str, tuple[np.ndarray, int]]) -> list[tuple[Node, str, int]]:
    """The BPU Conv/Linear layers whose weights are in ``weights``, in graph order."""
    layers: list[tuple[Node, str, int]] = []
    for node in graph.nodes:
        if node.meta.get("on") != "BPU":
            continue
        wa = weight_input_and_axis(node, graph)
        if wa is None or wa[0] not in weights or graph.is_const(node.inputs[0]):
            continue
        if node.op_type == "ConvTranspose" or (node.op_type == "Gemm" and node.attr("transA", 0)):
            continue
        if node.op_type == "Conv":
            nd = np.asarray(graph.const(wa[0])).ndim - 2
            pads = node.attr("pads") or [0] * (2 * nd)
            if nd != 2 or list(pads[:nd]) != list(pads[nd:]):
                continue
        layers.append((node, wa[0], wa[1]))
    return layers


def _on_grid(w: np.ndarray, scales: np.ndarray, axis: int) -> np.ndarray:
    """Round-to-nearest int8 weights as floats on their grid (what the quantized model computes with)."""
    shape = [1] * w.ndim
    shape[axis] = scales.size
    s = scales.astype(np.float32).reshape(shape)
    return (np.clip(np.round(w / s), -WEIGHT_QMAX, WEIGHT_QMAX) * s).astype(np.float32)


def _stack(arrays: list[np.ndarray], node: Node, rows: np.ndarray | None) -> torch.Tensor:
    if node.op_type == "Conv":
        return torch.from_numpy(np.concatenate(arrays).astype(np.float32))
    x = np.concatenate([a.reshape(-1, a.shape[-1]) for a in arrays]).astype(np.float32)
    return torch.from_numpy(x[rows] if rows is not None else x)


def _forward(node: Node, w: torch.Tensor, s: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``f(x, w_over_s)``: the layer's output without bias (the bias is not rounded by this)."""
    if node.op_type == "Conv":
        nd = w.ndim - 2
        pads = node.attr("pads") or [0] * (2 * nd)
        attrs = dict(stride=node.attr("strides") or 1, dilation=node.attr("dilations") or 1, groups=int(node.attr("group", 1)),
                     padding=tuple(pads[:nd]))
        return lambda x, wi: F.conv2d(x, wi * s, **attrs)
    transposed = node.op_type == "Gemm" and bool(node.attr("transB", 0))
    return lambda x, wi: x @ ((wi * s).t() if transposed else wi * s)


def adaround(
    graph: Graph,
    weights: Mapping[str, tuple[np.ndarray, int]],
    batches: Iterable[Mapping[str, np.ndarray]],
    iters: int = 200,
    max_rows: int = 1024,
    progress: Callable[[int, int], None] | None = None,
    context: Mapping[str, tuple[np.ndarray, int]] | None = None,
    conv_samples: int = 4,
) -> dict[str, np.ndarray]:
    """``{weight tensor: float weight on the learned int8 grid}`` for the BPU's Conv/Linear layers of ``weights``.

    Sequential and asymmetric, as AdaRound's and BRECQ's layer-wise reconstruction: the layers are
    learned in graph order, each on the inputs the *quantized-weight* model gives it -- the
    layers already learned with their learned integers, every other weight of ``context`` (the
    whole weight plan) rounded to nearest -- and its target is the float model's output of that
    layer. So a layer's rounding also cancels what the rounding of the layers before it moved,
    and a group of layers learned together does not add up their errors. The learned rounding is
    kept only where it lowers the layer's reconstruction error below round-to-nearest's on the
    same data (else nearest stays: the remedy never makes a layer worse on what it sees).

    A linear layer keeps at most ``max_rows`` input rows (a random subset), a convolution at
    most ``conv_samples`` samples.
    """
    layers = _layers(graph, weights)
    if not layers:
        return {}
    feeds = [dict(f) for _, f in zip(range(16), batches)]
    inputs = sorted({n.inputs[0] for n, _, _ in layers})
    sess = float_session(graph, inputs)
    float_in: dict[str, list[np.ndarray]] = {t: [] for t in inputs}
    for f in feeds:
        for t, arr in zip(inputs, sess.run(inputs, f)):
            float_in[t].append(arr)
    del sess
    # the quantized-weight model the learned layers see: nearest for every planned weight, learned ones replace theirs
    qgraph = graph.copy()
    for name, (scales, axis) in (context or weights).items():
        if qgraph.is_const(name):
            qgraph.values[name].data = _on_grid(np.asarray(qgraph.const(name), np.float32), scales, axis)
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    torch.manual_seed(0)
    for k, (node, wname, axis) in enumerate(layers):
        if wname in out:
            continue
        w = torch.from_numpy(np.array(graph.const(wname), dtype=np.float32))
        scales, _ = weights[wname]
        shape = [1] * w.ndim
        shape[axis] = scales.size
        s = torch.from_numpy(scales.astype(np.float32).reshape(shape))
        count = conv_samples if node.op_type == "Conv" else len(feeds)
        xf_list = float_in[node.inputs[0]][:count]
        qsess = float_session(qgraph, [node.inputs[0]], basic=True)
        xq_list = [qsess.run([node.inputs[0]], f)[0] for f in feeds[:count]]
        del qsess
        rows = None
        if node.op_type != "Conv":
            total = sum(a.reshape(-1, a.shape[-1]).shape[0] for a in xf_list)
            if total > max_rows:
                rows = np.sort(rng.choice(total, max_rows, replace=False))
        xf, xq = _stack(xf_list, node, rows), _stack(xq_list, node, rows)
        f = _forward(node, w, s)
        with torch.no_grad():
            target = f(xf, w / s)
            nearest = torch.clamp(torch.round(w / s), -WEIGHT_QMAX, WEIGHT_QMAX)
            err_nearest = float(F.mse_loss(f(xq, nearest), target))
        learned = _learn(w / s, lambda wi: f(xq, wi), target, iters)
        with torch.no_grad():
            err_learned = float(F.mse_loss(f(xq, learned), target))
        chosen = learned if err_learned < err_nearest else nearest
        out[wname] = (chosen * s).numpy().astype(np.float32)
        qgraph.values[wname].data = out[wname]
        if progress:
            progress(k + 1, len(layers))
    return out
