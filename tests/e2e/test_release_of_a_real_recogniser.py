"""Issue 31's Done-when sequence on a real recogniser: PP-OCRv6-tiny (a trained PaddleOCR text recogniser
from a PyPI wheel, benchmarks/_models/zoo/pkg; see tests/test_conformance_trained.py).

Calibrated on 8 rendered text lines, gated on 8 others (the zoo's held-out offset), with its task metric
(CTC character accuracy against the float model's transcription) as ``debug_parameters.metric``. A release
with reachable gates exits 0 with one JUnit testcase per gate and none failed; the manifest's
``artifact_sha256`` is the artifact's; a second release (another process and hash seed) is the same
bytes; ``verify`` passes and exits 4 after one flipped byte; ``min_fps: 1e6`` is exit 4 naming min_fps.

The output is (1, 40, 6625) probabilities, judged per step of axis 1 (``output_channel_axis``: the time
steps here): the worst step has cosine 0.836 where the whole output has 0.990 (measured), so
``min_output_cosine`` is 0.8. Slow (two builds of the recogniser, ~2 min on 2 shared cores);
``python -m pytest -m slow tests/e2e/test_release_of_a_real_recogniser.py -s`` prints the measured numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "benchmarks" / "zoo"
MODEL = ROOT / "benchmarks" / "_models" / "zoo" / "pkg" / "ppocrv6_tiny_rec.onnx"
NAME = "ppocrv6_tiny_rec"

pytestmark = pytest.mark.slow

METRIC_HOOK = '''
"""CTC character accuracy of the artifact's transcription against the float model's (higher is better)."""
from benchmarks.zoo import metrics

CHARSET = {charset!r}


def char_accuracy(quantized, float_):
    name = next(iter(float_))
    return metrics.char_accuracy(list(quantized[name]), list(float_[name]), CHARSET)[0]
'''


def _hbtool(*args: str, cwd: Path, seed: str = "0") -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hbtool.cli", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)
    return proc, time.perf_counter() - t0


def _case(tmp: Path) -> Path:
    from benchmarks.zoo import data
    from benchmarks.zoo.corpus import BY_NAME
    from benchmarks.zoo.run import HELD_OUT_OFFSET, _charset
    spec = BY_NAME[NAME]
    for folder, offset in (("cal", 0), ("held", HELD_OUT_OFFSET)):
        (tmp / folder).mkdir()
        for k, s in enumerate(data.samples(spec, 8, offset)):
            np.save(tmp / folder / f"{k:02d}.npy", s[spec.input_name])
    (tmp / "ctc_metric.py").write_text(METRIC_HOOK.format(charset=_charset(spec)))
    cfg = {
        "model_parameters": {"onnx_model": str(MODEL), "march": "bayes", "working_dir": "wd", "output_model_file_prefix": NAME},
        "input_parameters": {"input_name": spec.input_name, "input_shape": "x".join(map(str, spec.shape)),
                             "input_type_train": spec.color, "input_type_rt": spec.color, "input_layout_train": "NCHW",
                             "norm_type": "data_mean_and_scale", "mean_value": " ".join(f"{m:.6g}" for m in spec.mean),
                             "scale_value": " ".join(f"{s:.8g}" for s in spec.scale)},
        "calibration_parameters": {"cal_data_dir": "cal", "cal_data_type": "float32", "preprocess_on": False},
        "debug_parameters": {"metric": "ctc_metric:char_accuracy"},
        "gate_parameters": {"data_dir": "held", "min_output_cosine": 0.8, "min_metric": 0.95, "max_metric_drop": 0.05,
                            "min_fps": 50, "max_latency_ms": 20, "max_cpu_nodes": 0, "max_artifact_mb": 10,
                            "bit_exact_samples": 4},
    }
    path = tmp / "rec.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_release_sequence_on_the_ppocr_recogniser(tmp_path):
    if not MODEL.exists():
        message = f"{MODEL} missing; run: python benchmarks/zoo/export.py --models {NAME}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    cfg = _case(tmp_path)
    one, t_one = _hbtool("release", "-c", cfg, "-o", "rel1", "--junit", "junit.xml", cwd=tmp_path, seed="1")
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    gates = [k for k in yaml.safe_load(cfg.read_text())["gate_parameters"] if k != "data_dir"]
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert [c.get("name") for c in root.findall(".//testcase")] == gates and root.findall(".//failure") == []
    manifest = json.loads((tmp_path / "rel1" / "manifest.json").read_text())
    assert manifest["artifact_sha256"] == hashlib.sha256((tmp_path / "rel1" / f"{NAME}.bin").read_bytes()).hexdigest()

    two, t_two = _hbtool("release", "-c", cfg, "-o", "rel2", cwd=tmp_path, seed="2")
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = _tree(tmp_path / "rel1"), _tree(tmp_path / "rel2")
    assert set(a) == set(b) and [n for n in a if a[n] != b[n]] == []

    ok, t_verify = _hbtool("verify", "rel1", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    shutil.copytree(tmp_path / "rel1", tmp_path / "flipped")
    art = tmp_path / "flipped" / f"{NAME}.bin"
    data = bytearray(art.read_bytes())
    data[len(data) // 3] ^= 0x01
    art.write_bytes(bytes(data))
    bad, _ = _hbtool("verify", "flipped", cwd=tmp_path)
    assert bad.returncode == 4 and "verify: artifact" in bad.stderr

    fast = yaml.safe_load(cfg.read_text())
    fast["gate_parameters"] = {"min_fps": 1000000.0}
    (tmp_path / "fast.yaml").write_text(yaml.safe_dump(fast))
    slow, _ = _hbtool("gate", "-c", "fast.yaml", cwd=tmp_path)
    assert slow.returncode == 4 and slow.stderr.startswith("hbtool: gate failed: min_fps: ")

    results = {g["key"]: g["measured"] for g in manifest["gates"]["results"]}
    print(f"\n{NAME}: release {t_one:.1f} s, again {t_two:.1f} s (byte-identical, {len(a)} files), verify {t_verify:.1f} s; "
          f"artifact {manifest['artifact']['bytes']:,} bytes sha256 {manifest['artifact_sha256'][:16]}; gates {results}; "
          f"metric {manifest['accuracy']['metric']}; perf {manifest['perf']}; min_fps 1e6: {slow.stderr.strip()}")
