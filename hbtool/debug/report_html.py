"""``debug_report.html`` and its PNG plots (matplotlib Agg), returned as ``{path: bytes}``.

Plots: error along the graph (accumulated vs isolated), the top-k sensitive nodes,
float-vs-quantized histograms with the clipping threshold, per-channel range box plots, and
the accuracy-vs-FPS curve of the ``--auto`` steps. Images are files next to the page (not
inlined), so the page stays small and each plot can be reused.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any

import numpy as np

TOP_K = 15


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _figures(r, data: dict[str, Any]) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: dict[str, bytes] = {}
    nodes = data["nodes"]
    if nodes:
        fig, ax = plt.subplots(figsize=(10, 3.5))
        x = np.arange(len(nodes))
        ax.semilogy(x, [max(1 - n["accumulated"]["cosine"], 1e-9) for n in nodes], label="accumulated (model error)")
        ax.semilogy(x, [max(1 - n["isolated"]["cosine"], 1e-9) for n in nodes], label="isolated (op error)", alpha=0.8)
        marked = [i for i, n in enumerate(nodes) if n["marked"]]
        if marked:
            ax.scatter(marked, [max(1 - nodes[i]["accumulated"]["cosine"], 1e-9) for i in marked], color="red", zorder=3, label="error jumps")
        ax.set_xlabel("node (graph order)")
        ax.set_ylabel("1 - cosine (lower is better)")
        ax.legend()
        ax.set_title("Error along the graph")
        figs["debug_error_along_graph.png"] = _png(fig)
    sens = data["sensitivity"][:TOP_K]
    if sens:
        fig, ax = plt.subplots(figsize=(10, 0.35 * len(sens) + 1))
        names = [s["name"] for s in sens][::-1]
        w = [max(s["quant_only"].get("weights", 0), s["dequant_only"].get("weights", 0)) for s in sens][::-1]
        a = [max(s["quant_only"].get("activations", 0), s["dequant_only"].get("activations", 0)) for s in sens][::-1]
        y = np.arange(len(names))
        ax.barh(y - 0.2, w, 0.4, label="weights")
        ax.barh(y + 0.2, a, 0.4, label="activations")
        ax.set_yticks(y, names, fontsize=7)
        ax.set_xlabel(f"effect on {data['metric']} (higher = more sensitive)")
        ax.legend()
        ax.set_title("Most sensitive nodes")
        figs["debug_top_sensitive.png"] = _png(fig)
    plan = r.session.base.plan
    top = [s["name"] for s in sens[:4]]
    hist_tensors = []
    for name in top:
        node = r.session.base.graph.node(name)
        if node is not None and node.outputs and node.outputs[0] in r.observer.values:
            hist_tensors.append((name, node.outputs[0]))
    if hist_tensors:
        fig, axes = plt.subplots(1, len(hist_tensors), figsize=(3.2 * len(hist_tensors), 2.8), squeeze=False)
        for ax, (name, t) in zip(axes[0], hist_tensors):
            v = r.observer.values[t]
            ax.hist(v, bins=80, color="tab:blue", alpha=0.8, label="float")
            tq = plan.tensors.get(t)
            if tq is not None and not tq.is_log2:
                q = np.clip(np.round(v / tq.scale), -(2 ** (tq.bits - 1)), 2 ** (tq.bits - 1) - 1) * tq.scale
                ax.hist(q, bins=80, histtype="step", color="tab:orange", label=f"int{tq.bits}")
                for s in (-1, 1):
                    ax.axvline(s * tq.threshold, color="red", ls="--", lw=1)
            ax.set_title(name[:28], fontsize=8)
            ax.set_yscale("log")
        axes[0][0].legend(fontsize=7)
        fig.suptitle("float vs quantized values (red: clipping threshold)", fontsize=9)
        figs["debug_histograms.png"] = _png(fig)
    boxes = [(s["name"], r.observer.channel_max.get(r.session.base.graph.node(s["name"]).outputs[0]))
             for s in sens[:6] if r.session.base.graph.node(s["name"]) is not None]
    boxes = [(n, b) for n, b in boxes if b is not None and b.size > 1]
    if boxes:
        fig, ax = plt.subplots(figsize=(10, 3))
        ax.boxplot([b for _, b in boxes], showfliers=True)
        ax.set_xticks(range(1, len(boxes) + 1), [n[:20] for n, _ in boxes], fontsize=7, rotation=20)
        ax.set_yscale("log")
        ax.set_ylabel("per-channel max |x|")
        ax.set_title("Per-channel ranges of the sensitive nodes' outputs")
        figs["debug_channel_ranges.png"] = _png(fig)
    auto = data.get("auto")
    if auto:
        kept = [st for st in auto["steps"] if st["kept"]]
        fps = [st["fps"] for st in kept]
        if kept and all(f is not None for f in fps):
            fig, ax = plt.subplots(figsize=(6, 3.5))
            ax.plot(fps, [st["cosine"] for st in kept], "o-")
            for st in kept:
                ax.annotate(f"{st['remedy']}:{(st['node'] or '')[:14]}", (st["fps"], st["cosine"]), fontsize=6)
            ax.set_xlabel("estimated FPS")
            ax.set_ylabel("worst output cosine")
            ax.invert_xaxis()
            ax.set_title("--auto: accuracy vs FPS")
            figs["debug_auto_curve.png"] = _png(fig)
    return figs


def _table(rows: list[list[Any]], head: list[str]) -> str:
    def cell(v):
        if isinstance(v, float):
            return f"{v:.6g}"
        return html.escape(str(v))

    h = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _with_noise(step: dict[str, Any]) -> Any:
    """A step's metric, with the noise of its difference to the kept model where the folds gave one."""
    m, noise = step.get("metric"), step.get("metric_noise")
    return f"{m:.6g} ±{noise:.2g}" if isinstance(m, float) and noise else m


