"""``hbtool info``: what an artifact holds, like Horizon's ``hb_model_info``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from hbtool.compiler.artifact import Artifact


def summary(art: Artifact) -> dict[str, Any]:
    h = art.header
    nodes = h["program"]["nodes"]
    units = Counter(n["meta"].get("unit", "cpu") for n in nodes)
    ops = Counter(n["op_type"] for n in nodes)
    return {
        "file": {"bytes": art.nbytes, "sha256": art.sha256},
        "tool": h["tool"], "march": h["march"], "model": h["model"], "options": h["options"], "passes": h["passes"],
        "inputs": h["inputs"], "outputs": h["outputs"],
        "program": {"nodes": len(nodes), "by_unit": dict(sorted(units.items())), "by_op": dict(sorted(ops.items())),
                    "macs": sum(int(n["meta"].get("macs", 0)) for n in nodes)},
        "cpu_subgraphs": [{"name": s["name"], "nodes": s["nodes"], "inputs": s["inputs"], "outputs": s["outputs"]}
                          for s in h.get("cpu_subgraphs", [])],
        "layout": h["layout"], "memory": h["memory"], "fallbacks": h.get("fallbacks", []),
    }


def print_info(art: Artifact, console: Console | None = None) -> None:
    print_summary(summary(art), console)


def print_summary(s: dict[str, Any], console: Console | None = None) -> None:
    """Print a :func:`summary` (what ``hbtool info`` shows; ``api.info`` returns the dict)."""
    console = console or Console()
    console.print(f"[bold]{s['model']['name']}[/bold]  hbtool {s['tool']['version']}  march {s['march']}  "
                  f"{s['file']['bytes']:,} bytes  sha256 {s['file']['sha256'][:16]}...")
    opts = s["options"]
    console.print("compile options: " + ", ".join(f"{k}={v}" for k, v in opts.items() if v not in (None, [], "")))
    applied = [k for k, v in s["passes"].items() if v > 0]
    console.print("passes applied: " + (", ".join(f"{k} ({s['passes'][k]})" for k in applied) or "none"))
    t = Table(title="inputs")
    for col in ("name", "shape", "dtype", "type", "layout", "preprocess", "quantize"):
        t.add_column(col)
    for d in s["inputs"]:
        pre = d.get("norm_type") or "-"
        if d.get("mean") or d.get("scale"):
            pre += f" mean={d.get('mean')} scale={d.get('scale')}"
        q = d.get("quantize")
        rt = d.get("runtime")
        kind, layout = str(d.get("type", "-")), str(d.get("layout", "-"))
        quant = f"int{q['bits']} scale {q['scale']:.6g}" if q else "float (CPU)"
        if rt:  # the chip's buffer, converted by the program's first op
            kind, layout = f"{d.get('type_rt')} -> {kind}", f"{rt['layout']} -> {layout}"
            quant = "InputConvert (BPU)"
        t.add_row(d["name"], "x".join(map(str, d["shape"])), d["dtype"], kind, layout, pre, quant)
    console.print(t)
    t = Table(title="outputs")
    for col in ("name", "shape", "dtype", "dequantize"):
        t.add_column(col)
    for d in s["outputs"]:
        dq = d.get("dequantize")
        deq = "float (CPU)"
        if dq:
            deq = f"scale {dq['scale']:.6g}"
            if dq.get("scales"):
                deq = f"{len(set(dq['scales']))} scales along axis {dq['axis']} (per channel, {min(dq['scales']):.3g} to {dq['scale']:.3g})"
        t.add_row(d["name"], "x".join(map(str, d["shape"])), d["dtype"], deq)
    console.print(t)
    p = s["program"]
    console.print(f"program: {p['nodes']} nodes ({', '.join(f'{k} {v}' for k, v in p['by_unit'].items())}), "
                  f"{p['macs'] / 1e9:.3f} GMACs")
    m = s["memory"]
    console.print(f"memory: SRAM peak {m['sram_peak'] / 2**20:.2f} of {m['sram_bytes'] / 2**20:.0f} MiB, "
                  f"DDR {m['ddr_bytes_per_frame'] / 1e6:.2f} MB/frame, {len(m['spilled'])} spilled tensors, "
                  f"{len(m.get('tiled', []))} chains in row bands; "
                  f"layout: {s['layout']['reorders']} reorders, {s['layout']['padding_bytes']:,} padding bytes")
    for sg in s["cpu_subgraphs"]:
        console.print(f"CPU subgraph {sg['name']}: {len(sg['nodes'])} nodes ({', '.join(sg['nodes'][:5])}{'...' if len(sg['nodes']) > 5 else ''})")
    for node, op, why in s["fallbacks"]:
        console.print(f"[yellow]float fallback[/yellow] {node} ({op}): {why}")


def packed_summary(path: Path) -> dict[str, Any] | None:
    """The models of a packed artifact (``hbtool pack``), or None for a single-model artifact."""
    from hbtool.compiler.artifact import ArtifactError, from_bytes, read_artifact
    from hbtool.compiler.pack import is_packed, member, members_of

    path = Path(path)
    if not path.is_file():
        read_artifact(path)  # its one-line error
    with open(path, "rb") as f:
        if not is_packed(f.read(8)):
            return None
    data = path.read_bytes()
    models = []
    for name in members_of(data, str(path)):
        blob = member(data, name, str(path))
        art = from_bytes(blob, f"{path}:{name}")
        if art.header["model"]["name"] != name:  # pragma: no cover - pack() names members after their header
            raise ArtifactError(f"{path}: member '{name}' holds model '{art.header['model']['name']}'", "pack the models again")
        models.append({"name": name, "bytes": art.nbytes, "sha256": art.sha256, "march": art.header["march"],
                       "inputs": [{"name": d["name"], "shape": d["shape"], "dtype": d["dtype"]} for d in art.header["inputs"]],
                       "outputs": [{"name": d["name"], "shape": d["shape"], "dtype": d["dtype"]} for d in art.header["outputs"]]})
    return {"packed": True, "file": {"bytes": len(data)}, "models": models}


def print_packed(s: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"packed artifact: {len(s['models'])} models, {s['file']['bytes']:,} bytes "
                  "(hbtool info/simulate/perf --model-name NAME runs one)")
    t = Table(title="models")
    for col in ("name", "march", "bytes", "sha256", "inputs", "outputs"):
        t.add_column(col)
    for m in s["models"]:
        io = lambda ds: ", ".join(f"{d['name']} {'x'.join(map(str, d['shape']))}" for d in ds)  # noqa: E731
        t.add_row(m["name"], m["march"], f"{m['bytes']:,}", m["sha256"][:16] + "...", io(m["inputs"]), io(m["outputs"]))
    console.print(t)
