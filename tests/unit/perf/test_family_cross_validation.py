"""Leave-one-family-out cross-validation (benchmarks/published/cv.py): a held-out family is estimated by scales
fitted without it, and a systematic error the other families show is corrected on it."""

from __future__ import annotations

import pytest

from benchmarks.published.cv import cv_summary, fit_scales, leave_one_family_out, parameter_group, rescaled


def row(variant, family, tensor_ms, cpu_ms, pub_ms, march="bayes-e", runtime_ms=0.5, threads=4):
    """A result row as perf_published.estimate_row writes it: BPU-bound FPS with one core, ``threads`` in flight."""
    lat = tensor_ms + cpu_ms + runtime_ms
    bpu = tensor_ms + 0.2
    limits = {"bpu cores": 1e3 / bpu, "cpu": 4e3 / max(cpu_ms, 1e-6), f"{threads} threads x latency": threads * 1e3 / lat}
    fps = min(limits.values())
    pub_fps = 1e3 / (pub_ms - cpu_ms - runtime_ms + 0.2)
    return {"variant": variant, "family": family, "march": march, "split": "fit",
            "classes_ms": {"tensor / conv/linear": tensor_ms, "cpu": cpu_ms, "runtime per frame": runtime_ms},
            "latency_ms": lat, "fps": fps, "limits": limits, "bpu_runtime_ms": 0.2,
            "pub_latency_ms": pub_ms, "pub_fps": pub_fps, "latency_err": lat / pub_ms - 1, "fps_err": fps / pub_fps - 1}


def test_op_classes_map_to_the_parameter_that_scales_them():
    assert parameter_group("tensor / conv/linear") == "tensor"
    assert parameter_group("tensor / matmul int16") == "tensor int16"
    assert parameter_group("vector / softmax int16") == "vector"
    assert parameter_group("data movement / strided in SRAM") == "data movement"
    assert parameter_group("cpu") == "cpu"
    assert parameter_group("runtime per frame") == "runtime"


def test_a_tensor_rate_off_by_half_in_every_family_is_refit_and_corrects_the_held_out_family():
    # the board takes twice hbtool's tensor time in every family
    rows = [row(f"m{i}", fam, t, 0.3, 2 * t + 0.3 + 0.5) for i, (fam, t) in enumerate(
        [("a", 1.0), ("a", 2.0), ("b", 3.0), ("b", 1.5), ("c", 4.0), ("c", 0.8)])]
    assert all(r["latency_err"] < -0.3 for r in rows)
    cv = leave_one_family_out(rows, ridge=1e-4)
    assert len(cv) == len(rows)
    for c in cv:
        assert c["scales"]["tensor"] == pytest.approx(2.0, rel=0.02)
        assert abs(c["cv_latency_err"]) < 0.02 and abs(c["cv_fps_err"]) < 0.02
    summary = cv_summary(cv)
    assert [s[:4] for s in summary] == [["bayes-e", "latency", 6, 3], ["bayes-e", "fps", 6, 3]]


def test_a_held_out_family_never_sees_its_own_board_numbers():
    rows = [row("a1", "a", 1.0, 0.3, 1.8), row("b1", "b", 2.0, 0.3, 2.8), row("b2", "b", 3.0, 0.3, 3.8)]

    def cv_latency(rs):
        return {c["variant"]: (c["cv_latency_err"] + 1) * r["pub_latency_ms"]
                for c in leave_one_family_out(rs) for r in rs if r["variant"] == c["variant"]}

    before = cv_latency(rows)
    # family a's board number changes: its own estimate does not, the other family's does
    changed = [dict(rows[0], pub_latency_ms=5.0, latency_err=rows[0]["latency_ms"] / 5.0 - 1)] + rows[1:]
    after = cv_latency(changed)
    assert after["a1"] == pytest.approx(before["a1"])
    assert after["b1"] != pytest.approx(before["b1"])


def test_folds_are_per_march_and_ddr_bound_fps_does_not_move():
    x5 = [row("a1", "a", 1.0, 0.3, 2.8), row("b1", "b", 2.0, 0.3, 4.8)]
    x3 = [row("a1", "a", 1.0, 0.3, 1.8, march="bernoulli2")]
    cv = leave_one_family_out(x5 + x3)
    a_x3 = next(c for c in cv if c["march"] == "bernoulli2")
    assert a_x3["train_rows"] == 0 and all(v == 1.0 for v in a_x3["scales"].values())
    ddr = dict(x5[0], limits={"ddr bandwidth": 100.0, "bpu cores": 900.0}, fps=100.0)
    assert rescaled(ddr, dict(fit_scales(x5), tensor=3.0))[1] == 100.0
    assert rescaled(ddr, dict(fit_scales(x5), tensor=20.0))[1] < 100.0   # now the BPU binds
