"""Attention masks: keep float-min / -inf constants from poisoning activation ranges.

Exporters write masked attention as ``scores + mask`` with mask values of -inf, float32 min or
-10000. A quantizer that observes such a tensor picks a scale so coarse that every real logit
rounds to zero: the transformer's output stops matching the float model at all. hbtool clamps
masks to ``-MASK_VALUE`` before calibration: exp(-100) is 4e-44, which no softmax (float or the
integer one) can tell from zero, while the logits keep their resolution. Masks computed at run
time on the CPU (from an integer ``attention_mask`` input) get a Clip at the CPU->BPU boundary.
"""

from __future__ import annotations

import numpy as np

from hbtool.checker.placement import integer_derived_tensors
from hbtool.ir.graph import Graph
from hbtool.ir.patterns import flows_into

MASK_VALUE = 100.0
MASK_LIKE = -1.0e4  # values at or below this are masking values, not data


def clamp_masks(graph: Graph) -> int:
    """Clamp mask-like constants and run-time masks that flow into a Softmax; returns the count."""
    consumers = graph.consumer_map()
    count = 0
    for name, v in list(graph.values.items()):
        if not v.is_const or v.data is None or not np.issubdtype(v.data.dtype, np.floating) or v.data.size == 0:
            continue
        if float(np.nanmin(np.where(np.isnan(v.data), 0, v.data))) > MASK_LIKE:
            continue
        if not flows_into(graph, name, "Softmax", consumers=consumers):
            continue
        v.data = np.maximum(v.data, -MASK_VALUE).astype(v.data.dtype)
        count += 1
    derived = integer_derived_tensors(graph)
    for node in list(graph.nodes):
        if node.meta.get("on") != "BPU" or node.op_type not in ("Add", "Sub"):
            continue
        for k, t in enumerate(node.inputs):
            if t not in derived or graph.dtype(t) is None or not np.issubdtype(graph.dtype(t), np.floating):
                continue
            if not flows_into(graph, node.outputs[0], "Softmax", consumers=consumers):
                continue
            lo = graph.add_const(np.array(-MASK_VALUE, np.float32), hint="mask_min")
            hi = graph.add_const(np.array(MASK_VALUE, np.float32), hint="mask_max")
            out = graph.unique_name(f"{t}_clamped")
            graph.set_value(out, graph.shape(t), graph.dtype(t))
            clip = graph.add_node("Clip", [t, lo, hi], [out], name=f"{node.name}_mask_clamp")
            clip.meta.update(on="CPU", bpu_type=None, unit=None, subgraph=None, reason="clamps a run-time attention mask to a finite range before it enters the BPU")
            node.inputs[k] = out
            count += 1
    if count:
        graph.toposort()
    return count
