"""The checker's console report: the node table, then the summary."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from hbtool.checker.run import CheckerResult


def print_checker_report(result: CheckerResult, console: Console | None = None, max_rows: int | None = None) -> None:
    """Print ``Node | ON | Subgraph | Type | Reason`` and the placement summary.

    With ``max_rows`` the BPU rows are elided past that count, but every CPU row is printed:
    those are the ones a user must act on.
    """
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"hbtool checker: {result.model} (march {result.march})", show_lines=False)
    for col in ("Node", "ON", "Subgraph", "Type", "Reason"):
        table.add_column(col, overflow="fold")
    shown = 0
    elided = 0
    for n in result.graph.nodes:
        on = n.meta.get("on", "?")
        if max_rows is not None and on == "BPU" and shown >= max_rows:
            elided += 1
            continue
        sub = n.meta.get("subgraph")
        table.add_row(
            n.name,
            on,
            f"id({sub})" if sub is not None else "--",
            n.meta.get("bpu_type") or n.op_type,
            n.meta.get("reason") or "",
        )
        shown += 1
    console.print(table)
    if elided:
        console.print(f"... {elided} more BPU nodes (see checker.json)")
    s = result.summary
    console.print(
        f"BPU nodes: {s['bpu_nodes']}  CPU nodes: {s['cpu_nodes']}  BPU subgraphs: {s['subgraphs']}  "
        f"MACs on BPU: {100 * s['bpu_mac_fraction']:.2f}% of {s['total_macs'] / 1e9:.3f} GMACs"
    )
    if result.graph.prequantized is not None:
        console.print(result.graph.prequantized.summary() + "; calibrate keeps the weights' integers, "
                      "calibration_type: load takes the activation scales (docs/calibrate.md)")
    ops = {}
    for pr in result.passes:
        if pr.rewrites:
            ops[pr.name] = pr.rewrites
    if ops:
        console.print("float optimizations: " + ", ".join(f"{k} x{v}" for k, v in ops.items()))
    for key, path in result.files.items():
        console.print(f"wrote {path}")
