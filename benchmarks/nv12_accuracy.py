"""Top-1 of the tiny CNN sample deployed with rgb input vs nv12 input (the camera's format).

    python -m benchmarks.nv12_accuracy [--calibration-type default] [--simulate 100]

Calibrates and compiles ``configs/tiny_cnn.yaml`` twice into a temporary folder, once as given
(``input_type_rt: rgb``) and once with ``input_type_rt: nv12``, then runs each quantized ONNX on
the committed held-out digits (``samples/data/digits_heldout.npz``). The nv12 model gets every
image converted as the camera pipeline would (:func:`hbtool.io.runtime_input.to_runtime`:
BT.601 full range, 2x2 chroma means). The first ``--simulate`` images also run in the
artifact's simulator, which must give the quantized ONNX's outputs bit for bit.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import yaml

from benchmarks.paths import ROOT


def top1_pair(calibration_type: str = "default", simulate: int = 0, work: Path | None = None) -> dict[str, dict[str, float]]:
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.io.runtime_input import to_runtime
    from hbtool.simulator.executor import Executor

    raw = yaml.safe_load((ROOT / "configs" / "tiny_cnn.yaml").read_text())
    data = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")
    images, labels = data["images"], data["labels"]
    work = Path(work or tempfile.mkdtemp(prefix="nv12_accuracy_"))
    out: dict[str, dict[str, float]] = {}
    for rt in ("rgb", "nv12"):
        d = yaml.safe_load(yaml.safe_dump(raw))
        d["model_parameters"]["working_dir"] = str(work / rt)
        d["input_parameters"]["input_type_rt"] = rt
        d["calibration_parameters"]["calibration_type"] = calibration_type
        cfg = config_from_dict(d, base_dir=ROOT / "configs")
        write_outputs(cfg, run_calibration(cfg), "")
        compiled = compile_model(cfg)
        spec = cfg.inputs[0]
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(work / rt / "tiny_cnn_quantized_model.onnx"), so, providers=["CPUExecutionProvider"])
        ex = Executor(from_bytes(compiled.data)) if simulate else None
        hits, exact = 0, 0
        for k, (x, y) in enumerate(zip(images, labels)):
            x = x[None].astype(np.float32)
            feed = to_runtime(x, spec) if rt == "nv12" else x
            logits = sess.run(None, {"input": feed})[0]
            hits += int(np.argmax(logits) == y)
            if ex is not None and k < simulate:
                exact += int(np.array_equal(ex.run({"input": feed})[ex.output_names[0]], logits))
        out[rt] = {"top1": hits / len(labels), "simulated_exact": exact, "simulated": min(simulate, len(labels))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration-type", default="default")
    ap.add_argument("--simulate", type=int, default=100)
    args = ap.parse_args()
    res = top1_pair(args.calibration_type, args.simulate)
    for rt, r in res.items():
        print(f"tiny_cnn {rt:<5} top-1 {100 * r['top1']:.2f}%  simulate == quantized ONNX on {r['simulated_exact']}/{r['simulated']}")
    print(f"nv12 - rgb: {100 * (res['nv12']['top1'] - res['rgb']['top1']):+.2f} points")


if __name__ == "__main__":
    main()
