"""Pad with ``-inf`` followed by MaxPool -> one MaxPool with those pads.

timm's "same" max pooling (``create_pool2d('max', ..., padding='same')``, NesT's block pooling,
TF-ported models) is exported as a constant ``Pad`` whose value is ``-inf`` and a MaxPool with no
padding of its own. The ``-inf`` border is a real tensor in the float graph: calibration cannot
give it a range (it saw "NaN/Inf" and refused a valid model), and an int8 tensor cannot hold it.
MaxPool's own ``pads`` mean exactly that border: a padded element never wins a max, which is what
``-inf`` (or the most negative float) does. So the rewrite is exact when:

* the Pad is ``mode=constant`` with value ``-inf`` or the lowest float32, its pads constant and
  non-negative, and zero on the batch and channel axes;
* its output is read only by that MaxPool, directly or through Transposes each read only by the
  next step (no other reader sees the border; the pads are permuted through the Transposes), and
  is not a graph output;
* the MaxPool has explicit pads (``explicit_pads`` runs first) and no dilation, so the added
  pads shift its windows as the bigger input did, and each side's pads stay below the kernel size
  (ONNX's rule: no window may lie wholly in the padding).

The MaxPool's output size is unchanged: it depends only on input size plus pads.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.patterns import ints, remove_passthrough, scalar, sole_consumer

_LOWEST = float(np.finfo(np.float32).min)


def _border_is_minus_infinity(graph: Graph, pad: Node) -> bool:
    if pad.attr_text("mode", "constant") != "constant":
        return False
    value = pad.inputs[2] if len(pad.inputs) > 2 and pad.inputs[2] else None
    if value is None:
        return False   # the default border is 0: a real value that can win a max
    v = scalar(graph, value)
    return v is not None and (v == -np.inf or v <= _LOWEST)


def _full_pads(graph: Graph, pad: Node, rank: int) -> list[int] | None:
    """The Pad's ``[begin..., end...]`` over every axis, or None when not constant or negative (a crop)."""
    pads = ints(graph, pad.inputs[1]) if len(pad.inputs) > 1 and pad.inputs[1] else None
    if pads is None:
        return None
    axes = ints(graph, pad.inputs[3]) if len(pad.inputs) > 3 and pad.inputs[3] else list(range(rank))
    if axes is None or len(pads) != 2 * len(axes):
        return None
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        a %= rank
        full[a], full[rank + a] = pads[i], pads[len(axes) + i]
    return None if any(p < 0 for p in full) else full


def _pool_behind(graph: Graph, consumers: dict[str, list[Node]], pad: Node, full: list[int]) -> tuple[Node, list[int]] | None:
    """The MaxPool that reads the Pad, directly or through Transposes read only by the next step, and the
    Pad's pads in the MaxPool's axis order. onnxruntime's folding moves an NHWC Pad before the Transpose
    to NCHW, so the border may be added a layout change before the pool."""
    rank = len(full) // 2
    tensor = pad.outputs[0]
    for _ in range(4):
        nxt = sole_consumer(graph, consumers, tensor)
        if nxt is None or nxt.inputs[0] != tensor or nxt.domain not in ("", "ai.onnx"):
            return None
        if nxt.op_type == "MaxPool":
            return nxt, full
        if nxt.op_type != "Transpose" or len(nxt.outputs) != 1:
            return None
        perm = list(nxt.attr("perm") or reversed(range(rank)))
        if sorted(perm) != list(range(rank)):
            return None
        full = [full[p] for p in perm] + [full[rank + p] for p in perm]
        tensor = nxt.outputs[0]
    return None


def fold_pad_into_maxpool(graph: Graph) -> int:
    """Fold every ``-inf`` Pad read only by a MaxPool into that MaxPool's pads; returns the count."""
    consumers = graph.consumer_map()
    count = 0
    for pad in list(graph.nodes):
        if pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx") or len(pad.outputs) != 1:
            continue
        shape = graph.shape(pad.inputs[0])
        if shape is None or not _border_is_minus_infinity(graph, pad):
            continue
        full = _full_pads(graph, pad, len(shape))
        found = _pool_behind(graph, consumers, pad, full) if full is not None else None
        if found is None:
            continue
        pool, full = found
        rank = len(full) // 2
        kernel = pool.attr("kernel_shape")
        if kernel is None or len(kernel) != rank - 2 or full[0] or full[1] or full[rank] or full[rank + 1]:
            continue   # a border on the batch or channel axis adds whole planes of -inf: not a pool pad
        if pool.attr_text("auto_pad", "NOTSET") != "NOTSET" or any(d != 1 for d in pool.attr("dilations") or []):
            continue
        if len([o for o in pool.outputs if o]) != 1:
            continue   # Indices would count the border's positions
        extra = full[2:rank] + full[rank + 2:]
        own = list(pool.attr("pads") or [0] * len(extra))
        total = [a + b for a, b in zip(own, extra)]
        if any(p >= k for p, k in zip(total, list(kernel) * 2)):
            continue   # a window wholly in the border: ONNX (and onnxruntime) refuse pads that reach the kernel size
        pool.attrs["pads"] = total
        remove_passthrough(graph, pad)   # its output is no graph output (sole_consumer), so this always succeeds
        consumers = graph.consumer_map()
        count += 1
    if count:
        graph.remove_unused()
    return count
