"""Col2Im whose blocks tile the image exactly (block == stride, no pads, dilation 1) -> Reshape/Transpose/Reshape.

``F.fold`` (MobileViTV2's patch folding, exported by dynamo as ``Col2Im``) in general sums
overlapping blocks, which the BPU has no op for. When the blocks are laid edge to edge over the
whole image, every output pixel comes from exactly one input element, so the op is a pure
rearrangement: input ``[N, C*bh*bw, (H/bh)*(W/bw)]`` viewed as ``[N, C, bh, bw, H/bh, W/bw]``,
transposed to ``[N, C, H/bh, bh, W/bw, bw]`` and viewed as ``[N, C, H, W]``. The rearrangement
keeps the integers and their scale, and runs on the BPU as data movement; other Col2Im forms stay
on the CPU with the support rule's reason.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.patterns import ints


def _tiling(graph: Graph, node: Node) -> tuple[list[int], list[int]] | None:
    """``(image, block)`` sizes when ``node`` is an exact edge-to-edge fold, else None."""
    if len(node.inputs) < 3 or graph.shape(node.inputs[0]) is None:
        return None
    image, block = ints(graph, node.inputs[1]), ints(graph, node.inputs[2])
    if image is None or block is None or len(image) != len(block):
        return None
    image, block = list(image), list(block)
    nd = len(block)
    strides = list(node.attr("strides") or [1] * nd)
    if strides != block or any(p != 0 for p in node.attr("pads") or []) or any(d != 1 for d in node.attr("dilations") or []):
        return None
    if any(i % b for i, b in zip(image, block)):
        return None
    return image, block


def col2im_to_rearrange(graph: Graph) -> int:
    """Rewrite exact-tiling Col2Im nodes as Reshape -> Transpose -> Reshape; returns the count."""
    count = 0
    for node in list(graph.nodes):
        if node.op_type != "Col2Im" or node.domain not in ("", "ai.onnx"):
            continue
        tiling = _tiling(graph, node)
        if tiling is None:
            continue
        image, block = tiling
        n, cols, _ = graph.shape(node.inputs[0])
        nd = len(block)
        channels = cols // int(np.prod(block))
        grid = [i // b for i, b in zip(image, block)]
        dtype = graph.dtype(node.inputs[0])
        index = graph.nodes.index(node)
        split = graph.add_const(np.array([n, channels, *block, *grid], np.int64), hint=f"{node.name}_blocks_shape")
        whole = graph.add_const(np.array([n, channels, *image], np.int64), hint=f"{node.name}_image_shape")
        blocks = graph.add_node("Reshape", [node.inputs[0], split], 1, name=f"{node.name}_blocks", index=index)
        graph.set_value(blocks.outputs[0], [n, channels, *block, *grid], dtype)
        # [N, C, b_0..b_{nd-1}, g_0..g_{nd-1}] -> [N, C, g_0, b_0, g_1, b_1, ...]
        perm = [0, 1] + [a for d in range(nd) for a in (2 + nd + d, 2 + d)]
        moved = graph.add_node("Transpose", [blocks.outputs[0]], 1, {"perm": perm}, name=f"{node.name}_interleave", index=index + 1)
        graph.set_value(moved.outputs[0], [n, channels, *[s for d in range(nd) for s in (grid[d], block[d])]], dtype)
        graph.remove_node(node)
        graph.add_node("Reshape", [moved.outputs[0], whole], [node.outputs[0]], name=node.name, index=index + 2)
        count += 1
    if count:
        graph.remove_unused()
    return count
