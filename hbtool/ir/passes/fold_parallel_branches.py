"""Fold linear branches that run beside a Conv on the same input into that Conv (re-parameterization).

Multi-branch training blocks are often deployed unfused: RepGhost adds a BatchNorm of its input
(``x2 = dwconv(x1) + BN(x1)``), RepViT's token mixer adds a 1x1 depthwise conv and the identity to a 3x3
depthwise conv (``conv3(x) + conv1(x) + x``), RepVGG / MobileOne in their training form add 1x1 and
identity-BN branches to a 3x3 conv. Every such branch is linear in the same input, so the sum is one
conv: the small kernel is added at the centre of the big one, the identity is a 1 at the centre tap of
each output channel's own input channel (scaled per channel for a BatchNorm), and the biases add. This
is exactly what the models' own ``reparameterize`` methods compute, done here on any graph that has the
shape, so the BPU runs one conv instead of a conv, a per-channel multiply-add and an elementwise Add
over the whole feature map (RepGhostNet-100: 16 such branches). The float result is the same up to
rounding (the branches are summed in the weights instead of in the activations).

Matched, for ``Add(A, B)`` with both inputs of the output's shape: ``A`` a Conv with constant weights
whose output only this Add reads, and ``B`` one of
- the Conv's own input ``x`` (identity), when the conv keeps the channel count and its output grid is
  the input grid (stride 1, a centre tap at offset 0);
- an inference ``BatchNormalization(x)`` that only this Add reads (identity scaled by ``s``, bias ``t``);
- another Conv of ``x`` (optionally followed by a BatchNormalization only it feeds) with the same group,
  stride and dilation whose kernel sits inside A's at the same output positions, read only by this Add.
The result replaces A (weights and bias) and writes the Add's output; nested sums fold one Add at a time.
A BatchNormalization after the sum (RepViT) then folds into the conv in ``fold_batchnorm``.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.passes.fold_batchnorm import _bn_params
from hbtool.ir.patterns import sole_consumer


def _plain(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _model_quantized(graph: Graph, weight: str) -> bool:
    """The model quantized this weight itself (a QDQ / weight-only import): its integers and scales are the
    user's, kept as they are; a fold would rewrite them and lose that quantization, so such convs stay."""
    pre = getattr(graph, "prequantized", None)
    return pre is not None and weight in pre.weights


def _conv_geometry(graph: Graph, conv: Node) -> dict | None:
    """Weights, bias and attributes of a 2-D Conv with constant weights (``None`` otherwise)."""
    if not _plain(conv, "Conv") or len([o for o in conv.outputs if o]) != 1 or len(conv.inputs) < 2:
        return None
    w = graph.const(conv.inputs[1])
    if w is None or w.ndim != 4 or graph.is_const(conv.inputs[0]) or _model_quantized(graph, conv.inputs[1]):
        return None
    b_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
    b = graph.const(b_name) if b_name else np.zeros(w.shape[0], dtype=w.dtype)
    if b is None:
        return None
    if conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return None  # explicit_pads runs first; anything else is left alone
    kh, kw = int(w.shape[2]), int(w.shape[3])
    pads = [int(p) for p in conv.attrs.get("pads", [0, 0, 0, 0])]
    return {"w": np.asarray(w, np.float64), "b": np.asarray(b, np.float64).reshape(-1), "dtype": w.dtype,
            "group": int(conv.attrs.get("group", 1)), "strides": tuple(int(s) for s in conv.attrs.get("strides", [1, 1])),
            "dilations": tuple(int(d) for d in conv.attrs.get("dilations", [1, 1])), "pads": pads, "k": (kh, kw)}


def _centre_offset(geo: dict, pad_small: tuple[int, int], k_small: tuple[int, int]) -> tuple[int, int] | None:
    """Where a kernel of size ``k_small`` with pads ``pad_small`` (same stride and dilation) sits inside the big
    conv's kernel so that both read the same input positions, or ``None``."""
    out = []
    for axis in (0, 1):
        d = geo["dilations"][axis]
        begin_big, end_big = geo["pads"][axis], geo["pads"][axis + 2]
        begin_small = pad_small[axis]
        shift = begin_big - begin_small
        if shift % d:
            return None
        off = shift // d
        if off < 0 or off + k_small[axis] > geo["k"][axis]:
            return None
        # the small kernel's end padding follows from the same output size: checked by the Add's equal shapes
        del end_big
        out.append(off)
    return out[0], out[1]


