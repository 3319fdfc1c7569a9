"""hbtool simulate against onnxruntime float32 on corpus models, at batch 1 and batch 16, in one run.

For every model (``--models``, default: the 14 below) the compiled artifact of the conformance
corpus runner (``benchmarks/zoo/run.py``, written to ``--zoo-out``) is run

* through ``hbtool simulate``'s executor, one sample per call and 16 samples per call;
* through onnxruntime float32 on the same model's ``*_original_float_model.onnx``, one sample
  per call, and 16 per call where the model takes a batch (its first input axis made dynamic
  and the outputs checked to be the 16 one-sample outputs), else as 16 calls ("16x1").

The machine is shared, so both sides are measured in the same process and interleaved: each
of ``--rounds`` rounds times simulate and onnxruntime back to back on the same 16 samples, and
the totals over rounds are compared, so load from other processes falls on both alike.
Exactness: every simulated output at batch 16 must equal the batch-1 outputs and the quantized
ONNX model (``*_quantized_model.onnx`` in onnxruntime) bit for bit.

    python -m benchmarks.simulate_speed [--models ...] [--rounds 3] [--json out.json]

``--cli-lines N`` adds the command-line row: ``N`` samples of ``--cli-model`` (default the
PP-OCRv5 recogniser: text lines) through ``python -m hbtool.cli simulate`` against a Python
process running onnxruntime float32 on the same ``.npy`` line by line, process start included,
interleaved over ``--rounds``. ``--baseline DIR`` runs another checkout's code beside this one
(its hbtool in the CLI row; in the warm rows its hbtool measured by this copy of the benchmark) so old and
new are compared in the same run, measured alike; the CLI outputs of both must be identical. ``--threads 1 2`` measures every
model at one and at two threads back to back and prints how each side scales (on a loaded machine the
one-thread ratios and the CPU-time ratios are the honest ones). The five models of issue 34:

    python -m benchmarks.simulate_speed --models hf_mobilenet_v2 ppocrv5_rec hf_deit_tiny hf_resnet50 hf_swin_t \
        --cli-lines 200 [--baseline /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks import paths

ZOO_OUT = paths.OUT / "zoo"

MODELS = {
    "hf_mobilenet_v2": "depthwise CNN",
    "timm_efficientnet_b0": "depthwise CNN",
    "timm_mobilenetv3_large_100": "depthwise CNN",
    "ppocrv5_rec": "text recogniser",
    "ppocrv6_tiny_det": "text detector",
    "ddddocr_yolox_det": "detector",
    "hf_resnet50": "CNN",
    "hf_swin_t": "Swin",
    "hf_deit_tiny": "DeiT",
    "hf_vit_tiny": "ViT",
    "hf_bert_4l": "BERT",
    "minilm_l6_v2": "BERT (MiniLM)",
    "hf_segformer_b0": "segmenter",
    "hf_levit_128s": "LeViT",
}
BATCH = 16


def _samples(name: str, inputs: list[dict], n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` samples per input, stacked: the corpus runner's evaluation samples, repeated, else random."""
    rng = np.random.default_rng(seed)
    out = {}
    for desc in inputs:
        shape, dtype = tuple(desc["shape"]), np.dtype(desc["dtype"])
        path = ZOO_OUT / name / f"eval_{desc['name']}.npy"
        if path.exists():
            data = np.load(path)
            reps = -(-n * shape[0] // data.shape[0])
            data = np.concatenate([data] * reps)[: n * shape[0]]
        elif dtype.kind == "f":
            data = rng.uniform(0, 255, (n * shape[0],) + shape[1:]).astype(dtype)
        else:
            data = rng.integers(0, 1000, (n * shape[0],) + shape[1:]).astype(dtype)
        out[desc["name"]] = np.ascontiguousarray(data.astype(dtype))
    return out


def _slice(feeds: dict, shapes: dict, k: int, count: int = 1) -> dict:
    return {n: x[k * shapes[n][0]:(k + count) * shapes[n][0]] for n, x in feeds.items()}


def quiesce(window_s: float = 0.01, quiet_cpu_s: float = 0.001, limit_s: float = 1.0) -> float:
    """Wait until no thread of this process is spinning; returns the seconds waited.

    onnxruntime's float32 session (the peer; its pool spins, as a user's would) keeps a worker
    spinning for about 50 ms after each ``run`` returns (measured: a 50 ms sleep right after a
    MobileNetV2 run used 45-49 ms of this process's CPU, a 200 ms sleep no more). Timed right after
    the peer, simulate lost one of two cores to that spinner and was charged its CPU time: both its
    wall and its CPU ratio read high. The wait ends after two ``window_s`` sleeps in a row that cost
    the process under ``quiet_cpu_s`` of CPU each (two, because a preempted spinner also reads quiet),
    or after ``limit_s``. It is not timed.
    """
    start = time.perf_counter()
    quiet = 0
    while quiet < 2 and time.perf_counter() - start < limit_s:
        c = time.process_time()
        time.sleep(window_s)
        quiet = quiet + 1 if time.process_time() - c < quiet_cpu_s else 0
    return time.perf_counter() - start


def _session(path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    return ort.InferenceSession(path if isinstance(path, bytes) else str(path), opts, providers=["CPUExecutionProvider"])


def _batched_float(path: Path, threads: int, feeds16: dict, singles: list[list[np.ndarray]]):
    """The float model with a dynamic first axis, if it runs 16 samples at once and gives the one-sample outputs."""
    import onnx

    model = onnx.load(str(path))
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "N"
    try:
        sess = _session(model.SerializeToString(), threads)
        got = sess.run(None, feeds16)
    except Exception:
        return None
    for k, y in enumerate(got):
        want = np.concatenate([s[k] for s in singles])
        if y.shape != want.shape or not np.allclose(y, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max() + 1e-6)):
            return None
    return sess


def run_model(name: str, rounds: int, threads: int) -> dict:
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor

    wd = ZOO_OUT / name / "model_output"
    art_path = wd / f"{name}.bin"
    if not art_path.exists():
        raise SystemExit(f"{art_path} is missing: run benchmarks/zoo/run.py --models {name} --out {ZOO_OUT} first")
    art = read_artifact(art_path)
    t = time.perf_counter()
    executor = Executor(art, threads=threads)
    build_s = time.perf_counter() - t
    shapes = {d["name"]: tuple(d["shape"]) for d in art.header["inputs"]}
    feeds = _samples(name, art.header["inputs"], BATCH)
    outs = executor.output_names
    float_sess = _session(wd / f"{name}_original_float_model.onnx", threads)
    singles_f = [float_sess.run(outs, _slice(feeds, shapes, k)) for k in range(BATCH)]
    batched_f = _batched_float(wd / f"{name}_original_float_model.onnx", threads, feeds, singles_f)

    # warm-up: first-call allocations, loops loaded from the cache
    executor.run(_slice(feeds, shapes, 0))
    executor.run(feeds)
    quiesce()  # the float session's warm-up calls above
    t_sim1 = t_ort1 = t_sim16 = t_ort16 = 0.0
    # CPU seconds of this process beside the wall clock: on a loaded machine they move less (both sides
    # run in this process; with --threads 1 nothing spins, so they are each side's own work)
    c_sim1 = c_ort1 = c_sim16 = c_ort16 = 0.0
    sim1 = sim16 = None
    best1 = best16 = float("inf")  # the best round's wall time: on a loaded machine the least disturbed
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        sim1 = [executor.run(_slice(feeds, shapes, k)) for k in range(BATCH)]
        best1 = min(best1, time.perf_counter() - t)
        t_sim1 += time.perf_counter() - t
        c_sim1 += time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        for k in range(BATCH):
            float_sess.run(outs, _slice(feeds, shapes, k))
        t_ort1 += time.perf_counter() - t
        c_ort1 += time.process_time() - c
        quiesce()  # the peer's spinning pool must not run into simulate's time
        t, c = time.perf_counter(), time.process_time()
        sim16 = executor.run(feeds)
        best16 = min(best16, time.perf_counter() - t)
        t_sim16 += time.perf_counter() - t
        c_sim16 += time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        if batched_f is not None:
            batched_f.run(outs, feeds)
        else:
            for k in range(BATCH):
                float_sess.run(outs, _slice(feeds, shapes, k))
        t_ort16 += time.perf_counter() - t
        c_ort16 += time.process_time() - c
        quiesce()

    quant = _session(wd / f"{name}_quantized_model.onnx", threads)
    exact = True
    for k in range(BATCH):
        ref = quant.run(outs, _slice(feeds, shapes, k))
        for j, o in enumerate(outs):
            rows = sim16[o].shape[0] // BATCH
            got16 = sim16[o][k * rows:(k + 1) * rows]
            exact &= bool(np.array_equal(got16, sim1[k][o]) and np.array_equal(got16, np.asarray(ref[j], np.float32)))
    n = rounds * BATCH
    row = {
        "model": name, "kind": MODELS.get(name, ""), "input": "x".join(map(str, next(iter(shapes.values())))),
        "build_s": round(build_s, 2),
        "sim_b1_ms": 1000 * t_sim1 / n, "ort_b1_ms": 1000 * t_ort1 / n,
        "sim_b16_ms": 1000 * t_sim16 / n, "ort_b16_ms": 1000 * t_ort16 / n,
        "ort_b16_mode": "batched" if batched_f is not None else "16x1", "bit_exact": exact,
    }
    row["ratio_b1"] = row["sim_b1_ms"] / row["ort_b1_ms"]
    row["ratio_b16"] = row["sim_b16_ms"] / row["ort_b16_ms"]
    row["cpu_ratio_b1"] = c_sim1 / max(c_ort1, 1e-9)
    row["cpu_ratio_b16"] = c_sim16 / max(c_ort16, 1e-9)
    row["sim_b1_cpu_ms"], row["sim_b16_cpu_ms"] = 1000 * c_sim1 / n, 1000 * c_sim16 / n
    row["sim_b1_best_ms"], row["sim_b16_best_ms"] = 1000 * best1 / BATCH, 1000 * best16 / BATCH
    return row


def cpu_lines(rows: list[dict]) -> str:
    """simulate's own CPU ms and best-round wall ms per sample, the figures a loaded machine disturbs least."""
    return "\n".join(f"{r['model']}: simulate CPU b1 {r['sim_b1_cpu_ms']:.1f} / b16 {r['sim_b16_cpu_ms']:.1f} ms, best wall b1 "
                     f"{r['sim_b1_best_ms']:.1f} / b16 {r['sim_b16_best_ms']:.1f} ms a sample" for r in rows if "sim_b1_cpu_ms" in r)


def table(rows: list[dict]) -> str:
    lines = ["| model | kind | input | simulate b1 ms | ORT float b1 ms | ratio b1 | simulate b16 ms/sample | ORT float b16 ms/sample | ratio b16 | bit-exact |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['kind']} | {r['input']} | {r['sim_b1_ms']:.1f} | {r['ort_b1_ms']:.1f} | {r['ratio_b1']:.2f}x | "
                     f"{r['sim_b16_ms']:.1f} | {r['ort_b16_ms']:.1f} ({r['ort_b16_mode']}) | {r['ratio_b16']:.2f}x | {'yes' if r['bit_exact'] else 'NO'} |")
    for key in ("ratio_b1", "ratio_b16", "cpu_ratio_b1", "cpu_ratio_b16"):
        if not all(key in r for r in rows):
            continue  # an older checkout's rows (--baseline) have no CPU ratios
        vals = [r[key] for r in rows]
        lines.append(f"\n{key}: median {statistics.median(vals):.2f}x, worst {max(vals):.2f}x "
                     f"({max(rows, key=lambda r: r[key])['model']})")
    return "\n".join(lines)


def scaling(rows: list[dict], counts: list[int]) -> str:
    """How each side speeds up from the first thread count to the others (wall time ratios, same run)."""
    first = counts[0]
    lines = [f"\nscaling from {first} thread(s) (time at {first} / time at n; 2.0 = twice as fast):",
             "| model | n | simulate b1 | ORT float b1 | simulate b16 | ORT float b16 |", "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["model"] for r in rows):
        base = next(r for r in rows if r["model"] == name and r["threads"] == first)
        for r in rows:
            if r["model"] == name and r["threads"] != first:
                lines.append(f"| {name} | {r['threads']} | " + " | ".join(
                    f"{base[k] / r[k]:.2f}x" for k in ("sim_b1_ms", "ort_b1_ms", "sim_b16_ms", "ort_b16_ms")) + " |")
    return "\n".join(lines)


_ORT_LINES = """
import sys, time
import numpy as np
import onnxruntime as ort
model, data, name, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
opts = ort.SessionOptions()
opts.intra_op_num_threads = threads
opts.log_severity_level = 3
sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
x = np.load(data)
rows = sess.get_inputs()[0].shape[0]
rows = rows if isinstance(rows, int) and rows > 0 else 1
outs = [sess.run(None, {name: x[k:k + rows]})[0] for k in range(0, len(x), rows)]
"""


def cli_row(name: str, lines: int, threads: int, rounds: int, baseline: Path | None) -> dict:
    """``hbtool simulate`` on ``lines`` samples, process start included, against onnxruntime float32 in
    its own process on the same file; with ``baseline`` also that checkout's hbtool, outputs compared."""
    import os
    import subprocess
    import sys
    import tempfile

    from hbtool.compiler.artifact import read_artifact

    wd = ZOO_OUT / name / "model_output"
    art_path = wd / f"{name}.bin"
    if not art_path.exists():
        raise SystemExit(f"{art_path} is missing: run benchmarks/zoo/run.py --models {name} --out {ZOO_OUT} first")
    desc = read_artifact(art_path).header["inputs"]
    if len(desc) != 1:
        raise SystemExit(f"--cli-model {name}: the CLI row takes a model of one input")
    tmp = Path(tempfile.mkdtemp(prefix="simulate_speed_cli_"))
    try:
        data = tmp / "lines.npy"
        np.save(data, _samples(name, desc, lines)[desc[0]["name"]])
        sides = {"hbtool": paths.ROOT}
        if baseline is not None:
            sides["hbtool (baseline)"] = Path(baseline).resolve()
        # run in the side's root: ``python -m`` puts the working directory first on the import path, ahead of
        # PYTHONPATH, so from another checkout both sides would run that checkout's hbtool
        cmds = {label: ([sys.executable, "-m", "hbtool.cli", "simulate", str(art_path.resolve()), "-i", f"{desc[0]['name']}={data}",
                         "--threads", str(threads), "-o", str(tmp / label.replace(" ", "_"))],
                        dict(os.environ, PYTHONPATH=str(root)), root) for label, root in sides.items()}
        cmds["onnxruntime float32"] = ([sys.executable, "-c", _ORT_LINES, str((wd / f"{name}_original_float_model.onnx").resolve()),
                                        str(data), desc[0]["name"], str(threads)], dict(os.environ), None)
        for cmd, env, cwd in cmds.values():  # warm-up: the numba cache filled, files in the page cache
            # inline: the loops of a changed checkout compile in this run, not in a background process that a
            # measured round could overtake (it then ran the numpy forms: the 23.2 s of 2026-12-06 06:50)
            subprocess.run(cmd, env=dict(env, HBTOOL_SIM_COMPILE="inline"), cwd=cwd, check=True, capture_output=True)
        seconds = {label: 0.0 for label in cmds}
        for r in range(rounds):
            # the order turns every round: run first, a side measured slower in every round of a run (4 of 4 runs of
            # 2026-12-07 against alternated pairs that read it level, docs/simulate.md, session sim12)
            for label, (cmd, env, cwd) in (list(cmds.items()) if r % 2 == 0 else list(cmds.items())[::-1]):
                t = time.perf_counter()
                subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True)
                seconds[label] += time.perf_counter() - t
        outs = {label: {p.name: np.load(p) for p in sorted((tmp / label.replace(" ", "_")).glob("*.npy"))} for label in sides}
        same = all(outs[label].keys() == outs["hbtool"].keys() and all(np.array_equal(outs[label][k], v) for k, v in outs["hbtool"].items())
                   for label in outs)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    row = {"model": name, "lines": lines, **{f"{label} s": seconds[label] / rounds for label in seconds}, "outputs identical": same}
    for label in sides:
        row[f"ratio {label}"] = seconds[label] / seconds["onnxruntime float32"]
    return row


def _baseline_rows(baseline: Path, models: list[str], rounds: int, threads: int) -> list[dict]:
    """The warm rows of ``baseline``'s hbtool, measured by this copy of the benchmark.

    A process whose import path holds ``hbtool`` from ``baseline`` and ``benchmarks`` from here (two
    links in a scratch folder), so both sides are measured the same way: an older copy of the
    benchmark timed simulate while the peer's pool was still spinning (:func:`quiesce`) and would
    compare old code measured one way with new code measured another.
    """
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "hbtool").symlink_to(Path(baseline).resolve() / "hbtool", target_is_directory=True)
        (Path(tmp) / "benchmarks").symlink_to(paths.ROOT / "benchmarks", target_is_directory=True)
        out = Path(tmp) / "rows.json"
        subprocess.run([sys.executable, "-m", "benchmarks.simulate_speed", "--models", *models, "--rounds", str(rounds),
                        "--threads", str(threads), "--zoo-out", str(Path(ZOO_OUT).resolve()), "--json", str(out)],
                       cwd=tmp, env=dict(os.environ, PYTHONPATH=tmp), check=True, stdout=subprocess.DEVNULL)
        data = json.loads(out.read_text())
        return data["rows"]


