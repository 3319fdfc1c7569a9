"""Simulate an artifact and run onnxruntime on the float and quantized models, same inputs, one run.

Shared by ``simulate_vs_ort.py`` and ``third_party_simulate.py``: times the emulator and
onnxruntime float32 per sample (after one warm-up each), and compares the simulated outputs with
the quantized model's (share within 1 LSB, largest difference in LSB) and with the float model's
(cosine, mean over outputs; also the quantized model's cosine to float).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def compare_with_ort(executor, header: dict, wd: Path, prefix: str, feeds: list[dict], threads: int) -> dict:
    import onnxruntime as ort

    from hbtool.io.metrics import RunningCosine

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    float_sess = ort.InferenceSession(str(wd / f"{prefix}_original_float_model.onnx"), opts, providers=["CPUExecutionProvider"])
    quant_sess = ort.InferenceSession(str(wd / f"{prefix}_quantized_model.onnx"), opts, providers=["CPUExecutionProvider"])
    outs = executor.output_names
    scales = {o["name"]: (o.get("dequantize") or {}).get("scale") for o in header["outputs"]}
    # warm-up (first-call allocations, thread start, numba compilation)
    executor.run(feeds[0])
    float_sess.run(outs, feeds[0])
    t = time.perf_counter()
    sims = [executor.run(f) for f in feeds]
    t_sim = (time.perf_counter() - t) / len(feeds)
    t = time.perf_counter()
    floats = [float_sess.run(outs, f) for f in feeds]
    t_float = (time.perf_counter() - t) / len(feeds)
    quants = [quant_sess.run(outs, f) for f in feeds]
    within = total = 0
    max_lsb = 0.0
    cos_sim, cos_q = {o: RunningCosine() for o in outs}, {o: RunningCosine() for o in outs}
    for s, fl, q in zip(sims, floats, quants):
        for k, o in enumerate(outs):
            d = np.abs(np.asarray(s[o], np.float64) - np.asarray(q[k], np.float64)) / (scales[o] or 1.0)
            within += int(np.count_nonzero(d <= 1 + 1e-6))
            total += d.size
            max_lsb = max(max_lsb, float(d.max()))
            cos_sim[o].update(fl[k], s[o])
            cos_q[o].update(fl[k], q[k])
    return {
        "simulate_ms": round(1000 * t_sim, 1), "ort_float_ms": round(1000 * t_float, 1), "ratio": round(t_sim / t_float, 2),
        "within_1lsb": within / max(total, 1), "max_lsb": max_lsb,
        "cos_float_vs_sim": float(np.mean([c.value for c in cos_sim.values()])),
        "cos_float_vs_quant": float(np.mean([c.value for c in cos_q.values()])), "samples": len(feeds), "threads": threads,
    }
