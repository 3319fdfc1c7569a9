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


def adaround(
    graph: Graph,
    weights: Mapping[str, tuple[np.ndarray, int]],
    batches: Iterable[Mapping[str, np.ndarray]],
    iters: int = 200,
    max_rows: int = 1024,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, np.ndarray]:
    """``{weight tensor: float weight on the learned int8 grid}`` for the BPU's Conv/Linear layers.

    Layer inputs are the float model's activations on ``batches``; a linear layer keeps at most
    ``max_rows`` input rows (a random subset), a convolution at most 4 samples.
    """
    layers: list[tuple[Node, str, int]] = []
    for node in graph.nodes:
        if node.meta.get("on") != "BPU":
            continue
        wa = weight_input_and_axis(node, graph)
        if wa is None or wa[0] not in weights or graph.is_const(node.inputs[0]):
            continue
        if node.op_type == "ConvTranspose" or (node.op_type == "Gemm" and node.attr("transA", 0)):
            continue
        layers.append((node, wa[0], wa[1]))
    if not layers:
        return {}
    inputs = sorted({n.inputs[0] for n, _, _ in layers})
    sess = float_session(graph, inputs)
    collected: dict[str, list[np.ndarray]] = {t: [] for t in inputs}
    for k, feeds in enumerate(batches):
        for t, arr in zip(inputs, sess.run(inputs, dict(feeds))):
            if len(collected[t]) < 16:
                collected[t].append(arr)
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
        xs = collected[node.inputs[0]]
        if node.op_type == "Conv":
            x = torch.from_numpy(np.concatenate(xs[:4]).astype(np.float32))
            attrs = dict(stride=node.attr("strides") or 1, dilation=node.attr("dilations") or 1, groups=int(node.attr("group", 1)))
            pads = node.attr("pads") or [0] * (2 * (w.ndim - 2))
            nd = w.ndim - 2
            if list(pads[:nd]) != list(pads[nd:]) or w.ndim != 4:
                continue
            attrs["padding"] = tuple(pads[:nd])

            def fwd(wi, x=x, s=s, attrs=attrs):
                return F.conv2d(x, wi * s, **attrs)
        else:
            x = torch.from_numpy(np.concatenate([a.reshape(-1, a.shape[-1]) for a in xs]).astype(np.float32))
            if x.shape[0] > max_rows:
                x = x[torch.from_numpy(np.sort(rng.choice(x.shape[0], max_rows, replace=False)))]
            transposed = node.op_type == "Gemm" and bool(node.attr("transB", 0))

            def fwd(wi, x=x, s=s, transposed=transposed):
                ww = wi * s
                return x @ (ww.t() if transposed else ww)

        with torch.no_grad():
            target = fwd(w / s)
        learned = _learn(w / s, fwd, target, iters)
        out[wname] = (learned * s).numpy().astype(np.float32)
        if progress:
            progress(k + 1, len(layers))
    return out
