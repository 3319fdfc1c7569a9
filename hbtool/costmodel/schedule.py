"""From per-op costs to the model's latency, FPS and the shares that explain them.

The compiler's program order is the schedule: one op after another on one core, each taking
its own cost (:mod:`.cost`), plus a fixed runtime cost per frame on the BPU (``per_frame_us``)
and on the host (``host_per_frame_us``: the runtime's task set-up, cache maintenance of the
input and output buffers, the completion interrupt). That sum is the **latency** (Horizon's:
one thread, one core). With several threads (``fps_threads``) the host part of one frame
overlaps the BPU work of another, so it costs latency but not throughput. **FPS** is throughput mode: both BPU cores each run their
own frames, so it is the smallest of

* cores / BPU time per frame (CPU ops run on the A55 cluster meanwhile),
* sustained DDR bandwidth / DDR bytes per frame (the two cores share the DDR),
* A55 cores / CPU time per frame.

With ``core_num 2`` one frame is split over both cores (each op's unit work halves, the DDR
does not, each op pays a barrier), and FPS is one frame at a time: 1 / latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hbtool.costmodel.cost import IMAGE_INPUT_TYPES, CPU, DATA_MOVEMENT, DDR, OVERHEAD, SRAM, TENSOR, VECTOR, VIEW, CostContext, OpCost, cost_op, image_input_cost
from hbtool.costmodel.hardware import Hardware, hardware_for
from hbtool.errors import InputError
from hbtool.ir.graph import Graph
from hbtool.ir.hz_ops import HZ_REORDER
from hbtool.ir.program_io import program_from_section
from hbtool.kernels.units import UNITS

RUNTIME = "runtime"


@dataclass
class PerfResult:
    model: str
    march: str
    optimize_level: str
    core_num: int
    hw: Hardware
    ops: list[OpCost]
    per_frame_cycles: float
    latency_cycles: float
    fps: float
    fps_1core: float
    fps_bound: str                       # what limits fps: "bpu cores", "ddr bandwidth", "cpu"
    fps_limits: dict[str, float] = field(default_factory=dict)
    passes: dict[str, int] = field(default_factory=dict)
    bpu_cycles: float = 0.0              # BPU busy time per frame (runtime included), one core
    cpu_cycles: float = 0.0              # A55 time per frame (boundary conversions, CPU ops)
    model_outputs: int = 0               # outputs of the compiled model

    def fps_threads(self, threads: int) -> float:
        """Throughput with ``threads`` frames in flight (``hrt_model_exec perf --thread_num``).

        Each thread runs its frames one after another, so it delivers at most 1 / latency; the
        frames of different threads overlap, the BPU cores working on one while the A55 cores
        convert another's inputs and outputs, up to the throughput limits (``fps_limits``).
        """
        return self._threads(threads)[0]

    def fps_bound_at(self, threads: int) -> str:
        """What limits :meth:`fps_threads`: the threads' own latency, or one of ``fps_limits``."""
        return self._threads(threads)[1]

    def _threads(self, threads: int) -> tuple[float, str]:
        if self.core_num > 1:
            return self.fps, self.fps_bound
        limits = self.limits_at(threads)
        bound = min(limits, key=lambda k: limits[k])
        return limits[bound], bound

    def limits_at(self, threads: int) -> dict[str, float]:
        """Every throughput limit with ``threads`` frames in flight (:meth:`fps_threads` is the smallest)."""
        if self.core_num > 1:
            return dict(self.fps_limits)
        n = max(1, int(threads))
        limits = dict(self.fps_limits)
        slow = cpu_slowdown(self.hw, n)
        if slow > 1.0 and self.cpu_cycles:
            # the CPU part of each thread's frame runs slower while the other threads' CPU parts run
            # beside it; the cluster's own throughput limit is taken at the same contention
            limits[f"{n} threads x latency"] = n * self.hw.clock_hz / (self.latency_cycles + (slow - 1.0) * self.cpu_cycles)
            active = min(n, self.hw.cpu_cores)
            limits["cpu"] = active * self.hw.clock_hz / (self.cpu_cycles * slow)
        else:
            limits[f"{n} threads x latency"] = n * self.fps_1core
        return limits

    # ---- totals
    @property
    def latency_ms(self) -> float:
        return self.latency_cycles / self.hw.clock_hz * 1e3

    @property
    def macs(self) -> int:
        return sum(o.macs for o in self.ops)

    @property
    def padded_macs(self) -> int:
        return sum(o.padded_macs for o in self.ops)

    @property
    def gops_per_frame(self) -> float:
        return 2.0 * self.macs / 1e9

    @property
    def ddr_bytes_per_frame(self) -> int:
        return sum(o.ddr_bytes for o in self.ops)

    @property
    def vector_elements(self) -> int:
        return sum(o.vector_elements for o in self.ops)

    @property
    def tensor_vector_ratio(self) -> float | None:
        v = self.vector_elements
        return self.macs / v if v else None

    @property
    def utilisation(self) -> float:
        """Effective int8 ops per second at ``fps`` over the chip's peak."""
        return 2.0 * self.macs * self.fps / (self.hw.peak_int8_tops * 1e12)

    @property
    def tensor_busy_share(self) -> float:
        """MACs done / MACs one core could do in the latency (the MAC array's utilisation)."""
        return self.macs / max(1.0, self.latency_cycles * self.hw.macs_per_cycle * (self.core_num if self.core_num > 1 else 1))

    @property
    def padding_efficiency(self) -> float:
        return self.macs / self.padded_macs if self.padded_macs else 1.0

    def cycles_by(self, key) -> dict[str, float]:
        out: dict[str, float] = {}
        for o in self.ops:
            k = key(o)
            out[k] = out.get(k, 0.0) + o.cycles
        return out

    @property
    def time_share(self) -> dict[str, float]:
        """Share of the latency per op class (tensor, vector, data movement, CPU) and the runtime."""
        by = self.cycles_by(lambda o: o.unit)
        total = self.latency_cycles or 1.0
        share = {u: by.get(u, 0.0) / total for u in UNITS}
        share[RUNTIME] = self.per_frame_cycles / total
        return share

    @property
    def bound_share(self) -> dict[str, float]:
        """Share of the latency per binding resource (the unit, SRAM, DDR, dispatch overhead); the
        time an op waits for its weights (``memory.weight_fetch_exposed``) is DDR time."""
        by: dict[str, float] = {}
        for o in self.ops:
            by[o.bound_by] = by.get(o.bound_by, 0.0) + o.cycles - o.wait
            by[DDR] = by.get(DDR, 0.0) + o.wait
        total = self.latency_cycles or 1.0
        keys = [TENSOR, VECTOR, DATA_MOVEMENT, CPU, SRAM, DDR, OVERHEAD]
        share = {k: by.get(k, 0.0) / total for k in keys}
        share[RUNTIME] = self.per_frame_cycles / total
        return share

    @property
    def bound_by(self) -> str:
        """What binds the model: the resource with the largest share of the latency."""
        share = self.bound_share
        return max(share, key=lambda k: share[k])

    def by_op_type(self) -> list[dict[str, Any]]:
        """Time per op type (count, cycles, share, the resource that binds most of it), largest first."""
        groups: dict[tuple[str, str], list[OpCost]] = {}
        for o in self.ops:
            if o.cycles > 0:
                groups.setdefault((o.unit, o.op_type), []).append(o)
        rows = []
        total = self.latency_cycles or 1.0
        for (unit, op_type), ops in groups.items():
            cycles = sum(o.cycles for o in ops)
            bound: dict[str, float] = {}
            for o in ops:
                bound[o.bound_by] = bound.get(o.bound_by, 0.0) + o.cycles
            rows.append({"op_type": op_type, "unit": unit, "count": len(ops), "cycles": cycles,
                         "share": cycles / total, "bound_by": max(bound, key=lambda k: bound[k]),
                         "ddr_bytes": sum(o.ddr_bytes for o in ops)})
        return sorted(rows, key=lambda r: -r["cycles"])

    def top_ops(self, n: int = 10) -> list[OpCost]:
        return sorted(self.ops, key=lambda o: -o.cycles)[:n]

    def timeline(self) -> list[tuple[OpCost, float, float]]:
        """(op, start, end) in cycles, in schedule order (views take no time)."""
        t = 0.0
        rows = []
        for o in self.ops:
            rows.append((o, t, t + o.cycles))
            t += o.cycles
        return rows


