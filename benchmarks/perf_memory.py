"""Peak memory and wall time of ``hbtool perf --fast`` on the largest published models (issue 33: <= 4 GB).

For every model this script

1. exports it once with the published rows' recipe (``benchmarks/published/export_models.py`` in the
   export venv, ``HBTOOL_TIMM_PYTHON`` or ``--export-python``; random weights; cached in
   ``benchmarks/_models/published/``, gitignored),
2. runs ``python -m hbtool.cli perf --model M.onnx --input-shape images 1x3xHxW --fast --march bayes-e
   --input-type-rt nv12 --json OUT`` in a subprocess, as a user runs it, and samples the resident set
   of its whole process tree (``/proc``, every 50 ms; Linux only) for the peak,
3. prints model, input, peak GB, wall seconds and the estimated latency, and exits 1 when a peak is
   above ``--limit-gb`` (default 4).

A run whose tree passes ``--kill-gb`` (default 8) is killed and reported as ``> kill``, so a
regression cannot take the machine down. ``--baseline DIR`` also runs every model with the hbtool of
another checkout (e.g. the main branch) first, interleaved, and prints both, with whether the two
estimates are the same (they must be: the memory work changes no number).

    .venv/bin/python -m benchmarks.perf_memory [--models yolo12x yolo11x ...] [--rows] [--baseline /path/to/checkout]

``--rows-only`` measures every architecture of the rows except the LARGEST list, smallest ONNX first.
``--rows`` adds every architecture of the published rows (``benchmarks/published/rows.py``: fit and
hold-out rows; needs ``HBTOOL_REFERENCE`` for the fit csv). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.paths import OUT, ROOT, TIMM_PYTHON
from benchmarks.published.rows import CACHE
from benchmarks.tables import markdown_table, write_result

EXPORT_SCRIPT = ROOT / "benchmarks" / "published" / "export_models.py"


@dataclass(frozen=True)
class Model:
    name: str       # as the tables print it
    source: str     # timm | torchvision | ultralytics
    arch: str       # timm name or ultralytics model YAML
    height: int
    width: int

    @property
    def onnx(self) -> Path:
        stem = self.arch.replace(".yaml", "").replace("/", "_")
        return CACHE / f"{self.source}_{stem}_{self.height}x{self.width}.onnx"


#: the largest published models (the RDK model zoo's x-size detectors at 640x640; YOLO12x is the one
#: the issue saw killed for memory on a 24 GB machine) and the largest published classifiers
LARGEST: tuple[Model, ...] = (
    Model("YOLO12x", "ultralytics", "yolo12x.yaml", 640, 640),
    Model("YOLOv9e", "ultralytics", "yolov9e.yaml", 640, 640),
    Model("YOLO11x", "ultralytics", "yolo11x.yaml", 640, 640),
    Model("YOLO11x-Seg", "ultralytics", "yolo11x-seg.yaml", 640, 640),
    Model("YOLOv8x", "ultralytics", "yolov8x.yaml", 640, 640),
    Model("YOLOv8x-Seg", "ultralytics", "yolov8x-seg.yaml", 640, 640),
    Model("YOLO26x", "ultralytics", "yolo26x.yaml", 640, 640),
    Model("YOLOv5xu", "ultralytics", "yolov5xu.yaml", 640, 640),
    Model("EfficientFormer_l3", "timm", "efficientformer_l3", 224, 224),
    Model("RepVGG_B1g4", "timm", "repvgg_b1g4", 224, 224),
    Model("EdgeNeXt_base", "timm", "edgenext_base", 224, 224),
)


def published_models() -> list[Model]:
    """Every architecture of the published rows, once per input size."""
    from benchmarks.published.rows import calibration_rows, fresh2_rows, fresh3_rows, fresh_rows, holdout_rows

    out: dict[Path, Model] = {}
    rows = calibration_rows() + holdout_rows() + fresh_rows() + fresh2_rows() + fresh3_rows()
    for r in rows:
        if r.arch is not None:
            m = Model(r.variant, r.arch[0], r.arch[1], r.height, r.width)
            out.setdefault(m.onnx, m)
    return list(out.values())


def export_missing(models: list[Model], export_python: str) -> None:
    jobs = [{"source": m.source, "name": m.arch, "size": [m.height, m.width], "out": str(m.onnx)}
            for m in models if not m.onnx.exists()]
    if not jobs:
        return
    if not export_python or not Path(export_python).exists():
        print(f"export venv {export_python or '(HBTOOL_TIMM_PYTHON unset)'} missing: {len(jobs)} models not exported", file=sys.stderr)
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(jobs, fh)
    subprocess.run([export_python, str(EXPORT_SCRIPT), fh.name], check=False)
    os.unlink(fh.name)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every process below it."""
    kids, total, todo = _children(), 0, [pid]
    while todo:
        p = todo.pop()
        total += _rss(p)
        todo.extend(kids.get(p, []))
    return total


