"""Weight quantization of the tensor unit's ops: int8 symmetric, per output channel.

The chip takes int8 weights only ([-127, 127], zero point 0), so weight rounding alone can
cost accuracy; per-channel scales are the default and an MSE search of each channel's clipping
threshold is offered (``weight_clip: mse``), which helps channels with a few outlier weights.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node

WEIGHT_QMAX = 127


def weight_input_and_axis(node: Node, graph: Graph) -> tuple[str, int] | None:
    """The constant weight a tensor-unit node reads and its output-channel axis."""
    op = node.op_type
    if op == "Conv" and graph.is_const(node.inputs[1]):
        return node.inputs[1], 0
    if op == "ConvTranspose" and graph.is_const(node.inputs[1]):
        return node.inputs[1], 1
    if op in ("MatMul", "Linear") and len(node.inputs) > 1 and graph.is_const(node.inputs[1]):
        w = graph.const(node.inputs[1])
        return node.inputs[1], w.ndim - 1
    if op == "Gemm" and graph.is_const(node.inputs[1]):
        return node.inputs[1], 0 if node.attr("transB", 0) else 1
    return None


def channel_absmax(w: np.ndarray, axis: int) -> np.ndarray:
    moved = np.moveaxis(np.abs(w.astype(np.float64)), axis, 0).reshape(w.shape[axis], -1)
    return moved.max(axis=1)


def _mse_threshold(rows: np.ndarray, amax: np.ndarray, steps: int = 64) -> np.ndarray:
    """Per row, the clipping threshold in [0.5, 1] x max that minimises the squared error."""
    best = amax.copy()
    best_err = np.full(amax.shape, np.inf)
    for frac in np.linspace(0.5, 1.0, steps):
        t = np.maximum(amax * frac, 1e-12)
        s = (t / WEIGHT_QMAX)[:, None]
        q = np.clip(np.round(rows / s), -WEIGHT_QMAX, WEIGHT_QMAX) * s
        err = ((rows - q) ** 2).sum(axis=1)
        better = err < best_err
        best[better] = t[better]
        best_err[better] = err[better]
    return best


def weight_scales(w: np.ndarray, axis: int, per_channel: bool = True, clip: str = "none") -> np.ndarray:
    """Scales (one per output channel, or one repeated) for an int8 symmetric weight."""
    amax = channel_absmax(w, axis)
    if not per_channel:
        amax = np.full_like(amax, amax.max())
    if clip == "mse":
        rows = np.moveaxis(w.astype(np.float64), axis, 0).reshape(w.shape[axis], -1)
        if not per_channel:
            flat = rows.reshape(1, -1)
            amax = np.full_like(amax, _mse_threshold(flat, amax[:1])[0])
        else:
            amax = _mse_threshold(rows, amax)
    return (channel_floor(amax) / WEIGHT_QMAX).astype(np.float32)


#: a channel's weight range is floored to this fraction of the layer's largest channel range
CHANNEL_FLOOR = 2.0**-16


def channel_floor(amax: np.ndarray) -> np.ndarray:
    """Per-channel weight ranges with dead (all-zero) and vanishing channels floored.

    A dead filter quantizes to zeros at any scale, but its scale still sets the bias's scale
    ``s_x * s_w[c]`` and the channel's requantization ratio: a zero or denormal scale gives an
    unrepresentable bias and ratio. Flooring it to a small fraction of the layer's largest range
    keeps both in the range of the live channels; a layer whose weights are all zero takes 1.0.
    """
    amax = np.asarray(amax, np.float64)
    top = float(amax.max(initial=0.0))
    if top <= 0 or not np.isfinite(top):
        return np.where(amax > 0, amax, 1.0)
    return np.maximum(amax, top * CHANNEL_FLOOR)


def quantize_weight(w: np.ndarray, scales: np.ndarray, axis: int, qmax: int = WEIGHT_QMAX) -> np.ndarray:
    """Symmetric weight codes in [-qmax, qmax] (127 for int8, 7 for the int4 path)."""
    shape = [1] * w.ndim
    shape[axis] = scales.size
    return np.clip(np.round(w / scales.reshape(shape)), -qmax, qmax).astype(np.int8)


def plan_weights(graph: Graph, per_channel: bool = True, clip: str = "none") -> dict[str, tuple[np.ndarray, int]]:
    """Scales of every BPU weight: ``{weight tensor: (scales, axis)}``."""
    out: dict[str, tuple[np.ndarray, int]] = {}
    for node in graph.nodes:
        if node.meta.get("on") != "BPU":
            continue
        wa = weight_input_and_axis(node, graph)
        if wa is None or wa[0] in out:
            continue
        name, axis = wa
        out[name] = (weight_scales(graph.const(name), axis, per_channel, clip), axis)
    return out


def input_channel_axis(node: Node, graph: Graph) -> tuple[str, int] | None:
    """The data input of a tensor-unit node and the axis its weight contracts over."""
    if node.op_type in ("Conv", "ConvTranspose"):
        return node.inputs[0], 1
    if node.op_type in ("MatMul", "Linear", "Gemm") and not node.attr("transA", 0):
        return node.inputs[0], -1
    return None


def _grouped_conv_delta(err: np.ndarray, means: np.ndarray, groups: int) -> np.ndarray | None:
    """``(W - W_q) m`` of a Conv with ``groups`` groups: output channel o of group g sums its
    kernel's error against the means of group g's input channels; None when the shapes disagree."""
    c_out, c_per_group = err.shape[0], err.shape[1]
    if groups < 1 or c_out % groups or c_per_group * groups != means.size:
        return None
    summed = err.reshape(c_out, c_per_group, -1).sum(axis=2)                   # (C_out, C_in / groups)
    group_means = means.reshape(groups, c_per_group)[np.arange(c_out) // (c_out // groups)]
    return (summed * group_means).sum(axis=1)


def bias_corrections(graph: Graph, weights: dict[str, tuple[np.ndarray, int]], means: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-output-channel bias deltas that cancel the mean error of weight rounding.

    For an input with per-channel mean m, rounding W to W_q shifts the layer's output mean by
    (W - W_q) m; adding that to the bias removes the shift (bias correction, Nagel et al. 2019).
    ``{node name: delta}``. A grouped or depthwise convolution reads only its group's input
    channels, so each output channel's error meets the means of those channels alone; a
    depthwise kernel's rounding shifts its whole response to a flat region (a page margin) by
    ``m_c * sum_k (w - w_q)``, which no later layer can tell from signal.
    """
    out: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        if node.meta.get("on") != "BPU":
            continue
        wa = weight_input_and_axis(node, graph)
        ia = input_channel_axis(node, graph)
        if wa is None or ia is None or ia[0] not in means or wa[0] not in weights:
            continue
        w = graph.const(wa[0]).astype(np.float64)
        scales, axis = weights[wa[0]]
        wq = quantize_weight(w, scales, axis).astype(np.float64)
        shape = [1] * w.ndim
        shape[axis] = scales.size
        err = w - wq * scales.reshape(shape).astype(np.float64)
        m = np.asarray(means[ia[0]], np.float64)
        if node.op_type == "Conv":
            delta = _grouped_conv_delta(err, m, int(node.attr("group", 1) or 1))
        elif node.op_type == "Gemm" and node.attr("transB", 0):
            delta = err @ m if err.shape[1] == m.size else None
        elif node.op_type in ("MatMul", "Linear", "Gemm"):
            delta = m @ err if err.shape[0] == m.size else None
        else:
            delta = None
        if delta is not None:
            out[node.name] = delta
    return out


