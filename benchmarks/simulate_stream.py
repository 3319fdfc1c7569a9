"""A validation set through ``hbtool simulate``: 10,000 images of 224x224 through ResNet50, streamed.

1. writes ``--samples`` images (uint8, N x 3 x 224 x 224, the corpus runner's evaluation images
   with a different shift and noise per sample) to one ``.npy`` stack (memory-mapped, 1.5 GB for
   10,000);
2. runs ``hbtool simulate ART --input NAME=stack.npy --output-dir ... --batch-size B`` as a user
   would (a subprocess), sampling its resident memory and progress twice a second: peak RSS
   (the kernel's ``ru_maxrss``) and RSS at 10 %, 50 % and 100 % of the samples, and the same
   for a run of ``--small`` samples, show whether memory grows with the number of samples;
3. resumes: a run over ``--resume-samples`` samples is interrupted (SIGINT, as Ctrl-C) after a
   third of them, rerun with ``--resume``, and its output compared byte for byte with an
   uninterrupted run of the same samples (this runs first: it is the short one).

    python -m benchmarks.simulate_stream [--samples 10000] [--zoo-out benchmarks/_out/zoo] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import paths

ROOT = paths.ROOT
ZOO_OUT = paths.OUT / "zoo"


def make_stack(path: Path, n: int, eval_file: Path, shape: tuple[int, ...]) -> None:
    from numpy.lib.format import open_memmap

    base = np.load(eval_file).reshape((-1,) + shape[1:])
    base = np.clip(base, 0, 255).astype(np.uint8)
    out = open_memmap(path, mode="w+", dtype=np.uint8, shape=(n,) + shape[1:])
    rng = np.random.default_rng(0)
    for start in range(0, n, 256):
        stop = min(start + 256, n)
        for i in range(start, stop):
            img = np.roll(base[i % len(base)], (i * 7) % 224, axis=-1).astype(np.int16)
            out[i] = np.clip(img + rng.integers(-8, 9, img.shape), 0, 255).astype(np.uint8)
    out.flush()
    del out


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def run_simulate(art: Path, name: str, stack: Path, out: Path, batch: int, resume: bool = False,
                 interrupt_at: int | None = None) -> dict:
    """One ``hbtool simulate`` subprocess: seconds, exit code, peak RSS, (samples done, RSS) trace."""
    cmd = [sys.executable, "-m", "hbtool.cli", "simulate", str(art), "--input", f"{name}={stack}", "--output-dir", str(out),
           "--batch-size", str(batch)] + (["--resume"] if resume else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    log = out.parent / f"{out.name}.log"
    with open(log, "w") as sink:
        # SIGINT as Ctrl-C delivers it: a shell starts background jobs with SIGINT ignored, and a
        # child that inherits that never sees the interruption
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    trace = []
    state = out / ".partial" / "state.json"
    interrupted = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.5)
        try:
            done = json.loads(state.read_text())["done"]
        except (OSError, ValueError, KeyError):
            done = 0
        rss = _rss_kb(proc.pid)
        if rss:
            trace.append((done, rss))
            with open(out.parent / f"{out.name}.trace", "a") as f:  # kept if this benchmark is stopped
                f.write(f"{time.perf_counter() - t0:.1f} {done} {rss}\n")
        if interrupt_at is not None and done >= interrupt_at and not interrupted:
            proc.send_signal(signal.SIGINT)
            interrupted = True
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"seconds": round(time.perf_counter() - t0, 1), "rc": proc.returncode, "trace": trace,
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "output": log.read_text().strip().splitlines()[-3:]}


def _rss_at(trace: list, n: int, share: float) -> float | None:
    want = share * n
    for done, rss in trace:
        if done >= want:
            return round(rss / 1024, 1)
    return round(trace[-1][1] / 1024, 1) if trace else None


def _save(path: Path | None, report: dict) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="hf_resnet50")
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--small", type=int, default=500)
    ap.add_argument("--resume-samples", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--zoo-out", type=Path, default=ZOO_OUT)
    ap.add_argument("--work", type=Path, default=paths.OUT / "simulate_stream")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from hbtool.compiler.artifact import read_artifact

    wd = args.zoo_out / args.model / "model_output"
    art = wd / f"{args.model}.bin"
    desc = read_artifact(art).header["inputs"][0]
    name, shape = desc["name"], tuple(desc["shape"])
    args.work.mkdir(parents=True, exist_ok=True)
    stacks = {}
    for n in (args.samples, args.small, args.resume_samples):
        path = args.work / f"stack_{n}.npy"
        if not path.exists():
            print(f"writing {n} images to {path}", flush=True)
            make_stack(path, n, args.zoo_out / args.model / f"eval_{name}.npy", shape)
        stacks[n] = path
    report: dict = {"model": args.model, "samples": args.samples, "batch_size": args.batch_size}
    n = args.resume_samples
    out = args.work / "out_resume"
    first = run_simulate(art, name, stacks[n], out, args.batch_size, interrupt_at=n // 3)
    partial = json.loads((out / ".partial" / "state.json").read_text())["done"] if (out / ".partial" / "state.json").exists() else None
    second = run_simulate(art, name, stacks[n], out, args.batch_size, resume=True)
    straight = run_simulate(art, name, stacks[n], args.work / "out_resume_straight", args.batch_size)
    full_rows = np.load(args.work / "out_resume_straight" / "output.npy", mmap_mode="r") if straight["rc"] == 0 else None
    files = sorted(out.glob("*.npy"))
    resumed = np.load(files[0]) if files else None
    same = resumed is not None and full_rows is not None and np.array_equal(resumed, full_rows) and len(resumed) == n
    report["resume"] = {"samples": n, "interrupted_rc": first["rc"], "done_when_interrupted": partial,
                        "resumed_seconds": second["seconds"], "resumed_rc": second["rc"], "resumed_output": second["output"],
                        "identical_to_uninterrupted": bool(same)}
    print(json.dumps(report["resume"]), flush=True)
    _save(args.json, report)
    for label, n in (("small", args.small), ("full", args.samples)):
        print(f"simulate {n} samples", flush=True)
        r = run_simulate(art, name, stacks[n], args.work / f"out_{n}", args.batch_size)
        report[label] = {"samples": n, "seconds": r["seconds"], "rc": r["rc"], "samples_per_s": round(n / r["seconds"], 1),
                         "peak_rss_mb": r["peak_rss_mb"], "rss_mb_at_10_50_100pct": [_rss_at(r["trace"], n, s) for s in (0.1, 0.5, 1.0)],
                         "output": r["output"]}
        print(json.dumps(report[label]), flush=True)
        _save(args.json, report)


if __name__ == "__main__":
    main()
