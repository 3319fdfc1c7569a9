"""``hbtool qat`` through the CLI: a run that makes the model worse says so on stderr, and still exits 0."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from hbtool.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_qat_that_lowers_the_cosine_warns(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["hbtool"])
    cfg = yaml.safe_load((ROOT / "configs" / "tiny_cnn.yaml").read_text())
    shutil.copy(ROOT / "samples" / "tiny" / "tiny_cnn.onnx", tmp_path / "m.onnx")
    cfg["model_parameters"].update(onnx_model=str(tmp_path / "m.onnx"), working_dir=str(tmp_path / "wd"))
    cfg["calibration_parameters"].update(cal_data_dir=str(ROOT / "samples" / "data" / "digits_cal"), num_samples=16)
    # a step far too large: SGD at lr 1.0 throws the weights off, so the cosine must fall
    cfg["qat_parameters"] = {"steps": 2, "batch_size": 8, "val_samples": 8, "optimizer": "sgd", "lr": 1.0}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    r = CliRunner().invoke(main, ["qat", "-c", str(tmp_path / "cfg.yaml")])
    assert r.exit_code == 0, r.output
    before, after = (float(v) for v in r.stdout.split("output cosine vs float ")[1].split(";")[0].split(" -> "))
    assert after < before
    assert "hbtool: warning: QAT lowered the validation output cosine" in r.stderr
    assert "fix: lower qat_parameters.lr" in r.stderr
    assert (tmp_path / "wd" / "tiny_cnn_qat_model.onnx").exists()
