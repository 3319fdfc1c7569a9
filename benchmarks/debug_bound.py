"""Issue 34: a first-order BOUND on the worst output cosine any set of <= k remedied nodes (or any set within the
FPS budget) reaches, and its model error measured on sets the searches choose (:mod:`hbtool.debug.bound`).

On a model calibrated all-int8 (``auto_int16: false``; default: benchmarks/debug_auto.py's PP-OCRv5 recogniser case,
the first ``--samples`` (8) of its 32 debug lines: the bound is on those lines), metric cosine, remedy float
activations (the optimistic one; the int16 remedy of a dual model is not wired here):

* the de-quantize-alone pass: each candidate remedied alone, everything else int8 (one masked evaluation a node, on
  ``--workers`` processes in chunks), its projections onto the float output and the all-int8 error's kept
  coordinates (:class:`hbtool.debug.bound.ProjectionJob`);
* >= 20 measured sets: the top k by single-remedy cosine, the top k by single-node activation loss (the search's
  gains pass), random sets (seeded), and the prefixes of a greedy set
  where ``--marginal-cache`` points at benchmarks/debug_marginal.py's cache: each set's measured cosine beside the
  first-order model's prediction and its error (hull distance, direct error, t excess);
* the bound at ``--k`` (33 = 15 % of 222) and at the FPS budget (the price model's int16 prices, floor
  ``(1 - --fps-budget)`` x the all-int8 FPS), pure and with the measured sets' worst error as its margin;
* seconds of each stage and the load.

    nice python -m benchmarks.debug_bound --workers 2 --random 5 --cache /tmp/singles8.npz
        # the recogniser (builds its case once): about 12 minutes at load 8 (9.5 of them the single remedies, kept in
        # --cache for a rerun), about a third of that on an idle machine
    nice python -m benchmarks.debug_bound --config <config.yaml> --random 12 --k 33 80
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np


def _save(path: Path, first) -> None:
    from hbtool.utils.atomic import atomic_write_bytes
    import io

    arrays = {"names": np.array(first.names)}
    for o, b in first.base.items():
        arrays[f"base_z/{o}"], arrays[f"base_tn/{o}"] = b.z, np.array([b.t, b.norm2])
        arrays[f"delta/{o}"], arrays[f"gain_t/{o}"], arrays[f"cos/{o}"] = first.delta[o], first.gain_t[o], first.single_cosine[o]
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def _load(path: Path):
    from hbtool.debug import bound as B

    a = np.load(path)
    outs = [k.split("/", 1)[1] for k in a.files if k.startswith("base_z/")]
    base = {o: B.Projection(float(a[f"base_tn/{o}"][0]), a[f"base_z/{o}"], float(a[f"base_tn/{o}"][1])) for o in outs}
    return B.FirstOrder([str(n) for n in a["names"]], base, {o: a[f"delta/{o}"] for o in outs},
                        {o: a[f"gain_t/{o}"] for o in outs}, {o: a[f"cos/{o}"] for o in outs})


def main() -> None:
    from benchmarks.debug_options import _case_config
    from benchmarks.paths import OUT
    from hbtool.config import load_config
    from hbtool.debug import bound as B
    from hbtool.debug.auto import int16_candidates
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.price import pricing_programs, prices_from
    from hbtool.debug.sensitivity import ActivationGains
    from hbtool.debug.session import open_session
    from hbtool.debug.trials import TrialRunner

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=None)
    ap.add_argument("--samples", type=int, default=8,
                    help="debug lines the bound is on (one evaluation of 32 lines takes ~6 s on one thread at load 5)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--k", type=int, nargs="+", default=[33])
    ap.add_argument("--top", type=int, nargs="+", default=[1, 2, 4, 6, 12, 24, 33, 50, 80, 117])
    ap.add_argument("--random", type=int, default=10, help="random sets of each --random-size")
    ap.add_argument("--random-size", type=int, nargs="+", default=[33, 10])
    ap.add_argument("--coordinates", type=int, default=B.BOUND_COORDINATES)
    ap.add_argument("--fps-budget", type=float, default=0.10)
    ap.add_argument("--no-budget", action="store_true")
    ap.add_argument("--top-loss", type=int, nargs="*", default=[33, 80, 117, 144],
                    help="also the top k by single-node activation LOSS (the search's gains pass, --gain-samples lines)")
    ap.add_argument("--gain-samples", type=int, default=4)
    ap.add_argument("--cache", type=Path, default=None, help="a .npz keeping the de-quantize-alone pass between runs")
    ap.add_argument("--marginal-cache", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    out: dict = {"load_start": os.getloadavg(), "seconds": {}}
    t0 = time.perf_counter()
    config = args.config or _case_config(OUT / "debug_auto")
    session = open_session(load_config(config), resolve_metric("cosine", None), args.samples)
    out["seconds"]["session"] = time.perf_counter() - t0
    names = [n.name for n in session.switchable().nodes]
    order = [n for _, n in int16_candidates(session, names)]
    out["nodes"], out["candidates"] = len(names), len(order)
    print(f"session {out['seconds']['session']:.0f} s; {len(order)} candidates of {len(names)} nodes", flush=True)
    with TrialRunner(session, workers=args.workers) as runner:
        run = lambda jobs: list(runner.jobs(jobs))  # noqa: E731
        t = time.perf_counter()
        if args.cache is not None and args.cache.exists():
            first = _load(args.cache)
        else:
            first = B.FirstOrder.from_singles(order, run(B.single_jobs(order, args.samples, coordinates=args.coordinates)))
            if args.cache is not None:
                _save(args.cache, first)
        out["seconds"]["singles"] = time.perf_counter() - t
        worst_out = min(first.base, key=lambda o: first.base[o].cosine)
        single = first.single_cosine[worst_out]
        by_single = [order[i] for i in np.argsort(-single, kind="stable")]
        b0 = first.base[worst_out]
        out["all_int8"] = {"cosine": b0.cosine, "p": b0.p, "t": b0.t, "outputs": len(first.base)}
        print(f"singles {out['seconds']['singles']:.0f} s; all int8 {b0.cosine:.4f}; best single {single.max():.4f}",
              flush=True)
        sets, labels = [], []
        for k in args.top:
            sets.append(by_single[:k]), labels.append(f"top {k} by single cosine")
        if args.top_loss:
            t = time.perf_counter()
            gains = {k: v for p in run(ActivationGains(session, args.gain_samples).jobs(order)) for k, v in p.items()}
            out["seconds"]["gains"] = time.perf_counter() - t
            by_loss = sorted(order, key=lambda n: (-gains.get(n, 0.0), n))
            for k in args.top_loss:
                sets.append(by_loss[:k]), labels.append(f"top {k} by single loss")
        rng = np.random.default_rng(34)
        for size in args.random_size:
            for r in range(args.random):
                sets.append([order[i] for i in sorted(rng.choice(len(order), size, replace=False))])
                labels.append(f"random {size} #{r}")
        if args.marginal_cache is not None and args.marginal_cache.exists():
            cached = json.loads(args.marginal_cache.read_text())
            for key in ("greedy_float", "greedy_int16"):
                for k in (6, 12, 24, 33, 42):
                    if key in cached and len(cached[key]["order"]) >= k:
                        sets.append(cached[key]["order"][:k]), labels.append(f"{key} first {k}")
        t = time.perf_counter()
        errors = B.model_errors(first, sets, run(B.set_jobs(sets, args.samples, coordinates=args.coordinates)), labels)
        out["seconds"]["measured_sets"] = time.perf_counter() - t
        prices = None
        if not args.no_budget:
            t = time.perf_counter()
            prices = prices_from(run(pricing_programs({}, order)), order)
            out["seconds"]["prices"] = time.perf_counter() - t
    t = time.perf_counter()
    print(f"\n== first-order model on {len(errors)} measured sets (errors in units of the all-int8 orthogonal error "
          f"|z0| = {b0.p:.4g}) ==")
    print(f"{'set':<28} {'n':>4} {'cosine':>8} {'pure bound':>10} {'hull dist':>9} {'direct':>8} {'t excess':>9}")
    for e in errors:
        print(f"{e.label:<28} {len(e.nodes):>4} {e.cosine:>8.4f} {first.bound_k(len(e.nodes)):>10.4f} "
              f"{e.p[worst_out] / b0.p:>9.3f} {e.p_direct[worst_out] / b0.p:>8.3f} {e.t[worst_out] / b0.p:>9.4f}")
    summ = B.summary(errors, first)
    out["model_error"] = summ
    out["sets"] = [{"label": e.label, "n": len(e.nodes), "cosine": e.cosine, "pure_bound": first.bound_k(len(e.nodes)),
                    "hull_distance": e.p, "direct": e.p_direct, "t_excess": e.t, "t_direct": e.t_direct} for e in errors]
    out["bounds"] = {}
    for k in sorted(set(args.k + [0, 6, 12, 33, 80, 117, len(order)])):
        c = B.check(first, k, errors)
        best = max([e.cosine for e in errors if len(e.nodes) <= k], default=float("nan"))
        out["bounds"][k] = {"pure": c.bound, "with_margin": c.bound_with_margin, "best_measured": best,
                            "beaten_by": len(c.beaten), "holds": c.holds}
        print(f"k = {k:>3}: pure first-order bound {c.bound:.4f}, with the measured margin {c.bound_with_margin:.4f}; "
              f"best measured set of <= k {best:.4f}; measured sets above the pure bound: {len(c.beaten)}")
    if prices is not None:
        floor = prices.fps([]) * (1 - args.fps_budget)
        cons = B.Constraint.budget(prices, floor, order)
        margin_b = B.Margin.worst_of(errors, budget=True)
        fits = [e for e in errors if prices.fits(list(e.nodes), floor)]
        pure_b = first.bound(cons)
        out["budget"] = {"floor_fps": floor, "base_fps": prices.fps([]), "pure": pure_b,
                         "with_margin": first.bound(cons, margin_b),
                         "measured_sets_in_budget": len(fits), "best_in_budget": max([e.cosine for e in fits], default=None),
                         "beaten_by": sum(1 for e in fits if e.cosine > pure_b + 1e-9)}
        print(f"FPS budget -{args.fps_budget:.0%} (price model {prices.fps([]):.0f} -> floor {floor:.0f}): pure bound "
              f"{pure_b:.4f}, with the measured margin {out['budget']['with_margin']:.4f}; measured sets in the budget "
              f"{len(fits)}, best {out['budget']['best_in_budget']}, above the pure bound {out['budget']['beaten_by']}")
    out["seconds"]["bounds"] = time.perf_counter() - t
    beaten = sorted({e.label for c in (B.check(first, k, errors) for k in out["bounds"]) for e in c.beaten})
    outside = summ.get("outside", 0)
    out["proof"] = not beaten and not outside
    print(f"VERDICT: {'the first-order model held on every measured set: the bounds above hold for every set whose error is as small' if out['proof'] else 'not a proof'}"
          f" ({outside} of {len(errors)} measured sets outside the first-order model; sets above the pure bound: "
          f"{', '.join(beaten) or 'none'})")
    out["load_end"] = os.getloadavg()
    print("model error (units of |z0|):", json.dumps({k: round(v, 4) for k, v in summ.items()}))
    print("seconds", {k: round(v, 1) for k, v in out["seconds"].items()}, "load", out["load_start"], out["load_end"])
    print("What this is: under the first-order model (each node's remedy moves the output by what it moves it alone, "
          "and a set by the sum), relaxed over every set of <= k nodes (or within the price model's FPS budget), on these "
          f"{args.samples} debug lines, float activations as the remedy. It binds a set only where the model's error on "
          "that set is within the stated margin; the rows above say how far the measured sets were from it.")
    if args.json:
        from benchmarks._cache import save_results
        save_results(args.json, out)


if __name__ == "__main__":
    main()
