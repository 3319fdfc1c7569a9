"""Where every activation lives: SRAM by live range, DDR when it does not fit; conv chains in row bands.

Program order is the schedule. An activation is live from the node that writes it to the
last node that reads it; SRAM (``march.memory.sram_bytes_per_core``) is handed out first-fit
by offset among the activations live at the same time. What does not fit is spilled to DDR
(written once, read by each reader). The model's inputs and outputs, and every tensor the CPU
reads or writes, live in DDR, as do the tensors of data-movement ops unless the
``data_movement_in_sram`` pass let them into SRAM. Weights stream from DDR once per frame.

**Row-band tiling of op chains** (:func:`tile_groups`). A feature map too large for SRAM whole
need not go to DDR: every op between its writer and its last reader that computes an output row
from a window of input rows (a conv or pool: ``(k - 1) * dilation + 1`` rows at a stride; an
elementwise op, a channel Concat/Split/Slice, an integer-factor Resize: the same rows) can run
band by band, the whole chain on rows 0..r, then on the next r rows, and so on. Then each
intermediate tensor of the chain (written and read only inside it) needs in SRAM only one band
plus the rows its windowed readers need again at the next band (the halo, ``k_eff - stride``
rows kept as a line buffer, so nothing is recomputed or read twice); the chain's inputs and
outputs, and its weights, are what move to or from DDR. This is the layer-fusion / cascading
every NPU compiler with a small on-chip SRAM does (Arm Vela's cascades, the BM1684X layer
groups; Horizon says the Bayes compiler "reduces DDR bandwidth usage"), and it is physics of any
march with a finite SRAM, so it applies to every march with that march's SRAM size.

Each op of a banded chain runs once per band: it pays its dispatch once per band, and its
weights are either kept in SRAM for the whole chain (they then take SRAM beside the band
buffers) or streamed again from DDR for every band (``ddr_bytes["weights_reread"]``). The plan
takes the fewest bands that fit for either way, and bands a chain only where that pays under the
config's ``compile_mode`` (Horizon's knob): ``latency`` (the default) when the chain's cycles, by
the cost model ``hbtool perf`` uses, drop; ``bandwidth`` when its DDR bytes drop; ``balance`` a
mix. The banded ops carry ``meta["tile"]`` (chain id, bands, weight reads) so the cost model reads
the dispatches and re-reads from the compiled program. Tiling changes where tensors live, never
what is computed: ``simulate`` does not read the memory plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hbtool.compiler.layout import LayoutPlan
from hbtool.compiler.units import CPU, DATA_MOVEMENT, TENSOR, VECTOR
from hbtool.costmodel.cost import CostContext, cost_op
from hbtool.costmodel.hardware import hardware_for
from hbtool.costmodel.schedule import fuse_output_stage
from hbtool.errors import InputError
from hbtool.ir.graph import Graph, Node
from hbtool.march.description import March

SRAM, DDR = "sram", "ddr"
ALIGN = 64  # allocation granule: one DDR burst / SRAM line
TILED = "row-band buffer"


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
class TileGroup:
    """A chain of program nodes ``first..last`` run in ``bands`` row bands (see the module docstring)."""

    first: int
    last: int
    bands: int
    buffers: dict[str, int]          # intermediate tensor -> band buffer bytes (band + halo rows)
    weight_bytes: int
    weights_resident: bool
    saved: int                       # DDR bytes per frame the spills of the intermediates cost
    extra: int                       # DDR bytes per frame the banding costs (weights re-read)
    cycles_saved: float = 0.0        # the chain's cycles untiled minus banded (cost model, one core)
    gain: float = 0.0                # what the compile mode optimises (see :func:`plan_memory`)

    @property
    def weight_reads(self) -> int:
        return 1 if self.weights_resident else self.bands

    def to_json(self) -> dict:
        return {"nodes": [self.first, self.last], "bands": self.bands, "intermediates": len(self.buffers),
                "band_buffer_bytes": int(sum(self.buffers.values())), "weight_bytes": self.weight_bytes,
                "weights": "resident" if self.weights_resident else f"re-read per band ({self.bands}x)",
                "ddr_saved": self.saved, "ddr_extra": self.extra, "cycles_saved": round(self.cycles_saved)}


class _Objective:
    """What banding a chain gains under the compile mode: cycles (``latency``), DDR bytes
    (``bandwidth``), or a mix (``balance``, ``balance_factor`` 0 = bandwidth .. 100 = latency).

    Cycles come from the cost model the perf estimate uses (:func:`hbtool.costmodel.cost.cost_op`) on the
    chain's nodes, run as each candidate tiling says, with the chain's tensors where each plan puts them: so a chain whose ops wait on
    their compute, not on DDR, is not banded in latency mode just to pay more dispatches."""

    def __init__(self, program: Graph, layout: LayoutPlan, march: March, mode: str, balance_factor: int):
        self.program, self.layout = program, layout
        self.hw = None
        try:
            self.hw = hardware_for(march)
        except InputError:  # a march file without the cost model's parameters: DDR bytes only
            mode = "bandwidth"
        self.mode = mode
        self.weight = 1.0 if mode == "latency" else 0.0 if mode == "bandwidth" else min(1.0, max(0.0, balance_factor / 100.0))

    def cycles(self, nodes: list[Node], location, tile: dict | None) -> float:
        tensors: dict[str, dict] = {}
        for n in nodes:
            for t in list(n.inputs) + list(n.outputs):
                lay = self.layout.tensors.get(t) if t else None
                if lay is not None and t not in tensors:
                    tensors[t] = {"padded": list(lay.padded), "padded_bytes": lay.padded_bytes,
                                  "element_bytes": lay.element_bytes, "memory": {"location": location(t)}}
        ctx = CostContext(self.program, tensors, self.hw)
        ops = fuse_output_stage(self.program, [cost_op(n, ctx, tile) for n in nodes], self.hw, nodes)
        return float(sum(o.cycles for o in ops))

    def gain(self, cycles_saved: float, bytes_saved: int) -> float:
        per_cycle = self.hw.ddr_bytes_per_cycle if self.hw is not None else 1.0
        return self.weight * cycles_saved * per_cycle + (1.0 - self.weight) * bytes_saved


@dataclass
class MemoryPlan:
    sram_bytes: int
    tensors: dict[str, Placement] = field(default_factory=dict)
    sram_peak: int = 0
    ddr_bytes: dict[str, int] = field(default_factory=dict)  # per frame, by cause
    tiles: list[TileGroup] = field(default_factory=list)

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
            "tiled": [g.to_json() for g in self.tiles],
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


def _node_weight_bytes(node: Node) -> int:
    kernel = node.meta.get("kernel")
    if kernel is None or node.meta.get("unit") == CPU:
        return 0
    return int(kernel.param_bytes())


def _halo_rows(node: Node, program: Graph) -> int | None:
    """Input rows a row-band run of ``node`` reads again at the next band (``k_eff - stride``), or None
    when the node cannot run in row bands (an output row needs rows far apart, or all of them)."""
    acts = [n for n in node.inputs if n and not program.is_const(n)]
    outs = [o for o in node.outputs if o]
    if not acts or not outs:
        return None
    shapes = [program.shape(n) for n in acts + outs]
    if any(s is None or len(s) != 4 for s in shapes) or len({int(s[0]) for s in shapes}) != 1:
        return None
    h_in = {int(program.shape(n)[2]) for n in acts}
    h_out = {int(program.shape(o)[2]) for o in outs}
    unit = node.meta.get("unit")
    kernel = node.meta.get("kernel")
    kind = type(kernel).__name__ if kernel is not None else node.op_type
    if unit == TENSOR and kind == "Conv" and len(acts) == 1:
        k = [int(d) for d in kernel.weight.shape[2:]]
        if len(k) != 2:
            return None
        span = (k[0] - 1) * int(kernel.dilations[0]) + 1
        stride = int(kernel.strides[0])
    elif unit == VECTOR and kind in ("MaxPool", "AvgPool") and len(acts) == 1:
        k = [int(d) for d in kernel.kernel_shape]
        if len(k) != 2:
            return None
        span = (k[0] - 1) * int(getattr(kernel, "dilations", (1, 1))[0]) + 1
        stride = int(kernel.strides[0])
    elif unit == VECTOR and kind in ("Lut", "Add", "Mul", "Requantize"):
        return 0 if len(h_in | h_out) == 1 else None
    elif unit == DATA_MOVEMENT and (node.meta.get("in_sram") or node.meta.get("view")):
        if node.op_type in ("Concat", "Split", "Slice") and len(h_in | h_out) == 1:
            return 0  # channel (or width) moves: every output row is made of the same input row
        if node.op_type == "Resize" and len(h_in) == 1 and len(h_out) == 1:
            hi, ho = next(iter(h_in)), next(iter(h_out))
            return 0 if ho >= hi and ho % hi == 0 else None  # nearest upsampling by an integer factor
        return None
    else:
        return None
    hi = next(iter(h_in)) if len(h_in) == 1 else 0
    if hi <= 1 or span >= hi:  # a window over (nearly) all rows: no bands
        return None
    return max(0, span - stride)


def _allocate(program: Graph, layout: LayoutPlan, capacity: int, weight_bytes: int,
              groups: list[TileGroup]) -> MemoryPlan:
    plan = MemoryPlan(capacity)
    order = {n.name: k for k, n in enumerate(program.nodes)}
    producers = program.producer_map()
    consumers = program.consumer_map()
    alloc = _FirstFit(capacity)
    ddr = {"weights": int(weight_bytes), "inputs": 0, "outputs": 0, "spill_write": 0, "spill_read": 0,
           "cpu_exchange": 0, "data_movement": 0}
    band = {t: b for g in groups for t, b in g.buffers.items()}
    pending = sorted(groups, key=lambda g: g.first)  # resident weights are reserved when the chain starts
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
        while pending and pending[0].first <= start:
            g = pending.pop(0)
            alloc.release_before(g.first)
            if g.weights_resident and alloc.allocate(_round_up(g.weight_bytes), g.last) is None:
                g.weights_resident = False  # no room after all: the weights stream again for every band
                g.extra = (g.bands - 1) * g.weight_bytes
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
            if name in band:
                offset = alloc.allocate(band[name], end)
                if offset is not None:
                    plan.tensors[name] = Placement(SRAM, offset, band[name], start, end, TILED)
                    continue
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
    if groups:
        ddr["weights_reread"] = int(sum(g.extra for g in groups))
    plan.sram_peak = alloc.peak
    plan.ddr_bytes = ddr
    plan.tiles = list(groups)
    return plan


def _evaluate(program: Graph, layout: LayoutPlan, base: MemoryPlan, capacity: int, first: int, last: int,
              halos: list[int | None], weights: list[int], objective: _Objective) -> TileGroup | None:
    """The best row banding of nodes ``first..last`` against the untiled plan ``base``, or None if none pays.

    Every band is one more pass of every op of the chain (one more dispatch each), so for each way
    to hold the weights (kept in SRAM, or streamed per band) the fewest bands that fit are best; the
    chain is banded only where that gains under the compile mode (:class:`_Objective`)."""
    nodes = program.nodes[first:last + 1]
    if any(halos[k] is None for k in range(first, last + 1)):
        return None
    order = {n.name: k for k, n in enumerate(program.nodes)}
    consumers = program.consumer_map()
    inside = {n.name for n in nodes}
    outputs = set(program.outputs)
    rows: dict[str, tuple[int, int, int]] = {}  # tensor -> (height, bytes per row, halo rows)
    saved = 0
    for n in nodes:
        for t in n.outputs:
            readers = consumers.get(t, [])
            if not t or t in outputs or not readers or any(r.name not in inside for r in readers):
                continue
            lay = layout.tensors.get(t)
            p = base.tensors.get(t)
            if lay is None or p is None or p.why not in ("", "spilled"):
                return None
            h = int(lay.shape[2])
            halo = max(halos[order[r.name]] or 0 for r in readers)
            rows[t] = (h, -(-lay.padded_bytes // h), halo)
            if p.location == DDR:
                saved += p.size * (1 + len(readers))
    if not rows or saved <= 0:
        return None
    # line buffers of the chain's inputs read from DDR by windowed ops: their halo rows stay in SRAM
    ext: dict[str, tuple[int, int, int]] = {}
    for n in nodes:
        h = halos[order[n.name]] or 0
        for t in n.inputs:
            if t and not program.is_const(t) and t not in rows and h and base.location(t) == DDR and t in layout.tensors:
                lay = layout.tensors[t]
                ext[t] = (int(lay.shape[2]), -(-lay.padded_bytes // int(lay.shape[2])), max(h, ext.get(t, (0, 0, 0))[2]))
    # SRAM the rest of the plan holds while the chain runs
    others = [p for t, p in base.tensors.items() if p.location == SRAM and t not in rows and p.start <= last and p.end >= first]
    busy = max((sum(p.size for p in others if p.start <= k <= p.end) for k in range(first, last + 1)), default=0)
    avail = capacity - busy
    w = int(sum(weights[first:last + 1]))

    def need(bands: int) -> int:
        band_bufs = sum(_round_up(min(h, -(-h // bands) + halo) * rb) for h, rb, halo in rows.values())
        return band_bufs + sum(_round_up(halo * rb) for _, rb, halo in ext.values())

    h_min = min(h for h, _, _ in rows.values())
    timed = objective.hw is not None and objective.weight > 0
    untiled = objective.cycles(nodes, base.location, None) if timed else 0.0
    best: TileGroup | None = None
    for resident in (True, False):
        for bands in range(2, h_min + 1):
            if need(bands) + (_round_up(w) if resident else 0) > avail:
                continue
            buffers = {t: _round_up(min(h, -(-h // bands) + halo) * rb) for t, (h, rb, halo) in rows.items()}
            extra = 0 if resident else (bands - 1) * w
            cycles_saved = 0.0
            if timed:
                tile = {"bands": bands, "weight_reads": 1 if resident else bands}
                cycles_saved = untiled - objective.cycles(nodes, lambda t: SRAM if t in rows else base.location(t), tile)
            g = TileGroup(first, last, bands, buffers, w, resident, saved, extra, cycles_saved,
                          objective.gain(cycles_saved, saved - extra))
            if g.gain > 0 and (best is None or g.gain > best.gain):
                best = g
            break
    return best


def tile_groups(program: Graph, layout: LayoutPlan, base: MemoryPlan, capacity: int, objective: _Objective) -> list[TileGroup]:
    """Chains to run in row bands: around every spilled tensor whose writer and readers, and every node
    scheduled between them, can run in bands; overlapping chains merge where the merged chain saves more."""
    order = {n.name: k for k, n in enumerate(program.nodes)}
    producers = program.producer_map()
    consumers = program.consumer_map()
    halos = [_halo_rows(n, program) for n in program.nodes]

    def evaluate(first: int, last: int) -> TileGroup | None:
        return _evaluate(program, layout, base, capacity, first, last, halos, weights, objective)

    weights = [_node_weight_bytes(n) for n in program.nodes]
    spans = []
    for t, p in base.tensors.items():
        if p.location != DDR or p.why != "spilled":
            continue
        prod, readers = producers.get(t), consumers.get(t, [])
        if prod is None or not readers:
            continue
        first, last = order[prod.name], max(order[r.name] for r in readers)
        if all(halos[k] is not None for k in range(first, last + 1)):
            spans.append((first, last))
    groups: list[TileGroup] = []
    cur: TileGroup | None = None
    for first, last in sorted(set(spans)):
        if cur is not None and first <= cur.last:
            if last <= cur.last:
                continue
            alone = evaluate(cur.last + 1, last)
            merged = evaluate(cur.first, last)
            if merged is not None and merged.gain >= cur.gain + (alone.gain if alone is not None else 0):
                cur = merged
            elif alone is not None:
                groups.append(cur)
                cur = alone
            continue
        if cur is not None:
            groups.append(cur)
        cur = evaluate(first, last)
    if cur is not None:
        groups.append(cur)
    return groups


def plan_memory(program: Graph, layout: LayoutPlan, march: March, weight_bytes: int, tiling: bool = True,
                compile_mode: str = "latency", balance_factor: int = 50) -> MemoryPlan:
    """Assign every activation to SRAM or DDR and count DDR bytes per frame (see module docstring).

    With ``tiling`` (the default) chains whose intermediates spill run in row bands where that pays
    under ``compile_mode`` (``latency``: the chain's cycles drop; ``bandwidth``: its DDR bytes drop;
    ``balance``: a mix by ``balance_factor``, 0 = bandwidth .. 100 = latency); the banded nodes get
    ``meta["tile"]`` = ``{"group", "bands", "weight_reads"}``."""
    capacity = int(march.param("memory.sram_bytes_per_core"))
    for n in program.nodes:
        n.meta.pop("tile", None)
    base = _allocate(program, layout, capacity, weight_bytes, [])
    if not tiling:
        return base
    groups = tile_groups(program, layout, base, capacity, _Objective(program, layout, march, compile_mode, balance_factor))
    if not groups:
        return base
    plan = _allocate(program, layout, capacity, weight_bytes, groups)
    if plan.ddr_bytes_per_frame >= base.ddr_bytes_per_frame and compile_mode == "bandwidth":
        return base  # fragmentation ate the gain
    for k, g in enumerate(plan.tiles):
        for n in program.nodes[g.first:g.last + 1]:
            n.meta["tile"] = {"group": k, "bands": g.bands, "weight_reads": g.weight_reads}
    return plan
