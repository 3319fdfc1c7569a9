"""Sweep two global cost-model parameters of a march over the cached published rows (docs/perf.md, perf7).

For each (e, p): the tensor unit's sustained rate scaled by ``e`` (``macs_per_cycle`` x e: the array busy
e of its cycles) and ``overheads.per_op_cycles`` set to ``p``; prints the median absolute error and the
share within 25 % of latency and FPS for the fit rows and for the rows no parameter was fitted to
(holdout + fresh), and the fit rows whose FPS is off by more than 25 %. Only rows whose compile is
cached are used (``perf_published.py --compile-only`` fills the cache); nothing is written.

    .venv/bin/python -m benchmarks.published.sweep --march bayes-e --rate 1.0 0.95 0.9 --per-op 3000 2500
    .venv/bin/python -m benchmarks.published.sweep --fit-only --set weight_fetch_exposed=0.2,0.3 --set groups_share_lanes=false,true

``--set FIELD=V1,V2`` sweeps any other field of the cost model's ``Hardware`` (the grid is the product);
``--fit-only`` costs and prints only the fit rows, so a change can be chosen without seeing the rows it
will be checked on (perf8 chose ``memory.weight_fetch_exposed`` that way).

Why it exists: a parameter change that meets the fit-row bars must be checked on the rows it was not
fitted to before it is taken; this prints both sides of that trade in one table.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import sys

from benchmarks import perf_published as pp
from benchmarks.published.rows import calibration_rows, fresh_rows, holdout_rows


def _programs(rows):
    out = []
    for r in rows:
        if r.onnx is None or not pp.cache_path(r.onnx, r.march, r.calibration).exists():
            continue
        header, program = pp.compiled_program(r.onnx, r.march, False, r.calibration)
        out.append((r, pp.replan_memory(header, program, r.march, True), program))
    return out


def _errors(programs, hw):
    from hbtool.costmodel.schedule import estimate_program

    errors = {}
    for r, header, program in programs:
        res = estimate_program(program, header.get("tensors", {}), hw, 1, r.variant, "O3",
                               runtime_input_types={i["name"]: "nv12" for i in header.get("inputs", [])})
        errors[r.variant] = (res.latency_ms / r.latency_ms - 1, res.fps_threads(r.threads or 1) / r.fps_multithread - 1)
    return errors


def _summary(errors, k):
    e = [abs(v[k]) for v in errors.values()]
    return f"{statistics.median(e):.1%} / {sum(x <= 0.25 for x in e) / len(e):.0%}" if e else "-"


def main() -> None:
    from hbtool.costmodel.hardware import hardware_for

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--march", default="bayes-e")
    ap.add_argument("--rate", type=float, nargs="+", default=[1.0, 0.95, 0.9])
    ap.add_argument("--per-op", type=float, nargs="+", default=None, help="per_op_cycles values (default: the march's)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=V1,V2",
                    help="also sweep any other Hardware field (e.g. ddr_efficiency=0.8,0.6); repeatable")
    ap.add_argument("--family-fit", action="store_true",
                    help="issue 33's family split: the fit rows are the csv rows of the fit families "
                         "(benchmarks/published/split.py) and nothing else is costed (the family hold-out stays unseen)")
    ap.add_argument("--fit-only", action="store_true",
                    help="cost and print only the fit rows: choose a change without seeing the unseen rows, then run once without it")
    args = ap.parse_args()
    if args.family_fit:
        from benchmarks.published.split import FIT, split_of

        fit = _programs([r for r in calibration_rows() if r.march == args.march and split_of(r) == FIT])
        unseen = []
    else:
        fit = _programs([r for r in calibration_rows() if r.march == args.march])
        unseen = [] if args.fit_only else _programs([r for r in holdout_rows() + fresh_rows() if r.march == args.march])
    boards = {pp.BOARDS[r.board] for r, _, _ in fit + unseen}
    if len(boards) != 1:
        sys.exit(f"rows of {args.march} on several boards ({sorted(boards)}): sweep one board at a time")
    base = hardware_for(args.march, boards.pop())
    print(f"{len(fit)} fit rows, {len(unseen)} unseen rows (holdout + fresh) of {args.march}")
    extra = _extra_grid(base, args.set)
    print(f"| e, p{''.join(', ' + f for f, _ in extra)} | fit latency | fit FPS | unseen latency | unseen FPS | fit FPS rows out of 25 % |")
    print("|---|---|---|---|---|---|")
    for e, p, *values in itertools.product(args.rate, args.per_op or [base.per_op_cycles], *(v for _, v in extra)):
        changes = dict(zip((f for f, _ in extra), values))
        hw = dataclasses.replace(base, macs_per_cycle=int(round(base.macs_per_cycle * e)), per_op_cycles=p, **changes)
        f, u = _errors(fit, hw), _errors(unseen, hw)
        out = sorted((v[1], k) for k, v in f.items() if abs(v[1]) > 0.25)
        label = ", ".join(f"{v:g}" for v in (e, p, *values))
        print(f"| {label} | {_summary(f, 0)} | {_summary(f, 1)} | {_summary(u, 0)} | {_summary(u, 1)} | "
              f"{len(out)}: {', '.join(f'{k} {v:+.0%}' for v, k in out)} |", flush=True)


def _extra_grid(base, settings: list[str]) -> list[tuple[str, list]]:
    """``FIELD=V1,V2`` -> (field, values typed like the march's own value); an unknown field is an error."""
    grid = []
    for item in settings:
        name, _, values = item.partition("=")
        if not hasattr(base, name) or not values:
            sys.exit(f"--set {item}: write FIELD=V1,V2 with FIELD one of {', '.join(f.name for f in dataclasses.fields(base))}")
        kind = type(getattr(base, name))
        grid.append((name, [kind(float(v)) if kind is not bool else v.lower() in ("1", "true") for v in values.split(",")]))
    return grid


if __name__ == "__main__":
    main()
