"""hbtool perf against published on-board speeds of the RDK X5, X3 and Ultra BPUs.

For every row of ``published_perf_calibration.csv`` in ``$HBTOOL_REFERENCE`` (the fit set; ``--reference-csv``) and the
held-out rows of ``benchmarks/published/rows.py`` this script

1. exports the row's architecture to ONNX once (timm / torchvision / ultralytics YAML, random
   weights, in the separate export venv, ``HBTOOL_TIMM_PYTHON`` or ``--export-python``; cached in
   ``benchmarks/_models/published/``, gitignored),
2. runs the quick path (``hbtool perf --model M.onnx --fast``: random calibration, O3) with the
   row's march and input size, the input taken as ``nv12`` at run time as on the board, and the
   compiled program cached per march (``--recompile`` to redo it; the memory plan, the last
   compile step, and the cost model are re-run every time, they are cheap: ``--no-tiling`` plans
   without the row-band tiling of conv chains),
3. prints estimated vs published single-thread latency and multi-thread FPS (at the row's thread
   count), the error of each, and the summary per march and split: median absolute error and the
   share of rows within 15 % and 25 %.

    HBTOOL_REFERENCE=DIR .venv/bin/python -m benchmarks.perf_published [--march bayes-e] [--holdout]
        [--markdown docs/perf_published.md] [--plot docs/perf_published_residuals.png] [--json out.json]

``--cv-family``: every row, then a leave-one-family-out cross-validation of the fitted parameter groups
(:mod:`benchmarks.published.cv`), per march: the honest generalisation number now that every row is spent.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.paths import TIMM_PYTHON
from benchmarks.published.rows import (CACHE, ROOT, SKIPPED, Row, calibration_rows, fresh2_rows, fresh3_group, fresh3_rows, fresh_rows,
                                       holdout_rows)
from benchmarks.tables import markdown_table, write_result

EXPORT_SCRIPT = ROOT / "benchmarks" / "published" / "export_models.py"


def export_missing(rows: list[Row], export_python: str = TIMM_PYTHON) -> None:
    jobs = {}
    for r in rows:
        if r.onnx is not None and not r.onnx.exists():
            jobs[str(r.onnx)] = {"source": r.arch[0], "name": r.arch[1], "size": [r.height, r.width], "out": str(r.onnx)}
    if not jobs:
        return
    if not export_python or not Path(export_python).exists():
        print(f"export venv {export_python or '(HBTOOL_TIMM_PYTHON unset)'} missing: {len(jobs)} models not exported",
              file=sys.stderr)
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(list(jobs.values()), fh)
    subprocess.run([export_python, str(EXPORT_SCRIPT), fh.name], check=False)


def cache_path(onnx: Path, march: str, calibration: dict | None = None) -> Path:
    """The cached compile of ``onnx`` for ``march``; a precision setting (``calibration``) gets its own file."""
    tag = "".join(f".{k}-{v}" for k, v in sorted((calibration or {}).items())).replace("_", "").lower()
    return onnx.with_suffix(f".{march}{tag}.pkl")


def compiled_program(onnx: Path, march: str, recompile: bool = False, calibration: dict | None = None):
    """(header, program) of the quick path's O3 compile, cached beside the ONNX per march and precision."""
    import shutil

    from hbtool.compiler.compile import compile_model
    from hbtool.perf.run import calibrate_to, fast_config

    cached = cache_path(onnx, march, calibration)
    if cached.exists() and not recompile:
        with open(cached, "rb") as fh:
            return pickle.load(fh)
    work = Path(tempfile.mkdtemp(prefix="hbtool_pub_"))
    try:
        cfg = fast_config(onnx, {}, march, work, calibration)
        calibrated = calibrate_to(cfg, work / "calibrated.onnx")
        compiled = compile_model(cfg, optimize_level="O3", calibrated=calibrated)
        header = {k: v for k, v in compiled.header.items() if k != "program"}
        out = (header, compiled.program)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # written beside and renamed: a cache file hard-linked from another checkout is replaced, never rewritten
    partial = cached.with_suffix(cached.suffix + ".partial")
    with open(partial, "wb") as fh:
        pickle.dump(out, fh, protocol=pickle.HIGHEST_PROTOCOL)
    partial.replace(cached)
    return out


#: the board column of the published rows -> hbtool's board of the row's march (``boards`` in the march file)
BOARDS = {"RDK Ultra": "rdk-ultra", "RDK X5": "rdk-x5", "RDK X3": "rdk-x3"}


