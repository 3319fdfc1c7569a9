"""``DIR/perf.html``: the summary, a per-op bar chart and a per-unit timeline (PNGs beside it), every op.

Files (stable names, CI jobs may pick them up): ``perf.html``, ``perf_ops.png`` (time of every op
in schedule order, coloured by unit), ``perf_timeline.png`` (which unit works when during one
frame, and when the op waits on DDR), ``perf.json`` (the ``--json`` document).
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any

from hbtool.costmodel.cost import CPU, DATA_MOVEMENT, DDR, TENSOR, VECTOR
from hbtool.perf.report import LABELS, to_json
from hbtool.costmodel.schedule import RUNTIME, PerfResult

COLOURS = {TENSOR: "#1f77b4", VECTOR: "#ff7f0e", DATA_MOVEMENT: "#2ca02c", CPU: "#7f7f7f", DDR: "#d62728",
           RUNTIME: "#9467bd"}
ROWS = (TENSOR, VECTOR, DATA_MOVEMENT, CPU)


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def ops_chart(r: PerfResult) -> bytes:
    """Bar per op (schedule order), height = time in us, colour = unit; views are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [o for o in r.ops if o.cycles > 0]
    us = [o.cycles / r.hw.clock_hz * 1e6 for o in ops]
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.bar(range(len(ops)), us, width=1.0, color=[COLOURS.get(o.unit, "#000000") for o in ops], linewidth=0)
    from matplotlib.patches import Patch

    handles = [Patch(color=COLOURS[u], label=LABELS[u]) for u in ROWS if any(o.unit == u for o in ops)]
    ax.set_xlabel("op (schedule order)")
    ax.set_ylabel("time (us)")
    ax.set_title(f"{r.model}: time per op ({r.latency_ms:.2f} ms in all)")
    ax.set_xlim(-0.5, max(len(ops), 1) - 0.5)
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    data = _png(fig)
    plt.close(fig)
    return data


