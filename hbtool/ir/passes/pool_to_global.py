"""AveragePool / MaxPool whose one window covers the whole input -> GlobalAveragePool / GlobalMaxPool.

transformers' EfficientNet ends in ``nn.AvgPool2d(1280, ceil_mode=True)`` on a 7x7 map: a kernel
far larger than the input, which ``ceil_mode`` still turns into one output position. The support
rules bound pooling kernels (the BPU's window is at most 256), but a window over everything is a
global pool, which the BPU reduces whole. The rewrite is exact when:

* every spatial output size is 1 and the window (dilation 1) starting at ``-pad_begin`` reaches
  past the input's end (``kernel - pad_begin >= in``);
* for AveragePool, no padding is counted in the divisor: ``count_include_pad = 0``, or all pads
  zero. ONNX (and onnxruntime, and torch) count explicit pads with ``count_include_pad = 1`` but
  never the ``ceil_mode`` overhang past them, so the divisor is then exactly the input's size;
* for MaxPool, only the first output (no Indices): padding never wins a max.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph, Node

GLOBAL_FORM = {"AveragePool": "GlobalAveragePool", "MaxPool": "GlobalMaxPool"}


def covers_whole_input(graph: Graph, node: Node) -> bool:
    """True when ``node`` computes exactly its global pool (see the module docstring)."""
    shape, out_shape = graph.shape(node.inputs[0]), graph.shape(node.outputs[0])
    kernel = node.attr("kernel_shape")
    if shape is None or out_shape is None or kernel is None or len(shape) < 3:
        return False
    nd = len(kernel)
    spatial = list(shape[2:])
    pads = list(node.attr("pads") or [0] * (2 * nd))
    if node.attr("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") or len(spatial) != nd:
        return False
    if any(d != 1 for d in node.attr("dilations") or [1] * nd):
        return False
    if tuple(out_shape[2:]) != (1,) * nd or tuple(out_shape[:2]) != tuple(shape[:2]):
        return False
    if any(k - pads[i] < n for i, (k, n) in enumerate(zip(kernel, spatial))):
        return False
    if node.op_type == "AveragePool":
        return int(node.attr("count_include_pad", 0)) == 0 or all(p == 0 for p in pads)
    return len([o for o in node.outputs if o]) == 1 and len(node.outputs) == 1


def pool_to_global(graph: Graph) -> int:
    """Rewrite whole-input AveragePool / MaxPool nodes as their global forms; returns the count."""
    count = 0
    for node in list(graph.nodes):
        if node.op_type not in GLOBAL_FORM or node.domain not in ("", "ai.onnx"):
            continue
        if not covers_whole_input(graph, node):
            continue
        node.op_type = GLOBAL_FORM[node.op_type]
        node.attrs = {}
        count += 1
    return count
