"""What ``hbtool perf`` prints and what ``--json`` writes."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from hbtool.perf.cost import CPU, DATA_MOVEMENT, DDR, OVERHEAD, SRAM, TENSOR, VECTOR, OpCost
from hbtool.perf.hardware import parameter_table
from hbtool.perf.schedule import RUNTIME, PerfResult

LABELS = {TENSOR: "tensor", VECTOR: "vector", DATA_MOVEMENT: "data movement", CPU: "CPU", SRAM: "SRAM bandwidth",
          DDR: "DDR bandwidth", OVERHEAD: "dispatch overhead", RUNTIME: "runtime per frame", "view": "view"}


def _us(r: PerfResult, cycles: float) -> float:
    return cycles / r.hw.clock_hz * 1e6


def op_json(r: PerfResult, op: OpCost, start: float) -> dict[str, Any]:
    return {
        "name": op.name, "op_type": op.op_type, "unit": op.unit, "kernel": op.kernel,
        "cycles": round(op.cycles, 1), "time_us": round(_us(r, op.cycles), 3), "start_us": round(_us(r, start), 3),
        "bound_by": op.bound_by, "components": {k: round(v, 1) for k, v in op.components.items()},
        "overhead_cycles": round(op.overhead, 1), "weight_wait_cycles": round(op.exposed, 1), "calls": op.calls, "bits": op.bits,
        "macs": op.macs, "padded_macs": op.padded_macs, "elements": op.elements,
        "ddr_bytes": op.ddr_bytes, "ddr_useful_bytes": op.ddr_useful_bytes, "sram_bytes": op.sram_bytes, "weight_bytes": op.weight_bytes, "note": op.note,
    }


def to_json(r: PerfResult, levels: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``--json`` document (keys are stable: CI jobs read them)."""
    ddr = r.ddr_bytes_per_frame
    cpu_ops = [o for o in r.ops if o.unit == CPU]
    doc: dict[str, Any] = {
        "model": r.model, "march": r.march, "board": r.hw.board, "optimize_level": r.optimize_level, "core_num": r.core_num,
        "latency_ms": round(r.latency_ms, 4),
        "fps": round(r.fps, 2),
        "fps_1core": round(r.fps_1core, 2),
        "fps_bound": r.fps_bound,
        "fps_limits": {k: round(v, 2) for k, v in r.fps_limits.items()},
        "ddr_bytes_per_frame": int(ddr),
        "ddr_gb_per_s": round(ddr * r.fps / 1e9, 3),
        "gops_per_frame": round(r.gops_per_frame, 4),
        "macs": int(r.macs), "padded_macs": int(r.padded_macs),
        "padding_efficiency": round(r.padding_efficiency, 4),
        "utilisation": round(r.utilisation, 5),
        "mac_array_busy": round(r.tensor_busy_share, 5),
        "tensor_vector_ratio": None if r.tensor_vector_ratio is None else round(r.tensor_vector_ratio, 2),
        "vector_elements": int(r.vector_elements),
        "time_share": {k: round(v, 5) for k, v in r.time_share.items()},
        "bound_share": {k: round(v, 5) for k, v in r.bound_share.items()},
        "bound_by": r.bound_by,
        "cpu": {"ms": round(sum(o.cycles for o in cpu_ops) / r.hw.clock_hz * 1e3, 4),
                "ops": [{"name": o.name, "op_type": o.op_type, "time_us": round(_us(r, o.cycles), 3),
                         "flops": o.flops, "elements": o.elements} for o in cpu_ops]},
        "op_types": [{**row, "cycles": round(row["cycles"], 1), "share": round(row["share"], 5),
                      "time_ms": round(row["cycles"] / r.hw.clock_hz * 1e3, 4)} for row in r.by_op_type()],
        "ops": [op_json(r, op, start) for op, start, _ in r.timeline()],
        "passes": r.passes,
        "parameters": parameter_table(r.march, r.hw.board or None),
        "fps_threads": {str(n): round(r.fps_threads(n), 2) for n in THREAD_COUNTS},
        "measurement_class": _class_json(r),
    }
    if levels is not None:
        doc["levels"] = levels
    return doc


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


#: thread counts of the published board measurements (``hrt_model_exec perf --thread_num``)
THREAD_COUNTS = (1, 2, 4, 8)


def _class_json(r: PerfResult) -> dict[str, Any]:
    from hbtool.perf.classes import measurement_class

    name, err = measurement_class(r)
    out: dict[str, Any] = {"class": name}
    if err is not None:
        out.update(published_rows=err[0], median_abs_latency_error=err[1], median_abs_fps_error=err[2])
    return out


def class_line(r: PerfResult) -> str:
    """Which published measurement class the model resembles and how far off hbtool was on that class."""
    c = _class_json(r)
    if "published_rows" not in c:
        return f"resembles: {c['class']} (no published on-board rows of that class for march {r.march}: no measured error to quote)"
    return (f"resembles: {c['class']}; on {c['published_rows']} published on-board rows of that class (march {r.march}) "
            f"the estimate was off by a median {100 * c['median_abs_latency_error']:.0f} % in latency and "
            f"{100 * c['median_abs_fps_error']:.0f} % in multi-thread FPS (docs/perf.md)")