def timeline_chart(r: PerfResult) -> bytes:
    """One row per unit: when it works during one frame; a DDR row where the op waits on DDR."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = 1e3 / r.hw.clock_hz  # cycles -> ms
    rows = list(ROWS) + [DDR, RUNTIME]
    spans: dict[str, list[tuple[float, float]]] = {k: [] for k in rows}
    end = 0.0
    for op, start, end in r.timeline():
        if end <= start:
            continue
        spans[op.unit if op.unit in spans else CPU].append((start * scale, (end - start) * scale))
        ddr = op.components.get(DDR, 0.0)
        if ddr > 0:
            spans[DDR].append((start * scale, ddr * scale))
    spans[RUNTIME].append((end * scale, r.per_frame_cycles * scale))
    fig, ax = plt.subplots(figsize=(12, 3.2))
    for y, k in enumerate(rows):
        if spans[k]:
            ax.broken_barh(spans[k], (y - 0.4, 0.8), facecolors=COLOURS[k], linewidth=0)
    ax.set_yticks(range(len(rows)), [{DDR: "DDR busy", RUNTIME: "runtime"}.get(k, LABELS[k]) for k in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, r.latency_ms)
    ax.set_xlabel("time in one frame (ms)")
    ax.set_title(f"{r.model}: timeline per unit (1 frame, {'both cores' if r.core_num == 2 else 'one core'})")
    data = _png(fig)
    plt.close(fig)
    return data


def _table(rows: list[list[Any]], head: list[str]) -> str:
    h = "".join(f"<th>{html.escape(str(c))}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def render_html(r: PerfResult, doc: dict[str, Any], levels: list[dict[str, Any]] | None = None) -> str:
    pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
    summary = [
        ["latency (1 frame)", f"{r.latency_ms:.3f} ms"],
        ["FPS", f"{r.fps:.1f} (bound by {r.fps_bound})"],
        ["FPS, 1 core", f"{r.fps_1core:.1f}"],
        ["DDR per frame", f"{r.ddr_bytes_per_frame / 1e6:.2f} MB"],
        ["GOPs per frame", f"{r.gops_per_frame:.2f}"],
        ["utilisation of the peak", f"{pct(r.utilisation)} of {r.hw.peak_int8_tops:g} TOPS"],
        ["MAC array busy", pct(r.tensor_busy_share)],
        ["padding efficiency", f"{r.padding_efficiency:.2f}"],
        ["tensor:vector compute ratio", "-" if r.tensor_vector_ratio is None else f"{r.tensor_vector_ratio:.0f}:1"],
        ["optimize level / core_num", f"{r.optimize_level or '-'} / {r.core_num}"],
    ]
    limits = [[k, f"{v:.1f}"] for k, v in r.fps_limits.items()]
    shares = [[LABELS.get(k, k), pct(v), pct(r.bound_share.get(k, 0.0)) if k in r.bound_share else ""] for k, v in r.time_share.items()]
    shares += [[f"(bound by) {LABELS.get(k, k)}", "", pct(v)] for k, v in r.bound_share.items() if k not in r.time_share and v > 0]
    ops = [[k, o["name"], o["op_type"], o["unit"], f"{o['time_us']:.2f}", o["bound_by"], o["macs"], o["padded_macs"],
            o["ddr_bytes"], o["sram_bytes"], o["note"]] for k, o in enumerate(doc["ops"]) if o["cycles"] > 0]
    params = [[p["parameter"], p["value"], p["kind"], p["source"]] for p in doc["parameters"]]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>hbtool perf: {html.escape(r.model)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}th{background:#eee}</style></head><body>",
        f"<h1>hbtool perf: {html.escape(r.model)}</h1>",
        f"<p>march {html.escape(r.march)}{' on board ' + html.escape(r.hw.board) if r.hw.board else ''}. A cost-model estimate from the hardware parameters listed at the end, "
        "not a measurement.</p>",
        _table(summary, ["", ""]),
        "<h2>FPS limits</h2>", _table(limits, ["limit", "FPS"]),
        "<h2>Time share</h2>", _table(shares, ["class", "share of latency (op class)", "share bound by"]),
        "<h2>Time per op</h2><img src='perf_ops.png' alt='time per op'>",
        "<h2>Timeline per unit</h2><img src='perf_timeline.png' alt='timeline per unit'>",
    ]
    if levels:
        rows = [[k, lv["level"] or "", lv["pass"] or "(none: O0)", f"{lv['latency_ms']:.2f}", f"{lv['fps']:.1f}",
                 f"{lv['speedup_previous']:.2f}", f"{lv['speedup_o0']:.2f}", f"{lv['ddr_bytes_per_frame'] / 1e6:.1f}"]
                for k, lv in enumerate(levels)]
        parts += ["<h2>What each compiler optimization buys</h2>",
                  _table(rows, ["step", "level", "pass switched on", "latency ms", "FPS", "x previous", "x O0", "DDR MB/frame"])]
    parts += ["<h2>Every op</h2>",
              _table(ops, ["#", "op", "type", "unit", "time us", "bound by", "MACs", "padded MACs", "DDR bytes", "SRAM bytes", "note"]),
              "<h2>Hardware parameters</h2>", _table(params, ["parameter", "value", "kind", "source"]),
              "</body></html>"]
    return "\n".join(parts)


def write_html(r: PerfResult, out_dir: Path, levels: list[dict[str, Any]] | None = None) -> list[Path]:
    """Write perf.html, its two PNGs and perf.json into ``out_dir``; returns the paths."""
    from hbtool.utils.atomic import atomic_write_bytes

    out_dir = Path(out_dir)
    doc = to_json(r, levels)
    files = {
        out_dir / "perf_ops.png": ops_chart(r),
        out_dir / "perf_timeline.png": timeline_chart(r),
        out_dir / "perf.json": (json.dumps(doc, indent=1) + "\n").encode("utf-8"),
        out_dir / "perf.html": render_html(r, doc, levels).encode("utf-8"),
    }
    for path, data in files.items():
        atomic_write_bytes(path, data)
    return list(files)
