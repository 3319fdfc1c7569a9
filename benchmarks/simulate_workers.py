"""``hbtool simulate --workers 1`` against ``--workers 2`` on one larger input set, in one run.

The committed tiny Swin (``samples/tiny``, configs/tiny_swin.yaml) is compiled once into a temporary
folder; ``--samples`` held-out digits (repeated to that count) are stacked into one ``.npy`` and
simulated through the real CLI (a fresh process each time: start, imports and the workers' start
are counted) with ``--output-dir`` and ``--compare``, ``--rounds`` times, the two worker counts
alternating so that load from other processes falls on both alike. Prints every time, the best of
each, the speedup, and checks that the output files are the same bytes.

    python -m benchmarks.simulate_workers [--model tiny_swin] [--samples 2000] [--rounds 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.paths import ROOT

HELDOUT = ROOT / "samples" / "data" / "digits_heldout.npz"


def _run(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny_swin", choices=["tiny_cnn", "tiny_swin", "tiny_vit"])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="the parallel row's worker count (default 2)")
    args = ap.parse_args(argv)

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="hbtool_sim_workers_"))
    try:
        cfg = tmp / "configs" / f"{args.model}.yaml"
        shutil.copytree(ROOT / "configs", tmp / "configs")
        (tmp / "samples").symlink_to(ROOT / "samples")
        print(f"compiling {args.model} ...", flush=True)
        _run([py, "-m", "hbtool.cli", "compile", "-c", str(cfg)], env)
        wd = tmp / "work_dirs" / args.model
        artifact = wd / f"{args.model}.bin"
        images = np.load(HELDOUT)["images"].astype(np.float32)
        stack = np.concatenate([images] * -(-args.samples // len(images)))[: args.samples]
        np.save(tmp / "x.npy", stack)
        base = [py, "-m", "hbtool.cli", "simulate", str(artifact), "-i", f"input={tmp / 'x.npy'}",
                "--compare", str(wd / f"{args.model}_quantized_model.onnx")]
        load = os.getloadavg()
        times: dict[int, list[float]] = {1: [], args.workers: []}
        for r in range(args.rounds):
            for w in ((1, args.workers) if r % 2 == 0 else (args.workers, 1)):
                out = tmp / f"out_w{w}"
                shutil.rmtree(out, ignore_errors=True)
                s = _run([*base, "--output-dir", str(out), "--workers", str(w)], env)
                times[w].append(s)
                print(f"round {r + 1}: --workers {w}: {s:.1f} s", flush=True)
        files = sorted(p.name for p in (tmp / "out_w1").glob("*.npy"))
        same = all((tmp / "out_w1" / f).read_bytes() == (tmp / f"out_w{args.workers}" / f).read_bytes() for f in files)
        one, many = min(times[1]), min(times[args.workers])
        print(f"{args.model}, {args.samples} samples, batch 16, CLI with --output-dir and --compare, best of {args.rounds}:")
        print(f"  --workers 1: {one:.1f} s   --workers {args.workers}: {many:.1f} s   speedup {one / many:.2f}x   "
              f"output files identical: {same} ({', '.join(files)})")
        print(f"  {os.cpu_count()} CPUs; load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