def main() -> None:
    global ZOO_OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help="both sides (default: all cores); several (e.g. 1 2): every model at each, one after another, "
                         "and how each side scales (its time at the first count over its time at each other)")
    ap.add_argument("--zoo-out", type=Path, default=ZOO_OUT, help="the corpus runner's --out folder")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cli-lines", type=int, default=0, help="samples of the command-line row (0: no CLI row)")
    ap.add_argument("--cli-model", default="ppocrv5_rec")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout (e.g. the old main) measured beside this one")
    ap.add_argument("--parallel-passes", action="store_true",
                    help="a batch's passes on all threads at once (HBTOOL_SIM_PARALLEL_PASSES=1; the default since 2026-12-07, "
                         "so this matters for a --baseline before it)")
    ap.add_argument("--sequential-passes", action="store_true",
                    help="a batch's passes one after another, each step split over the threads (HBTOOL_SIM_PARALLEL_PASSES=0)")
    ap.add_argument("--small-product-macs", default=None,
                    help="HBTOOL_SIM_SMALL_PRODUCT_MACS for this run (e.g. 2e7; 0: off): product calls of fewer multiply-adds "
                         "run on one onnxruntime thread (hbtool.simulator.cores.SMALL_PRODUCT_MACS)")
    args = ap.parse_args()
    ZOO_OUT = args.zoo_out
    import os

    if args.parallel_passes and args.sequential_passes:
        raise SystemExit("--parallel-passes and --sequential-passes exclude each other")
    if args.parallel_passes or args.sequential_passes:  # read by every Executor of this process and of the CLI rows' hbtool
        os.environ["HBTOOL_SIM_PARALLEL_PASSES"] = "1" if args.parallel_passes else "0"
    if args.small_product_macs is not None:  # read by every product session built in this process and the CLI rows'
        os.environ["HBTOOL_SIM_SMALL_PRODUCT_MACS"] = args.small_product_macs

    counts = args.threads or [len(os.sched_getaffinity(0))]
    threads = counts[-1]  # the CLI row's
    rows, old_rows, cli = [], [], None
    for name in args.models:
        for count in counts:  # back to back, so the thread counts see the same load
            row = dict(run_model(name, args.rounds, count), threads=count)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.baseline is not None:  # right after, so both see the same load
                old_rows += [dict(r, threads=count) for r in _baseline_rows(args.baseline, [name], args.rounds, count)]
                print("baseline:", json.dumps(old_rows[-1]), flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"rows": rows, "baseline_rows": old_rows}, indent=1))
    if args.cli_lines:
        cli = cli_row(args.cli_model, args.cli_lines, threads, args.rounds, args.baseline)
        print(json.dumps(cli), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"rows": rows, "baseline_rows": old_rows, "cli": cli}, indent=1))
    for count in counts:
        if len(counts) > 1:
            print(f"\n{count} thread(s):")
        print(table([r for r in rows if r["threads"] == count]))
        print(cpu_lines([r for r in rows if r["threads"] == count]))
        if old_rows:
            print(f"\nbaseline ({args.baseline}), {count} thread(s):")
            print(table([r for r in old_rows if r["threads"] == count]))
            print(cpu_lines([r for r in old_rows if r["threads"] == count]))
    if len(counts) > 1:
        print(scaling(rows, counts))
    if cli is not None:
        labels = [k[:-2] for k in cli if k.endswith(" s")]
        print(f"\ncommand line, {cli['lines']} samples of {cli['model']}, process start included (mean of {args.rounds}):")
        print("| " + " | ".join(labels) + " | " + " | ".join(k for k in cli if k.startswith("ratio")) + " | outputs identical |")
        print("|" + "---|" * (len(labels) + sum(k.startswith("ratio") for k in cli) + 1))
        print("| " + " | ".join(f"{cli[f'{k} s']:.2f} s" for k in labels) + " | "
              + " | ".join(f"{cli[k]:.2f}x" for k in cli if k.startswith("ratio")) + f" | {'yes' if cli['outputs identical'] else 'NO'} |")


if __name__ == "__main__":
    main()