def replan_memory(header: dict, program, march: str, tiling: bool = True) -> dict:
    """The cached compile with its memory plan made again by this checkout's compiler.

    The memory plan is the last compile step and a function of the program, the layout (stored in
    the header's tensors) and the march only, so a compile cached before a change to the plan
    (e.g. the row-band tiling) is re-planned here instead of recompiled. Returns the header with
    every tensor's ``memory`` and the plan summary replaced; the program's nodes get their
    ``tile`` annotations. ``tiling=False`` (``--no-tiling``): the plan without row-band tiling."""
    from hbtool.compiler.compile import bpu_weight_bytes
    from hbtool.compiler.layout import LayoutPlan, TensorLayout
    from hbtool.compiler.memory import plan_memory
    from hbtool.march.description import load_march

    tensors = header.get("tensors", {})
    lays = {name: TensorLayout(name, tuple(t["shape"]), tuple(t["padded"]), None, None, int(t["element_bytes"]))
            for name, t in tensors.items() if "padded" in t}
    options = header.get("options", {})
    memory = plan_memory(program, LayoutPlan(lays, 0, 0), load_march(march), bpu_weight_bytes(program), tiling=tiling,
                         compile_mode=options.get("compile_mode", "latency"), balance_factor=options.get("balance_factor", 50))
    out = dict(header)
    out["tensors"] = {}
    for name, t in tensors.items():
        t = dict(t)
        p = memory.tensors.get(name)
        if p is not None:
            t["memory"] = p.to_json()
        out["tensors"][name] = t
    out["memory"] = memory.to_json()
    return out


def estimate_row(r: Row, recompile: bool = False, tiling: bool = True) -> dict:
    from hbtool.costmodel.classes import measurement_class
    from hbtool.costmodel.hardware import hardware_for
    from hbtool.costmodel.schedule import estimate_program

    header, program = compiled_program(r.onnx, r.march, recompile, r.calibration)
    header = replan_memory(header, program, r.march, tiling)
    res = estimate_program(program, header.get("tensors", {}), hardware_for(r.march, BOARDS[r.board]), 1, r.variant, "O3",
                           runtime_input_types={i["name"]: "nv12" for i in header.get("inputs", [])})
    threads = r.threads or 1
    fps = res.fps_threads(threads)
    by_class: dict[str, float] = {}
    for op in res.ops:
        if op.cycles > 0:
            group = residual_group(op)
            by_class[group] = by_class.get(group, 0.0) + op.cycles / res.hw.clock_hz * 1e3
    by_class[RUNTIME_GROUP] = res.per_frame_cycles / res.hw.clock_hz * 1e3
    from benchmarks.published.split import row_family

    out = {"variant": r.variant, "march": r.march, "split": r.split, "class": measurement_class(res)[0],
           "family": row_family(r), "classes_ms": by_class, "limits": res.limits_at(threads),
           "bpu_runtime_ms": res.hw.per_frame_us * 1e-3,
           "latency_ms": res.latency_ms, "fps": fps, "threads": threads,
           "pub_latency_ms": r.latency_ms, "pub_fps": r.fps_multithread, "bound": res.fps_bound_at(threads)}
    out["latency_err"] = res.latency_ms / r.latency_ms - 1 if r.latency_ms else None
    out["fps_err"] = fps / r.fps_multithread - 1 if r.fps_multithread else None
    return out


RUNTIME_GROUP = "runtime per frame"


def residual_group(op) -> str:
    """The op class of the residual analysis: unit and the rule that costs it (a move's layout case,
    a vector op's class, a tensor op's kernel and width)."""
    if op.unit == "data_movement":
        return f"data movement / {op.layout or 'copy'}"
    if op.unit == "vector":
        cls = op.note.split(":", 1)[0] if ":" in op.note else str(op.kernel)
        return f"vector / {cls}{' int16' if op.bits > 8 else ''}"
    if op.unit == "tensor":
        return f"tensor / {'matmul' if op.kernel in ('MatMul', 'Log2MatMul') else 'conv/linear'}{' int16' if op.bits > 8 else ''}"
    return "cpu"


