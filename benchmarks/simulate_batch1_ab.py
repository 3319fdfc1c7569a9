"""Batch-1 ``simulate`` time a sample, this checkout against another, in alternated processes.

For each model (a compiled artifact of the corpus runner, ``benchmarks/zoo/run.py``, under ``--zoo-out``)
and each thread count, one process per side builds ``Executor(read_artifact(path), threads=T)``, runs
4 warm-up samples, then ``--rounds`` rounds of ``--samples`` samples one at a time, and reports CPU ms
(``time.process_time``: all of the process's threads) and wall ms a sample per round, and a hash of
every output. The sides alternate (old, new, old, new...) ``--alternations`` times, so load from other
processes falls on both alike. Printed per model and thread count: the minimum round and the median of
the processes' median rounds of each side, and whether the outputs' hashes agree (they must: the two
checkouts compute the same bits).

The measuring code is this file's, run as a script in both sides' processes (``PYTHONPATH`` picks the
``hbtool``), so both are measured alike:

    python -m benchmarks.simulate_batch1_ab --baseline /path/to/old/checkout \\
        [--models hf_mobilenet_v2 hf_deit_tiny ppocrv5_rec] [--threads 1 2] [--alternations 4] \\
        [--env-new HBTOOL_SIM_SMALL_PRODUCT_MACS=2e7] [--min-parallel-work-new 32768]

``--env-new NAME=VALUE`` sets an environment variable in the new side's processes only (a switch
measured against the old code), ``--min-parallel-work-new N`` the work past which its loops split over
the cores (``hbtool.simulator.jit.MIN_PARALLEL_WORK``); ``--baseline .`` with either compares one checkout
with and without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_MODELS = ["hf_mobilenet_v2", "hf_deit_tiny", "ppocrv5_rec"]


def child(zoo: Path, name: str, threads: int, samples: int, rounds: int, min_parallel_work: int | None = None) -> dict:
    """One side's measurement of one model, in this process (``hbtool`` from ``PYTHONPATH``)."""
    import hashlib
    import time

    import numpy as np

    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor

    if min_parallel_work is not None:  # where the loops start to split over the cores (a module constant)
        from hbtool.simulator import jit

        jit.MIN_PARALLEL_WORK = int(min_parallel_work)

    art = read_artifact(zoo / name / "model_output" / f"{name}.bin")
    executor = Executor(art, threads=threads)
    rng = np.random.default_rng(0)
    feeds = [{} for _ in range(samples)]
    for desc in art.header["inputs"]:
        shape, dtype = tuple(desc["shape"]), np.dtype(desc["dtype"])
        path = zoo / name / f"eval_{desc['name']}.npy"
        data = np.load(path) if path.exists() else None
        for k in range(samples):
            if data is not None:  # the corpus runner's evaluation samples, in turn
                start = (k % (data.shape[0] // shape[0])) * shape[0]
                x = data[start:start + shape[0]]
            elif dtype.kind == "f":
                x = rng.uniform(0, 255, shape)
            else:
                x = rng.integers(0, 1000, shape)
            feeds[k][desc["name"]] = np.ascontiguousarray(np.asarray(x).astype(dtype))
    for f in feeds[:4]:  # warm-up: loops loaded from the numba cache, first-call allocations
        executor.run(f)
    cpu, wall, outs = [], [], []
    for _ in range(rounds):
        c, t = time.process_time(), time.perf_counter()
        outs = [executor.run(f) for f in feeds]
        cpu.append((time.process_time() - c) / samples * 1e3)
        wall.append((time.perf_counter() - t) / samples * 1e3)
    digest = hashlib.sha256()
    for out in outs:
        for key in sorted(out):
            digest.update(np.ascontiguousarray(out[key]).tobytes())
    return {"cpu_ms": cpu, "wall_ms": wall, "hash": digest.hexdigest()}


def _run_side(code: Path, env_extra: dict[str, str], zoo: Path, name: str, threads: int, samples: int, rounds: int,
              min_parallel_work: int | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code), **env_extra)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--zoo-out", str(zoo),
           "--threads", str(threads), "--samples", str(samples), "--rounds", str(rounds)]
    if min_parallel_work is not None:
        cmd += ["--min-parallel-work-new", str(min_parallel_work)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="the other checkout (its root: the folder holding hbtool/)")
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--alternations", type=int, default=4)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--zoo-out", type=Path, default=None, help="the corpus runner's --out (default benchmarks/_out/zoo)")
    ap.add_argument("--env-new", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the new side's processes only")
    ap.add_argument("--min-parallel-work-new", type=float, default=None, metavar="N",
                    help="the new side's jit.MIN_PARALLEL_WORK (where the loops split over the cores), e.g. 32768")
    ap.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        here = Path(__file__).resolve().parent  # run as a script: its folder must not shadow any import
        sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != here]
        print(json.dumps(child(args.zoo_out, args.child, args.threads[0], args.samples, args.rounds,
                               args.min_parallel_work_new)))
        return 0
    if args.baseline is None:
        ap.error("--baseline DIR is required")
    if args.zoo_out is None:
        from benchmarks import paths

        args.zoo_out = paths.OUT / "zoo"
    new_env = dict(item.split("=", 1) for item in args.env_new)
    here = Path(__file__).resolve().parents[1]
    new_mpw = None if args.min_parallel_work_new is None else int(args.min_parallel_work_new)
    sides = [("old", args.baseline.resolve(), {}, None), ("new", here, new_env, new_mpw)]
    results: dict[tuple, list[dict]] = {}
    for alternation in range(args.alternations):
        for name in args.models:
            for threads in args.threads:
                for label, code, env_extra, mpw in sides:
                    r = _run_side(code, env_extra, args.zoo_out.resolve(), name, threads, args.samples, args.rounds, mpw)
                    results.setdefault((name, threads, label), []).append(r)
                    print(f"  {alternation + 1}/{args.alternations} {name} t{threads} {label}: CPU ms {min(r['cpu_ms']):.2f}, "
                          f"wall ms {min(r['wall_ms']):.2f}", flush=True)
    print("\n| model | threads | old CPU ms min / median | new CPU ms min / median | old wall ms min / median "
          "| new wall ms min / median | new / old CPU median | same outputs |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        for threads in args.threads:
            row, medians = [], []
            for label, *_ in sides:
                runs = results[(name, threads, label)]
                for key in ("cpu_ms", "wall_ms"):
                    low = min(min(r[key]) for r in runs)
                    mid = statistics.median(statistics.median(r[key]) for r in runs)
                    row.append(f"{low:.2f} / {mid:.2f}")
                    if key == "cpu_ms":
                        medians.append(mid)
            same = len({r["hash"] for label, *_ in sides for r in results[(name, threads, label)]}) == 1
            print(f"| {name} | {threads} | {row[0]} | {row[2]} | {row[1]} | {row[3]} | {medians[1] / medians[0]:.2f}x | "
                  f"{'yes' if same else 'NO'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
