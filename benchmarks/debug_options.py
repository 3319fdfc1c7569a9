"""Issue 34: do the model-level transformer options lift the all-int8 recogniser towards cosine 0.99 on few nodes?

On a config calibrated all-int8 (``auto_int16: false``), metric cosine, the debug samples: each of
``calibration_parameters``' FQ-ViT and SmoothQuant options (``ptf``, ``softmax_log2``, ``smooth_quant`` at several
``smooth_alpha``, and SmoothQuant *forced*: every absorbable site smoothed whatever its outlier ratio), alone and in
combination, calibrated as ``hbtool calibrate`` would (the method choice included), compiled (the real integer
program, run on the simulator's executor) and priced by the cost model. Per variant: the worst output cosine, the
estimated FPS, the sites each option took and the nodes it changed (a site's producer and consumers: the nodes whose
constants, scales or kernels differ), and with ``--gains`` where those nodes sit in the single-node activation-loss
ranking (the search's gains pass: how much of the model's loss the options can reach at all).

With ``--on-top K`` the top K nodes by single-node loss at int16 are added to the best variant and to the plain
calibration, compiled (the K nodes plus the option's nodes counted as changed).

    nice python -m benchmarks.debug_options --workers 2 --gains --on-top 33       # docs/debug.md's issue-34 table
    nice python -m benchmarks.debug_options --config <a debug_auto case's config.yaml> --variants base ptf

Every variant is cached in ``--cache`` (JSON), so a cut run goes on where it stopped; ``--report-only`` prints the
table from it. About 13 minutes in all at load 5-7 on 2 cores (15 variants on 2 workers 8.5 min, the gains 2.6 min).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._cache import load_results, save_results

ALPHAS = (0.3, 0.5, 0.7, 0.85)
#: the options measured here (``result.options`` also says what bias correction and the output checks did)
OPTIONS = ("ptf", "softmax_log2", "smooth_quant")


def variants(alphas: tuple[float, ...]) -> dict[str, dict]:
    """``{name: calibration_parameters overrides}``; ``forced`` smooths every absorbable site (outlier ratio 0)."""
    out: dict[str, dict] = {"base": {}, "ptf": {"ptf": True}, "softmax_log2": {"softmax_log2": True}}
    for a in alphas:
        out[f"smooth_{a}"] = {"smooth_quant": True, "smooth_alpha": a}
    for a in alphas:
        out[f"smooth_forced_{a}"] = {"smooth_quant": True, "smooth_alpha": a, "forced": True}
    out["ptf+softmax_log2"] = {"ptf": True, "softmax_log2": True}
    out["ptf+smooth_forced_0.5"] = {"ptf": True, "smooth_quant": True, "smooth_alpha": 0.5, "forced": True}
    out["all (ptf, softmax_log2, smooth_forced_0.5)"] = {"ptf": True, "softmax_log2": True, "smooth_quant": True,
                                                         "smooth_alpha": 0.5, "forced": True}
    return out


def changed_nodes(result) -> dict[str, list[str]]:
    """``{option: node names it changed}``: a PTF or log2 tensor's producer and consumers (their scales and kernels
    change), a smoothed site's producer and the Linear/MatMul nodes that absorbed the factors (their constants)."""
    g = result.graph
    producers, consumers = g.producer_map(), g.consumer_map()
    out: dict[str, list[str]] = {}
    for option in ("ptf", "softmax_log2"):
        names: set[str] = set()
        for t in (result.options.get(option) or {}).get("applied", []):
            if producers.get(t) is not None:
                names.add(producers[t].name)
            names.update(c.name for c in consumers.get(t, []))
        if option in result.options:
            out[option] = sorted(names)
    if "smooth_quant" in result.options:
        names = set()
        for site in result.options["smooth_quant"].get("applied", []):
            names.add(site["producer"])
            names.update(site["consumers"])
        out["smooth_quant"] = sorted(names)
    return out


