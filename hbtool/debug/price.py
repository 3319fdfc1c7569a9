"""The FPS price of ``OutputType: int16`` per node, from the cost model, and the set that fits a budget.

Why not multiply-accumulates: on the all-int8 PP-OCRv5 recogniser the elementwise Mul/Add outputs
add no MACs at int16, yet every candidate output at int16 costs 20.9 % of the estimated FPS, most
of it in the int16 tensors' DDR traffic and the vector unit's wider elements; 144 outputs "free" by
MACs cost 17 %. The cost model already says what each op of a compiled program costs and why, so
the price of a node's int16 output is read from two programs, not guessed:

* the all-int8 program (the model kept) and the program with every candidate output at int16,
  each costed op by op (:func:`hbtool.costmodel.schedule.estimate`);
* an op's extra BPU cycles and DDR bytes at int16 are charged to the int16 outputs that caused
  them: its own output, and the candidates whose output reaches its inputs (an int16 input widens
  the consumer's reads; through reorders, reshapes and the output's dequantize, which are no
  candidates), in equal shares, so the prices add up to the whole difference;
* the FPS of a set of int16 outputs is the schedule's rule on the summed resources: the smallest
  of the BPU cores' limit (cycles per frame) and the DDR's (bytes per frame), the CPU's unchanged.

Two cost-model evaluations per session, whatever the number of nodes. The sum is a model of the
compiled program, not the program: a set chosen by it is still compiled and priced for real when
it is tried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: the least price a node is given when dividing a gain by it (a node whose int16 costs nothing is not
#: infinitely good: its gain still orders those)
MIN_RELATIVE_PRICE = 1e-4


@dataclass
class Int16Prices:
    """Per candidate node: the BPU cycles and DDR bytes per frame its int16 output adds (see the module docstring)."""

    cycles: dict[str, float]
    ddr_bytes: dict[str, float]
    base_bpu_cycles: float
    base_ddr_bytes: float
    base_cpu_cycles: float
    base_fps: float
    cores: int
    clock_hz: float
    ddr_bytes_per_s: float
    cpu_cores: int
    core_num: int = 1
    base_latency_cycles: float = 0.0
    #: "why" per node: the ops whose difference it was charged with (for the report and the tests)
    ops: dict[str, list[str]] = field(default_factory=dict)
    #: the CPU cluster's slowdown with every core busy (:func:`hbtool.costmodel.schedule.cpu_slowdown`)
    cpu_slow: float = 1.0

    def fps(self, names) -> float:
        """The estimated FPS with the int16 outputs of ``names`` (the schedule's rule on the summed resources)."""
        names = [n for n in names if n in self.cycles]
        extra_cycles = sum(self.cycles[n] for n in names)
        if self.core_num > 1:      # one frame on both cores: 1 / latency
            return self.clock_hz / max(self.base_latency_cycles + extra_cycles / self.core_num, 1.0)
        from hbtool.costmodel.schedule import throughput_limits

        limits = throughput_limits(bpu_cycles=self.base_bpu_cycles + extra_cycles,
                                   ddr_bytes=self.base_ddr_bytes + sum(self.ddr_bytes[n] for n in names),
                                   cpu_cycles=self.base_cpu_cycles, cores=self.cores, clock_hz=self.clock_hz,
                                   ddr_bytes_per_s=self.ddr_bytes_per_s, cpu_cores=self.cpu_cores, cpu_slow=self.cpu_slow)
        return min(limits.values())

    def room(self, floor_fps: float) -> tuple[float, float]:
        """(BPU cycles, DDR bytes) per frame the int16 outputs may add before the FPS falls under ``floor_fps``."""
        floor_fps = max(floor_fps, 1e-9)
        if self.core_num > 1:
            return (self.clock_hz / floor_fps - self.base_latency_cycles) * self.core_num, float("inf")
        cycles = self.cores * self.clock_hz / floor_fps - self.base_bpu_cycles
        ddr = self.ddr_bytes_per_s / floor_fps - self.base_ddr_bytes if self.base_ddr_bytes > 0 else float("inf")
        return cycles, ddr

    def relative(self, name: str, floor_fps: float) -> float:
        """The node's price as a share of the budget: the larger of its cycles' and its bytes' share of the room."""
        cycles_room, ddr_room = self.room(floor_fps)
        if cycles_room <= 0 or ddr_room <= 0:
            return float("inf")
        return max(self.cycles.get(name, 0.0) / cycles_room, self.ddr_bytes.get(name, 0.0) / ddr_room, 0.0)

    def fits(self, names, floor_fps: float) -> bool:
        return self.fps(names) >= floor_fps


def perf_of(session, compiled, node_info) -> Any:
    """The cost model's estimate (:class:`hbtool.costmodel.schedule.PerfResult`) of a compiled variant."""
    from hbtool.costmodel.schedule import estimate

    return estimate(compiled.header, session.config_with(node_info).compiler.core_num, program=compiled.program)


def int16_prices(base_perf, wide_perf, program, candidates: list[str]) -> Int16Prices:
    """The prices of ``candidates``' int16 outputs from the costed programs without (``base_perf``) and with all of
    them (``wide_perf``); ``program``: the compiled graph (its ops are named after the calibrated model's nodes)."""
    from hbtool.costmodel.cost import CPU
    from hbtool.costmodel.schedule import cpu_slowdown

    cand = set(candidates)
    producers = program.producer_map()
    base_ops = {o.name: o for o in base_perf.ops}
    cycles = {n: 0.0 for n in candidates}
    ddr = {n: 0.0 for n in candidates}
    why: dict[str, list[str]] = {n: [] for n in candidates}
    for op in wide_perf.ops:
        before = base_ops.get(op.name)
        if before is None:
            continue
        d_cycles = (op.cycles - before.cycles) if op.unit != CPU else 0.0
        d_bytes = float(op.ddr_bytes - before.ddr_bytes)
        if d_cycles == 0.0 and d_bytes == 0.0:
            continue
        owners = ([op.name] if op.name in cand else []) + _int16_sources(program, op.name, producers, cand)
        owners = list(dict.fromkeys(owners))
        if not owners:      # an op no candidate reaches (it did not change with them): nothing to charge
            continue
        for o in owners:
            cycles[o] += d_cycles / len(owners)
            ddr[o] += d_bytes / len(owners)
            why[o].append(op.name)
    base_ddr = float(sum(o.ddr_bytes for o in base_perf.ops))
    hw = base_perf.hw
    return Int16Prices(cycles, ddr, float(base_perf.bpu_cycles), base_ddr, float(base_perf.cpu_cycles), float(base_perf.fps),
                       int(hw.cores), float(hw.clock_hz), float(hw.ddr_sustained_bytes_per_s), int(hw.cpu_cores),
                       int(base_perf.core_num), float(base_perf.latency_cycles), why, cpu_slowdown(hw, hw.cpu_cores))


#: how far back through ops that are no candidate (reorders, reshapes, the output's dequantize) an op's wider
#: input is traced to the int16 outputs that widened it
TRACE_DEPTH = 16


def _int16_sources(program, name: str, producers, cand: set[str]) -> list[str]:
    """The candidates whose int16 output reaches op ``name``'s inputs, through ops that are no candidate (a
    reorder or a reshape of an int16 tensor moves int16 bytes; the output's dequantize reads them)."""
    out: list[str] = []
    seen: set[str] = set()
    frontier = [name]
    for _ in range(TRACE_DEPTH):
        nxt = []
        for n in frontier:
            node = program.node(n)
            for i in (node.inputs if node is not None else []):
                p = producers.get(i)
                if p is None or p.name in seen:
                    continue
                seen.add(p.name)
                if p.name in cand:
                    out.append(p.name)
                else:
                    nxt.append(p.name)
        if not nxt:
            break
        frontier = nxt
    return out


def budget_set(order: list[str], gains: dict[str, float], prices: Int16Prices, floor_fps: float,
               share: float = 1.0) -> list[str]:
    """The largest set, by expected gain per price, whose summed price fits ``share`` of the FPS budget.

    Nodes are taken in the order of gain over relative price (:meth:`Int16Prices.relative`; ties keep
    ``order``), each added while the set's estimated FPS stays at or above the floor that ``share`` of the
    budget allows; a node that does not fit is skipped and cheaper ones after it may still fit. The set
    comes back in the order it was filled (best value first), so a prefix of it is the best smaller set."""
    rank = {n: k for k, n in enumerate(order)}
    base = prices.fps([])
    floor = base - share * max(base - floor_fps, 0.0)
    value = {n: max(gains.get(n, 0.0), 0.0) / max(prices.relative(n, floor_fps), MIN_RELATIVE_PRICE) for n in order}
    chosen: list[str] = []
    for n in sorted(order, key=lambda n: (-value[n], rank[n])):
        if value[n] <= 0.0:
            continue
        if prices.fits(chosen + [n], floor):
            chosen.append(n)
    return chosen


#: the calibration method the pricing programs are built with (where the config lets the calibration choose one):
#: the program's shape (which ops, which tensors at which width) does not depend on the thresholds, and a pinned
#: method skips the choice among the candidate methods
PRICING_CALIBRATION = "max"


@dataclass(frozen=True)
class PricingProgram:
    """One of the two programs the prices are read from, as a task (here, or on a ``--workers`` process beside the
    gains pass: :meth:`hbtool.debug.trials.TrialRunner.jobs`): ``node_info`` calibrated with
    :data:`PRICING_CALIBRATION` on the session's statistics, compiled in memory and costed. Returns the costed
    program (``PerfResult``) and, with ``keep_program``, the compiled graph (the prices trace through it)."""

    node_info: dict[str, dict[str, Any]]
    keep_program: bool = False
    #: a calibration, a compile and a costing, as an ``--auto`` try: its measured seconds predict the first try's
    #: (:meth:`hbtool.debug.trials.TrialRunner.slice_seconds`)
    like_a_try = True

    def run(self, session) -> tuple[Any, Any]:
        from hbtool.debug.auto import compile_variant

        result = session.calibrate(self.node_info, method=PRICING_CALIBRATION)
        compiled = compile_variant(session, result, self.node_info)
        return perf_of(session, compiled, self.node_info), (compiled.program if self.keep_program else None)


def pricing_programs(node_info: dict[str, dict[str, Any]], names: list[str]) -> list[PricingProgram]:
    """The two programs of :func:`price_int16`: ``node_info`` (the model kept), and it with every ``names`` at int16."""
    from hbtool.debug.auto import INT16_OUT, with_group

    return [PricingProgram(node_info), PricingProgram(with_group(node_info, names, INT16_OUT[1]), keep_program=True)]


def prices_from(programs: list[tuple[Any, Any]], names: list[str]) -> Int16Prices:
    """The prices of ``names`` from the results of :func:`pricing_programs`' two tasks, in their order."""
    (base_perf, _), (wide_perf, wide_program) = programs
    return int16_prices(base_perf, wide_perf, wide_program, names)


def price_int16(session, node_info: dict[str, dict[str, Any]], names: list[str]) -> Int16Prices:
    """The int16 prices of ``names`` on top of ``node_info`` (the model kept): the two programs calibrated with
    :data:`PRICING_CALIBRATION` on the session's statistics, compiled in memory and costed (here, one after the other)."""
    return prices_from([job.run(session) for job in pricing_programs(node_info, names)], names)
