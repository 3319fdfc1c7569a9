"""Reproducibility: the same calibrate run gives byte-identical outputs.

Two ``hbtool calibrate`` processes (not one process twice: caches and the global random state
would hide nondeterminism) with different ``PYTHONHASHSEED`` (set and dict order of strings must
not leak into the result) calibrate the tiny Swin into two working dirs. Every model and
``quant_info.json`` must be byte-identical; the log too, apart from the run time it reports.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def _without_durations(log: bytes) -> bytes:
    return re.sub(rb"time: [0-9.]+s", b"time: <t>s", log)


def test_two_calibrate_runs_write_identical_bytes(tmp_path):
    cal = tmp_path / "cal"
    cal.mkdir()
    for p in sorted((ROOT / "samples" / "data" / "digits_cal").glob("*.png"))[:16]:
        shutil.copy(p, cal)
    procs = []
    for k in (1, 2):
        data = yaml.safe_load((ROOT / "configs" / "tiny_swin.yaml").read_text())
        data["model_parameters"]["onnx_model"] = str(ROOT / "samples" / "tiny" / "tiny_swin.onnx")
        data["model_parameters"]["working_dir"] = str(tmp_path / f"wd{k}")
        data["calibration_parameters"]["cal_data_dir"] = str(cal)
        data["calibration_parameters"]["calibration_type"] = "default"  # all four candidates, then the choice
        cfg = tmp_path / f"run{k}.yaml"
        cfg.write_text(yaml.safe_dump(data))
        env = {**os.environ, "PYTHONHASHSEED": str(k)}
        procs.append(subprocess.Popen([sys.executable, "-m", "hbtool.cli", "calibrate", "-c", str(cfg)], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out.decode(errors="replace")[-3000:]
    one = {p.name: p.read_bytes() for p in (tmp_path / "wd1").iterdir()}
    two = {p.name: p.read_bytes() for p in (tmp_path / "wd2").iterdir()}
    assert set(one) == set(two) and len(one) == 6
    assert sum(n.endswith(".onnx") for n in one) == 4 and "tiny_swin_quant_info.json" in one
    for name in one:
        if name == "hb_calibrate.log":
            assert _without_durations(one[name]) == _without_durations(two[name])
        else:
            assert one[name] == two[name], f"{name} differs between two identical runs"
