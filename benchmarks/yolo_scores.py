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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.yolo_like import export_onnx, f1_against_float, render_images  # noqa: E402


def build(march: str, model: Path, cal_dir: Path, work: Path, calibration: dict | None = None):
    """Calibrate (default settings unless ``calibration``) and compile; (result, compiled)."""
    from hbtool.compiler.compile import compile_model
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration, write_outputs

    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(model), "working_dir": str(work), "march": march, "output_model_file_prefix": "y"},
        "input_parameters": {"input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"cal_data_dir": str(cal_dir), **(calibration or {})},
    }, base_dir=work)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    return cfg, result, compile_model(cfg)


def quantized_outputs(result, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    from hbtool.ir.onnx_export import to_onnx

    sess = ort.InferenceSession(to_onnx(result.quantized, stage="quantized").SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"images": images[i:i + 1]})[0] for i in range(len(images))])


def float_outputs(model: Path, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"images": images[i:i + 1]})[0] for i in range(len(images))])


def fps(compiled) -> float:
    from hbtool.perf.schedule import estimate

    return float(estimate(compiled.header, None, program=compiled.program).fps)


def write_calibration(folder: Path, count: int, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    images, _ = render_images(count, seed)
    for i, img in enumerate(images):
        np.save(folder / f"{i:03d}.npy", img[None])
    return folder


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
