"""A YOLOv8-style output (pixel boxes concatenated with sigmoid scores) on every march: F1 against float and FPS.

Two detectors (``--model``):

* ``yolo_like``: tests/yolo_like.py's (the Ultralytics Detect head's structure with hand-set
  weights), on its rendered coloured shapes;
* ``nudenet``: a trained Ultralytics YOLOv8n, NudeNet's ``320n.onnx`` (corpus model ``nudenet_yolov8n``:
  the ``nudenet==3.4.2`` wheel, 4 box channels and 18 class scores in one ``1 x 22 x 2100`` output), on
  the corpus's ``people`` images: random crops, flips and brightness/contrast changes of the two
  photographs of people in scikit-image's wheel (an astronaut: FACE_FEMALE; a cameraman: FACE_MALE),
  RGB ``x / 255`` as NudeNet feeds it (export it first: ``python -m benchmarks.zoo.export --models nudenet_yolov8n``).

For each march the model is calibrated with the default settings on ``--cal`` images, compiled, and
its quantized model (what ``hbtool simulate`` computes bit for bit) run on ``--eval`` other images;
detections (best class > 0.25, class-aware NMS 0.45) are matched to the float model's (same class,
IoU >= 0.5) and F1 printed, with the worst output channel's SNR and ``hbtool perf``'s estimated FPS
beside the FPS of the same model with every tensor int8 (``auto_int16: false``: what a plain int8
build costs; an output's per-segment scales cost nothing on the BPU, so they are int8 too), and the
all-int8 build's own F1.

    PYTHONPATH=. .venv/bin/python benchmarks/yolo_scores.py [--model yolo_like|nudenet] [--marches bayes bayes-e bernoulli2]
                                                           [--cal 16] [--eval 24]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.yolo_like import (build, detections, export_onnx, f1_against_float, float_outputs, fps,  # noqa: E402
                             quantized_outputs, render_images)


def _nudenet_images(count: int, offset: int) -> np.ndarray:
    from benchmarks.zoo.corpus import BY_NAME
    from benchmarks.zoo.data import samples

    spec = BY_NAME["nudenet_yolov8n"]
    return np.concatenate([s[spec.input_name] for s in samples(spec, count, offset)]).astype(np.float32) / 255.0


def _model_and_images(name: str, tmp: Path, n_cal: int, n_eval: int) -> tuple[Path, np.ndarray, np.ndarray, str | None]:
    """(ONNX file, calibration images, held-out images, input_shape to fix) of one detector; images NCHW in [0, 1]."""
    if name == "nudenet":
        from benchmarks.zoo.corpus import BY_NAME
        from benchmarks.zoo.run import HELD_OUT_OFFSET

        path = BY_NAME["nudenet_yolov8n"].onnx_path
        if not path.exists():
            raise SystemExit(f"{path} missing: run python -m benchmarks.zoo.export --models nudenet_yolov8n")
        return path, _nudenet_images(n_cal, 0), _nudenet_images(n_eval, HELD_OUT_OFFSET), "1x3x320x320"
    cal, _ = render_images(n_cal, seed=1)
    held, _ = render_images(n_eval, seed=2)
    return export_onnx(tmp / "yolo_like.onnx"), cal, held, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["yolo_like", "nudenet"], default="yolo_like")
    ap.add_argument("--marches", nargs="+", default=["bayes", "bayes-e", "bernoulli2"])
    ap.add_argument("--cal", type=int, default=16)
    ap.add_argument("--eval", type=int, default=24)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yolo_scores_"))
    try:
        model, cal_images, images, input_shape = _model_and_images(args.model, tmp, args.cal, args.eval)
        cal = tmp / "cal"
        cal.mkdir()
        for i, img in enumerate(cal_images):
            np.save(cal / f"{i:03d}.npy", img[None])
        ref = float_outputs(model, images)
        n_float = sum(len(detections(r)) for r in ref)
        print(f"{args.model}: {len(images)} held-out images, {n_float} float detections")
        print("| march | F1 vs float | worst channel SNR (dB) | output bits | FPS | all-int8 FPS | FPS ratio | all-int8 F1 |")
        print("|---|---|---|---|---|---|---|---|")
        for march in args.marches:
            _, result, compiled = build(march, model, cal, tmp / march, input_shape=input_shape)
            f1 = f1_against_float(ref, quantized_outputs(result, images))
            judged = result.options.get("output_channels", {}).get("output0", {})
            worst = judged.get("worst_snr_db", float("nan"))
            _, plain_result, plain = build(march, model, cal, tmp / f"{march}_int8", {"auto_int16": False}, input_shape=input_shape)
            f1_int8 = f1_against_float(ref, quantized_outputs(plain_result, images))
            f_now, f_int8 = fps(compiled), fps(plain)
            bits = result.plan.tensors["output0"].dtype if "output0" in result.plan.tensors else "float"
            print(f"| {march} | {f1:.3f} | {worst:.1f} | {bits} | {f_now:.1f} | {f_int8:.1f} | {f_now / f_int8:.3f} | {f1_int8:.3f} |",
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
