"""Where every activation lives: SRAM by live range, DDR when it does not fit.

Program order is the schedule. An activation is live from the node that writes it to the
last node that reads it; SRAM (``march.memory.sram_bytes_per_core``) is handed out first-fit
by offset among the activations live at the same time. What does not fit is spilled to DDR
(written once, read by each reader). The model's inputs and outputs, and every tensor the CPU
reads or writes, live in DDR, as do the tensors of data-movement ops unless the
``data_movement_in_sram`` pass let them into SRAM. Weights stream from DDR once per frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hbtool.compiler.layout import LayoutPlan
from hbtool.compiler.units import CPU, DATA_MOVEMENT
from hbtool.ir.graph import Graph
from hbtool.march.description import March

SRAM, DDR = "sram", "ddr"
ALIGN = 64  # allocation granule: one DDR burst / SRAM line


@dataclass
class Placement:
    location: str
    offset: int | None
    size: int
    start: int
    end: int
    why: str

    def to_json(self) -> dict:
        return {"location": self.location, "offset": self.offset, "size": self.size, "live": [self.start, self.end], "why": self.why}


@dataclass
class MemoryPlan:
    sram_bytes: int
    tensors: dict[str, Placement] = field(default_factory=dict)
    sram_peak: int = 0
    ddr_bytes: dict[str, int] = field(default_factory=dict)  # per frame, by cause

    @property
    def ddr_bytes_per_frame(self) -> int:
        return int(sum(self.ddr_bytes.values()))

    def location(self, tensor: str) -> str:
        p = self.tensors.get(tensor)
        return p.location if p is not None else DDR

    def to_json(self) -> dict:
        return {
            "sram_bytes": self.sram_bytes, "sram_peak": self.sram_peak,
            "ddr_bytes_per_frame": self.ddr_bytes_per_frame, "ddr_bytes": dict(sorted(self.ddr_bytes.items())),
            "spilled": sorted(n for n, p in self.tensors.items() if p.location == DDR and p.why == "spilled"),
        }


def _round_up(v: int) -> int:
    return -(-int(v) // ALIGN) * ALIGN


class _FirstFit:
    """Offsets in [0, capacity) for intervals of time; blocks freed after their last use."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.live: list[tuple[int, int, int]] = []  # (offset, size, end)
        self.peak = 0

    def release_before(self, t: int) -> None:
        self.live = [b for b in self.live if b[2] >= t]

    def allocate(self, size: int, end: int) -> int | None:
        offset = 0
        for o, s, _ in sorted(self.live):
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        if offset + size > self.capacity:
            return None
        self.live.append((offset, size, end))
        self.peak = max(self.peak, offset + size)
        return offset


def plan_memory(program: Graph, layout: LayoutPlan, march: March, weight_bytes: int) -> MemoryPlan:
    """Assign every activation to SRAM or DDR and count DDR bytes per frame (see module docstring)."""
    capacity = int(march.param("memory.sram_bytes_per_core"))
    plan = MemoryPlan(capacity)
    order = {n.name: k for k, n in enumerate(program.nodes)}
    producers = program.producer_map()
    consumers = program.consumer_map()
    alloc = _FirstFit(capacity)
    ddr = {"weights": int(weight_bytes), "inputs": 0, "outputs": 0, "spill_write": 0, "spill_read": 0,
           "cpu_exchange": 0, "data_movement": 0}
    names = list(program.inputs) + [o for n in program.nodes for o in n.outputs if o]
    for name in names:
        lay = layout.tensors.get(name)
        if lay is None:
            continue
        size = _round_up(lay.padded_bytes)
        p = producers.get(name)
        readers = consumers.get(name, [])
        start = order[p.name] if p is not None else -1
        end = max([order[r.name] for r in readers], default=start)
        if name in program.outputs:
            end = len(program.nodes)
        units = {p.meta.get("unit", CPU) if p is not None else CPU} | {r.meta.get("unit", CPU) for r in readers}
        dm_nodes = ([p] if p is not None else []) + readers
        if name in program.inputs or name in program.outputs:
            why = "model input" if name in program.inputs else "model output"
        elif CPU in units:
            why = "CPU exchange"
        elif any(n.meta.get("unit") == DATA_MOVEMENT and not n.meta.get("in_sram") and not n.meta.get("view") for n in dm_nodes):
            why = "data movement in DDR"
        else:
            why = ""
        alloc.release_before(start)
        if not why:
            offset = alloc.allocate(size, end)
            if offset is not None:
                plan.tensors[name] = Placement(SRAM, offset, size, start, end, "")
                continue
            why = "spilled"
        plan.tensors[name] = Placement(DDR, None, size, start, end, why)
        n_reads = len(readers)
        if why == "model input":
            ddr["inputs"] += size * max(n_reads, 1)
        elif why == "model output":
            ddr["outputs"] += size
        elif why == "CPU exchange":
            ddr["cpu_exchange"] += size * (1 + n_reads)
        elif why == "data movement in DDR":
            ddr["data_movement"] += size * (1 + n_reads)
        else:
            ddr["spill_write"] += size
            ddr["spill_read"] += size * n_reads
    plan.sram_peak = alloc.peak
    plan.ddr_bytes = ddr
    return plan
