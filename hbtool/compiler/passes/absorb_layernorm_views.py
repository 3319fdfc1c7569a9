"""Transposes around LayerNorm become its read and write order.

CNN-style transformers normalise NCHW feature maps over channels by transposing to NHWC,
running LayerNorm over the last axis and transposing back. The vector unit can walk the
channel axis with a stride, so both transposes disappear into the LayerNorm.
"""

from __future__ import annotations

from hbtool.compiler.passes.common import drop_node, is_bpu_move, sole_user, transpose_perm
from hbtool.ir.graph import Graph
from hbtool.ir.hz_ops import HZ_LAYERNORM


def absorb_layernorm_views(program: Graph) -> int:
    """Absorb a transpose in front of and one behind a LayerNorm into its read/write order."""
    count = 0
    for ln in [n for n in program.nodes if n.op_type == HZ_LAYERNORM]:
        consumers = program.consumer_map()
        producers = program.producer_map()
        before = producers.get(ln.inputs[0])
        if before is not None and is_bpu_move(before, ("Transpose",)) and sole_user(program, before.outputs[0], consumers) is ln:
            perms = dict(ln.meta.get("in_perms") or {})
            perms[0] = transpose_perm(program, before)
            ln.meta["in_perms"] = perms
            drop_node(program, before, before.inputs[0])
            count += 1
            consumers = program.consumer_map()
        after = sole_user(program, ln.outputs[0], consumers)
        if after is not None and is_bpu_move(after, ("Transpose",)) and "out_perm" not in ln.meta:
            perm = transpose_perm(program, after)
            ln.meta["out_perm"] = perm
            old, new = ln.outputs[0], after.outputs[0]
            program.nodes.remove(after)
            ln.outputs = [new]
            program.values.pop(old, None)
            count += 1
    return count

