"""The calibrate report: per-node table and per-output errors, for the console and the log."""

from __future__ import annotations

import io
import sys

from rich.console import Console
from rich.table import Table

from hbtool.quant.calibrate import CalibrationResult, option_lines


def _node_rows(result: CalibrationResult):
    g = result.graph
    for node in g.nodes:
        out = node.outputs[0] if node.outputs else None
        tq = result.plan.tensors.get(out) if out else None
        err = result.node_errors.get(out) if out else None
        sub = node.meta.get("subgraph")
        yield (
            node.name,
            node.meta.get("on", "?"),
            f"id({sub})" if sub is not None else "--",
            node.meta.get("bpu_type") or node.op_type,
            f"{err['cosine']:.6f}" if err else "--",
            f"{tq.threshold:.6g}" if tq else "--",
            _dtype(tq) if tq else ("float32" if node.meta.get("on") != "BPU" else "--"),
        )


def _dtype(tq) -> str:
    if tq.is_log2:
        return f"log2 {tq.bits}-bit"
    return f"int{tq.bits}" + (" ptf" if tq.ptf_alpha is not None else "")


def _outputs_table(result: CalibrationResult) -> Table:
    out = Table(title="model outputs")
    for col in ("Output", "Cosine", "L1", "L2", "Chebyshev", "Worst channel (SNR dB)"):
        out.add_column(col)
    judged = result.options.get("output_channels", {})
    for name, e in result.output_errors.items():
        out.add_row(name, f"{e['cosine']:.6f}", f"{e['l1']:.6g}", f"{e['l2']:.6g}", f"{e['chebyshev']:.6g}", _worst_channel(judged.get(name)))
    return out


def _worst_channel(j) -> str:
    """``#6 5.1`` (the channel a whole-output cosine hides), ``exact``, or ``-`` (one channel / not judged)."""
    if not j or j.get("channels", 0) < 2:
        return "-"
    if j["worst_snr_db"] is None:
        return "exact"
    return f"#{j['worst_channel']} {j['worst_snr_db']:.1f}" + (" (low)" if j.get("warning") else "")


def _nodes_table(title: str, rows) -> Table:
    table = Table(title=title)
    for col in ("Node", "ON", "Subgraph", "Type", "Cosine Similarity", "Threshold", "DataType"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def render_report(result: CalibrationResult, width: int = 160) -> Console:
    """Build the report on a recording console (print it, or export its text for the log)."""
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(_nodes_table("calibration: per-node output similarity (float vs quantized, calibration data)", _node_rows(result)))
    console.print(_outputs_table(result))
    cands = ", ".join(f"{k} {v:.6f}" for k, v in result.candidates.items())
    console.print(f"calibration method: {result.method} (output cosine per candidate: {cands})")
    console.print(f"samples: {result.num_samples}  time: {result.seconds:.1f}s")
    for line in option_lines(result):
        console.print(line, markup=False)
    for line in fallback_lines(result):
        console.print(line, markup=False)
    return console


def fallback_lines(result: CalibrationResult) -> list[str]:
    """One warning line per BPU node that the quantized model runs in float (no integer lowering yet)."""
    nodes = [n for n in (result.program.nodes if result.program is not None else []) if n.meta.get("fallback")]
    if not nodes:
        return []
    lines = [f"warning: {len(nodes)} BPU node(s) have no integer lowering yet and run in float in the quantized model:"]
    lines += [f"  {n.name} ({n.op_type})" for n in nodes]
    return lines


def print_report(result: CalibrationResult, max_rows: int | None = None) -> None:
    """Print the report (node rows elided past ``max_rows``, worst first kept).

    The full report (every node row, what the log holds) is rendered only when it is printed: rich's
    rendering of ResNet50's 123-row table cost about 0.1 CPU seconds per ``hbtool calibrate``, and the
    elided form builds its own tables."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    if max_rows is None:
        console.print(render_report(result).export_text(), end="", markup=False, highlight=False)
        return
    rows = sorted(_node_rows(result), key=lambda r: float(r[4]) if r[4] != "--" else 2.0)
    console.print(_nodes_table(f"calibration: the {max_rows} least similar node outputs (full table in hb_calibrate.log)", rows[:max_rows]))
    console.print(_outputs_table(result))
    cands = ", ".join(f"{k} {v:.6f}" for k, v in result.candidates.items())
    console.print(f"calibration method: {result.method} (output cosine per candidate: {cands}); samples {result.num_samples}; {result.seconds:.1f}s")
    for line in option_lines(result):
        console.print(line, markup=False)
    for line in fallback_lines(result):
        console.print(line, markup=False, style="yellow")
