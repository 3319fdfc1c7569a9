"""Where one ``simulate`` executor spends its time, step by step, and what a route change does to each step.

Each step's run function is wrapped in a timer; the program runs ``--repeat`` times on the corpus
runner's artifact (``benchmarks/zoo/run.py``) at ``--batch`` samples per call, one thread by
default, interleaved with onnxruntime float32 on the same model and samples. Steps are summed by
kind (op type; for a Conv its route: depthwise loop or session, 1x1, bit width) and listed by
total; a step's time is its best over the repeats (the machine is shared: the best is what load
did not add to). ``--without ROUTE`` builds a second executor without one route (``depthwise-loop``:
every depthwise layer as a one-node onnxruntime session; ``matmul-integer``: activation MatMuls as
float GEMMs; ``same-shape-flat``: an Add / Mul of operands of one shape in rows of the last axis; ``avgpool-loop``:
AvgPool in its numpy form; ``affine-pairs``: a scalar Mul and its scalar Add as two steps, so the two executors'
steps no longer line up and ``--kind`` does not apply; ``integer-conv-kxk``: int8 3 x 3 convolutions whose float32
form splits the weight as that float form, not ``ConvInteger``; ``unsigned-gemm``: Linear and int16 x int8 MatMul
without the uint8 x uint8 ``MatMulInteger`` chosen where uint8 x int8 saturates, as on main before it;
``int8-matmul-unsigned``: int8 x int8 MatMuls as float32 GEMMs instead of `MatMulInteger`; ``depthwise-float64-requant``: the
depthwise loops requantizing in int64; ``im2col-gemm``: convolutions larger than 1 x 1 (and strided pointwise ones)
as float32 convolutions or ``ConvInteger`` instead of int8 columns and ``MatMulInteger``; ``channel-scale``: a 1 x 1
depthwise convolution (the preprocessing's) in the depthwise loop instead of an int32 product and the requantizing
pass; ``table-chains``: a chain of elementwise steps holding a table as its steps, not one lookup, so, as with
``affine-pairs``, the steps no longer line up; ``depthwise-3x3``: MobileNet's 3 x 3 depthwise layers in the routes
before ``depthwise.run_3x3``, the row loop on large planes and a session on small ones), runs the two interleaved and
lists the steps of ``--kind`` side by side.

``--cores`` (use with ``--threads 2``) also records each step's process CPU time beside its wall
time and lists, by kind, how many cores a step kept busy (CPU / wall; onnxruntime's pools do not
spin, so an idle thread adds nothing), and the same for the whole run of both sides: which steps
run on one core while the float graph uses more. On a loaded machine the ratio reads low for every
step alike (a preempted step's wall grows, its CPU does not); compare steps with each other.

    python -m benchmarks.simulate_profile --model hf_mobilenet_v2 [--batch 1] [--repeat 20] [--top 15] \\
        [--without depthwise-loop --kind "Conv depthwise"] [--threads 2 --cores]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np


# routes an executor can be built without (--without): the accel function to replace and its stand-in
_ROUTES = {
    "depthwise-loop": ("depthwise_in_loop", lambda kernel, in_shape=None: False),
    "matmul-integer": ("_integer_matmul", lambda kernel, threads: None),
    "same-shape-flat": ("SAME_SHAPE_FLAT", False),
    "avgpool-loop": ("_BUILDERS", lambda builders: {k: v for k, v in builders.items() if k != "AvgPool"}),
    "affine-pairs": ("AFFINE_PAIRS", False),
    "integer-conv-kxk": ("_float_conv_splits", lambda w, in_bits: False),
    "unsigned-gemm": ("_cpu_unsigned_gemm_is_exact", lambda: False),
    "int8-matmul-unsigned": ("INT8_MATMUL_UNSIGNED", False),
    "depthwise-float64-requant": ("DEPTHWISE_FLOAT64_REQUANT", False),
    "im2col-gemm": ("IM2COL_GEMM", False),
    "channel-scale": ("CHANNEL_SCALE", False),
    "table-chains": ("TABLE_CHAINS", False),
    "depthwise-3x3": ("depthwise.LOOP_3X3", False),
}


def _route(step) -> str:
    kernel = step.node.meta.get("kernel")
    kind = type(kernel).__name__ if kernel is not None else step.node.op_type
    if kind == "Conv":
        from hbtool.simulator import accel

        w = kernel.weight
        if w.shape[1] == 1 and int(kernel.group) > 1:
            kind += " depthwise " + ("loop" if getattr(step.fast, "depthwise_loop", False) else "session")
        elif all(k == 1 for k in w.shape[2:]):
            kind += " 1x1"
        kind += f" int{kernel.in_bits}"
    elif kind == "MatMul":
        kind += f" int{kernel.a_bits}x{kernel.b_bits}"
    elif kind == "Linear":
        kind += f" int{getattr(kernel, 'in_bits', getattr(kernel, 'a_bits', 0))}"
    return kind


def _timed(ex, cpu: dict[int, list] | None = None) -> dict[int, list]:
    """Wrap every step's run in a wall-clock timer (and a process-CPU one into ``cpu``, when given)."""
    spent: dict[int, list] = defaultdict(list)
    for k, step in enumerate(ex.steps):
        def timed(xs, _run=step.run, _k=k):
            c = time.process_time() if cpu is not None else 0.0
            t = time.perf_counter()
            y = _run(xs)
            spent[_k].append(time.perf_counter() - t)
            if cpu is not None:
                cpu[_k].append(time.process_time() - c)
            return y
        step.run = timed
    return spent


