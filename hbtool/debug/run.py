"""``hbtool debug``: the library entry the CLI wraps, and the files it writes.

Order: calibrate the config in-process (statistics kept), the switchable fake-quant model, op and
model error along the graph (with range flags), the sensitivity ranking, then with ``auto`` the
greedy remedies. Everything the report shows is in ``debug.json``; the files are written at the
end, together.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from hbtool.config import HbConfig
from hbtool.debug.analysis.graph_errors import NodeErrors, graph_errors
from hbtool.debug.analysis.ranges import RangeFlag, RangeObserver, activation_flags, weight_flags
from hbtool.debug.auto import WEIGHT_CANDIDATES, AutoResult, calibrated_bytes, run_auto
from hbtool.debug.masked import MaskedModel
from hbtool.debug.metrics import DIRECTION
from hbtool.debug.metrics_hook import resolve_metric
from hbtool.debug.sensitivity import (ActivationGains, Sensitivity, WeightGain, rank_on, rank_weights_on, ranking_jobs,
                                      ranking_of, weight_share)
from hbtool.debug.session import DebugSession, open_session
from hbtool.debug.trials import TrialRunner, probe_cluster
from hbtool.errors import InputError
from hbtool.utils.workers import check_workers

Progress = Callable[[str, int, int], None]

#: samples of the O(nodes) loops (sensitivity, isolated error); the accumulated pass uses all.
#: A model of a giga-MAC or more gets half (as calibrate's candidate evaluation does)
SENSITIVITY_SAMPLES = 4
#: samples of the weight-only ranking under a task metric (one evaluation per weighted node: it can afford more)
WEIGHT_SAMPLES = 8
LARGE_MACS = 1e9
#: multiply-accumulates the sensitivity loops may spend (model MACs x samples x evaluations): about two
#: minutes on 2 cores. Over it a large model gets 1 sample, and then the four-way evaluation of the
#: nodes whose op error or error jump (one run for all, already measured) is largest, as many as fit
SENSITIVITY_MAC_BUDGET = 1.5e12
#: seconds kept free before ``--time-limit`` for writing the report (``debug.json``, the HTML and its figures, the
#: kept models) after the search and the report's ranking: on the all-int8 PP-OCRv5 recogniser (222 nodes, 32 lines,
#: 2 cores) 2.9 s with the PTQ model kept and a cut ranking at load average 7, 6.4 s with 64 nodes changed and the
#: whole ranking at load 9; 2.4 s on the tests' transformer (matplotlib's import included); with a margin for more
REPORT_SECONDS = 10.0


@dataclass
class DebugResult:
    session: DebugSession
    model: MaskedModel
    node_errors: list[NodeErrors]
    flags: list[RangeFlag]
    ranking: list[Sensitivity]
    reference: dict[str, float]
    observer: RangeObserver
    auto: AutoResult | None = None
    weight_ranking: list[WeightGain] = field(default_factory=list)
    weight_share: float | None = None      # the weights' share of the loss (task metric, --auto): see weight_share
    seconds: dict[str, float] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    data: dict[str, Any] | None = None     # what debug.json holds, once written
    #: the ranking computed on first call (``--auto`` computes it only where a phase or the report needs it)
    ranked: Callable[[], list[Sensitivity]] | None = None
    ranking_note: str = ""                 # why the ranking is empty, where it is
    weight_ranked: Callable[[], list[WeightGain]] | None = None   # the weight-only ranking, likewise (task metric)
    #: ``--auto``'s expected gain of each node's int16 output (:class:`ActivationGains`), computed when called
    int16_gains: Callable[[list[str]], dict[str, float]] | None = None


def parse_fps_loss(text: str | float) -> float:
    """``10%`` or ``0.1`` -> 0.1."""
    s = str(text).strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise InputError(f"--max-fps-loss {text}: not a fraction", "write it like 10% or 0.1") from None
    if not 0 <= v < 1:
        raise InputError(f"--max-fps-loss {text}: must be at least 0 and below 100%", "write it like 10% or 0.1")
    return v


def parse_time_limit(text: str | float | None) -> float | None:
    """``30m``, ``90s``, ``1.5h`` or plain seconds -> seconds; ``0`` or ``none`` -> no limit (None)."""
    s = str(text).strip().lower() if text is not None else "none"
    if s in ("0", "none", "off", "inf"):
        return None
    unit = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(s[-1:], None)
    try:
        v = float(s[:-1]) * unit if unit else float(s)
    except ValueError:
        raise InputError(f"--time-limit {text}: not a duration", "write it like 30m, 90s or 1h (0 for no limit)") from None
    if v <= 0:
        raise InputError(f"--time-limit {text}: must be positive", "write it like 30m, 90s or 1h (0 for no limit)")
    return v


def run_debug(cfg: HbConfig, auto: bool = False, target_cosine: float = 0.99, max_fps_loss: float = 0.10,
              samples: int | None = None, progress: Progress | None = None, sensitivity_samples: int | None = None,
              candidates: int | None = None, weight_samples: int | None = None, weight_candidates: int | None = None,
              sensitivity_budget: float | None = None, time_limit: float | None = None,
              workers: int | None = 1, cluster: str | None = None) -> DebugResult:
    """Analyse (and with ``auto`` fix) the config's quantized model; writes nothing (see :func:`write_debug`).

    ``time_limit`` (seconds, from the start of the run): the command (this and :func:`write_debug`) ends within it:
    ``--auto`` starts no try whose measured cost would end past it less the measured ending (the final calibration
    and measure, :data:`REPORT_SECONDS` for the report) and keeps the best found so far; the analysis before the
    search is not cut (it is bounded by its own MAC budget).
    ``workers`` (None: the machine's cores) / ``cluster`` (a Ray address, or ``local``): where the rankings,
    ``--auto``'s gains pass and the tries of a round run (:mod:`hbtool.debug.trials`); the result does not depend
    on them. With ``--auto`` the report's ranking, where the search did not need it, is bounded by the same
    time limit (:func:`_rank_for_the_report`)."""
    if not 0 < target_cosine <= 1:
        raise InputError(f"--target-cosine {target_cosine}: must be in (0, 1]", "write it like 0.99")
    workers = check_workers(workers)
    probe_cluster(cluster)
    base_dir = cfg.source.parent if cfg.source is not None else cfg.base_dir
    metric = resolve_metric(cfg.debug.metric, base_dir)
    n = int(samples or cfg.debug.num_samples)
    t = {"start": time.perf_counter()}
    deadline = time.monotonic() + time_limit if time_limit else None
    # the workers start now, their imports beside the base calibration (much of it on one core), and get the session
    # once it exists; the rankings, the gains pass, the prices and the search's tries all run on them, on one
    # onnxruntime thread each, the same numbers for any count
    with TrialRunner(None, workers, cluster, deadline) as runner:
        # the float outputs of the debug samples on a worker, beside the calibration (none with --workers 1)
        session = open_session(cfg, metric, n, progress, reference_beside=runner.float_outputs_beside())
        t["calibrate"] = time.perf_counter()
        runner.attach(session, switchable=True)    # the workers build their switchable models beside this one
        model = MaskedModel(session.base.calibrated, session.base.graph, spinning=not runner.parallel)
        session.masked_model = model
        return _analyse(cfg, session, model, runner, metric, auto, target_cosine, max_fps_loss, progress,
                        sensitivity_samples, candidates, weight_samples, weight_candidates, sensitivity_budget, deadline, t)


def _analyse(cfg, session, model, runner, metric, auto, target_cosine, max_fps_loss, progress, sensitivity_samples,
             candidates, weight_samples, weight_candidates, sensitivity_budget, deadline, t) -> DebugResult:
    """:func:`run_debug` once the session is open and its workers are started (``runner``)."""
    lnin = {nd.inputs[0] for nd in session.base.graph.nodes if nd.op_type in ("LayerNormalization", "ChannelLayerNorm")}
    watched = [nd.outputs[0] for nd in model.nodes] + sorted(lnin)
    observer = RangeObserver(list(dict.fromkeys(watched)), lnin)
    from hbtool.quant.calibrate import _total_macs

    macs = max(float(_total_macs(session.base.graph)), 1.0)
    budget = SENSITIVITY_MAC_BUDGET if sensitivity_budget is None else float(sensitivity_budget)
    if sensitivity_samples is None:
        sensitivity_samples = SENSITIVITY_SAMPLES // 2 if macs >= LARGE_MACS else SENSITIVITY_SAMPLES
        sensitivity_samples = max(1, min(sensitivity_samples, int(budget // (macs * max(_evaluations(model.nodes), 1)))))
    k = min(sensitivity_samples, len(session.samples))
    evaluations = budget / (macs * max(k, 1))
    # an unlimited --auto search on workers: the four-way ranking of every node (the budget covers them all) decides
    # nothing the search does not wait for, so its chunks start now as background work, on the workers' idle slots
    # beside the op error below, the gains pass's tail and the search's rounds (the same numbers: each chunk's values
    # depend only on its nodes); read when the per-node pass or the report needs it
    early = None
    if auto and deadline is None and runner.parallel and _within_budget(model.nodes, [], evaluations) is None:
        early_jobs = ranking_jobs(session, k)
        early = runner.background(early_jobs)
    errs = graph_errors(model, session.base.graph, session.samples, k, progress, observer)
    owners = {nd.outputs[0]: nd.name for nd in model.nodes}
    flags = activation_flags(observer, owners) + weight_flags(session.base.graph)
    t["analysis"] = time.perf_counter()
    only = _within_budget(model.nodes, errs, evaluations)
    result = DebugResult(session, model, errs, flags, [], {}, observer)
    spent = {"sensitivity": 0.0, "weight_sensitivity": 0.0, "report_sensitivity": 0.0}

    def ranked(part: str = "sensitivity") -> list[Sensitivity]:
        """The four-way ranking, computed once: before the report, or when ``--auto``'s per-node pass needs it
        (``part``: the ``seconds`` it counts as)."""
        if not result.ranking:
            t0 = time.perf_counter()
            if early is not None:
                results = []
                for r in early.results():
                    results.append(r)
                    if progress:
                        progress("sensitivity", len(results), len(early_jobs))
                result.ranking, result.reference, _ = ranking_of(session, results)
            elif deadline is not None:
                # asked for by --auto's per-node pass under a time limit: bounded like the report's, by the limit less
                # the command's ending as the search prices it (TrialRunner.ending), the likeliest nodes first
                ending = runner.ending() if getattr(runner, "ending", None) is not None else REPORT_SECONDS
                _rank_for_the_report(result, runner, session, k, errs, only, deadline - ending, progress,
                                     why="--auto's per-node pass asked for it and the time limit cut it")
            else:
                result.ranking, result.reference, _ = rank_on(runner, session, k, only=only, progress=progress)
            spent[part] += time.perf_counter() - t0
        return result.ranking

    result.ranked = ranked
    if not auto:
        ranked()
    if auto and metric.is_hook:
        # a coarse task metric ties most nodes on the few samples above: the weight remedies get their own ranking
        kw = max(k, min(weight_samples or WEIGHT_SAMPLES, len(session.samples)))
        w_float = {o: v[: kw * (v.shape[0] // max(len(session.samples), 1))] for o, v in session.float_outputs.items()}

        def weight_ranked() -> list[WeightGain]:
            if not result.weight_ranking:
                t0 = time.perf_counter()
                result.weight_ranking = rank_weights_on(runner, session, kw, progress)
                spent["weight_sensitivity"] += time.perf_counter() - t0
            return result.weight_ranking

        result.weight_ranked = weight_ranked
        result.weight_share = weight_share(model, session.samples[:kw], session.output_names, w_float, metric)
        t["weight_share"] = time.perf_counter()
    # the expected gain of each node's int16 output for --auto's budget set: its activations' loss alone, on the
    # sensitivity samples; the search runs it in chunks on its workers beside the prices (ActivationGains.jobs)
    result.int16_gains = ActivationGains(session, k, progress)
    if auto:
        ideal = metric.value(session.float_outputs, session.float_outputs)
        t0 = time.perf_counter()
        result.auto = run_auto(session, ranked, target_cosine, max_fps_loss, ideal, candidates, progress=progress,
                               weight_ranking=weight_ranked if metric.is_hook else [],
                               weight_candidates=WEIGHT_CANDIDATES if weight_candidates is None else weight_candidates,
                               deadline=deadline, weight_share=result.weight_share,
                               nodes=[nd.name for nd in model.nodes], int16_gains=result.int16_gains, runner=runner,
                               report_seconds=REPORT_SECONDS if deadline is not None else 0.0)
        auto_wall = time.perf_counter() - t0
        # rankings a phase asked for, and the work before the first round: counted as themselves, not as the search
        inside = sum(spent.values()) + sum(result.auto.seconds.values())
        if early is not None:
            ranked("report_sensitivity")      # the rest of the background ranking, if any is left
        elif not result.ranking:
            t0 = time.perf_counter()
            _rank_for_the_report(result, runner, session, k, errs, only,
                                 deadline - REPORT_SECONDS if deadline is not None else None, progress)
            spent["report_sensitivity"] = time.perf_counter() - t0
    end = time.perf_counter()
    keys = list(t)
    result.seconds = {b: t[b] - t[a] for a, b in zip(keys, keys[1:])}
    result.seconds.update({name: v for name, v in spent.items() if v})
    if auto:
        result.seconds.update(result.auto.seconds)
        result.seconds["auto"] = auto_wall - inside
    result.seconds["total"] = end - t["start"]
    return result


def _rank_for_the_report(result: DebugResult, runner, session, samples: int, errs: list[NodeErrors], only,
                         deadline: float | None, progress,
                         why: str = "--auto ended without needing the ranking and the time limit cut it") -> None:
    """The report's ranking after an ``--auto`` search that ended without needing it: on the workers, in chunks of
    nodes, bounded by the same time limit as the search (no chunk started that the last wave's time says ends after
    it), the nodes of the largest op error or error jump first; the nodes left out are listed as not evaluated and
    the note says so (``why``: what cut it). After the search it decides nothing, so a partial ranking changes no
    result. The same bounded ranking serves ``--auto``'s per-node pass when it asks for the ranking under a time limit
    (``deadline`` then the limit less the search's priced ending): that pass gets the evaluated nodes, the likeliest
    first, where an unbounded ranking ran 86 s past a 5-minute limit on the all-int8 PP-OCRv5 recogniser (idle, 2
    workers: 339 s in all).

    Why bounded: on the all-int8 PP-OCRv5 recogniser it took 181 s of a 427 s command (serial, after a search cut by
    a 5-minute limit): the user's ``--time-limit`` bounds the command, not only the search. ``deadline`` is the
    limit less the report's writing (:data:`REPORT_SECONDS`); the first wave is priced by the gains pass's measured
    seconds per masked evaluation (:func:`_chunk_estimate`), so it too starts only where it ends in time."""
    proxy = {e.name: max(1.0 - e.isolated.get("cosine", 1.0), e.jump, 0.0) for e in errs}
    nodes = result.model.nodes
    order = [n.name for n in sorted(nodes, key=lambda n: -proxy.get(n.name, 0.0))]
    wanted = sum(1 for n in nodes if only is None or n.name in only)
    result.ranking, result.reference, done = rank_on(runner, session, samples, only=only, order=order, progress=progress,
                                                     deadline=deadline, estimate=_chunk_estimate(runner, nodes))
    if done < wanted:
        result.ranking_note = (f"{done} of {wanted} nodes evaluated: {why} (the nodes of the largest op error or error "
                               "jump first; the rest are listed as not evaluated); hbtool debug without --auto ranks "
                               "every node")
        if not done:
            result.ranking = []


def _chunk_estimate(runner, nodes) -> Callable[[Any], float] | None:
    """A ranking chunk's expected seconds from this run's gains pass (:class:`ActivationLossJob`: one masked evaluation
    per node and one for its reference, on the same samples and one onnxruntime thread as the ranking's chunks): the
    slowest seconds per evaluation it measured, times the chunk's evaluations (:func:`_evaluations`, and two for its
    reference points). ``None`` where the gains pass did not run (the first wave then starts where the limit is not
    yet reached, as before)."""
    from hbtool.debug.sensitivity import ActivationLossJob

    per = [seconds / (len(job.names) + 1) for job, seconds in getattr(runner, "job_seconds", [])
           if isinstance(job, ActivationLossJob)]
    if not per:
        return None
    per_evaluation, by_name = max(per), {n.name: n for n in nodes}
    return lambda job: per_evaluation * (_evaluations([by_name[name] for name in job.names if name in by_name]) + 2)


def _evaluations(nodes) -> int:
    """Masked evaluations of the four-way sensitivity of ``nodes`` (two per part, weights and activations)."""
    return sum(2 * (bool(n.weights) + bool(n.acts)) for n in nodes)


def _within_budget(nodes, errs: list[NodeErrors], evaluations: float) -> set[str] | None:
    """The nodes whose sensitivity fits ``evaluations`` (``None``: all fit), the worst op error or error jump first.

    A node quantized alone that loses little, and adds little to the error along the graph,
    rarely tops the ranking; the ones skipped are listed in the ranking as not evaluated.
    """
    if _evaluations(nodes) + 2 <= evaluations:
        return None
    proxy = {e.name: max(1.0 - e.isolated.get("cosine", 1.0), e.jump, 0.0) for e in errs}
    chosen, spent = set(), 2
    for n in sorted(nodes, key=lambda n: -proxy.get(n.name, 0.0)):
        cost = _evaluations([n])
        if spent + cost > evaluations:
            break
        chosen.add(n.name)
        spent += cost
    return chosen


def fragment(node_info: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``model_parameters.node_info`` fragment (unset sub-keys dropped)."""
    clean = {}
    for node, entry in node_info.items():
        e = {k: v for k, v in (entry or {}).items() if v is not None}
        if e:
            clean[node] = e
    return {"model_parameters": {"node_info": clean}}


def to_json(r: DebugResult) -> dict[str, Any]:
    s = r.session
    out: dict[str, Any] = {
        "metric": s.metric.name,
        "metric_is_hook": s.metric.is_hook,
        "directions": DIRECTION,
        "samples": len(s.samples),
        "seconds": r.seconds,
        "calibration_method": s.base.method,
        "reference": r.reference,
        # the PTQ model's outputs: as ``--auto`` measured them when its search began (the same numbers: the simulator
        # runs its compiled program bit for bit as the quantized model), else measured now
        "outputs": dict((r.auto.ptq if r.auto is not None and r.auto.ptq is not None
                         else s.measure(s.base, s.cfg.model.node_info)).outputs),
        "nodes": [asdict(e) for e in r.node_errors],
        "range_flags": [asdict(f) for f in r.flags],
        "sensitivity": [{**asdict(x), "sensitivity": x.sensitivity, "kind": x.kind()} for x in r.ranking],
        "sensitivity_note": r.ranking_note,
        "weight_sensitivity": [asdict(g) for g in r.weight_ranking],
        "weight_share": r.weight_share,
    }
    if r.auto is not None:
        a = r.auto
        out["auto"] = {"steps": [asdict(st) for st in a.steps], "node_info": fragment(a.node_info)["model_parameters"]["node_info"],
                       "changed": a.changed, "quantized_nodes": a.quantized_nodes, "base_fps": a.base_fps,
                       "final_fps": a.final.fps if a.final else None, "reached": a.reached,
                       "tries": a.tries, "tries_run": a.tries_run, "stopped": a.stopped, "notes": a.notes, "bound": a.bound, "activation_reference": a.activation_reference,
                       "final_outputs": a.final.outputs if a.final else None, "final_metric": a.final.metric if a.final else None}
    return out


def plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def write_debug(r: DebugResult, out_dir: Path) -> list[Path]:
    """``debug.json``, ``debug_report.html`` + PNGs and, after ``--auto``, node_info.yaml and the two models."""
    from hbtool.debug.report_html import write_report
    from hbtool.ir.onnx_export import to_onnx
    from hbtool.utils.atomic import atomic_write_files

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = plain(to_json(r))
    r.data = data
    payloads: dict[Path, bytes] = {out_dir / "debug.json": (json.dumps(data, indent=1) + "\n").encode()}
    if r.auto is not None and r.auto.final is not None:
        prefix = r.session.cfg.model.output_model_file_prefix
        final = r.auto.final.result
        head = "# hbtool debug --auto: paste under model_parameters in the config (it replaces node_info)\n"
        payloads[out_dir / "node_info.yaml"] = (head + yaml.safe_dump(fragment(r.auto.node_info), sort_keys=False)).encode()
        payloads[out_dir / f"{prefix}_calibrated_model.onnx"] = calibrated_bytes(final)
        payloads[out_dir / f"{prefix}_quantized_model.onnx"] = to_onnx(final.quantized, stage="quantized").SerializeToString()
    payloads.update(write_report(r, data, out_dir))
    atomic_write_files(payloads)
    r.files = sorted(payloads)
    return r.files