@dataclass(frozen=True)
class OptionVariantJob:
    """One variant calibrated, compiled, measured and priced on a worker's debug session (a TrialRunner job)."""

    name: str
    overrides: tuple[tuple[str, object], ...]
    node_info: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def run(self, session) -> dict:
        from hbtool.debug import auto
        from hbtool.quant import smooth_quant
        from hbtool.quant.calibrate import run_calibration

        t0 = time.perf_counter()
        over = dict(self.overrides)
        forced = bool(over.pop("forced", False))
        node_info = {n: dict(kv) for n, kv in self.node_info}
        cfg = copy.copy(session.cfg)
        cfg.calibration = copy.copy(session.cfg.calibration)
        for k, v in over.items():
            setattr(cfg.calibration, k, v)
        cfg.model = copy.copy(session.cfg.model)
        cfg.model.node_info = node_info
        # SmoothQuant changes the float graph the statistics are taken on: the session's statistics do not hold
        cache = {} if over.get("smooth_quant") else copy.copy(session.stats_cache)
        defaults = smooth_quant.apply_smooth_quant.__defaults__
        if forced:   # every absorbable site, whatever its outlier ratio
            smooth_quant.apply_smooth_quant.__defaults__ = (defaults[0], 0.0)
        try:
            result = run_calibration(cfg, stats_cache=cache, evaluate=False)
        finally:
            smooth_quant.apply_smooth_quant.__defaults__ = defaults
        variant = dataclasses.replace(session, cfg=cfg, stats_cache=cache)
        compiled = auto.compile_variant(variant, result, node_info)
        m = variant.measure(result, node_info, channels=False, compiled=compiled)
        changed = changed_nodes(result)
        options = [o for o in OPTIONS if o in result.options]
        return {"name": self.name, "overrides": dict(self.overrides), "cosine": m.cosine,
                "outputs": {o: v["cosine"] for o, v in m.outputs.items()},
                "fps": auto.fps_of(variant, compiled, node_info), "method": result.method,
                "sites": {o: len(result.options[o].get("applied", [])) for o in options},
                "skipped": {o: dict(list((result.options[o].get("skipped") or {}).items())[:6]) for o in options},
                "smooth_ratios": [(s["tensor"], round(s["channel_ratio"] or 0.0, 2), round(s["channel_ratio_after"], 2))
                                  for s in (result.options.get("smooth_quant") or {}).get("applied", [])],
                "changed": changed, "int16_nodes": sorted(node_info),
                "changed_count": len(set().union(*changed.values(), node_info)) if (changed or node_info) else 0,
                "seconds": time.perf_counter() - t0}


def channel_axis(rank: int) -> int:
    """The channel axis of an activation, from the end: NCHW's C for a 4-d tensor, else the last axis."""
    return -3 if rank == 4 else -1


def per_channel_scales(session, names: list[str], pow2: bool) -> dict[str, tuple[int, int]]:
    """The switchable model's all-int8 worst output cosine with per-channel activation scales on the outputs of
    ``names`` (what no BPU kernel of hbtool takes today beyond PTF's LayerNorm inputs): ``pow2``, PTF's rule on the
    channel axis (channel c at ``s / 8 * 2**alpha_c``, the smallest alpha in 0..3 whose range holds the channel's
    calibration maximum); else each channel's own max scale (never coarser than the tensor's). An estimate of what a
    per-channel outlier fix could give on these nodes, in the fake-quant model (compare with its all-int8 value)."""
    import numpy as np

    from hbtool.debug.masked import MaskedModel
    from hbtool.debug.sensitivity import evaluate
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.quant.calibrated_model import build_calibrated_graph
    from hbtool.quant.collect import collect_stats
    from hbtool.quant.data import load_calibration_data
    from hbtool.quant.fqvit import PTF_MAX_ALPHA, ptf_alphas
    from hbtool.quant.plan import QMAX

    base = session.base
    model = session.switchable()
    chosen = set(names)
    tensors = sorted({model.quantizers[i].float_name for n in model.nodes if n.name in chosen for i in n.acts})
    tensors = [t for t in tensors if t in base.plan.tensors and not base.plan.tensors[t].is_log2
               and len(base.graph.shape(t) or ()) >= 2]
    axes = {t: channel_axis(len(base.graph.shape(t))) for t in tensors}
    data = load_calibration_data(session.cfg, base.graph)
    stats = collect_stats(base.graph, [], data.iter_batches(1), None, channel_maxes=axes)
    plan = copy.deepcopy(base.plan)
    ratios = []
    for t in tensors:
        tq, m = plan.tensors[t], stats[t].channel_absmax
        qmax = QMAX[tq.bits]
        if pow2:
            low = float(np.float32(tq.scale) / np.float32(2**PTF_MAX_ALPHA))
            scales = low * 2.0 ** ptf_alphas(m, low, qmax)
        else:
            scales = np.minimum(tq.scale, np.maximum(m, 1e-12) / qmax)
        tq.axis_scales, tq.scale_axis = np.asarray(scales, np.float64), axes[t]
        ratios.append(float(m.max() / max(float(np.median(m)), 1e-30)))
    # the graph the calibration quantized (bias corrections folded): with no tensor changed, the session's own model
    calibrated, _ = build_calibrated_graph(base.quantized_source or base.graph, plan, base.weight_scales)
    mm = MaskedModel(calibrated, base.graph, threads=session.threads)
    cos = evaluate(mm, session.samples, mm.mask(off=[]), session.output_names, session.float_outputs,
                   resolve_metric("cosine", None))[1]
    return {"tensors": len(tensors), "cosine": cos, "median_channel_ratio": float(np.median(ratios)) if ratios else None}



