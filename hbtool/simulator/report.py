"""The console table of ``hbtool simulate``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from hbtool.simulator.simulate import SimulationResult


def print_simulation(result: SimulationResult, console: Console | None = None) -> None:
    console = console or Console()
    ran = result.samples if result.samples_run is None else result.samples_run
    rate = ran / result.seconds if result.seconds > 0 else float("inf")
    resumed = f" (resumed: {result.samples - ran} were done before)" if ran != result.samples else ""
    console.print(f"simulated {result.samples} samples in {result.seconds:.2f} s ({rate:.1f} samples/s){resumed}")
    if not result.comparisons:
        return
    if result.compare_preprocessed:
        console.print("--compare has no hbtool preprocessing: its input(s) " + ", ".join(f"'{n}'" for n in result.compare_preprocessed)
                      + " got the artifact's (x - mean) * scale first")
    t = Table(title="simulated vs --compare")
    for col in ("Output", "Cosine", "L1", "L2", "Chebyshev", "Max error (LSB)", "Within 1 LSB"):
        t.add_column(col, justify="right" if col != "Output" else "left")
    for c in result.comparisons:
        t.add_row(c.name, f"{c.cosine:.6f}", f"{c.l1:.6g}", f"{c.l2:.6g}", f"{c.chebyshev:.6g}",
                  "-" if c.max_lsb is None else f"{c.max_lsb:.2f}",
                  "-" if c.within_1lsb is None else f"{100 * c.within_1lsb:.3f}%")
    console.print(t)
    for c in result.comparisons:   # what the whole output's numbers can hide (a detector's scores beside its boxes)
        if c.worst_channel is not None:
            console.print(f"output '{c.name}': worst channel {worst_channel_cell(c)}")


def worst_channel_cell(c) -> str:
    """``#k: SNR 12.3 dB, cosine 0.9876``: the channel the whole output's numbers can hide (-: one channel)."""
    if c.worst_channel is None:
        return "-"
    return f"#{c.worst_channel}: SNR {c.worst_channel_snr_db:.1f} dB, cosine {c.worst_channel_cosine:.6f}"