def cpu_slowdown(hw: Hardware, threads: int) -> float:
    """How much slower a frame's CPU operators run while ``threads`` frames are in flight (1: alone).

    The boundary conversions and float subgraphs are memory-bound streams over whole feature maps;
    the A53/A55 cores share one cluster memory port, so each extra core streaming at once slows all of
    them (march ``cpu.concurrency_slowdown`` per extra busy core, up to ``cpu.cores``). Why: the RDK X3
    detectors with most of their time on the CPU (YOLOv8n, YOLOv8n-Seg, YOLOv10n) deliver 3.2-3.5x
    their one-thread FPS with 8 threads on 4 cores, and RepViT-m0.9 2.7x with 4 threads, not 4x."""
    busy = min(max(1, int(threads)), hw.cpu_cores)
    return 1.0 + hw.cpu_concurrency_slowdown * (busy - 1)


#: elementwise kernels the tensor unit's output stage can apply to results as they leave the array
OUTPUT_STAGE_KERNELS = ("Lut",)


def throughput_limits(*, bpu_cycles: float, ddr_bytes: float, cpu_cycles: float, cores: int, clock_hz: float,
                      ddr_bytes_per_s: float, cpu_cores: int, cpu_slow: float) -> dict[str, float]:
    """Frames per second each shared resource allows with one frame per BPU core in flight: the BPU cores
    (``bpu_cycles`` per frame, runtime included), the DDR (``ddr_bytes`` per frame) and the CPU cluster
    (``cpu_cycles`` per frame on ``cpu_cores`` cores, every one busy: ``cpu_slow`` is
    :func:`cpu_slowdown` at full contention). The estimate's FPS is the smallest; ``hbtool debug``'s int16
    prices (:mod:`hbtool.debug.price`) apply the same rule to summed per-node resources."""
    limits = {"bpu cores": cores * clock_hz / max(bpu_cycles, 1.0)}
    if ddr_bytes > 0:
        limits["ddr bandwidth"] = ddr_bytes_per_s / ddr_bytes
    if cpu_cycles > 0:
        limits["cpu"] = cpu_cores * clock_hz / (cpu_cycles * cpu_slow)
    return limits


