"""Fold a per-channel constant ``Add`` after a Conv / ConvTranspose into the layer's bias.

Exporters such as paddle2onnx write a ConvTranspose (and sometimes a Conv) without its bias
and add the bias as a separate ``Add(y, c)`` with ``c`` of shape ``(1, M, 1, 1)``. Left apart,
the layer's output is quantized before the bias is added: a DB detector head's logits
(range ~100) go through int8 before the bias and the Sigmoid, so the probability map loses its
resolution around the binarisation threshold. Folded, the layer writes the biased tensor, a
BatchNormalization after the Add folds into the weights too, and the scale of the layer's
output is the one its consumer (e.g. Sigmoid, int16) asks for.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.patterns import other_input, sole_consumer


def _channel_bias(graph: Graph, layer: Node, add: Node) -> np.ndarray | None:
    """The Add's constant as a length-M vector when it is shaped like a channel bias (``(1, M, 1, 1)``, ``(M, 1, 1)``)."""
    y = layer.outputs[0]
    name = other_input(add, y)
    c = graph.const(name) if name else None
    out_shape = graph.shape(y)
    if c is None or out_shape is None or len(out_shape) < 3 or graph.shape(add.outputs[0]) != out_shape:
        return None
    m = int(out_shape[1])
    if c.ndim < 2 or c.ndim > len(out_shape):
        # a scalar is not a bias: ``Conv + 3`` is the start of a hard-sigmoid that fuse_activations needs whole
        return None
    full = (1,) * (len(out_shape) - c.ndim) + tuple(c.shape)
    if any(d != 1 for k, d in enumerate(full) if k != 1) or full[1] not in (1, m):
        return None
    return np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (m,)).copy()


def _out_channels(graph: Graph, layer: Node) -> int | None:
    w = graph.const(layer.inputs[1]) if len(layer.inputs) > 1 else None
    if w is None or w.ndim < 3:
        return None
    if layer.op_type == "Conv":
        return int(w.shape[0])
    return int(w.shape[1]) * int(layer.attrs.get("group", 1))


def fold_conv_bias(graph: Graph) -> int:
    """Conv/ConvTranspose (constant weights) + Add(per-channel constant) -> the layer with that bias."""
    count = 0
    for layer in list(graph.nodes):
        if layer not in graph.nodes or layer.op_type not in ("Conv", "ConvTranspose") or layer.domain not in ("", "ai.onnx"):
            continue
        if len([o for o in layer.outputs if o]) != 1 or graph.is_const(layer.inputs[0]):
            continue
        m = _out_channels(graph, layer)
        add = sole_consumer(graph, graph.consumer_map(), layer.outputs[0])
        if m is None or add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx") or add.inputs[0] == add.inputs[-1]:
            continue
        c = _channel_bias(graph, layer, add)
        if c is None or c.size != m:
            continue
        b_name = layer.inputs[2] if len(layer.inputs) > 2 else ""
        b = graph.const(b_name) if b_name else None
        if b_name and b is None:
            continue
        dtype = graph.const(layer.inputs[1]).dtype
        b_new = (np.zeros(m) if b is None else np.asarray(b, np.float64).reshape(-1)) + c
        layer.inputs = [layer.inputs[0], layer.inputs[1], graph.add_const(b_new.astype(dtype), hint=f"{layer.name}_bias_addfold")]
        old = layer.outputs[0]
        layer.outputs = [add.outputs[0]]
        graph.nodes.remove(add)
        graph.values.pop(old, None)
        count += 1
    if count:
        graph.remove_unused()
    return count