def _identity_kernel(geo: dict, scale: np.ndarray) -> np.ndarray | None:
    """A kernel of the big conv's shape that computes ``scale[c] * x[c]`` (``None`` when the conv cannot)."""
    w = geo["w"]
    c_out, c_in_g = int(w.shape[0]), int(w.shape[1])
    group = geo["group"]
    if c_out != c_in_g * group or geo["strides"] != (1, 1) or scale.size != c_out:
        return None
    off = _centre_offset(geo, (0, 0), (1, 1))
    if off is None:
        return None
    k = np.zeros_like(w)
    per_group_out = c_out // group
    if per_group_out != c_in_g:
        return None
    for o in range(c_out):
        k[o, o % c_in_g, off[0], off[1]] = scale[o]
    return k


def _branch(graph: Graph, consumers, add: Node, name: str, x: str, geo: dict) -> tuple[np.ndarray, np.ndarray, list[Node]] | None:
    """The Add input ``name`` as (kernel of the big conv's shape, bias, nodes it removes), when it is a linear
    branch of the big conv's input ``x``."""
    c_out = geo["w"].shape[0]
    if name == x:
        k = _identity_kernel(geo, np.ones(c_out))
        return None if k is None else (k, np.zeros(c_out), [])
    node = graph.producer(name)
    if node is None or sole_consumer(graph, consumers, name) is not add or len([o for o in node.outputs if o]) != 1:
        return None
    scale, shift, removed = np.ones(c_out), np.zeros(c_out), [node]
    if _plain(node, "BatchNormalization"):
        params = _bn_params(graph, node)
        if params is None or params[0].size != c_out:
            return None
        scale, shift = params
        if node.inputs[0] == x:                      # BN(x): an identity branch scaled per channel
            k = _identity_kernel(geo, scale)
            return None if k is None else (k, shift, removed)
        node = graph.producer(node.inputs[0])        # BN(Conv(x)): a conv branch with its BN
        if node is None or sole_consumer(graph, consumers, node.outputs[0]) is not removed[0]:
            return None
        removed.append(node)
    small = _conv_geometry(graph, node)
    if small is None or node.inputs[0] != x or small["group"] != geo["group"] or small["strides"] != geo["strides"]:
        return None
    if small["dilations"] != geo["dilations"] or small["w"].shape[:2] != geo["w"].shape[:2]:
        return None
    off = _centre_offset(geo, (small["pads"][0], small["pads"][1]), small["k"])
    if off is None:
        return None
    k = np.zeros_like(geo["w"])
    kh, kw = small["k"]
    k[:, :, off[0]:off[0] + kh, off[1]:off[1] + kw] = small["w"] * scale.reshape(-1, 1, 1, 1)
    return k, small["b"] * scale + shift, removed


def _fold_add(graph: Graph, add: Node) -> bool:
    if not _plain(add, "Add") or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return False
    out_shape = graph.shape(add.outputs[0])
    if out_shape is None or len(out_shape) != 4 or any(graph.shape(i) != out_shape for i in add.inputs):
        return False
    consumers = graph.consumer_map()
    candidates = []
    for j in (0, 1):
        conv = graph.producer(add.inputs[j])
        geo = _conv_geometry(graph, conv) if conv is not None else None
        if geo is not None and sole_consumer(graph, consumers, add.inputs[j]) is add:
            candidates.append((geo["k"][0] * geo["k"][1], j, conv, geo))
    for _, j, conv, geo in sorted(candidates, key=lambda c: -c[0]):   # the bigger kernel takes the other branch
        found = _branch(graph, consumers, add, add.inputs[1 - j], conv.inputs[0], geo)
        if found is None:
            continue
        k, bias, removed = found
        w_name = graph.add_const((geo["w"] + k).astype(geo["dtype"]), hint=f"{conv.name}_weight_branchfold")
        b_name = graph.add_const((geo["b"] + bias).astype(geo["dtype"]), hint=f"{conv.name}_bias_branchfold")
        conv.inputs = [conv.inputs[0], w_name, b_name]
        old = conv.outputs[0]
        conv.outputs = [add.outputs[0]]
        for node in [add] + removed:
            graph.nodes.remove(node)
        graph.values.pop(old, None)
        return True
    return False


def fold_parallel_branches(graph: Graph) -> int:
    """Conv(x) + (x | BN(x) | Conv'(x) [+ BN]) -> one Conv(x), repeated until nothing more folds."""
    count = 0
    changed = True
    while changed:
        changed = False
        for node in list(graph.nodes):
            if node in graph.nodes and _fold_add(graph, node):
                count += 1
                changed = True
    if count:
        graph.remove_unused()
    return count