def fuse_output_stage(program: Graph, ops: list[OpCost], hw: Hardware, nodes: list | None = None) -> list[OpCost]:
    """A lookup-table activation reading the only output of a conv/linear that nothing else reads
    runs in the tensor unit's output stage (march ``units.tensor.output_stage_lut``): its table is
    applied while the results stream out, so it moves no data of its own and issues no pass; only
    vector work beyond the producer's own time would show. ``nodes``: the nodes ``ops`` cost, when
    not the whole program (the memory plan costs one chain)."""
    if not hw.output_stage_lut:
        return ops
    consumers = program.consumer_map()
    by_name = {o.name: o for o in ops}
    producers = program.producer_map()
    for node, op in zip(program.nodes if nodes is None else nodes, ops):
        if op.unit != VECTOR or op.kernel not in OUTPUT_STAGE_KERNELS or not node.inputs:
            continue
        src = producers.get(node.inputs[0])
        prod = by_name.get(src.name) if src is not None else None
        if prod is None or prod.unit != TENSOR or len(consumers.get(node.inputs[0], [])) != 1 or node.inputs[0] in program.outputs:
            continue
        extra = max(0.0, op.components.get(VECTOR, 0.0) - prod.busy)
        op.components = {VECTOR: extra}
        op.overhead = op.exposed = 0.0
        op.sram_bytes = op.ddr_bytes = op.ddr_useful_bytes = 0
        op.note += f"; in the output stage of {prod.name}"
    return ops


def absorb_image_reorders(program: Graph, ops: list[OpCost], ctx: CostContext) -> list[OpCost]:
    """An image input converted on the BPU is written in the layout its reader needs.

    The compiler stores a tensor in the layout of the unit that writes it and inserts an
    ``HzReorder`` where a reader needs more alignment: a float input quantized on the CPU is
    written unpadded, so the BPU copies it into the tensor unit's layout (C to 8, W to 16) before
    the first convolution. An ``nv12`` input is not written by the CPU but by the BPU's own colour
    converter (:func:`~hbtool.costmodel.cost.image_input_cost`), which emits the channels it computes
    straight into that padded layout; so the reorder moves nothing, and the conversion writes the
    padded bytes where the reorder's output lives. Why it matters: costed as a copy, the reorder of
    a 640x640 image is a DDR round trip of 4.5 MB, 0.4 ms of BPU time per frame on the RDK X5.
    """
    if not ctx.image_inputs:
        return ops
    producers = program.producer_map()
    index = {n.name: i for i, n in enumerate(program.nodes)}
    for node, op in zip(program.nodes, ops):
        if node.op_type != HZ_REORDER or not node.inputs:
            continue
        quantize = producers.get(node.inputs[0])
        if quantize is None or not quantize.inputs or quantize.inputs[0] not in ctx.image_inputs:
            continue
        image = quantize.inputs[0]
        out = node.outputs[0]
        i = index[quantize.name]
        converted = image_input_cost(image, ctx.image_inputs[image], ctx.shape(image), ctx.location(out), ctx.hw, ctx.split,
                                     out_bytes=ctx.padded_bytes(out))
        converted.note += ", written in its reader's layout"
        ops[i] = converted
        op.components, op.overhead, op.exposed = {}, 0.0, 0.0
        op.sram_bytes = op.ddr_bytes = op.ddr_useful_bytes = 0
        op.elements = 0
        op.note = f"none: {image}'s colour conversion writes this layout"
    return ops


