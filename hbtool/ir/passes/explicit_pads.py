"""Write ``auto_pad`` (SAME_UPPER / SAME_LOWER / VALID) of Conv and pooling nodes as explicit ``pads``.

TensorFlow-style exports, and torch ``Conv2d(padding="same")`` (HF EfficientNet), give ``auto_pad``
instead of ``pads``; every later stage (the support rules, the integer Conv and pool kernels, the
cost model) reads ``pads``, so the padding is resolved once here from the static input shape, by
ONNX's rule: output ``ceil(in / stride)``, total padding
``max(0, (out - 1) * stride + (k - 1) * dilation + 1 - in)``, the odd element at the end
(SAME_UPPER) or the beginning (SAME_LOWER). Padded elements are what they were (zeros for Conv,
counted or not by AveragePool's ``count_include_pad`` as before): the rewrite changes no value.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph, Node

AUTO_PAD_OPS = {"Conv", "AveragePool", "MaxPool", "LpPool"}


def same_pads(in_size: list[int], kernel: list[int], strides: list[int], dilations: list[int], upper: bool) -> list[int]:
    """ONNX's SAME padding as ``[begin..., end...]``."""
    begins, ends = [], []
    for n, k, s, d in zip(in_size, kernel, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins + ends


def _kernel_shape(graph: Graph, node: Node) -> list[int] | None:
    if node.op_type == "Conv":
        w = graph.shape(node.inputs[1]) if len(node.inputs) > 1 else None
        return list(w[2:]) if w is not None else None
    k = node.attr("kernel_shape")
    return list(k) if k is not None else None


def explicit_pads(graph: Graph) -> int:
    """Replace ``auto_pad`` by ``pads`` where the input shape is known; returns the nodes rewritten."""
    count = 0
    for node in graph.nodes:
        if node.op_type not in AUTO_PAD_OPS or node.domain not in ("", "ai.onnx"):
            continue
        mode = node.attr_text("auto_pad", "NOTSET")
        if mode == "NOTSET":
            continue
        shape = graph.shape(node.inputs[0])
        kernel = _kernel_shape(graph, node)
        if shape is None or kernel is None:
            continue
        nd = len(kernel)
        if mode == "VALID":
            pads = [0] * (2 * nd)
        elif mode in ("SAME_UPPER", "SAME_LOWER"):
            strides = list(node.attr("strides") or [1] * nd)
            dilations = list(node.attr("dilations") or [1] * nd)
            pads = same_pads(list(shape[2:]), kernel, strides, dilations, upper=mode == "SAME_UPPER")
        else:
            continue
        del node.attrs["auto_pad"]
        node.attrs["pads"] = pads
        count += 1
    return count