def fold_bias_delta(graph: Graph, deltas: dict[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray]]:
    """A copy of ``graph`` with each Conv/Gemm's bias correction added to its
    float bias, and the deltas left over.

    Folding the correction into the bias constant makes every model built from that graph (the
    fake-quantized calibrated model, the integer program, a QAT module) carry the same float32
    bias, so the calibrated model, calibrate's quantized model and compile's program agree bit for
    bit. The node gets a bias constant of its own (optimization shares equal constants, such as
    zero biases, between layers); a Conv without a bias gets one. A Gemm with ``beta`` != 1 and
    layers without a bias input (MatMul, a Gemm/Linear without C) keep their delta, which lowering
    adds.
    """
    left: dict[str, np.ndarray] = {}
    out = graph.copy()     # constant arrays are shared: cheap
    for name, delta in deltas.items():
        node = out.node(name)
        delta = np.asarray(delta, np.float64).reshape(-1)
        if node is None or node.op_type not in ("Conv", "Gemm", "Linear") or node.attr("beta", 1.0) != 1.0:
            left[name] = delta
            continue
        bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        if (bias_name is None and node.op_type != "Conv") or bias_name is not None and (
                not out.is_const(bias_name) or out.const(bias_name).size != delta.size):
            left[name] = delta
            continue
        old = np.zeros(delta.size, np.float32) if bias_name is None else np.asarray(out.const(bias_name), np.float32)
        new = (old.astype(np.float64).reshape(-1) + delta).astype(np.float32).reshape(old.shape)
        node.inputs = [*node.inputs[:2], out.add_const(new, hint=f"{name}_corrected_bias")]
    return out, left
