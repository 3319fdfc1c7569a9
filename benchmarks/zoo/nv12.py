"""Corpus image models deployed with ``input_type_rt: nv12`` vs their training colour type.

    python -m benchmarks.zoo.nv12 [--models NAME ...] [--eval-samples 32]

For each model: the runner's config (``run.py``), calibrated and compiled twice in
``benchmarks/_out/zoo_nv12/<model>/`` (as trained, and with ``input_type_rt: nv12``), then both
quantized ONNX models on held-out rendered samples (``data.py``); the nv12 one gets each sample
converted as the camera would (:func:`hbtool.io.runtime_input.to_runtime`). Prints the top-1
agreement with the float model and the output cosine for both, and checks the nv12 artifact's
simulator against its quantized ONNX bit for bit on the first samples.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.zoo.corpus import OUT_DIR, select

DEFAULT = ["ppocrv5_textline_cls", "pplcnet_orientation"]


def run_model(spec, eval_samples: int, cal_samples: int = 8) -> dict:
    import onnxruntime as ort

    from benchmarks.zoo.data import float_samples, samples
    from benchmarks.zoo.metrics import cosine, top1
    from benchmarks.configs import corpus_config as _config
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.io.runtime_input import to_runtime
    from hbtool.simulator.executor import Executor

    case = OUT_DIR.parent / "zoo_nv12" / spec.name
    (case / "cal").mkdir(parents=True, exist_ok=True)
    for k, s in enumerate(samples(spec, cal_samples, 0)):
        np.save(case / "cal" / f"cal_{k:02d}.npy", s[spec.input_name])
    held = samples(spec, eval_samples, 100)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    f_sess = ort.InferenceSession(str(spec.onnx_path), so, providers=["CPUExecutionProvider"])
    ref = [f_sess.run(None, f)[0] for f in float_samples(spec, held)]
    row = {}
    for rt in (spec.color, "nv12"):
        d = _config(spec, case / rt, [case / "cal"], "default", cal_samples)
        d["input_parameters"]["input_type_rt"] = rt
        cfg = config_from_dict(d, base_dir=case)
        write_outputs(cfg, run_calibration(cfg), "")
        compiled = compile_model(cfg)
        sess = ort.InferenceSession(str(case / rt / "model_output" / f"{spec.name}_quantized_model.onnx"), so,
                                    providers=["CPUExecutionProvider"])
        feeds = [{spec.input_name: to_runtime(f[spec.input_name], cfg.inputs[0]) if rt == "nv12" else f[spec.input_name]}
                 for f in held]
        got = [sess.run(None, f)[0] for f in feeds]
        exact = None
        if rt == "nv12":
            ex = Executor(from_bytes(compiled.data))
            exact = sum(int(np.array_equal(ex.run(f)[ex.output_names[0]], g)) for f, g in zip(feeds[:4], got[:4]))
        row[rt] = {"top1": top1(got, ref), "cosine": float(np.mean([cosine(g, r) for g, r in zip(got, ref)])), "exact": exact,
                   "shape": compiled.header["inputs"][0]["shape"], "dtype": compiled.header["inputs"][0]["dtype"]}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=DEFAULT)
    ap.add_argument("--eval-samples", type=int, default=32)
    args = ap.parse_args()
    for spec in select(args.models):
        row = run_model(spec, args.eval_samples)
        for rt, r in row.items():
            extra = f", simulate == quantized ONNX {r['exact']}/4" if r["exact"] is not None else ""
            print(f"{spec.name} {rt:<5} input {r['shape']} {r['dtype']}: top-1 vs float {100 * r['top1']:.1f}%, "
                  f"cosine {r['cosine']:.5f}{extra}")


if __name__ == "__main__":
    main()
