"""Data-movement ops work in SRAM instead of DDR.

Without this pass every reshape, transpose, slice, concat, window op and roll reads its
input from DDR and writes its output back (strided accesses waste most of each DDR burst).
With it, their tensors are candidates for SRAM like any other activation, and the memory
planner only sends them to DDR when SRAM is full.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph


def data_movement_in_sram(program: Graph) -> int:
    """Let data-movement ops keep their tensors in SRAM (spilling to DDR only when full)."""
    count = 0
    for node in program.nodes:
        if node.meta.get("on") == "BPU" and "kernel" not in node.meta:
            node.meta["in_sram"] = True
            count += 1
    return count