def _case_config(out: Path) -> Path:
    """The benchmark's case (benchmarks/debug_auto.py's): PP-OCRv5 recogniser, all int8, 32 calibration lines, 32
    debug lines (offset 100), metric cosine."""
    from benchmarks.debug_auto import prepare_case
    from benchmarks.zoo.corpus import select

    ns = argparse.Namespace(out=out, samples=32, cal_samples=32, check_samples=0,
                            set=["calibration_parameters.auto_int16=false"])
    return prepare_case(select(["ppocrv5_rec"])[0], ns, "cosine")[1]


def main() -> None:
    from benchmarks.paths import OUT
    from hbtool.config import load_config
    from hbtool.debug.auto import INT16_OUT, int16_candidates, with_group
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.sensitivity import ActivationGains
    from hbtool.debug.session import open_session
    from hbtool.debug.trials import TrialRunner

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=None,
                    help="a debug config (default: benchmarks/debug_auto.py's all-int8 PP-OCRv5 recogniser case)")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--alphas", type=float, nargs="+", default=list(ALPHAS))
    ap.add_argument("--variants", nargs="+", default=None, help="names of the variants to run (default: all)")
    ap.add_argument("--gains", action="store_true", help="the single-node activation losses (gains pass, 4 samples): "
                                                         "where the options' nodes rank and their share of the loss")
    ap.add_argument("--gain-samples", type=int, default=4)
    ap.add_argument("--on-top", type=int, default=0, help="K: int16 on the top K by single loss on the best variant and on base")
    ap.add_argument("--per-channel", type=int, nargs="*", default=[],
                    help="K ...: per-channel activation scales (PTF's power-of-two rule, and each channel's max) on the "
                         "top K by single loss (0: every node), fake-quant: what a per-channel outlier fix could give")
    ap.add_argument("--report-only", action="store_true", help="print the table of what --cache holds (no session)")
    ap.add_argument("--cache", type=Path, default=OUT / "debug_options")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    path = args.cache / "options.json"
    out = load_results(path)
    out.setdefault("load_average", []).append(os.getloadavg())
    if args.report_only:
        report(out)
        return
    config = args.config or _case_config(OUT / "debug_auto")
    t0 = time.perf_counter()
    session = open_session(load_config(config), resolve_metric("cosine", None), args.samples)
    print(f"session {time.perf_counter() - t0:.0f} s (method {session.base.method})", flush=True)
    names = [n.name for n in session.switchable().nodes]
    out["quantized_nodes"] = len(names)
    every = variants(tuple(args.alphas))
    todo = [k for k in (args.variants or every) if k not in out.get("variants", {})]

    with TrialRunner(session, workers=args.workers) as runner:
        if todo:
            jobs = [OptionVariantJob(k, tuple(every[k].items())) for k in todo]
            for k, r in zip(todo, runner.jobs(jobs)):
                r["load_after"] = os.getloadavg()
                out.setdefault("variants", {})[k] = r
                save_results(path, out)
                print(f"{k}: cosine {r['cosine']:.4f}, FPS {r['fps']:.0f}, sites {r['sites']}, changed "
                      f"{r['changed_count']} ({r['seconds']:.0f} s)", flush=True)
        if (args.gains or args.on_top or args.per_channel) and "gains" not in out:
            t = time.perf_counter()
            order = [n for _, n in int16_candidates(session, names)]
            out["gains"] = {k: v for p in runner.jobs(ActivationGains(session, args.gain_samples).jobs(order)) for k, v in p.items()}
            out.setdefault("seconds", {})["gains"] = time.perf_counter() - t
            save_results(path, out)
        if args.on_top and out.get("variants"):
            by_loss = sorted(out["gains"], key=lambda n: (-out["gains"][n], n))[: args.on_top]
            best = max((k for k in out["variants"] if k != "base"), key=lambda k: out["variants"][k]["cosine"], default=None)
            group = with_group({}, by_loss, INT16_OUT[1])
            info = tuple((n, tuple(kv.items())) for n, kv in group.items())
            keys = [k for k in ("base", best) if k is not None and f"{k} + int16 top {args.on_top}" not in out["variants"]]
            jobs = [OptionVariantJob(f"{k} + int16 top {args.on_top}", tuple(every.get(k, out["variants"][k]["overrides"]).items()), info)
                    for k in keys]
            for job, r in zip(jobs, runner.jobs(jobs)):
                r["load_after"] = os.getloadavg()
                out["variants"][job.name] = r
                save_results(path, out)
                print(f"{job.name}: cosine {r['cosine']:.4f}, FPS {r['fps']:.0f}, changed {r['changed_count']}", flush=True)
    if args.per_channel and "gains" in out:
        from hbtool.debug.sensitivity import evaluate
        from hbtool.debug.metrics_hook import resolve_metric

        by_loss = sorted(out["gains"], key=lambda n: (-out["gains"][n], n))
        pc = out.setdefault("per_channel", {})
        if "all_int8_fake_quant" not in pc:
            model = session.switchable()
            pc["all_int8_fake_quant"] = evaluate(model, session.samples, model.mask(off=[]), session.output_names,
                                                 session.float_outputs, resolve_metric("cosine", None))[1]
        for k in args.per_channel:
            for pow2 in (True, False):
                key = f"{'pow2' if pow2 else 'max'}_top_{k}"
                if key not in pc:
                    t = time.perf_counter()
                    pc[key] = per_channel_scales(session, by_loss[:k] if k else names, pow2)
                    pc[key]["seconds"] = time.perf_counter() - t
                    save_results(path, out)
                    print(key, pc[key], flush=True)
    report(out)
    print("seconds: session", round(time.perf_counter() - t0), "load", out["load_average"][-1], os.getloadavg())


