"""A YOLOv8-style output (pixel boxes concatenated with sigmoid scores) on every march: F1 against float and FPS.

The detector is tests/yolo_like.py's (the Ultralytics Detect head's structure with hand-set
weights; no trained weights ship in any wheel we may use). For each march it is calibrated with
the default settings on ``--cal`` rendered images, compiled, and its quantized model (what
``hbtool simulate`` computes bit for bit) run on ``--eval`` other images; detections (best class
> 0.25, class-aware NMS 0.45) are matched to the float model's (same class, IoU >= 0.5) and F1
printed, with the worst output channel's SNR and ``hbtool perf``'s estimated FPS beside the FPS
of the same model with every tensor int8 (``auto_int16: false``: what a plain int8 build costs;
an output's per-segment scales cost nothing on the BPU, so they are int8 too).

    PYTHONPATH=. .venv/bin/python benchmarks/yolo_scores.py [--marches bayes bayes-e bernoulli2] [--cal 16] [--eval 24]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from tests.yolo_like import build, export_onnx, f1_against_float, float_outputs, fps, quantized_outputs, render_images, write_calibration  # noqa: E501


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--marches", nargs="+", default=["bayes", "bayes-e", "bernoulli2"])
    ap.add_argument("--cal", type=int, default=16)
    ap.add_argument("--eval", type=int, default=24)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yolo_scores_"))
    try:
        model = export_onnx(tmp / "yolo_like.onnx")
        cal = write_calibration(tmp / "cal", args.cal, seed=1)
        images, _ = render_images(args.eval, seed=2)
        ref = float_outputs(model, images)
        print("| march | F1 vs float | worst channel SNR (dB) | output bits | FPS | all-int8 FPS | FPS ratio |")
        print("|---|---|---|---|---|---|---|")
        for march in args.marches:
            _, result, compiled = build(march, model, cal, tmp / march)
            f1 = f1_against_float(ref, quantized_outputs(result, images))
            judged = result.options.get("output_channels", {}).get("output0", {})
            worst = judged.get("worst_snr_db", float("nan"))
            _, _, plain = build(march, model, cal, tmp / f"{march}_int8", {"auto_int16": False})
            f_now, f_int8 = fps(compiled), fps(plain)
            bits = result.plan.tensors["output0"].dtype if "output0" in result.plan.tensors else "float"
            print(f"| {march} | {f1:.3f} | {worst:.1f} | {bits} | {f_now:.1f} | {f_int8:.1f} | {f_now / f_int8:.3f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
    main()