def estimate_program(program: Graph, tensors: dict[str, dict[str, Any]], hw: Hardware, core_num: int = 1,
                     model: str = "model", optimize_level: str = "", passes: dict[str, int] | None = None,
                     runtime_input_types: dict[str, str] | None = None) -> PerfResult:
    """Cost every op of a compiled program and sum the schedule (see the module docstring).

    ``runtime_input_types`` (input name -> ``input_type_rt``) says which inputs arrive as images
    (nv12, rgb...: 8-bit pixels the BPU takes directly); their boundary quantize is costed as the
    BPU's colour conversion (:func:`~hbtool.costmodel.cost.image_input_cost`) instead of a CPU quantize.
    """
    if core_num not in (1, 2):
        raise InputError(f"--core-num {core_num}: the BPU has 1 or 2 cores per frame", "use --core-num 1 or 2")
    images = {k: v for k, v in (runtime_input_types or {}).items() if v in IMAGE_INPUT_TYPES}
    def cost_all(split: int) -> list[OpCost]:
        ctx = CostContext(program, tensors, hw, split, images)
        return absorb_image_reorders(program, fuse_output_stage(program, [cost_op(n, ctx, n.meta.get("tile")) for n in program.nodes], hw), ctx)

    single = cost_all(1)
    ops = single if core_num == 1 else cost_all(2)
    per_frame = hw.per_frame_us * 1e-6 * hw.clock_hz
    host = hw.host_per_frame_us * 1e-6 * hw.clock_hz
    latency = sum(o.cycles for o in ops) + per_frame + host
    single_latency = sum(o.cycles for o in single) + per_frame + host
    fps_1core = hw.clock_hz / single_latency
    if core_num == 1:
        bpu = sum(o.cycles for o in ops if o.unit != CPU) + per_frame
        cpu = sum(o.cycles for o in ops if o.unit == CPU)
        ddr = sum(o.ddr_bytes for o in ops)
        limits = throughput_limits(bpu_cycles=bpu, ddr_bytes=ddr, cpu_cycles=cpu, cores=hw.cores, clock_hz=hw.clock_hz,
                                   ddr_bytes_per_s=hw.ddr_sustained_bytes_per_s, cpu_cores=hw.cpu_cores,
                                   cpu_slow=cpu_slowdown(hw, hw.cpu_cores))
        bound = min(limits, key=lambda k: limits[k])
        fps = limits[bound]
    else:
        fps = hw.clock_hz / latency
        limits = {"one frame on both cores": fps}
        bound = "one frame on both cores"
    return PerfResult(model, hw.march, optimize_level, core_num, hw, ops, per_frame + host, latency, fps, fps_1core, bound,
                      limits, dict(passes or {}), sum(o.cycles for o in ops if o.unit != CPU) + per_frame,
                      sum(o.cycles for o in ops if o.unit == CPU), len(program.outputs))


def estimate(header: dict[str, Any], core_num: int | None = None, program: Graph | None = None,
             runtime_input_types: dict[str, str] | None = None, board: str | None = None) -> PerfResult:
    """Estimate an artifact (its decoded header; ``program`` if already at hand) on ``board`` (None: the march's default).

    The run-time input types come from the header's ``inputs`` (``type_rt``); ``runtime_input_types``
    overrides them (``perf --input-type-rt``). The artifact is per march; the board only sets the
    operating point it runs at."""
    hw = hardware_for(header["march"], board)
    options = header.get("options", {})
    prog = program if program is not None else program_from_section(header["program"])
    cores = int(core_num if core_num is not None else options.get("core_num", 1) or 1)
    rt_types = {i["name"]: str(i.get("type_rt") or "").lower() for i in header.get("inputs", []) if i.get("type_rt")}
    rt_types.update(runtime_input_types or {})
    return estimate_program(prog, header.get("tensors", {}), hw, cores, header.get("model", {}).get("name", "model"),
                            options.get("optimize_level", ""), header.get("passes", {}), rt_types)


__all__ = ["PerfResult", "estimate", "estimate_program", "RUNTIME", "VIEW"]
