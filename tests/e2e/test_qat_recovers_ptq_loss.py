"""Issue 13's first bar on a bundled trained sample: PTQ loses >= 1 point top-1, QAT recovers >= half of it,
and the exported model, compiled and simulated, scores within 0.2 points of the QAT module.

The sample: samples/tiny/tiny_cnn.onnx (digits, float top-1 99.07% on the 539 held-out images),
int8 everywhere (auto_int16 false) with calibration_type kl, whose clipped thresholds cost ~28
points. QAT: label-free distillation on the 64 bundled calibration images (crop + colour
augmentation), LSQ scales, Adam 1e-3, 40 steps of 32. Minutes on 2 CPU cores: marked ``slow`` (``pytest -m slow``, scripts/nightly.sh).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow  # minutes of training

ROOT = Path(__file__).resolve().parents[2]


def test_qat_recovers_int8_kl_loss_of_the_tiny_cnn(tmp_path):
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import calibrated_path, compile_model
    from hbtool.config import load_config
    from hbtool.qat.module import FloatGraphModule
    from hbtool.qat.train import build_model, run_qat
    from hbtool.quant.calibrate import run_calibration
    from hbtool.simulator.executor import Executor

    cfg = load_config(ROOT / "configs" / "tiny_cnn.yaml", overrides={
        "model_parameters": {"working_dir": str(tmp_path / "wd")},
        "calibration_parameters": {"calibration_type": "kl", "auto_int16": False},
        "qat_parameters": {"steps": 40, "lr": 1e-3, "optimizer": "adam", "batch_size": 32, "train_scales": True,
                           "augment": ["crop", "color"]}})
    held = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")
    images, labels = held["images"].astype(np.float32), held["labels"]

    def top1(module) -> float:
        with torch.no_grad():
            pred = np.concatenate([module(torch.from_numpy(images[i:i + 128]))[0].argmax(1).numpy() for i in range(0, len(images), 128)])
        return float(np.mean(pred == labels))

    calibration = run_calibration(cfg)
    float_top1 = top1(FloatGraphModule(calibration.graph))
    ptq_top1 = top1(build_model(cfg, calibration))
    assert ptq_top1 <= float_top1 - 0.01, (ptq_top1, float_top1)
    result = run_qat(cfg, calibration=calibration)
    qat_top1 = top1(result.model)
    assert qat_top1 - ptq_top1 >= 0.5 * (float_top1 - ptq_top1), (ptq_top1, qat_top1, float_top1)

    shutil.copy(result.path, calibrated_path(cfg))
    ex = Executor(from_bytes(compile_model(cfg).data))
    out = ex.output_names[0]
    sim = np.array([int(ex.run({"input": images[i:i + 1]})[out].argmax()) for i in range(len(images))])
    sim_top1 = float(np.mean(sim == labels))
    print(f"tiny_cnn int8 kl: float {float_top1:.4f} ptq {ptq_top1:.4f} qat {qat_top1:.4f} simulated {sim_top1:.4f} "
          f"({result.seconds:.0f} s)")
    assert abs(sim_top1 - qat_top1) <= 0.002