def residuals(results: list[dict], min_share: float = 0.15, ridge: float = 1.0) -> list[str]:
    """Per op class: is its estimate systematically off across the rows?

    Two views of the same question, latency only: (1) a least-squares fit of the published latency as a
    sum of scaled class times, each row weighted by 1 / published (relative errors), with a ridge pull of
    every scale towards 1 (``ridge``: a class needs evidence in the rows to move; with few rows an
    unregularised fit is degenerate): the scale of class k is how much its time would have to change for
    the rows to agree; (2) for the rows where class k takes at least ``min_share`` of the estimate, the
    median of published / estimated. A class off by more than 2x in either view (where it is at least
    ``min_share`` of some row) is flagged."""
    import numpy as np

    rows = [o for o in results if o["pub_latency_ms"]]
    classes = sorted({k for o in rows for k in o["classes_ms"]})
    if not rows or not classes:
        return []
    from benchmarks.published.cv import ridge_scales

    a = np.array([[o["classes_ms"].get(k, 0.0) / o["pub_latency_ms"] for k in classes] for o in rows])
    scale = ridge_scales(a, ridge)
    cells = []
    for j, k in enumerate(classes):
        shares = [o["classes_ms"].get(k, 0.0) / o["latency_ms"] for o in rows]
        heavy = [o["pub_latency_ms"] / o["latency_ms"] for o, sh in zip(rows, shares) if sh >= min_share]
        total = sum(o["classes_ms"].get(k, 0.0) for o in rows)
        med = statistics.median(heavy) if heavy else None
        off = (heavy and not 0.5 <= scale[j] <= 2.0) or (med is not None and not 0.5 <= med <= 2.0)
        cells.append([k, sum(1 for sh in shares if sh > 0), f"{total:.1f}", f"{100 * max(shares):.0f} %", f"{scale[j]:.2f}",
                      len(heavy), "-" if med is None else f"{med:.2f}", "OFF > 2x" if off else "ok"])
    return markdown_table(("op class", "rows with it", "est ms (all rows)", "largest share", "ridge scale (pub/est)",
                           f"rows where >= {min_share:.0%}", "median pub/est there", "verdict"), cells).splitlines()


def summary(errors: list[float]) -> dict:
    a = [abs(e) for e in errors if e is not None]
    if not a:
        return {"n": 0}
    return {"n": len(a), "median_abs": statistics.median(a), "within_15": sum(x <= 0.15 for x in a) / len(a),
            "within_25": sum(x <= 0.25 for x in a) / len(a)}


def _pct(x):
    return "-" if x is None else f"{100 * x:+.0f}%"


def table(results: list[dict]) -> list[str]:
    cells = []
    for o in results:
        pl = f"{o['pub_latency_ms']:.2f}" if o["pub_latency_ms"] else "-"
        pf = f"{o['pub_fps']:.1f}" if o["pub_fps"] else "-"
        cells.append([o["variant"], o["march"], o["split"], o["class"], f"{o['latency_ms']:.2f} / {pl}", _pct(o["latency_err"]),
                      f"{o['fps']:.1f} / {pf} ({o['threads']})", _pct(o["fps_err"]), o["bound"]])
    return markdown_table(("model", "march", "split", "class", "latency ms est / pub", "err", "FPS est / pub (threads)", "err",
                           "FPS bound"), cells).splitlines()


def summaries(results: list[dict]) -> list[str]:
    cells = []
    keys = sorted({(o["march"], o["split"]) for o in results})
    for march, split in keys:
        sel = [o for o in results if o["march"] == march and o["split"] == split]
        for metric in ("latency", "fps"):
            s = summary([o[f"{metric}_err"] for o in sel])
            if s["n"]:
                cells.append([march, split, metric, s["n"], f"{100 * s['median_abs']:.1f} %", f"{100 * s['within_15']:.0f} %",
                              f"{100 * s['within_25']:.0f} %"])
    return markdown_table(("march", "split", "metric", "rows", "median abs error", "within 15 %", "within 25 %"), cells).splitlines()


def class_errors(results: list[dict]) -> str:
    """CLASS_ERRORS of hbtool/costmodel/classes.py from the fit rows: march -> class -> (rows, median |lat err|, median |FPS err|)."""
    out: dict[str, dict[str, tuple]] = {}
    for o in results:
        if o["split"] != "fit":
            continue
        out.setdefault(o["march"], {}).setdefault(o["class"], []).append(o)
    lines = ["CLASS_ERRORS = {"]
    for march, classes in sorted(out.items()):
        lines.append(f"    {march!r}: {{")
        for cls, sel in sorted(classes.items()):
            lat = [abs(o["latency_err"]) for o in sel if o["latency_err"] is not None]
            fps = [abs(o["fps_err"]) for o in sel if o["fps_err"] is not None]
            lines.append(f"        {cls!r}: ({len(sel)}, {statistics.median(lat) if lat else float('nan'):.3f}, "
                         f"{statistics.median(fps) if fps else float('nan'):.3f}),")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