def report(out: dict) -> None:
    """The table: variant, sites, nodes changed, compiled worst cosine, FPS against the plain all-int8 program."""
    rows = out.get("variants", {})
    base_fps = (rows.get("base") or {}).get("fps")
    gains = out.get("gains") or {}
    rank = {n: k + 1 for k, n in enumerate(sorted(gains, key=lambda n: (-gains[n], n)))}
    total = sum(max(v, 0.0) for v in gains.values())
    print(f"\n== issue 34: the all-int8 recogniser with the calibration options ({out.get('quantized_nodes')} quantized nodes), "
          "compiled, worst output cosine on the debug samples ==")
    print(f"{'variant':<44}{'sites':>24}{'nodes changed':>15}{'worst cosine':>14}{'FPS':>8}{'vs base':>9}  method")
    for k, r in rows.items():
        fps = r["fps"]
        rel = f"{100 * (fps / base_fps - 1):+.1f} %" if base_fps else ""
        sites = ", ".join(f"{o} {n}" for o, n in r["sites"].items()) or "-"
        print(f"{k:<44}{sites:>24}{r['changed_count']:>15}{r['cosine']:>14.4f}{fps:>8.0f}{rel:>9}  {r['method']}")
    if gains:
        touched = sorted({n for r in rows.values() for ns in r["changed"].values() for n in ns})
        in_rank = [n for n in touched if n in rank]
        share = sum(max(gains[n], 0.0) for n in in_rank) / total if total else 0.0
        print(f"nodes any option changes: {len(touched)}; their single-node activation losses: "
              f"{share:.2%} of the sum over the {len(gains)} candidates; ranks "
              f"{sorted(rank[n] for n in in_rank)}")
        order = sorted(rank, key=rank.get)
        print("share of that sum on the top k by single loss: " + ", ".join(
            f"{k}: {sum(max(gains[n], 0.0) for n in order[:k]) / total:.1%}" for k in (10, 33, 80) if total))
        for r in rows.values():
            if r.get("smooth_ratios"):
                print(f"  {r['name']}: smoothed (tensor, max/median channel ratio before, after) {r['smooth_ratios']}")
                break
    pc = out.get("per_channel") or {}
    if pc:
        print(f"per-channel activation scales, fake-quant (all int8 there: {pc.get('all_int8_fake_quant', float('nan')):.4f}), "
              "worst output cosine:")
        for k, v in pc.items():
            if isinstance(v, dict):
                print(f"  {k:<16} {v['tensors']:>4} tensors  {v['cosine']:.4f}  (median max/median channel ratio "
                      f"{v['median_channel_ratio']:.1f})")


if __name__ == "__main__":
    main()
