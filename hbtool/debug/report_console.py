"""The rich tables ``hbtool debug`` prints: outputs, sensitive nodes, error jumps, flags, --auto steps."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from hbtool.debug.metrics import DIRECTION


def print_debug(data: dict, console: Console | None = None, top: int = 10) -> None:
    console = console or Console()
    t = Table(title=f"model outputs ({data['samples']} samples; each output judged alone)")
    t.add_column("output")
    for c, d in DIRECTION.items():
        t.add_column(f"{c}\n({d} is better)", justify="right")
    t.add_column("worst channel\n(SNR dB, cosine)", justify="right")
    for o, m in data["outputs"].items():
        worst = f"#{m['worst_channel']} {m['worst_channel_snr_db']:.1f} {m['worst_channel_cosine']:.4f}" if "worst_channel" in m else "-"
        t.add_row(o, *[f"{m[c]:.6g}" for c in DIRECTION], worst)
    console.print(t)
    t = Table(title=f"most sensitive nodes (metric {data['metric']}, higher is better; effects: higher = more sensitive)")
    for c in ("node", "op", "kind", "sensitivity", "q-only w", "q-only a", "dq-only w", "dq-only a"):
        t.add_column(c, justify="right" if c not in ("node", "op", "kind") else "left")
    for s in data["sensitivity"][:top]:
        f = lambda d, k: f"{d[k]:.4g}" if k in d else "-"  # noqa: E731
        t.add_row(s["name"], s["op_type"], s["kind"], f"{s['sensitivity']:.4g}", f(s["quant_only"], "weights"), f(s["quant_only"], "activations"),
                  f(s["dequant_only"], "weights"), f(s["dequant_only"], "activations"))
    skipped = sum(1 for s in data["sensitivity"] if not s.get("evaluated", True))
    if skipped:
        t.caption = f"{skipped} nodes with the smallest op error and error jump not evaluated (sensitivity budget of a large model)"
    console.print(t)
    jumps = [n for n in data["nodes"] if n["marked"]]
    if jumps:
        t = Table(title="error jumps along the quantized model (cosine: higher is better)")
        for c in ("node", "op", "accumulated cosine", "isolated cosine", "jump (1-cos)"):
            t.add_column(c)
        for n in sorted(jumps, key=lambda n: -n["jump"])[:top]:
            t.add_row(n["name"], n["op_type"], f"{n['accumulated']['cosine']:.5f}", f"{n['isolated']['cosine']:.5f}", f"{n['jump']:.4f}")
        console.print(t)
    if data["range_flags"]:
        t = Table(title="range flags")
        for c in ("node", "kind", "ratio", "why"):
            t.add_column(c)
        for f in data["range_flags"][:top]:
            t.add_row(f["node"], f["kind"], f"{f['ratio']:.0f}", f["reason"])
        console.print(t)
    a = data.get("auto")
    if a:
        t = Table(title=f"--auto: {len(a['changed'])} of {a['quantized_nodes']} quantized nodes changed; target {'reached' if a['reached'] else 'NOT reached'}")
        for c in ("remedy", "node", "worst cosine", data["metric"][:24], "est. FPS", "kept", "note"):
            t.add_column(c)
        for st in a["steps"]:
            cos = "-" if st["cosine"] is None else f"{st['cosine']:.5f}"
            met = "-" if st["metric"] is None else f"{st['metric']:.5g}" + (f" ±{st['metric_noise']:.2g}" if st.get("metric_noise") else "")
            t.add_row(st["remedy"], st["node"] or "", cos, met, "-" if st["fps"] is None else f"{st['fps']:.1f}", "yes" if st["kept"] else "", st["note"])
        notes = list(a.get("notes") or [])
        if a.get("stopped"):
            notes.append(f"stopped early: {a['stopped']} (raise --time-limit to search further)")
        if notes:
            t.caption = "; ".join(notes)
        console.print(t)
