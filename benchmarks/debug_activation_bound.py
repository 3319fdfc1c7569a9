"""Issue 34: can any activation remedy on <= 15 % of the nodes reach the cosine target? Measured on the masked model.

On a model calibrated all-int8 (``auto_int16: false``), with the metric cosine on the debug samples:

* the gains pass (each node's activations quantized alone, everything else float: ``activation_losses`` on the
  sensitivity samples) run serially and on ``--workers`` processes in chunks: wall seconds of each, and whether the
  values are bit for bit the same;
* the worst output cosine of the masked model with the activations of the top-k nodes by that gain left float
  (everything else quantized), for k up to every node: the upper bound of any activation remedy (int16, another
  threshold) on those k nodes, *if* float activations dominate every remedy (they need not: a coarser step can
  cancel another node's error), and the same with the nodes' weights float too (CPU placement);
* the calibration methods (max / percentile / kl / mse) one by one for the whole model, and per node the method whose
  threshold costs the node's activations least alone, for the top-k nodes at once (the other nodes keep the chosen
  calibration): what a per-node threshold knob could give;
* int16 outputs on the top-k by gain, compiled and priced for real (cosine and FPS against the all-int8 program).

    python -m benchmarks.debug_activation_bound --config benchmarks/_out/debug_auto/ppocrv5_rec/config.yaml --workers 2
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path


def _worst(model, samples, float_out, outputs, mask) -> float:
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.sensitivity import evaluate

    return evaluate(model, samples, mask, outputs, float_out, resolve_metric("cosine", None))[1]


def main() -> None:
    from hbtool.config import load_config
    from hbtool.debug.auto import INT16_OUT, with_group
    from hbtool.debug.masked import MaskedModel
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.sensitivity import ActivationGains
    from hbtool.debug.session import open_session
    from hbtool.debug.trials import Trial, TrialRunner, evaluate
    from hbtool.quant.calibrate import CANDIDATES
    from hbtool.quant.calibrated_model import CALIBRATION_OP

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--gain-samples", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--top", type=int, nargs="+", default=[10, 20, 33, 50, 80, 117, 144])
    ap.add_argument("--method-top", type=int, nargs="+", default=[33, 80])
    ap.add_argument("--int16-top", type=int, nargs="+", default=[33])
    args = ap.parse_args()
    out: dict = {"load_average_start": os.getloadavg()}
    t0 = time.perf_counter()
    session = open_session(load_config(args.config), resolve_metric("cosine", None), args.samples)
    out["session_s"] = time.perf_counter() - t0
    model = session.switchable()
    names = [n.name for n in model.nodes]
    acts = {n.name: n.acts for n in model.nodes}
    weights = {n.name: n.weights for n in model.nodes}
    gains = ActivationGains(session, args.gain_samples)
    t = time.perf_counter()
    serial = gains(names)
    out["gains_serial_s"] = time.perf_counter() - t
    t = time.perf_counter()
    with TrialRunner(session, workers=args.workers) as runner:
        started = time.perf_counter()
        parts = list(runner.jobs(gains.jobs(names)))
    out[f"gains_workers{args.workers}_s"] = time.perf_counter() - t
    out[f"gains_workers{args.workers}_after_start_s"] = time.perf_counter() - started
    parallel = {n: v for p in parts for n, v in p.items()}
    out["gains_identical"] = parallel == serial
    order = sorted(names, key=lambda n: -serial.get(n, 0.0))
    out["top_gains"] = [(n, round(serial.get(n, 0.0), 5)) for n in order[:12]]
    f = session.float_outputs
    outputs = session.output_names
    samples = session.samples
    full = _worst(model, samples, f, outputs, model.mask(off=[]))
    out["quantized_cosine"] = full
    out["float_acts_top"] = {}
    out["float_nodes_top"] = {}
    for k in args.top + [len(order)]:
        idx = [i for n in order[:k] for i in acts[n]]
        out["float_acts_top"][k] = _worst(model, samples, f, outputs, model.mask(off=idx))
        idx_w = idx + [i for n in order[:k] for i in weights[n]]
        out["float_nodes_top"][k] = _worst(model, samples, f, outputs, model.mask(off=idx_w))
        print(k, out["float_acts_top"][k], out["float_nodes_top"][k], flush=True)
    out["after_bounds_s"] = time.perf_counter() - t0
    # the calibration methods, whole model and per node
    base_method = getattr(session.base, "method", None)
    out["base_method"] = base_method
    by_method = {}
    for m in CANDIDATES:
        res = session.calibrate({}, method=m)
        mm = MaskedModel(res.calibrated, session.base.graph)
        by_method[m] = (res, mm)
        out.setdefault("method_cosine", {})[m] = _worst(mm, samples, f, outputs, mm.mask(off=[]))
        print(m, out["method_cosine"][m], flush=True)
    sub = samples[: args.gain_samples]
    total = len(samples)
    sub_f = {o: v[: args.gain_samples * (v.shape[0] // total)] for o, v in f.items()}
    base_cal = session.base.calibrated
    for k in args.method_top:
        choice = {}
        for n in order[:k]:
            losses = {}
            for m, (_, mm) in by_method.items():
                node = next((d for d in mm.nodes if d.name == n), None)
                if node is None or not node.acts:
                    continue
                ideal = _worst(mm, sub, sub_f, outputs, mm.mask(on=[]))
                losses[m] = ideal - _worst(mm, sub, sub_f, outputs, mm.mask(on=node.acts))
            if losses:
                choice[n] = min(losses, key=lambda m: (losses[m], m))
        mixed = base_cal.copy()
        position = {nd.outputs[0]: i for i, nd in enumerate(mixed.nodes) if nd.op_type == CALIBRATION_OP}
        swapped = 0
        for n, m in choice.items():
            mm = by_method[m][1]
            cal_of = {nd.outputs[0]: nd for nd in by_method[m][0].calibrated.nodes if nd.op_type == CALIBRATION_OP}
            for q in mm.quantizers:
                if q.kind == "act" and q.owner == n and q.quant_name in position and q.quant_name in cal_of:
                    mixed.nodes[position[q.quant_name]] = copy.deepcopy(cal_of[q.quant_name])
                    swapped += 1
        mx = MaskedModel(mixed, session.base.graph)
        out.setdefault("best_method_top", {})[k] = {"cosine": _worst(mx, samples, f, outputs, mx.mask(off=[])), "swapped": swapped,
                                                     "methods": {m: sum(1 for c in choice.values() if c == m) for m in CANDIDATES}}
        print("best method top", k, out["best_method_top"][k], flush=True)
    out["after_methods_s"] = time.perf_counter() - t0
    base = evaluate(session, Trial({}, priced=True))
    out["int8_fps"] = base.fps
    for k in args.int16_top:
        m = evaluate(session, Trial(with_group({}, order[:k], INT16_OUT[1]), priced=True))
        out.setdefault("int16_top", {})[k] = {"cosine": m.cosine, "fps": m.fps, "fps_change": m.fps / base.fps - 1.0}
        print("int16 top", k, out["int16_top"][k], flush=True)
    out["total_s"] = time.perf_counter() - t0
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
