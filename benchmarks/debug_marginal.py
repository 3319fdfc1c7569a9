"""Issue 34: does a set of <= 15 % of the nodes chosen by MARGINAL gain reach the cosine target where the top k by
single-node loss does not? Measured in the switchable (fake-quant) model, then compiled for real.

On a model calibrated all-int8 (``auto_int16: false``), metric cosine:

* the single-node activation losses (the search's gains pass, 4 samples) and the curve k -> worst output cosine
  of the top k by that loss with their activations float, everything else int8 (all debug samples);
* greedy by marginal gain (:func:`hbtool.debug.marginal.greedy_marginal`): in rounds, every remaining candidate of the
  top ``--pool`` by single loss added to the chosen set, the ``--take`` best kept; float activations as the remedy,
  chosen on the first ``--select-samples`` debug samples, the curve read on all of them;
* the same with the int16 remedy in a dual-precision switchable model (every activation quantizer has an int16 twin
  with the thresholds of the calibration with every candidate output at int16): the top-k curve and the greedy;
* each greedy set of ``--check-k`` nodes at int16 compiled for real: worst cosine and estimated FPS against the
  all-int8 program (and the price model's estimate of the set), beside the top-k by single loss.

Every stage is cached in ``--cache`` (JSON), so a cut run goes on where it stopped.

    nice python -m benchmarks.debug_marginal --config benchmarks/_out/debug_auto/ppocrv5_rec/config.yaml \
        --workers 2 --cache /tmp/marginal          # docs/debug.md's table (issue 34), about 30 minutes at load 6
    ... --cache /tmp/marginal2 --pool 222 --take 8 --size 8 --remedies float --no-compile   # one round over every node
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks._cache import load_results, save_results



def main() -> None:
    from hbtool.config import load_config
    from hbtool.debug.auto import INT16_OUT, int16_candidates, with_group
    from hbtool.debug.marginal import SetCosineJob, dual_precision_graph, greedy_marginal, switches_of
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.price import pricing_programs, prices_from
    from hbtool.debug.sensitivity import ActivationGains
    from hbtool.debug.session import open_session
    from hbtool.debug.trials import Trial, TrialRunner

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--gain-samples", type=int, default=4)
    ap.add_argument("--select-samples", type=int, default=6)
    ap.add_argument("--pool", type=int, default=80)
    ap.add_argument("--pool-values", type=Path, default=None,
                    help="JSON {node: cosine}, higher first: the pool by these values (e.g. a greedy round's values over "
                         "every node: the de-quantize-alone cosine) instead of the single-node loss")
    ap.add_argument("--take", type=int, default=6)
    ap.add_argument("--size", type=int, default=42)
    ap.add_argument("--curve", type=int, nargs="+", default=[6, 12, 18, 24, 30, 33, 36, 42])
    ap.add_argument("--check-k", type=int, nargs="+", default=[33])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--remedies", nargs="+", default=["float", "int16"])
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--cache", type=Path, required=True)
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    path = args.cache / "marginal.json"
    out = load_results(path)
    out.setdefault("load_average", []).append(os.getloadavg())
    t0 = time.perf_counter()
    session = open_session(load_config(args.config), resolve_metric("cosine", None), args.samples)
    print(f"session {time.perf_counter() - t0:.0f} s", flush=True)
    plain = session.switchable()
    names = [n.name for n in plain.nodes]
    order = [n for _, n in int16_candidates(session, names)]
    out["quantized_nodes"], out["candidates"] = len(names), len(order)

    def stage(key, fn):
        if key not in out:
            t = time.perf_counter()
            out[key] = fn()
            out.setdefault("seconds", {})[key] = time.perf_counter() - t
            out.setdefault("load_after", {})[key] = os.getloadavg()
            save_results(path, out)
            print(key, json.dumps(out[key], default=str)[:600], f"({out['seconds'][key]:.0f} s)", flush=True)
        return out[key]

    with TrialRunner(session, workers=args.workers) as runner:
        run_jobs = lambda jobs: list(runner.jobs(jobs))  # noqa: E731
        gains = stage("gains", lambda: {k: v for p in run_jobs(ActivationGains(session, args.gain_samples).jobs(order))
                                        for k, v in p.items()})
        by_loss = sorted(order, key=lambda n: (-gains.get(n, 0.0), n))
        pool = by_loss[: args.pool]
        if args.pool_values is not None:
            pool_values = json.loads(args.pool_values.read_text())
            pool = sorted(pool_values, key=lambda n: (-pool_values[n], n))[: args.pool]
            out["pool"] = pool
        sizes = sorted(set(args.curve))
        stage("quantized_cosine", lambda: run_jobs([SetCosineJob((), 0)])[0])
        stage("top_loss_float", lambda: dict(zip(map(str, sizes), run_jobs([SetCosineJob(tuple(by_loss[:k]), 0) for k in sizes]))))

        def greedy(remedy):
            def fn():
                r = greedy_marginal(run_jobs, pool, args.size, args.take, args.select_samples, remedy,
                                    progress=lambda s: print(f"  {remedy} +{s.added} -> {s.cosine:.4f} ({s.evaluations} ev, {s.seconds:.0f} s)", flush=True))
                return {"order": r.order, "steps": [vars(s) for s in r.steps]}
            return fn

        if "float" in args.remedies:
            g = stage("greedy_float", greedy("float"))
            stage("greedy_float_curve", lambda: dict(zip(map(str, sizes), run_jobs([SetCosineJob(tuple(g["order"][:k]), 0) for k in sizes]))))
    if "int16" in args.remedies:
        def dual():
            t = time.perf_counter()
            wide = session.calibrate(with_group({}, order, INT16_OUT[1]))
            print(f"int16 calibration {time.perf_counter() - t:.0f} s (method {getattr(wide, 'method', None)})", flush=True)
            return dual_precision_graph(session.base.calibrated, wide.calibrated)
        session.masked_graphs = (dual(), session.base.graph)
        session.masked_model = None
        model = session.switchable()
        sw = switches_of(model)
        out["dual_nodes_with_int16"] = sum(1 for v in sw.int16.values() if v)
        with TrialRunner(session, workers=args.workers) as runner:
            run_jobs = lambda jobs: list(runner.jobs(jobs))  # noqa: E731
            stage("dual_check", lambda: {"all_int8": run_jobs([SetCosineJob((), 0, "int16")])[0],
                                         "all_int16": run_jobs([SetCosineJob(tuple(order), 0, "int16")])[0]})
            stage("top_loss_int16", lambda: dict(zip(map(str, sizes), run_jobs([SetCosineJob(tuple(by_loss[:k]), 0, "int16") for k in sizes]))))
            g16 = stage("greedy_int16", greedy("int16"))
            stage("greedy_int16_curve", lambda: dict(zip(map(str, sizes), run_jobs([SetCosineJob(tuple(g16["order"][:k]), 0, "int16") for k in sizes]))))
            if "greedy_float" in out:
                stage("greedy_float_set_at_int16", lambda: dict(zip(map(str, sizes), run_jobs(
                    [SetCosineJob(tuple(out["greedy_float"]["order"][:k]), 0, "int16") for k in sizes]))))
    if not args.no_compile:
        with TrialRunner(session, workers=args.workers) as runner:
            prices = prices_from(list(runner.jobs(pricing_programs({}, order))), order)
            sets = {"base": []}
            for k in args.check_k:
                sets[f"top_loss_{k}"] = by_loss[:k]
                for key in ("greedy_int16", "greedy_float"):
                    if key in out:
                        sets[f"{key}_{k}"] = out[key]["order"][:k]
            todo = [k for k in sets if f"compiled_{k}" not in out]
            trials = [Trial(with_group({}, sets[k], INT16_OUT[1]), priced=True) for k in todo]
            for key, m in zip(todo, runner.run(trials)):
                stage(f"compiled_{key}", lambda: {"nodes": len(sets[key]), "cosine": getattr(m, "cosine", None),
                                                 "fps": getattr(m, "fps", None), "price_model_fps": prices.fps(sets[key]),
                                                 "error": getattr(m, "error", None)})
    base_fps = (out.get("compiled_base") or {}).get("fps")
    print("\n== issue 34: worst output cosine, k nodes remedied, everything else int8 (fake-quant; all",
          args.samples, "debug samples) ==")
    print(f"all int8 {out.get('quantized_cosine')}; candidates {len(order)} of {len(names)} quantized nodes")
    cols = [c for c in ("top_loss_float", "greedy_float_curve", "top_loss_int16", "greedy_int16_curve", "greedy_float_set_at_int16") if c in out]
    print("k    " + "  ".join(f"{c:>24}" for c in cols))
    for k in sizes:
        print(f"{k:<4} " + "  ".join(f"{out[c].get(str(k), float('nan')):>24.4f}" for c in cols))
    for key, v in out.items():
        if key.startswith("compiled_") and key != "compiled_base" and base_fps:
            print(f"{key}: cosine {v['cosine']}, FPS {v['fps']:.0f} ({v['fps'] / base_fps - 1:+.1%}), price model "
                  f"{v['price_model_fps']:.0f}")
    print("seconds", {k: round(v) for k, v in out.get("seconds", {}).items()}, "load", out["load_average"][-1], os.getloadavg())


if __name__ == "__main__":
    main()