def run_measured(cmd: list[str], env: dict[str, str], kill_bytes: int, timeout: float, cwd: Path | None = None,
                 interval: float = 0.05) -> dict:
    """Run ``cmd``; its exit code (``"killed"`` past ``kill_bytes``, ``"timeout"``), peak tree RSS (bytes) and seconds."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, status = 0, None
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        if peak > kill_bytes:
            status = "killed"
        elif time.perf_counter() - t0 > timeout:
            status = "timeout"
        if status:
            proc.kill()
            break
        time.sleep(interval)
    out, err = proc.communicate()
    return {"rc": status or proc.returncode, "peak_bytes": peak, "seconds": time.perf_counter() - t0, "stdout": out, "stderr": err}


def perf_fast(model: Model, root: Path, kill_bytes: int, timeout: float, march: str) -> dict:
    """``hbtool perf --fast`` of ``model`` with the hbtool of checkout ``root``: peak, seconds, latency."""
    with tempfile.TemporaryDirectory(prefix="hb_perfmem_") as tmp:
        out = Path(tmp) / "perf.json"
        cmd = [sys.executable, "-m", "hbtool.cli", "perf", "--model", str(model.onnx), "--input-shape", "images",
               f"1x3x{model.height}x{model.width}", "--fast", "--march", march, "--input-type-rt", "nv12", "--json", str(out)]
        env = dict(os.environ, PYTHONPATH=str(root), NO_COLOR="1")
        r = run_measured(cmd, env, kill_bytes, timeout, cwd=root)
        estimate = json.loads(out.read_text()) if r["rc"] == 0 and out.exists() else None
    r["latency_ms"] = estimate["latency_ms"] if estimate else None
    r["estimate"] = estimate
    if r["rc"] not in (0,):
        err = [ln for ln in r["stderr"].splitlines() if ln.strip()]
        r["error"] = err[-1] if err else None
    return r


def _cell(r: dict | None, kill_gb: float) -> tuple[str, str]:
    if r is None:
        return "", ""
    peak = f"> {kill_gb:g} (killed)" if r["rc"] == "killed" else f"{r['peak_bytes'] / 1e9:.2f}"
    secs = f"{r['seconds']:.0f}" + ("" if r["rc"] in (0, "killed") else f" (rc {r['rc']})")
    return peak, secs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", help="names from the LARGEST list (case-insensitive; default: all of it)")
    ap.add_argument("--rows", action="store_true", help="also every architecture of the published rows")
    ap.add_argument("--rows-only", action="store_true",
                    help="every architecture of the published rows but not the LARGEST list (measured before), smallest "
                         "ONNX first, so that a time box cut short still covers the most models")
    ap.add_argument("--march", default="bayes-e")
    ap.add_argument("--limit-gb", type=float, default=4.0)
    ap.add_argument("--kill-gb", type=float, default=8.0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--baseline", type=Path, help="another checkout whose hbtool runs each model first (e.g. the main branch)")
    ap.add_argument("--export-python", default=TIMM_PYTHON, help="the export venv's interpreter (default: $HBTOOL_TIMM_PYTHON)")
    ap.add_argument("--json", type=Path, default=OUT / "perf_memory.json")
    args = ap.parse_args(argv)

    models = list(LARGEST)
    if args.models:
        wanted = {m.lower() for m in args.models}
        models = [m for m in models if m.name.lower() in wanted]
        unknown = wanted - {m.name.lower() for m in models}
        if unknown:
            ap.error(f"unknown model(s) {', '.join(sorted(unknown))}; choose from {', '.join(m.name for m in LARGEST)}")
    if args.rows_only:
        largest = {m.onnx for m in LARGEST}
        models = sorted((m for m in published_models() if m.onnx not in largest),
                        key=lambda m: (m.onnx.stat().st_size if m.onnx.exists() else float("inf"), m.name))
    elif args.rows:
        have = {m.onnx for m in models}
        models += [m for m in published_models() if m.onnx not in have]
    export_missing(models, args.export_python)
    kill = int(args.kill_gb * 1e9)
    results, lines = [], []
    for m in models:
        if not m.onnx.exists():
            print(f"{m.name}: not exported, skipped", flush=True)
            continue
        base = perf_fast(m, args.baseline.resolve(), kill, args.timeout, args.march) if args.baseline else None
        now = perf_fast(m, ROOT, kill, args.timeout, args.march)
        same = None
        if base and base["estimate"] and now["estimate"]:
            same = base["estimate"] == now["estimate"]
        row = {"model": m.name, "input": f"{m.height}x{m.width}", "onnx_mb": round(m.onnx.stat().st_size / 1e6, 1),
               "peak_gb": round(now["peak_bytes"] / 1e9, 3),
               "seconds": round(now["seconds"], 1), "rc": now["rc"], "latency_ms": now["latency_ms"], "error": now.get("error")}
        if base is not None:
            row.update(baseline_peak_gb=round(base["peak_bytes"] / 1e9, 3), baseline_seconds=round(base["seconds"], 1),
                       baseline_rc=base["rc"], same_estimate=same)
        results.append(row)
        print(json.dumps(row), flush=True)
        cells = [m.name, f"{m.height}x{m.width}", *_cell(now, args.kill_gb),
                 f"{now['latency_ms']:.2f}" if now["latency_ms"] else now.get("error") or ""]
        if args.baseline:
            cells[2:2] = [_cell(base, args.kill_gb)[0]]
            cells[4:4] = [_cell(base, args.kill_gb)[1]]
            cells.append({True: "yes", False: "NO", None: ""}[same])
        lines.append(cells)
    header = ["model", "input", "peak GB", "seconds", "latency ms"]
    if args.baseline:
        header = ["model", "input", "baseline peak GB", "peak GB", "baseline s", "seconds", "latency ms", "same estimate"]
    print(f"\nhbtool perf --fast --march {args.march} --input-type-rt nv12 (load: {os.getloadavg()[0]:.1f})\n")
    print(markdown_table(header, lines))
    write_result(args.json, json.dumps(results, indent=1) + "\n")
    over = [r["model"] for r in results if r["rc"] != 0 or r["peak_gb"] > args.limit_gb]
    if over:
        print(f"over {args.limit_gb:g} GB or failed: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