def print_report(r: PerfResult, console: Console | None = None, top: int = 10) -> None:
    console = console or Console()
    hw = r.hw
    ddr = r.ddr_bytes_per_frame
    mode = "one frame on both cores" if r.core_num == 2 else "1 core"
    board = f" on {hw.board}" if hw.board else ""
    console.print(f"[bold]{r.model}[/bold]  march {r.march}{board}  {r.optimize_level or '-'}  core_num {r.core_num}  "
                  "(cost-model estimate, not a measurement)")
    lat = f"latency {r.latency_ms:.3f} ms ({mode})"
    if r.core_num == 1:
        console.print(f"{lat}   FPS {r.fps:.1f} ({hw.cores} cores, bound by {r.fps_bound})   FPS 1 core {r.fps_1core:.1f}")
    else:
        console.print(f"{lat}   FPS {r.fps:.1f}   (FPS with 1 core per frame: {r.fps_1core:.1f})")
    console.print("FPS limits: " + ", ".join(f"{k} {v:.1f}" for k, v in r.fps_limits.items()))
    if r.core_num == 1:
        console.print("FPS by threads (hrt_model_exec --thread_num): "
                      + ", ".join(f"{n}: {r.fps_threads(n):.1f}" for n in THREAD_COUNTS))
    console.print(class_line(r))
    console.print(f"DDR {ddr / 1e6:.2f} MB/frame ({ddr * r.fps / 1e9:.2f} GB/s at {r.fps:.0f} FPS)   "
                  f"{r.macs / 1e9:.3f} GMAC = {r.gops_per_frame:.2f} GOPs/frame")
    console.print(f"utilisation {_pct(r.utilisation)} of {hw.peak_int8_tops:g} TOPS; MAC array busy {_pct(r.tensor_busy_share)} "
                  f"of the latency; padding efficiency {r.padding_efficiency:.2f} (MACs / padded MACs)")
    ratio = r.tensor_vector_ratio
    console.print("tensor:vector compute ratio " + (f"{ratio:.0f}:1 ({r.macs / 1e9:.2f} GMAC : {r.vector_elements / 1e6:.2f} M vector elements)"
                                                     if ratio else "- (no vector ops)"))
    ts = r.time_share
    console.print("time share by op class: " + ", ".join(f"{LABELS[k]} {_pct(v)}" for k, v in ts.items()))
    bs = {k: v for k, v in r.bound_share.items() if v >= 0.0005}
    console.print("time bound by: " + ", ".join(f"{LABELS.get(k, k)} {_pct(v)}" for k, v in sorted(bs.items(), key=lambda kv: -kv[1])))
    cpu_ops = [o for o in r.ops if o.unit == CPU]
    if cpu_ops:
        cpu_ms = sum(o.cycles for o in cpu_ops) / hw.clock_hz * 1e3
        console.print(f"CPU (Cortex-A55, rough model, counted in the latency): {cpu_ms:.3f} ms in {len(cpu_ops)} ops: "
                      + ", ".join(f"{o.name} {_us(r, o.cycles):.0f} us" for o in cpu_ops[:6]) + (" ..." if len(cpu_ops) > 6 else ""))
    t = Table(title="time by op type")
    for col in ("op type", "unit", "ops", "ms", "share", "mostly bound by", "DDR MB"):
        t.add_column(col, justify="right" if col in ("ops", "ms", "share", "DDR MB") else "left", no_wrap=True)
    for row in r.by_op_type()[:max(top, 1)]:
        t.add_row(row["op_type"], row["unit"], str(row["count"]), f"{row['cycles'] / hw.clock_hz * 1e3:.3f}", _pct(row["share"]),
                  row["bound_by"], f"{row['ddr_bytes'] / 1e6:.2f}")
    console.print(t)
    if top <= 0:
        return
    t = Table(title=f"top {top} ops by time")
    for col in ("#", "op", "type", "unit", "us", "share", "bound by", "MACs", "DDR KB", "why"):
        right = col in ("#", "us", "share", "MACs", "DDR KB")
        t.add_column(col, justify="right" if right else "left", no_wrap=col != "why", overflow="ellipsis" if col != "why" else "fold",
                     max_width={"op": 44, "why": 60}.get(col))
    total = r.latency_cycles or 1.0
    for k, o in enumerate(r.top_ops(top), 1):
        t.add_row(str(k), short_name(o.name), o.op_type, o.unit, f"{_us(r, o.cycles):.1f}", _pct(o.cycles / total), o.bound_by,
                  f"{o.macs / 1e6:.1f}M" if o.macs else "", f"{o.ddr_bytes / 1024:.0f}" if o.ddr_bytes else "", o.note)
    console.print(t)


def short_name(name: str, width: int = 44) -> str:
    """The end of a long node name (the distinctive part of exported names)."""
    return name if len(name) <= width else "..." + name[-(width - 3):]


def print_levels(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """The ablation table: each compiler optimization switched on in turn (level order)."""
    console = console or Console()
    t = Table(title="what each compiler optimization buys (cumulative, in optimize_level order)")
    for col in ("step", "level", "pass switched on", "latency ms", "FPS", "x prev", "x O0", "DDR MB", "bound by"):
        t.add_column(col, justify="left" if col in ("level", "pass switched on", "bound by") else "right", no_wrap=True)
    for k, row in enumerate(rows):
        t.add_row(str(k), row["level"] or "", row["pass"] or "(none: O0)", f"{row['latency_ms']:.2f}", f"{row['fps']:.1f}",
                  f"{row['speedup_previous']:.2f}", f"{row['speedup_o0']:.2f}", f"{row['ddr_bytes_per_frame'] / 1e6:.1f}",
                  row["bound_by"])
    console.print(t)
