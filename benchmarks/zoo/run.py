"""Run every corpus model through hbtool checker -> calibrate -> compile -> simulate and print one table.

    python -m benchmarks.zoo.export                       # once: writes benchmarks/_models/zoo/
    python -m benchmarks.zoo.run [--models NAME ...] [--fast] [--strict] [--timeout 900] [--march bayes-e]

Each model runs in its own worker process (``run.py --worker NAME``), and inside it every stage
is the real CLI (``python -m hbtool.cli checker|calibrate|compile|simulate``, :mod:`benchmarks.runner`) in its own
subprocess, with a YAML config the worker writes into ``<--out>/<model>/`` (default ``benchmarks/_out/zoo/<model>/``): an exit
3, a traceback, a crash or a timeout is recorded in the row, never fatal to the run. The worker
reads what hbtool wrote (``checker.json``, ``<prefix>_quant_info.json``, the simulate table and
its ``-o`` outputs, exit codes, stderr) and compares with the float model in onnxruntime.

Calibration: ``--cal-samples`` (default 8) generated samples (``data.py``), ``calibration_type``
``--calibration-type`` (default ``default``, hbtool's own: it compares max, percentile, KL and
MSE on the output; ``max`` alone cost PP-OCRv5's recogniser 4 points of character accuracy). Held-out: ``--eval-samples`` (default 4) other samples,
simulated, compared with the quantized ONNX by ``hbtool simulate --compare`` (max error in
LSB of the output scale) and with the float model here (output cosine, task metric,
``metrics.py``). The table (``benchmarks/_out/zoo/zoo.md`` and ``zoo.json``, ``--out`` to move
them) is rewritten after every model, so an interrupted run keeps its rows; ``causes.md``
beside it groups the failures by message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.configs import corpus_config, write_config
from benchmarks.runner import hbtool_env, run_stage
from benchmarks.tables import markdown_table, write_results
from benchmarks.zoo import metrics
from benchmarks.zoo.corpus import OUT_DIR, ROOT, ModelSpec, select

STAGES = ("checker", "calibrate", "compile", "simulate")


# ----------------------------------------------------------------------------- the worker
HELD_OUT_OFFSET = 100    # held-out samples are data.samples(spec, n, HELD_OUT_OFFSET): never a calibration index


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def write_case(spec: ModelSpec, case: Path, cal: list[dict], calibration_type: str, march: str = "bayes") -> Path:
    """The calibration samples as one .npy folder per input, and the YAML config that points at them."""
    import numpy as np

    cal_dirs = []
    for name in cal[0]:
        d = case / "cal" / _safe(name)
        d.mkdir(parents=True)
        for k, s in enumerate(cal):
            np.save(d / f"cal_{k:02d}.npy", s[name])
        cal_dirs.append(d)
    return write_config(case / "config.yaml", corpus_config(spec, case, cal_dirs, calibration_type, len(cal), march))


def eval_inputs(case: Path, held: list[dict]) -> list[str]:
    """The held-out samples stacked per input, as ``hbtool simulate``'s ``-i name=file.npy`` arguments
    (on the first axis; a rank-0 input's scalars side by side)."""
    import numpy as np

    args = []
    for name in held[0]:
        p = case / f"eval_{_safe(name)}.npy"
        parts = [s[name] for s in held]
        np.save(p, np.stack(parts) if parts[0].ndim == 0 else np.concatenate(parts, axis=0))
        args += ["-i", f"{name}={p}"]
    return args


def simulated_outputs(sim_dir: Path, ref: dict[str, list]) -> dict[str, list]:
    """``hbtool simulate -o``'s outputs, split back per sample (it stacks them along axis 0) and
    shaped like the reference outputs ``ref`` (output name -> one array per sample)."""
    import numpy as np

    from hbtool.io.files import safe_file_name

    out = {}
    for n, parts in ref.items():
        stacked = np.load(sim_dir / f"{safe_file_name(n)}.npy")
        out[n] = [part.reshape(parts[i].shape) for i, part in enumerate(np.split(stacked, len(parts)))]
    return out


def _stage(name: str, args: list[str], case: Path, deadline: float) -> dict:
    """One CLI call (:func:`benchmarks.runner.run_stage`), within what is left of the model's time."""
    return run_stage(name, args, case, deadline - time.time())


def _simulate_table(stdout: str) -> dict[str, float | None]:
    """Max error (LSB) per output from the 'simulated vs --compare' table (an output without a scale
    whose Chebyshev distance is 0 counts as 0 LSB)."""
    lsb: dict[str, float | None] = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        if len(cells) == 7 and re.fullmatch(r"-?[0-9.]+", cells[1]):
            # "-": an output with no scale (an integer output, e.g. a TFLite model's uint8 Softmax); equal is 0 LSB
            exact = cells[5] == "-" and re.fullmatch(r"[0-9.eE+-]+", cells[4]) and float(cells[4]) == 0
            lsb[cells[0]] = 0.0 if exact else None if cells[5] == "-" else float(cells[5])
    return lsb


def _float_outputs(spec: ModelSpec, feeds: list[dict]) -> tuple[list[str], list[list]]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(spec.onnx_path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    return names, [sess.run(None, {k: v for k, v in f.items() if k in wanted}) for f in feeds]


def _charset(spec: ModelSpec) -> list[str]:
    from benchmarks.zoo.export_pkg import dictionary_path

    lines = dictionary_path(spec).read_text(encoding="utf-8").split("\n")[:-1]
    if "charset" in spec.extra:            # ddddocr: index 0 is already the blank ''
        return lines
    return ["<blank>"] + lines + [" "]      # PaddleOCR: blank first, use_space_char last


def _task_metric(spec: ModelSpec, sim: dict[str, list], ref: dict[str, list], feeds: list[dict]) -> tuple[str, float, str]:
    first = next(iter(ref))
    if spec.metric == "top1":
        return "top-1 = float", metrics.top1(sim[first], ref[first]), ""
    if spec.metric == "ctc":
        acc, texts = metrics.char_accuracy(sim[first], ref[first], _charset(spec))
        return "char acc", acc, "; ".join(texts[:1])
    if spec.metric == "embedding":
        return "emb cos", metrics.embedding_cosine(sim[first], ref[first], [f["attention_mask"] for f in feeds]), ""
    s, r = detections(spec, sim), detections(spec, ref)
    n_ref = sum(len(b) for b, _ in r)
    return "det F1", metrics.match_f1(s, r), f"{n_ref} float dets"


def detections(spec: ModelSpec, outputs: dict[str, list]) -> list[tuple]:
    """(boxes, classes) per sample, decoded the package's way (``metrics.py``) from a detector's
    outputs (output name -> one array per sample)."""
    size = spec.shape[2:]
    first = next(iter(outputs))
    if spec.metric == "yolox":
        return [metrics.yolox_boxes(o, size) for o in outputs[first]]
    if spec.metric == "yolov8":
        return [metrics.yolov8_boxes(o) for o in outputs[first]]
    if spec.metric == "db":
        post = metrics.db_postprocess(spec.name)
        return [metrics.db_boxes(o, post) for o in outputs[first]]
    if spec.metric == "picodet":
        return [metrics.picodet_boxes({k: v[i] for k, v in outputs.items()}, size) for i in range(len(outputs[first]))]
    raise ValueError(spec.metric)


def work(spec: ModelSpec, args: argparse.Namespace, row: dict) -> dict:
    """Fill ``row`` stage by stage (the caller keeps what is there if a later step raises)."""
    import numpy as np
    import onnx

    from benchmarks.zoo.data import float_samples, samples

    deadline = time.time() + args.timeout
    case = args.out_root / spec.name
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    row["stages"] = {}
    model = onnx.load(str(spec.onnx_path), load_external_data=False)
    row["nodes"] = len(model.graph.node)
    row["opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)

    cal = samples(spec, args.cal_samples, 0)
    held = samples(spec, args.eval_samples, HELD_OUT_OFFSET)
    cfg = write_case(spec, case, cal, args.calibration_type, args.march)
    eval_args = eval_inputs(case, held)
    work_dir = case / "model_output"

    st = row["stages"]
    st["checker"] = _stage("checker", ["-c", str(cfg), "--output-dir", str(case / "check")], case, deadline)
    check_json = case / "check" / "checker.json"
    if check_json.exists():
        chk = json.loads(check_json.read_text())
        row["bpu_mac_share"] = chk["summary"].get("bpu_mac_fraction")
        row["gmacs"] = chk["summary"].get("total_macs", 0) / 1e9
        cpu = [n for n in chk["nodes"] if n.get("on") == "CPU"]
        row["cpu_nodes"] = len(cpu)
        row["cpu_reasons"] = dict(Counter(f"{n['op_type']}: {n.get('reason') or '?'}" for n in cpu))
        row["cpu_examples"] = {}
        for n in cpu:
            row["cpu_examples"].setdefault(_generic(f"{n['op_type']}: {n.get('reason') or '?'}"), n["name"])

    st["calibrate"] = _stage("calibrate", ["-c", str(cfg)], case, deadline)
    qi = work_dir / f"{spec.name}_quant_info.json"
    if st["calibrate"]["rc"] == 0 and qi.exists():
        info = json.loads(qi.read_text())
        row["float_fallbacks"] = len(info.get("float_fallbacks", []))
        row["fallback_reasons"] = dict(Counter(f"{f['op_type']}: {f.get('reason')}" for f in info.get("float_fallbacks", [])))
        row["fallback_examples"] = {}
        for f in info.get("float_fallbacks", []):
            row["fallback_examples"].setdefault(_generic(f"{f['op_type']}: {f.get('reason')}"), f["node"])
        row["calib_output_cosine"] = min((o.get("cosine", 1.0) for o in info.get("outputs", {}).values()), default=None)
        row["calibration_method"] = info.get("method")
        st["compile"] = _stage("compile", ["-c", str(cfg)], case, deadline)
    hbm = work_dir / f"{spec.name}.bin"
    if st.get("compile", {}).get("rc") == 0 and hbm.exists():
        st["simulate"] = _stage("simulate", [str(hbm), *eval_args, "--compare", str(work_dir / f"{spec.name}_quantized_model.onnx"),
                                             "-o", str(case / "sim"), "--threads", "2"], case, deadline)
    if st.get("simulate", {}).get("rc") == 0:
        lsb = _simulate_table(st["simulate"]["stdout"])
        row["max_lsb"] = max((v for v in lsb.values() if v is not None), default=None)
        out_names, float_runs = _float_outputs(spec, float_samples(spec, held))
        ref = {n: [run[i] for run in float_runs] for i, n in enumerate(out_names)}
        sim = simulated_outputs(case / "sim", ref)
        row["cosine"] = min(float(np.mean([metrics.cosine(a, b) for a, b in zip(sim[n], ref[n])])) for n in out_names)
        if spec.metric:
            try:
                row["metric_name"], row["metric"], row["metric_note"] = _task_metric(spec, sim, ref, held)
            except Exception as exc:
                row["metric_error"] = f"{type(exc).__name__}: {exc}"
    for s in st.values():
        s.pop("stdout", None)
    return row


# ----------------------------------------------------------------------------- the table
def _rc(row: dict, stage: str) -> str:
    s = row.get("stages", {}).get(stage)
    if s is None:
        return "-"
    rc = s["rc"]
    if _internal(s):
        return f"**{rc}!**"
    return str(rc)


def _generic(reason: str) -> str:
    """A reason with its numbers replaced, so that one cause is one group (ratios, sizes differ per node)."""
    reason = re.sub(r"'[^']*'", "'<tensor>'", reason)                # tensor names differ per block
    reason = re.sub(r"has shape [0-9x]+", "has shape <shape>", reason)
    return re.sub(r"(?<![A-Za-z_])-?\d[\d.]*(e[+-]?\d+)?", "N", reason)


def _grouped(counts: dict | None) -> dict[str, int]:
    out: Counter = Counter()
    for k, v in (counts or {}).items():
        out[_generic(k)] += v
    return dict(out)


def _short(counts: dict | None, limit: int = 3) -> str:
    counts = _grouped(counts)
    if not counts:
        return "0"
    total = sum(counts.values())
    items = sorted(counts.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{v}x {k[:70]}" for k, v in items[:limit])
    return f"{total}: {text}" + (" ..." if len(items) > limit else "")


def clean(row: dict) -> bool:
    """End to end with every stage exit 0, zero float fallbacks (every BPU node integer)."""
    st = row.get("stages", {})
    return all(st.get(s, {}).get("rc") == 0 for s in STAGES) and row.get("float_fallbacks") == 0


def _internal(stage: dict) -> bool:
    """An internal error: exit 3, or a traceback with any exit but hbtool's own 1 and 2 (the stages run with
    ``-v``, which prints the traceback of a one-line exit-1/2 error too: a model refused is no internal error)."""
    return stage.get("rc") == 3 or bool(stage.get("traceback")) and stage.get("rc") not in (1, 2)


def exit3(row: dict) -> bool:
    return any(_internal(s) for s in row.get("stages", {}).values())


def _fmt(v, spec: str = ".4f") -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: list[dict], wall: float) -> str:
    header = ("model", "source", "exporter", "nodes", "BPU MACs", "CPU nodes", "float fallbacks", "chk", "cal", "cmp", "sim",
              "cal s", "cmp s", "cos vs float", "max LSB", "task metric")
    cells = []
    for r in rows:
        st = r.get("stages", {})
        metric = "-"
        if r.get("metric") is not None:
            metric = f"{r['metric_name']} {r['metric']:.3f}"
        elif r.get("metric_error"):
            metric = f"error: {r['metric_error'][:60]}"
        cells.append([
            r["model"] + (f" ({r['status']})" if r.get("status") else ""), r.get("source", ""), r.get("exporter", ""),
            str(r.get("nodes", "-")),
            "-" if r.get("bpu_mac_share") is None else f"{100 * r['bpu_mac_share']:.1f}%",
            _short(r.get("cpu_reasons")) if "cpu_nodes" in r else "-",
            _short(r.get("fallback_reasons")) if "float_fallbacks" in r else "-",
            *(_rc(r, s) for s in STAGES),
            _fmt(st.get("calibrate", {}).get("seconds"), ".1f"), _fmt(st.get("compile", {}).get("seconds"), ".1f"),
            _fmt(r.get("cosine")), _fmt(r.get("max_lsb"), ".2f"), metric])
    n_clean = sum(clean(r) for r in rows)
    n_exit3 = sum(exit3(r) for r in rows)
    lines = markdown_table(header, cells).splitlines()
    lines.append("")
    lines.append(f"**{n_clean} of {len(rows)} models go end to end with zero float fallbacks and every BPU node integer; "
                 f"{n_exit3} give exit 3 (internal error) in some stage.** Corpus wall time {wall / 60:.1f} min.")
    return "\n".join(lines) + "\n"


def _where(model: str, stage: str, root: Path = OUT_DIR) -> str:
    """The innermost hbtool frame of an internal error's traceback (the stage ran with -v; its stderr in ``root``)."""
    path = root / model / f"{stage}.stderr.txt"
    frames = re.findall(r'File "[^"]*/(hbtool/[^"]+)", line (\d+), in (\S+)', path.read_text()) if path.exists() else []
    return f" [at {frames[-1][0]}:{frames[-1][1]} {frames[-1][2]}]" if frames else ""


def causes(rows: list[dict], root: Path = OUT_DIR) -> str:
    """Every failure message grouped, with the models it hits."""
    groups: dict[str, dict[str, list[str]]] = {"exit 3 / traceback": defaultdict(list), "other non-zero exit": defaultdict(list),
                                                "CPU placement": defaultdict(list), "float fallback": defaultdict(list)}
    for r in rows:
        for stage, s in r.get("stages", {}).items():
            if s["rc"] != 0:
                kind = "exit 3 / traceback" if _internal(s) else "other non-zero exit"
                msg = re.sub(r"/[^\s;:']+/", "<path>/", s.get("error") or f"rc {s['rc']}")
                where = _where(r["model"], stage, root) if kind.startswith("exit 3") else ""
                groups[kind][f"{stage}: {msg[:300]}{where}"].append(r["model"])
        if r.get("status"):
            groups["other non-zero exit"][r["status"]].append(r["model"])
        for k, v in _grouped(r.get("cpu_reasons")).items():
            example = r.get("cpu_examples", {}).get(k)
            groups["CPU placement"][k].append(f"{r['model']} ({v}" + (f", e.g. `{example}`)" if example else ")"))
        for k, v in _grouped(r.get("fallback_reasons")).items():
            example = r.get("fallback_examples", {}).get(k)
            groups["float fallback"][k].append(f"{r['model']} ({v}" + (f", e.g. `{example}`)" if example else ")"))
    out = []
    for kind, g in groups.items():
        out.append(f"## {kind}\n")
        for msg, models in sorted(g.items(), key=lambda kv: -len(kv[1])):
            out.append(f"- {msg} -- {len(models)} model(s): {', '.join(models)}")
        out.append("")
    return "\n".join(out)


def write_tables(rows: list[dict], out: Path, wall: float) -> None:
    """zoo.json, zoo.md, causes.md; the corpus wall time is the sum of the rows' (right under --update too)."""
    wall = sum(r.get("wall_seconds", 0.0) for r in rows) or wall
    summary = {"models": len(rows), "clean": sum(clean(r) for r in rows), "exit3": sum(exit3(r) for r in rows),
               "wall_seconds": round(wall, 1)}
    write_results(out, {"zoo.json": {"summary": summary, "rows": rows}, "zoo.md": markdown(rows, wall), "causes.md": causes(rows, out)})


# ----------------------------------------------------------------------------- main
def _merged(rows: list[dict], earlier: dict[str, dict]) -> list[dict]:
    """This run's rows plus (with --update) the earlier rows of models not run again, in corpus order."""
    from benchmarks.zoo.corpus import CORPUS

    by_name = {**earlier, **{r["model"]: r for r in rows}}
    return [by_name[m.name] for m in CORPUS if m.name in by_name]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--fast", action="store_true", help="the small subset that covers the known bug classes")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per model, all stages together")
    ap.add_argument("--cal-samples", type=int, default=8)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--calibration-type", default="default", help="hbtool's calibration_type (default: hbtool's own default)")
    ap.add_argument("--march", default="bayes", choices=("bayes", "bayes-e", "bernoulli2"),
                    help="the BPU every model is built for (default bayes, J5)")
    ap.add_argument("--out", type=Path, default=OUT_DIR,
                    help="where zoo.md / zoo.json / causes.md go, and each model's work folder (runs with different "
                         "--out, e.g. one per march, can run side by side)")
    ap.add_argument("--update", action="store_true", help="keep the other models' rows of an earlier zoo.json in --out")
    ap.add_argument("--rewrite", action="store_true", help="only rewrite zoo.md / causes.md from --out's zoo.json")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 unless every exported model goes end to end clean (scripts/nightly.sh)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out_root = args.out

    if args.rewrite:
        saved = json.loads((args.out / "zoo.json").read_text())
        write_tables(saved["rows"], args.out, saved["summary"]["wall_seconds"])
        return

    if args.worker:
        spec = select([args.worker])[0]
        row = {"model": spec.name, "source": spec.source, "exporter": spec.exporter}
        try:
            work(spec, args, row)
        except Exception as exc:
            row["status"] = f"runner error: {type(exc).__name__}: {exc}"[:200]
            row["runner_traceback"] = traceback.format_exc()
        for s in row.get("stages", {}).values():
            s.pop("stdout", None)
        (args.out / spec.name / "row.json").parent.mkdir(parents=True, exist_ok=True)
        (args.out / spec.name / "row.json").write_text(json.dumps(row, indent=1))
        return

    specs = select(args.models, args.fast)
    rows: list[dict] = []
    earlier: dict[str, dict] = {}
    if args.update and (args.out / "zoo.json").exists():
        earlier = {r["model"]: r for r in json.loads((args.out / "zoo.json").read_text())["rows"]}
    t_start = time.perf_counter()
    for spec in specs:
        t0 = time.perf_counter()
        row_file = args.out / spec.name / "row.json"
        if not spec.onnx_path.exists():
            row = {"model": spec.name, "source": spec.source, "exporter": spec.exporter,
                   "status": "not exported (run benchmarks/zoo/export.py)"}
        else:
            row_file.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "benchmarks.zoo.run", "--worker", spec.name, "--timeout", str(args.timeout),
                   "--cal-samples", str(args.cal_samples), "--eval-samples", str(args.eval_samples),
                   "--calibration-type", args.calibration_type, "--march", args.march, "--out", str(args.out.resolve())]
            try:
                subprocess.run(cmd, timeout=args.timeout + 120, cwd=ROOT, env=hbtool_env())
            except subprocess.TimeoutExpired:
                pass
            row = json.loads(row_file.read_text()) if row_file.exists() else {
                "model": spec.name, "source": spec.source, "exporter": spec.exporter, "status": "worker died or timed out"}
        row["wall_seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        earlier.pop(spec.name, None)
        write_tables(_merged(rows, earlier), args.out, time.perf_counter() - t_start)
        rcs = " ".join(f"{s}={row.get('stages', {}).get(s, {}).get('rc', '-')}" for s in STAGES)
        print(f"{spec.name:32s} {rcs}  cos={_fmt(row.get('cosine'))} lsb={_fmt(row.get('max_lsb'), '.2f')} "
              f"metric={_fmt(row.get('metric'), '.3f')} fb={row.get('float_fallbacks', '-')} cpu={row.get('cpu_nodes', '-')} "
              f"{row.get('status', '')} ({row['wall_seconds']:.0f} s)", flush=True)
    wall = time.perf_counter() - t_start
    rows = _merged(rows, earlier)
    write_tables(rows, args.out, wall)
    print(markdown(rows, wall).splitlines()[-1])
    print(f"table: {args.out / 'zoo.md'}  json: {args.out / 'zoo.json'}  causes: {args.out / 'causes.md'}")
    if args.strict:
        failed = [r["model"] for r in rows if not clean(r) and not str(r.get("status", "")).startswith("not exported")]
        if failed:
            raise SystemExit(f"not clean: {', '.join(failed)}")


if __name__ == "__main__":
    main()