MARKERS = {"fit": "o", "holdout": "x", "fresh": "^", "fresh2": "v"}


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colours = {"bayes-e": "tab:blue", "bernoulli2": "tab:orange", "bayes": "tab:green"}
    for ax, metric, pub in ((axes[0], "latency", "pub_latency_ms"), (axes[1], "fps", "pub_fps")):
        for o in results:
            if o[f"{metric}_err"] is None:
                continue
            ax.scatter(o[pub], 100 * o[f"{metric}_err"], c=colours.get(o["march"], "k"),
                       marker=MARKERS.get(o["split"], "x"), s=28)
        ax.axhspan(-25, 25, color="0.92", zorder=-2)
        ax.axhspan(-15, 15, color="0.85", zorder=-1)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log")
        ax.set_xlabel("published " + ("latency (ms, 1 thread)" if metric == "latency" else "FPS (multi-thread)"))
        ax.set_title(f"{metric}: estimate / published - 1")
    axes[0].set_ylabel("error (%)")
    handles = [plt.Line2D([], [], ls="", marker="o", c=c, label=m) for m, c in colours.items()]
    handles += [plt.Line2D([], [], ls="", marker="o", c="k", label="fit (calibration csv)"),
                plt.Line2D([], [], ls="", marker="x", c="k", label="classification hold-out (seen in earlier rounds)"),
                plt.Line2D([], [], ls="", marker="^", c="k", label="fresh hold-out (never fitted)"),
                plt.Line2D([], [], ls="", marker="v", c="k", label="second fresh hold-out (evaluated once)")]
    axes[1].legend(handles=handles, fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--march", action="append", help="only these marches (repeatable)")
    ap.add_argument("--families", choices=("fit", "holdout", "seen", "all"),
                    help="issue 33's family split (benchmarks/published/split.py) over every row: only this side of it "
                         "(fit: csv rows of fit families; holdout: every row of a held-out family, evaluated once; "
                         "seen: README rows of fit families)")
    ap.add_argument("--residuals", action="store_true", help="print the per-op-class residual analysis")
    ap.add_argument("--holdout", action="store_true", help="also the held-out rows")
    ap.add_argument("--fresh", action="store_true", help="also the fresh hold-out (HOLDOUT_FRESH)")
    ap.add_argument("--fresh2", action="store_true", help="also the second fresh hold-out (HOLDOUT_FRESH2)")
    ap.add_argument("--fresh3", action="store_true",
                    help="also the third fresh hold-out (HOLDOUT_FRESH3; its rows summarised apart as 'fresh3 fit family' / "
                         "'fresh3 unseen family' too), taken in split.evaluation_order")
    ap.add_argument("--fresh3-only", action="store_true", help="only the third fresh hold-out (implies --fresh3)")
    ap.add_argument("--compile-only", action="store_true",
                    help="export and compile the selected rows into the cache, print no estimate (to prepare a hold-out unseen)")
    ap.add_argument("--only", action="append", help="only these variants")
    ap.add_argument("--recompile", action="store_true")
    ap.add_argument("--no-tiling", action="store_true", help="memory plan without row-band tiling of conv chains (the plan before it)")
    ap.add_argument("--cached-only", action="store_true", help="skip rows whose compiled program is not cached yet")
    ap.add_argument("--cv-family", action="store_true",
                    help="leave-one-family-out cross-validation over every spent row (implies --holdout --fresh --fresh2 "
                         "--fresh3): per family, the fitted parameter groups refit without it (benchmarks/published/cv.py)")
    ap.add_argument("--cv-ridge", type=float, help="the cross-validation's ridge pull towards the frozen parameters "
                    "(default: benchmarks/published/cv.py RIDGE, the residual analysis's)")
    ap.add_argument("--results-json", type=Path, help="take the estimates from an earlier --json run instead of estimating")
    ap.add_argument("--classes", action="store_true", help="print CLASS_ERRORS for hbtool/costmodel/classes.py (fit rows)")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reference-csv", type=Path, help="the fit rows (default: published_perf_calibration.csv in $HBTOOL_REFERENCE)")
    ap.add_argument("--export-python", default=TIMM_PYTHON, help="the export venv's interpreter (default: $HBTOOL_TIMM_PYTHON)")
    args = ap.parse_args()
    if args.cv_family:
        args.holdout = args.fresh = args.fresh2 = args.fresh3 = True
    rows = (calibration_rows(args.reference_csv) + (holdout_rows() if args.holdout else []) + (fresh_rows() if args.fresh else [])
            + (fresh2_rows() if args.fresh2 else []))
    if args.fresh3_only:
        args.fresh3, rows = True, []
    if args.fresh3:
        from benchmarks.published.split import evaluation_order

        rows += evaluation_order(fresh3_rows())
    if args.families:
        import dataclasses

        from benchmarks.published.split import FIT, HOLDOUT, SEEN_FAMILY, evaluation_order, split_of

        pool = calibration_rows(args.reference_csv) + holdout_rows() + fresh_rows() + fresh2_rows()
        want = {"fit": {FIT}, "holdout": {HOLDOUT}, "seen": {SEEN_FAMILY}, "all": {FIT, HOLDOUT, SEEN_FAMILY}}[args.families]
        rows = evaluation_order([dataclasses.replace(r, split=split_of(r)) for r in pool if split_of(r) in want])
    if args.march:
        rows = [r for r in rows if r.march in args.march]
    if args.only:
        rows = [r for r in rows if r.variant in args.only]
    export_missing(rows, args.export_python)
    if args.compile_only:
        for r in rows:
            if r.onnx is not None and r.onnx.exists():
                print(f"compiling {r.variant} ({r.march})", flush=True)
                compiled_program(r.onnx, r.march, args.recompile, r.calibration)
        return
    results, skipped = [], []
    if args.results_json:
        saved = json.loads(args.results_json.read_text())
        results, skipped, rows = saved["results"], saved["skipped"], []
    for r in rows:
        if r.onnx is None or not r.onnx.exists():
            skipped.append((r.variant, r.march, SKIPPED.get(r.variant, "no ONNX: not exported (export venv missing, or its export failed: see the export log)")))
            continue
        if args.cached_only and not cache_path(r.onnx, r.march, r.calibration).exists():
            skipped.append((r.variant, r.march, "not compiled yet (compiles are cached per march; a 640x640 YOLO of size l/x takes over 10 min and about 9 GB on a shared 2-core machine: rerun without --cached-only where there is room)"))
            continue
        try:
            o = estimate_row(r, args.recompile, not args.no_tiling)
        except Exception as exc:  # noqa: BLE001 - report and go on
            skipped.append((r.variant, r.march, f"hbtool failed: {type(exc).__name__}: {str(exc)[:120]}"))
            continue
        results.append(o)
        print(f"{o['variant']:24s} {o['march']:10s} {o['split']:7s} lat {o['latency_ms']:8.2f} / {o['pub_latency_ms'] or 0:8.2f} "
              f"{_pct(o['latency_err']):>6s}   fps {o['fps']:8.1f} / {o['pub_fps'] or 0:8.1f} {_pct(o['fps_err']):>6s}  "
              f"{o['class']}, {o['bound']}", flush=True)
    if args.fresh3 and not args.results_json:
        from benchmarks.published.split import row_family

        fit_families = {row_family(r) for r in calibration_rows(args.reference_csv)}
        by_variant = {(r.variant, r.march): r for r in fresh3_rows()}
        results += [dict(o, split=f"fresh3 {fresh3_group(by_variant[(o['variant'], o['march'])], fit_families)}")
                    for o in list(results) if o["split"] == "fresh3"]
    lines = table([o for o in results if not o["split"].startswith("fresh3 ")]) + [""] + summaries(results)
    if skipped:
        lines += ["", "Not estimated: " + "; ".join(f"{v} ({m}): {why}" for v, m, why in skipped)]
    print("\n".join(summaries(results)))
    if args.residuals:
        res_lines = residuals([o for o in results if not o["split"].startswith("fresh3 ")])   # each row once
        print("\n".join(res_lines))
        lines += ["", "Per-op-class residuals (latency):", ""] + res_lines
    if args.cv_family:
        from benchmarks.published.cv import CV_HEADER, FAMILY_HEADER, RIDGE, cv_summary, family_table, leave_one_family_out

        ridge = RIDGE if args.cv_ridge is None else args.cv_ridge
        cv = leave_one_family_out([o for o in results if not o["split"].startswith("fresh3 ")], ridge)
        cv_lines = (markdown_table(CV_HEADER, cv_summary(cv)).splitlines() + [""]
                    + markdown_table(FAMILY_HEADER, family_table(cv)).splitlines())
        print("\n".join(cv_lines))
        lines += ["", f"Leave-one-family-out cross-validation (benchmarks/published/cv.py, ridge {ridge:g}):", ""] + cv_lines
    if args.classes:
        print(class_errors(results))
    if args.markdown:
        write_result(args.markdown, "\n".join(lines) + "\n")
    if args.plot:
        plot(results, args.plot)
    if args.json:
        write_result(args.json, json.dumps({"results": results, "skipped": skipped}, indent=1))


if __name__ == "__main__":
    main()