def write_report(r, data: dict[str, Any], out_dir: Path) -> dict[Path, bytes]:
    figs = _figures(r, data)
    d = data["directions"]
    parts = [f"<h1>hbtool debug</h1><p>{data['samples']} samples; metric <b>{html.escape(data['metric'])}</b> (higher is better); "
             f"calibration method {html.escape(str(data['calibration_method']))}.</p>"]
    parts.append("<h2>Model outputs (judged per output)</h2>")
    cols = list(d)
    extra = ["worst_channel", "worst_channel_snr_db", "worst_channel_cosine"]  # what a whole-output number hides
    parts.append(_table([[o] + [m.get(c) for c in cols + extra] for o, m in data["outputs"].items()],
                        ["output"] + [f"{c} ({d[c]} is better)" for c in cols] + ["worst channel", "its SNR (dB)", "its cosine"]))
    for title, fname in (("Error along the graph", "debug_error_along_graph.png"), ("Sensitivity", "debug_top_sensitive.png"),
                         ("Histograms", "debug_histograms.png"), ("Channel ranges", "debug_channel_ranges.png"),
                         ("--auto", "debug_auto_curve.png")):
        if fname in figs:
            parts.append(f"<h2>{title}</h2><img src=\"{fname}\" alt=\"{title}\">")
    parts.append("<h2>Sensitive nodes</h2>")
    parts.append(_table([[s["name"], s["op_type"], s["kind"], s["sensitivity"], s["quant_only"].get("weights", ""), s["quant_only"].get("activations", ""),
                          s["dequant_only"].get("weights", ""), s["dequant_only"].get("activations", "")] for s in data["sensitivity"][:30]],
                        ["node", "op", "kind", "sensitivity (higher = worse)", "quantize-only loss: weights", "activations",
                         "de-quantize-only gain: weights", "activations"]))
    parts.append("<h2>Nodes where the error jumps</h2>")
    parts.append(_table([[n["name"], n["op_type"], n["accumulated"]["cosine"], n["isolated"]["cosine"], n["jump"]] for n in data["nodes"] if n["marked"]],
                        ["node", "op", "accumulated cosine (higher is better)", "isolated cosine (higher is better)", "jump in 1-cosine"]))
    parts.append("<h2>Range flags</h2>")
    parts.append(_table([[f["node"], f["tensor"], f["kind"], f["ratio"], f["reason"]] for f in data["range_flags"][:40]],
                        ["node", "tensor", "kind", "ratio (higher is worse)", "why"]))
    if data.get("auto"):
        a = data["auto"]
        parts.append(f"<h2>--auto steps</h2><p>{len(a['changed'])} of {a['quantized_nodes']} quantized nodes changed; "
                     f"FPS {a['base_fps']} -> {a['final_fps']}; target {'reached' if a['reached'] else 'not reached'}"
                     f"{'; stopped early: ' + html.escape(a['stopped']) if a.get('stopped') else ''}"
                     f"{''.join('; ' + html.escape(n) for n in a.get('notes') or [])}.</p>")
        parts.append(_table([[st["remedy"], st["node"] or "", st["cosine"], _with_noise(st), st["fps"], "kept" if st["kept"] else "", st["note"]] for st in a["steps"]],
                            ["remedy", "node", "worst output cosine (higher is better)", f"{data['metric']} (higher is better; ± the noise of its difference to the kept model)", "estimated FPS (higher is better)", "", "note"]))
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}"
    page = f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>hbtool debug</title><style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    out = {out_dir / name: png for name, png in figs.items()}
    out[out_dir / "debug_report.html"] = page.encode()
    return out
