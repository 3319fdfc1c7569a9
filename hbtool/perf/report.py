"""What ``hbtool perf`` prints; the ``--json`` document is :mod:`hbtool.costmodel.document` (the compiler writes it too)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from hbtool.costmodel.cost import CPU, DATA_MOVEMENT, DDR, OVERHEAD, SRAM, TENSOR, VECTOR
from hbtool.costmodel.document import THREAD_COUNTS, class_json, microseconds, op_json, to_json
from hbtool.costmodel.schedule import RUNTIME, PerfResult

__all__ = ["LABELS", "class_line", "op_json", "print_levels", "print_report", "short_name", "to_json"]

LABELS = {TENSOR: "tensor", VECTOR: "vector", DATA_MOVEMENT: "data movement", CPU: "CPU", SRAM: "SRAM bandwidth",
          DDR: "DDR bandwidth", OVERHEAD: "dispatch overhead", RUNTIME: "runtime per frame", "view": "view"}


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def class_line(r: PerfResult) -> str:
    """Which published measurement class the model resembles and how far off hbtool was on that class."""
    c = class_json(r)
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
                      + ", ".join(f"{o.name} {microseconds(r, o.cycles):.0f} us" for o in cpu_ops[:6]) + (" ..." if len(cpu_ops) > 6 else ""))
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
        t.add_row(str(k), short_name(o.name), o.op_type, o.unit, f"{microseconds(r, o.cycles):.1f}", _pct(o.cycles / total), o.bound_by,
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
