"""QAT losses for classifiers and CTC recognisers (``loss: kl``), the learning-rate schedule, the
teacher cache and the pruned forward the KL loss uses: each against an independent reference."""

from __future__ import annotations

import math
import shutil

import numpy as np
import torch

from hbtool.compiler.compile import calibrated_path
from hbtool.qat.module import FloatGraphModule
from hbtool.qat.train import KlDistillLoss, TeacherCache, build_model, logit_tensors, lr_factor, run_qat
from hbtool.quant.calibrate import run_calibration
from tests.unit.qat.test_train_export_and_compile import _config, _simulate, cnn_model


def test_kl_loss_is_the_per_position_kl_divergence():
    rng = np.random.default_rng(0)
    s = torch.from_numpy(rng.standard_normal((3, 4, 7)).astype(np.float32))
    f = torch.from_numpy(rng.standard_normal((3, 4, 7)).astype(np.float32))
    t = 2.0
    ref = torch.nn.functional.kl_div(torch.log_softmax(s / t, -1), torch.log_softmax(f / t, -1), log_target=True,
                                     reduction="none").sum(-1).mean() * t * t
    got = KlDistillLoss(t, 1)([s], [f], 3)
    assert abs(float(got) - float(ref)) < 1e-6 and float(ref) > 0.1
    # a shard's loss is its share of the global batch's
    parts = KlDistillLoss(t, 1)([s[:1]], [f[:1]], 3) + KlDistillLoss(t, 1)([s[1:]], [f[1:]], 3)
    assert abs(float(parts) - float(got)) < 1e-6


def test_lr_schedule_warms_up_then_decays_to_zero():
    total = 40
    f = [lr_factor("cosine", k, total) for k in range(total)]
    assert f[0] == 0.5 and f[1] == 1.0  # 5% of 40 = 2 warm-up steps
    assert all(a >= b for a, b in zip(f[1:], f[2:]))
    assert abs(f[21] - 0.5 * (1 + math.cos(math.pi * 19 / 38))) < 1e-12 and f[-1] < 0.01
    assert {lr_factor("constant", k, total) for k in range(total)} == {1.0}


def test_kl_training_on_the_softmax_logits_exports_the_module(tmp_path):
    """``loss: kl`` trains on the logits under the final Softmax; the export compiles to the module exactly."""
    cfg, _ = _config(tmp_path, cnn_model(), (1, 3, 12, 12),
                     qat={"loss": "kl", "temperature": 2.0, "lr_schedule": "cosine", "steps": 6})
    calibration = run_calibration(cfg)
    assert logit_tensors(calibration.graph) == ["logits"]
    before = {k: v.detach().clone() for k, v in build_model(cfg, calibration).named_weights().items()}
    result = run_qat(cfg, calibration=calibration)
    model = result.model
    moved = max(float((model.named_weights()[k].detach() - w).abs().max()) for k, w in before.items())
    assert moved > 1e-4
    assert len(result.losses) == 6 and all(np.isfinite(result.losses))
    rng = np.random.default_rng(7)
    feeds = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(4)]
    x = torch.from_numpy(np.concatenate(feeds))
    with torch.no_grad():
        ours = model(x)[0].numpy()
        full = model(x, tensors=["logits"])[1]
        pruned = model(x, tensors=["logits"], outputs=False)
    assert len(pruned) == 1 and torch.equal(pruned[0], full)  # the pruned forward: the same logits, no outputs
    shutil.copy(result.path, calibrated_path(cfg))
    assert np.abs(_simulate(cfg, feeds) - ours).max() == 0.0


def test_teacher_cache_returns_the_teacher_and_runs_it_once_per_sample(tmp_path):
    cfg, _ = _config(tmp_path, cnn_model(), (1, 3, 12, 12))
    calibration = run_calibration(cfg)
    teacher = FloatGraphModule(calibration.graph)
    calls = []
    real_forward = teacher.forward

    def counting(*xs, **kw):
        calls.append(xs[0].shape[0])
        return real_forward(*xs, **kw)

    teacher.forward = counting
    cache = TeacherCache(teacher)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((4, 3, 12, 12)).astype(np.float32))
    first = cache([x[:2]], [5, 9], ["logits"])
    second = cache([x[[2, 0]]], [7, 5], ["logits"])
    with torch.no_grad():
        ref = real_forward(x, tensors=["logits"])
    assert calls == [2, 1]  # sample 5 came from the cache
    # the same values up to float rounding of a different batch size in the teacher's convolutions
    assert torch.allclose(first[0], ref[0][:2], atol=1e-6) and torch.allclose(second[1], ref[1][[2, 0]], atol=1e-6)
    assert torch.equal(second[1][1], first[1][0])  # sample 5: the stored tensor itself