def _cores_table(ex, wall: dict[int, list], cpu: dict[int, list], totals: dict[str, tuple[float, float]]) -> None:
    """Per kind: mean wall and CPU ms per run, CPU / wall (cores busy), and the share of wall in one-core steps."""
    by_kind: dict[str, list] = defaultdict(lambda: [0.0, 0.0, 0])
    one_core = all_wall = 0.0
    runs = max(len(v) for v in wall.values())
    for k in wall:
        w, c = sum(wall[k]) / runs, sum(cpu[k]) / runs
        entry = by_kind[_route(ex.steps[k])]
        entry[0] += w
        entry[1] += c
        entry[2] += 1
        all_wall += w
        if c < 1.25 * w:
            one_core += w
    print("whole runs, CPU / wall (cores busy): " + ", ".join(f"{label} {c / w:.2f} ({w * 1e3:.2f} ms wall)"
                                                               for label, (w, c) in totals.items()))
    print(f"steps with CPU < 1.25 x wall (one core busy): {one_core / all_wall:.1%} of the steps' wall")
    print(f"  {'kind':<28} {'wall ms':>8} {'cpu ms':>8} {'cores':>6} {'steps':>6}")
    for kind, (w, c, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"  {kind:<28} {w * 1e3:>8.3f} {c * 1e3:>8.3f} {c / w:>6.2f} {n:>6}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--kind", help="also list every step of this kind (a prefix, e.g. 'Conv depthwise')")
    ap.add_argument("--cores", action="store_true", help="also list CPU / wall per kind of step (cores kept busy)")
    ap.add_argument("--without", choices=sorted(_ROUTES), default=None,
                    help="also run an executor built without this route (its kernels take the route before it), interleaved")
    args = ap.parse_args(argv)

    from benchmarks.simulate_speed import ZOO_OUT, _samples, _session, _slice, quiesce
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator import accel
    from hbtool.simulator.executor import Executor

    wd = ZOO_OUT / args.model / "model_output"
    art = read_artifact(wd / f"{args.model}.bin")
    executors = {"now": Executor(art, threads=args.threads)}
    if args.without:
        name, off = _ROUTES[args.without]
        owner = accel
        if "." in name:  # a switch of another simulator module
            import importlib

            module, name = name.rsplit(".", 1)
            owner = importlib.import_module(f"hbtool.simulator.{module}")
        keep = getattr(owner, name)
        setattr(owner, name, off(keep) if name == "_BUILDERS" else off)  # the builders' table: a copy without one kind
        try:
            executors["without"] = Executor(art, threads=args.threads)
        finally:
            setattr(owner, name, keep)
    shapes = {d["name"]: tuple(d["shape"]) for d in art.header["inputs"]}
    feeds = _slice(_samples(args.model, art.header["inputs"], args.batch), shapes, 0, args.batch)
    cpu: dict[int, list] = defaultdict(list)
    spent = {label: _timed(ex, cpu if args.cores and label == "now" else None) for label, ex in executors.items()}
    first = {label: ex.run(feeds) for label, ex in executors.items()}
    for label, y in first.items():
        for name in y:
            assert np.array_equal(y[name], first["now"][name]), f"{label} differs from now on {name}"
    for s in list(spent.values()) + [cpu]:
        s.clear()
    sess = _session(wd / f"{args.model}_original_float_model.onnx", args.threads)
    outs = executors["now"].output_names
    total, total_cpu = defaultdict(float), defaultdict(float)
    for _ in range(args.repeat):
        for label, ex in executors.items():
            c, t = time.process_time(), time.perf_counter()
            ex.run(feeds)
            total[label] += time.perf_counter() - t
            total_cpu[label] += time.process_time() - c
        c, t = time.process_time(), time.perf_counter()
        for k in range(args.batch):  # the float model's own batch (often fixed at 1), sample by sample
            sess.run(outs, _slice(feeds, shapes, k))
        total["ort"] += time.perf_counter() - t
        total_cpu["ort"] += time.process_time() - c
        quiesce()  # its pool's spinning would run into the next simulate run (benchmarks.simulate_speed.quiesce)
    r = args.repeat
    print(f"{args.model} batch {args.batch}, {args.threads} thread(s), {r} interleaved runs (mean ms): "
          + ", ".join(f"simulate[{label}] {total[label] / r * 1e3:.2f} ({total[label] / total['ort']:.2f}x)"
                      for label in executors) + f", onnxruntime float32 {total['ort'] / r * 1e3:.2f}")
    ex, best = executors["now"], {k: min(v) for k, v in spent["now"].items()}
    if args.cores:
        _cores_table(ex, spent["now"], cpu, {"simulate": (total["now"] / r, total_cpu["now"] / r),
                                             "onnxruntime float32": (total["ort"] / r, total_cpu["ort"] / r)})
    steps_total = sum(best.values())
    by_kind: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for k, s in best.items():
        kind = _route(ex.steps[k])
        by_kind[kind][0] += s
        by_kind[kind][1] += 1
    print(f"best-of-{r} per step, summed by kind (now; all steps {steps_total * 1e3:.2f} ms):")
    print(f"  {'kind':<28} {'ms':>8} {'share':>6} {'steps':>6}")
    for kind, (s, c) in sorted(by_kind.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {kind:<28} {s * 1e3:>8.3f} {s / steps_total:>6.1%} {c:>6}")
    if args.kind:
        other = {k: min(v) for k, v in spent["without"].items()} if "without" in spent else None
        print(f"steps of kind {args.kind!r}, best ms" + (f" (now / without {args.without})" if other else "") + ":")
        for k, st in enumerate(ex.steps):
            if _route(st).startswith(args.kind):
                kern = st.node.meta["kernel"]
                shape = tuple(ex.program.shape(st.inputs[0]))
                extra = f"  {other[k] * 1e3:>7.3f}  {best[k] / other[k]:.2f}x" if other else ""
                geometry = f"s{kern.strides[0]}" if hasattr(kern, "strides") else f"w{tuple(np.shape(getattr(kern, 'weight', ())))}"
                print(f"  {st.node.name[-32:]:<32} {_route(st):<26} in {str(shape):<20} {geometry}  "
                      f"{best[k] * 1e3:>7.3f}{extra}")
        chosen = [k for k, st in enumerate(ex.steps) if _route(st).startswith(args.kind)]
        print(f"  sum {sum(best[k] for k in chosen) * 1e3:.3f} ms"
              + (f" / {sum(other[k] for k in chosen) * 1e3:.3f} ms" if other else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
