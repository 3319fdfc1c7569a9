"""Measure ``hbtool debug --auto`` on corpus models (the numbers of issue 12's note).

Per model: calibration data (32 rendered samples) and held-out debug samples (offset 100) as
.npy folders, the zoo's config plus ``debug_parameters`` (metric: ``debug_metrics:
transcription_agreement`` for recognisers, else cosine), then ``run_debug(auto=True)``.
Prints PTQ and final cosine / metric, nodes changed, estimated FPS before/after and wall time.

    python -m benchmarks.debug_auto --models ppocrv5_rec ddddocr_crnn_rec --out /tmp/debug_bench
    python -m benchmarks.debug_auto --models hf_swin_t --no-auto --samples 32   # the 5-minute bar
    python -m benchmarks.debug_auto --models ppocrv5_rec --set calibration_parameters.bias_correction=false \
        --time-limit 20m --check-samples 100                                                   # the recogniser bar
    python -m benchmarks.debug_auto --models ppocrv4_seal_det --metric debug_metrics:seal_detection_f1
    python -m benchmarks.debug_auto --models ppocrv5_rec --set calibration_parameters.auto_int16=false \
        --metric cosine debug_metrics:transcription_agreement --time-limit 5m 10m --workers 2 1 --ray
        # issue 34: the all-int8 recogniser with cosine (5 min) and the task metric (10 min), --workers 2 beside 1 and
        # a local Ray cluster; the last lines sum up each search's wall time, the ratio and whether the decisions match
    python -m benchmarks.debug_auto --models ppocrv5_rec --set calibration_parameters.auto_int16=false \
        --metric cosine --time-limit 0 --target-cosine 0.97 --workers 1 2 --whole
        # the whole command with 1 worker, then again with 2 (no time limit and a target the search reaches, so the
        # decisions are whole): wall and CPU seconds of each phase and of the command, the ratio, "identical: yes/no"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.configs import corpus_config, write_config
from benchmarks.paths import OUT

HERE = Path(__file__).resolve().parent


def _stat_fields(path: str | Path) -> list[str]:
    """The fields of a /proc ``stat`` line after the command name (``[0]`` the state, ``[1]`` the parent pid,
    ``[11]`` and ``[12]`` utime and stime in clock ticks); raises OSError or IndexError if it is gone."""
    return Path(path).read_text().rsplit(")", 1)[1].split()


def _cpu_seconds(fields: list[str], tick: int) -> float:
    """User plus system CPU seconds of :func:`_stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / tick


def _tree_cpu() -> float:
    """CPU seconds of this process (all threads) and of its children, the live ones (``--workers`` processes, read
    from /proc) and the finished ones: the command's CPU so far."""
    total = time.process_time() + _children_cpu()
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _stat_fields(stat)
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me:              # a child of this process
            total += _cpu_seconds(fields, tick)
    return total


def _tree_threads(pid: int, skip: int) -> tuple[int, float]:
    """``(runnable, cpu)``: the threads of ``pid``'s process tree running or waiting for a core (state R), thread
    ``skip`` left out, and the CPU seconds of the tree's live threads."""
    runnable, cpu, tick, stack = 0, 0.0, os.sysconf("SC_CLK_TCK"), [pid]
    while stack:
        p = stack.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                fields = _stat_fields(f"/proc/{p}/task/{tid}/stat")
                stack += [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
            except (OSError, IndexError, ValueError):
                continue
            runnable += fields[0] == "R" and int(tid) != skip
            cpu += _cpu_seconds(fields, tick)
    return runnable, cpu


class _OneProcessClock(threading.Thread):
    """The stretches in which at most one thread of this command's process tree (this process and its ``--workers``)
    runs or waits for a core, sampled every ``period`` s: what a second idle core could not shorten. Counted in the CPU
    seconds the tree spent in them, which is what they last on an idle machine, so a run on a shared machine reads
    as it would idle (their wall seconds there are the load's; a thread waiting for a core still counts as runnable)."""

    def __init__(self, period: float = 0.2):
        super().__init__(name="one-process-clock", daemon=True)
        self.period, self.pending, self.total = period, 0.0, 0.0
        self.lock, self.stopped = threading.Lock(), threading.Event()

    def run(self) -> None:
        me = threading.get_native_id()
        _, last = _tree_threads(os.getpid(), me)
        while not self.stopped.wait(self.period):
            runnable, cpu = _tree_threads(os.getpid(), me)
            spent, last = max(cpu - last, 0.0), cpu     # a worker that ended takes its seconds with it: never below 0
            if runnable <= 1:
                with self.lock:
                    self.pending += spent
                    self.total += spent

    def take(self) -> float:
        """The one-process seconds since the last call."""
        with self.lock:
            seconds, self.pending = self.pending, 0.0
        return seconds


class _printer:
    """Progress as one line per stage every 10 % (a log file, not a terminal), and the wall, CPU and one-process seconds
    of each stage (``stages``: the time from one progress tick to the next goes to the next tick's stage; one-process:
    :class:`_OneProcessClock`). ``close()`` ends the clock and books the time since the last tick as ``ending`` (after
    the search's last tick: the final calibration and measure, the rest of the report's ranking)."""

    def __init__(self):
        self.shown: dict[str, int] = {}
        self.t0 = self.last = time.perf_counter()
        self.cpu = _tree_cpu()
        self.stages: dict[str, list[float]] = {}
        self.stage = ""
        self.clock = _OneProcessClock()
        self.clock.start()

    def _book(self, stage: str, now: float) -> None:
        cpu = _tree_cpu()
        acc = self.stages.setdefault(stage, [0.0, 0.0, 0.0])
        acc[0] += now - self.last
        acc[1] += cpu - self.cpu
        acc[2] += self.clock.take()
        self.last, self.cpu, self.stage = now, cpu, stage

    def close(self) -> float:
        """Books the ``ending`` and stops the clock; returns the command's one-process seconds."""
        self._book("ending", time.perf_counter())
        self.clock.stopped.set()
        self.clock.join()
        return self.clock.total

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if stage != self.stage or now - self.last >= 1.0 or done >= total:   # /proc read at most once a second a stage
            self._book(stage, now)
        step = int(10 * done / max(total, 1))
        if self.shown.get(stage) != step:
            self.shown[stage] = step
            print(f"  [{now - self.t0:7.1f}s] {stage} {done}/{total}", file=sys.stderr, flush=True)


def check_on_unseen(r, folders: list[Path], count: int) -> dict:
    """PTQ and the ``--auto`` result on the check set: the greedy chose on the debug set, this set is unseen."""
    import copy
    import dataclasses

    from hbtool.debug.session import debug_samples, run_outputs

    s = r.session
    cfg = copy.copy(s.cfg)
    cfg.debug = copy.copy(s.cfg.debug)
    cfg.debug.data_dir = folders[0] if len(folders) == 1 else folders[0].parent
    feeds = debug_samples(cfg, s.base.graph, count)
    check = dataclasses.replace(s, samples=feeds, float_outputs=run_outputs(s.base.graph, feeds, s.output_names))
    ptq, final = check.measure(s.base, {}), check.measure(r.auto.final.result, r.auto.node_info)
    return {"check_samples": len(feeds), "check_ptq_metric": ptq.metric, "check_final_metric": final.metric,
            "check_ptq_cosine": ptq.cosine, "check_final_cosine": final.cosine}


def prepare_case(spec, args, metric: str | None = None) -> tuple[Path, Path, dict[str, list[Path]]]:
    """The case folder, its config (the zoo's plus ``--set`` and ``debug_parameters``) and the sample folders."""
    from benchmarks.zoo.data import samples
    from benchmarks.zoo.trained import set_keys

    case = args.out / spec.name
    case.mkdir(parents=True, exist_ok=True)
    dirs = {}
    sets = [("cal", args.cal_samples, 0), ("debug", args.samples, 100)] + ([("check", args.check_samples, 200)] if args.check_samples else [])
    for tag, count, offset in sets:
        done = case / tag / f".{count}_samples"
        feeds = None if done.exists() else samples(spec, count, offset)   # rendering is slow: kept between runs
        names = sorted(p.name for p in (case / tag).iterdir() if p.is_dir()) if feeds is None else [re.sub(r"[^A-Za-z0-9_.-]", "_", n) for n in feeds[0]]
        for k_name, name in enumerate(names):
            d = case / tag / name
            d.mkdir(parents=True, exist_ok=True)
            if feeds is not None:
                key = list(feeds[0])[k_name]
                for k, s in enumerate(feeds):
                    np.save(d / f"{tag}_{k:02d}.npy", s[key])
            dirs.setdefault(tag, []).append(d)
        done.touch()
    cfg = corpus_config(spec, case, dirs["cal"], "default", args.cal_samples)
    recogniser = spec.metric == "ctc"
    set_keys(cfg, args.set)
    metric = metric or ("debug_metrics:transcription_agreement" if recogniser else "cosine")
    cfg["debug_parameters"] = {"metric": metric,
                               "data_dir": str(dirs["debug"][0] if len(dirs["debug"]) == 1 else dirs["debug"][0].parent)}
    path = write_config(case / "config.yaml", cfg)
    (case / "debug_metrics.py").write_text((HERE / "debug_metrics.py").read_text())
    return case, path, dirs


def _children_cpu() -> float:
    """CPU seconds of the finished worker processes (``--workers``): the search's CPU is theirs."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _decisions(a) -> tuple:
    """What an ``--auto`` search did and found (every step, the node_info, the final numbers): equal means identical."""
    steps = [(s.remedy, s.node, s.cosine, s.metric, s.fps, s.kept) for s in a.steps]
    return steps, a.node_info, a.tries, a.final.outputs, a.final.metric, a.final.fps


def search_again(r, args, workers: int, cluster: str | None, time_limit: str) -> dict:
    """The ``--auto`` search of ``r`` again with ``workers``, on the same session and ranking (the analysis is not
    redone); its wall time beside the first run's and whether it decided exactly the same."""
    from hbtool.debug.auto import WEIGHT_CANDIDATES, run_auto
    from hbtool.debug.run import parse_time_limit

    s = r.session
    limit = parse_time_limit(time_limit)
    if limit:   # the first run's limit counted from its start: the search again gets what the first search had
        limit -= sum(r.seconds.get(k, 0.0) for k in ("calibrate", "analysis", "weight_share"))
    t, c = time.perf_counter(), time.process_time() + _children_cpu()
    again = run_auto(s, r.ranked, args.target_cosine, args.max_fps_loss, s.metric.value(s.float_outputs, s.float_outputs), args.candidates,
                     weight_ranking=r.weight_ranked or r.weight_ranking, weight_share=r.weight_share, workers=workers, cluster=cluster,
                     nodes=[n.name for n in r.model.nodes], int16_gains=r.int16_gains,
                     weight_candidates=WEIGHT_CANDIDATES if args.weight_candidates is None else args.weight_candidates,
                     deadline=time.monotonic() + limit if limit else None)
    wall = time.perf_counter() - t
    first = r.seconds.get("auto", float("nan"))
    return {"model": r.session.cfg.model.output_model_file_prefix, "metric": s.metric.name, "workers": workers,
            "cluster": cluster, "first_workers": args.workers[0],
            "auto_seconds": wall, "first_auto_seconds": first, "speedup": first / wall if wall else None,
            "cpu_seconds": time.process_time() + _children_cpu() - c, "identical": _decisions(again) == _decisions(r.auto),
            "tries": again.tries, "reached": again.reached, "final_cosine": again.final.cosine, "stopped": again.stopped,
            "load_average": os.getloadavg()}


def whole_again(r, args, path: Path, workers: int, cluster: str | None, time_limit: str, first_wall: float,
                first_cpu: float, first_stages: dict[str, list[float]], first_one_process: float) -> list[str]:
    """The whole ``hbtool debug --auto`` again with ``workers`` (session, analysis, prices and gains, search): the
    user's wall time for the command beside the first run's, per phase, and whether it decided the same."""
    from hbtool.config import load_config
    from hbtool.debug.run import parse_time_limit, run_debug

    progress = _printer()
    t, c = time.perf_counter(), _tree_cpu()
    again = run_debug(load_config(path), auto=True, target_cosine=args.target_cosine, samples=args.samples,
                      max_fps_loss=args.max_fps_loss, sensitivity_samples=args.sensitivity_samples, candidates=args.candidates,
                      weight_samples=args.weight_samples, weight_candidates=args.weight_candidates, progress=progress,
                      time_limit=parse_time_limit(time_limit), workers=workers, cluster=cluster)
    wall, cpu = time.perf_counter() - t, _tree_cpu() - c
    one_process = progress.close()
    same = _decisions(again.auto) == _decisions(r.auto)
    row = {"model": r.session.cfg.model.output_model_file_prefix, "workers": workers, "cluster": cluster, "whole_seconds": wall,
           "first_whole_seconds": first_wall, "cpu_seconds": cpu, "first_cpu_seconds": first_cpu, "seconds": again.seconds,
           "first_seconds": r.seconds, "identical": same, "tries": again.auto.tries, "load_average": os.getloadavg(),
           "stages": progress.stages, "first_stages": first_stages, "one_process_seconds": one_process,
           "first_one_process_seconds": first_one_process}
    print(json.dumps(row, default=str), flush=True)
    a, b = f"workers {args.workers[0]}", f"workers {workers}" + (" on local Ray" if cluster else "")
    lines = [f"whole command, {a} against {b} (wall s; the phases run_debug reports):",
             f"  {'phase':<24}{a:>14}{b:>22}"]
    for k in dict.fromkeys(list(r.seconds) + list(again.seconds)):
        lines.append(f"  {k:<24}{r.seconds.get(k, 0.0):>14.1f}{again.seconds.get(k, 0.0):>22.1f}")
    lines.append(f"  {'(wall, CPU, 1-proc s)':<24}{a:>14}{b:>22}   (stages of the progress ticks; CPU: process + workers; "
                 "1-proc: CPU s spent with at most one runnable thread, what those stretches last idle)")
    for k in dict.fromkeys(list(first_stages) + list(progress.stages)):
        x, y = first_stages.get(k, [0.0, 0.0, 0.0]), progress.stages.get(k, [0.0, 0.0, 0.0])
        lines.append(f"  {k:<24}{f'{x[0]:.0f}, {x[1]:.0f}, {x[2]:.0f}':>14}{f'{y[0]:.0f}, {y[1]:.0f}, {y[2]:.0f}':>22}")
    lines.append(f"  {'command':<24}{f'{first_wall:.0f}, {first_cpu:.0f}, {first_one_process:.0f}':>14}"
                 f"{f'{wall:.0f}, {cpu:.0f}, {one_process:.0f}':>22}")
    stopped = " (a search was cut by the time limit: the decisions are not comparable)" if (r.auto.stopped or again.auto.stopped) else ""
    lines.append(f"ratio {a} / {b}: {first_wall / max(wall, 1e-9):.2f}x wall ({first_cpu / max(cpu, 1e-9):.2f}x CPU); "
                 f"tries {r.auto.tries} / {again.auto.tries} (run: {r.auto.tries_run} / {again.auto.tries_run}); reached {r.auto.reached} / {again.auto.reached}; "
                 f"identical: {'yes' if same else 'no'}{stopped}; load average {os.getloadavg()[0]:.1f}")
    return lines


def main() -> None:
    from benchmarks.zoo.corpus import select

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--out", type=Path, default=OUT / "debug_auto")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--cal-samples", type=int, default=32)
    ap.add_argument("--sensitivity-samples", type=int, default=None)
    ap.add_argument("--candidates", type=int, default=None, help="--auto tries the top N of the ranking (default: a quarter, at least 5)")
    ap.add_argument("--weight-samples", type=int, default=None, help="samples of the weight-only ranking (task metric)")
    ap.add_argument("--weight-candidates", type=int, default=None, help="single nodes of the weight ranking tried after the groups")
    ap.add_argument("--no-auto", action="store_true")
    ap.add_argument("--max-fps-loss", type=float, default=0.10)
    ap.add_argument("--target-cosine", type=float, default=0.99,
                    help="hbtool debug --target-cosine (e.g. 0.97: a target the search reaches, so both --whole runs end by "
                         "themselves and their decisions are comparable)")
    ap.add_argument("--metric", nargs="+", default=[None],
                    help="debug_parameters.metric (default: transcription agreement for recognisers, else cosine); several: "
                         "one run per metric, e.g. --metric cosine debug_metrics:transcription_agreement")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a config key, e.g. calibration_parameters.bias_correction=false (repeatable)")
    ap.add_argument("--time-limit", nargs="+", default=["30m"],
                    help="--auto's time limit (hbtool debug --time-limit); several: one per --metric, in order")
    ap.add_argument("--workers", type=int, nargs="+", default=[1],
                    help="hbtool debug --workers; several (e.g. 1 2): the first runs the whole debug, each other one the --auto "
                         "search again on the same session and ranking, timed beside it and checked for the identical result")
    ap.add_argument("--cluster", default=None, help="hbtool debug --cluster (a Ray address, or local) for the first run")
    ap.add_argument("--ray", action="store_true",
                    help="also the --auto search again on a local Ray cluster (2 workers), checked for the identical result")
    ap.add_argument("--whole", action="store_true",
                    help="each extra --workers count (and --ray) runs the whole debug --auto again, not only its search: "
                         "the user's wall time for the command, per phase, and whether it decided the same")
    ap.add_argument("--check-samples", type=int, default=0,
                    help="a second held-out set (offset 200): PTQ and the --auto result measured on lines the greedy never saw")
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="  %(message)s")
    logging.getLogger("hbtool.debug.auto").setLevel(logging.INFO)   # every --auto try, as it is measured
    summary = []
    for spec in select(args.models):
        for k, metric in enumerate(args.metric):
            summary += run_case(spec, args, metric, args.time_limit[min(k, len(args.time_limit) - 1)])
    for line in summary:
        print(line, flush=True)


def run_case(spec, args, metric: str | None, time_limit: str) -> list[str]:
    """One model with one metric: the whole debug, then the search again per extra worker count (and on Ray);
    returns the summary lines (wall seconds of each search, the ratio, identical or not)."""
    from hbtool.config import load_config
    from hbtool.debug.run import parse_time_limit, run_debug, write_debug

    t0 = time.perf_counter()
    case, path, dirs = prepare_case(spec, args, metric)
    progress = _printer()
    t1, c1 = time.perf_counter(), _tree_cpu()
    r = run_debug(load_config(path), auto=not args.no_auto, target_cosine=args.target_cosine, samples=args.samples,
                  max_fps_loss=args.max_fps_loss, sensitivity_samples=args.sensitivity_samples, candidates=args.candidates,
                  weight_samples=args.weight_samples, weight_candidates=args.weight_candidates, progress=progress,
                  time_limit=parse_time_limit(time_limit), workers=args.workers[0], cluster=args.cluster)
    wall = time.perf_counter() - t1
    cpu = _tree_cpu() - c1
    one_process = progress.close()         # run_debug's, as whole_again's (the report below is one process anyway)
    t2 = time.perf_counter()
    write_debug(r, case / "debug")
    report = time.perf_counter() - t2      # the report's writing: the command ends after it (--time-limit covers it)
    row = {"report_seconds": report, "command_seconds": wall + report, "model": spec.name, "metric": r.session.metric.name, "quantized_nodes": len(r.model.nodes), "seconds": r.seconds,
           "data_seconds": t1 - t0,
           # CPU seconds of the process and its workers (all threads): on a shared machine, wall time / load is no measure
           "cpu_seconds": cpu, "workers": args.workers[0], "load_average": os.getloadavg(),
           # CPU seconds spent with at most one runnable thread in the process tree (the one-process stretches as they
           # last idle), and per stage (wall, CPU, one-process)
           "one_process_seconds": one_process, "stages": progress.stages,
           "ptq_cosine": min(m["cosine"] for m in r.data["outputs"].values())}   # measured once, by write_debug
    lines = []
    if r.auto is not None:
        a = r.auto
        row.update(ptq_metric=a.steps[0].metric, final_metric=a.final.metric, final_cosine=a.final.cosine,
                   base_fps=a.base_fps, final_fps=a.final.fps, changed=a.changed, node_info=a.node_info, reached=a.reached,
                   tries=a.tries, stopped=a.stopped, notes=a.notes, bound=a.bound,
                   weight_top=[(g.name, round(g.metric_gain, 4), round(g.cosine_gain, 5)) for g in r.weight_ranking[:8]])
        if args.check_samples:
            row.update(check_on_unseen(r, dirs["check"], args.check_samples))
        lines.append(f"{spec.name} [{r.session.metric.name}] workers {args.workers[0]}: {wall:.0f} s in all, "
                     f"{wall + report:.0f} s with the report written (limit {time_limit}; search "
                     f"{r.seconds.get('auto', 0):.0f} s, {a.tries} tries), load {os.getloadavg()[0]:.1f}; metric "
                     f"{a.steps[0].metric:.4g} -> {a.final.metric:.4g}, worst cosine {a.steps[0].cosine:.4f} -> {a.final.cosine:.4f}, "
                     f"{len(a.changed)} of {a.quantized_nodes} nodes ({100 * len(a.changed) / max(a.quantized_nodes, 1):.1f} %), FPS "
                     f"{a.base_fps:.0f} -> {a.final.fps:.0f} ({100 * (a.final.fps / a.base_fps - 1):+.1f} %), reached {a.reached}"
                     + (f"; stopped: {a.stopped}" if a.stopped else "") + "".join(f"; {n}" for n in a.notes)
                     + (f"; the int16 bound's verdict after {a.bound['after_tries']} tries, "
                        f"{sum(r.seconds.get(k, 0.0) for k in ('calibrate', 'analysis', 'weight_share')) + a.bound['after_seconds']:.0f} s "
                        "from the start" if a.bound else ""))
    print(json.dumps(row, default=str), flush=True)
    agains = [(w, None) for w in args.workers[1:]] + ([(2, "local")] if args.ray else [])
    for workers, cluster in agains if r.auto is not None else []:
        if args.whole:
            lines += whole_again(r, args, path, workers, cluster, time_limit, wall, cpu, progress.stages, one_process)
            continue
        again = search_again(r, args, workers, cluster, time_limit)
        print(json.dumps(again, default=str), flush=True)
        lines.append(f"{spec.name} [{r.session.metric.name}] search again with workers {workers}{' on local Ray' if cluster else ''}: "
                     f"{again['auto_seconds']:.0f} s ({again['tries']} tries) against {again['first_auto_seconds']:.0f} s "
                     f"({a.tries} tries) with workers {args.workers[0]} (wall ratio workers {workers} / workers {args.workers[0]}: "
                     f"{again['auto_seconds'] / max(again['first_auto_seconds'], 1e-9):.2f}), identical decisions: "
                     f"{again['identical']} (only comparable where neither search was cut by the time limit), "
                     f"load {again['load_average'][0]:.1f}")
    return lines

if __name__ == "__main__":
    main()
