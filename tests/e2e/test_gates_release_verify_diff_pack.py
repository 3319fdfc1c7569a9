"""CI and release use (issue 31): gates and exit code 4, JUnit, release bundles, verify, diff, packed artifacts.

Small models, through the real CLI: the tiny digits CNN with reachable gates (configs/tiny_cnn_release.yaml),
and a YOLOv8-style head whose output concatenates 4 box channels in pixels (0-320) with 8 class-score
channels (sigmoid, 0-1): built all-int8 with max calibration, the scores round to zero while the whole
output's cosine stays above 0.9999, which only the per-channel judgement catches.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from click.testing import CliRunner
from onnx import helper

from hbtool.cli import main
from tests.helpers import make_model, tensor, vinfo

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def _workspace(tmp: Path) -> Path:
    """configs/ copied (so working_dir lands under tmp), samples/ linked: the repo's relative paths hold."""
    shutil.copytree(ROOT / "configs", tmp / "configs")
    (tmp / "samples").symlink_to(ROOT / "samples")
    return tmp / "configs" / "tiny_cnn_release.yaml"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("release")
    cfg = _workspace(tmp)
    res = _cli("release", "-c", cfg, "-o", tmp / "rel1", "--junit", tmp / "junit.xml")
    return tmp, cfg, res


def test_release_with_reachable_gates_passes_with_one_testcase_per_gate(released):
    tmp, cfg, res = released
    assert res.exit_code == 0, res.output
    gates = yaml.safe_load(cfg.read_text())["gate_parameters"]
    asked = [k for k in gates if k != "data_dir"]
    for junit in (tmp / "junit.xml", tmp / "rel1" / "reports" / "tiny_cnn_gates.xml"):
        root = ET.parse(junit).getroot()
        cases = root.findall(".//testcase")
        assert [c.get("name") for c in cases] == asked
        assert root.findall(".//failure") == [] and root.get("failures") == "0"
    report = json.loads((tmp / "rel1" / "reports" / "tiny_cnn_gates.json").read_text())
    assert report["passed"] and [g["key"] for g in report["gates"]] == asked
    assert (tmp / "work_dirs" / "tiny_cnn_release" / "tiny_cnn_gates.json").exists()


def test_manifest_names_the_artifact_and_holds_no_path_or_time(released):
    tmp, _, _ = released
    rel = tmp / "rel1"
    manifest = json.loads((rel / "manifest.json").read_text())
    assert manifest["artifact_sha256"] == _sha(rel / "tiny_cnn.bin")
    assert manifest["model_sha256"] == _sha(ROOT / "samples" / "tiny" / "tiny_cnn.onnx")
    assert manifest["calibration_samples"] == 64 and len(manifest["calibration_sha256"]) == 64
    assert manifest["gates"]["passed"] and manifest["perf"]["fps"] > 1000
    assert manifest["accuracy"]["outputs"]["logits"]["channels"] == 10
    assert manifest["inputs"][0]["name"] == "input" and manifest["outputs"][0]["shape"] == [1, 10]
    text = (rel / "manifest.json").read_text()
    assert str(tmp) not in text and str(ROOT) not in text
    assert {"reports/perf.json", "reports/perf.html", "reports/tiny_cnn_quant_info.json",
            "check/inputs/input.npy", "check/outputs/logits.npy"} <= set(_tree(rel))


def test_second_release_of_the_same_inputs_is_byte_identical(released, tmp_path):
    """Another process (other hash seed), another workspace: every file of the bundle is the same bytes."""
    tmp, _, _ = released
    cfg = _workspace(tmp_path)
    env = {**os.environ, "PYTHONHASHSEED": "7", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "hbtool.cli", "release", "-c", str(cfg), "-o", str(tmp_path / "rel2")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = _tree(tmp / "rel1"), _tree(tmp_path / "rel2")
    assert set(one) == set(two)
    assert [name for name in one if one[name] != two[name]] == []


def test_verify_passes_then_exits_4_after_one_flipped_byte(released, tmp_path):
    tmp, _, _ = released
    res = _cli("verify", tmp / "rel1")
    assert res.exit_code == 0, res.output
    copy = tmp_path / "copy"
    shutil.copytree(tmp / "rel1", copy)
    data = bytearray((copy / "tiny_cnn.bin").read_bytes())
    data[len(data) // 2] ^= 0x01
    (copy / "tiny_cnn.bin").write_bytes(bytes(data))
    res = _cli("verify", copy)
    assert res.exit_code == 4
    assert res.stderr.startswith("hbtool: gate failed: verify: artifact tiny_cnn.bin: sha256")
    # a check output changed (e.g. a simulator that computes differently now) is named too
    shutil.rmtree(copy)
    shutil.copytree(tmp / "rel1", copy)
    out = copy / "check" / "outputs" / "logits.npy"
    arr = np.load(out)
    arr[0, 0] += 1.0
    np.save(out, arr)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["check"]["outputs"]["logits"]["sha256"] = _sha(out)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    res = _cli("verify", copy)
    assert res.exit_code == 4 and "output 'logits': simulated values differ" in res.stderr


def test_gate_command_rechecks_the_working_dir_and_unreachable_fps_fails_makertbin_with_exit_4(released, tmp_path):
    tmp, cfg, _ = released
    res = _cli("gate", "-c", cfg)
    assert res.exit_code == 0, res.output
    data = yaml.safe_load(cfg.read_text())
    data["gate_parameters"] = {"min_fps": "1e6"}  # as a YAML file writes it: 1e6 unquoted
    text = yaml.safe_dump(data).replace("'1e6'", "1e6")
    bad = cfg.parent / "unreachable.yaml"
    bad.write_text(text)
    res = _cli("makertbin", "-c", bad, "--junit", tmp_path / "j.xml")
    assert res.exit_code == 4
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hbtool: gate failed: min_fps: ") and " < 1000000" in lines[0]
    root = ET.parse(tmp_path / "j.xml").getroot()
    assert root.get("failures") == "1" and "min_fps" in root.find(".//failure").get("message")
    report = json.loads((tmp / "work_dirs" / "tiny_cnn_release" / "tiny_cnn_gates.json").read_text())
    assert report["passed"] is False and report["gates"][0]["measured"] < 1e6


def test_gate_with_two_workers_writes_the_same_verdict_bytes(released):
    """The gates simulate through simulate's sharded path: --workers 2 measures exactly what one process does."""
    tmp, cfg, _ = released
    verdict = tmp / "work_dirs" / "tiny_cnn_release" / "tiny_cnn_gates.json"
    res = _cli("gate", "-c", cfg)
    assert res.exit_code == 0, res.output
    one = verdict.read_bytes()
    res = _cli("gate", "-c", cfg, "--workers", "2")
    assert res.exit_code == 0, res.output
    assert verdict.read_bytes() == one
    res = _cli("gate", "-c", cfg, "--workers", "0")
    assert res.exit_code == 2 and res.output.strip().startswith("hbtool: error: --workers 0")


# --------------------------------------------------------------------------------------- the detector head
def _yolo_head(tmp: Path) -> None:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "wb"], ["cb"], name="conv_box", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["cb"], ["sb"], name="sig_box"),
        helper.make_node("Mul", ["sb", "px"], ["boxes"], name="to_pixels"),
        helper.make_node("Conv", ["x", "wc", "bc"], ["cc"], name="conv_cls", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["cc"], ["scores"], name="sig_cls"),
        helper.make_node("Concat", ["boxes", "scores"], ["cat"], name="concat", axis=1),
        helper.make_node("Reshape", ["cat", "shape"], ["output0"], name="flatten"),
    ]
    inits = [tensor("wb", rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3),
             tensor("wc", rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3),
             tensor("bc", np.full(8, -1.0, np.float32)), tensor("px", np.array(320.0, np.float32)),
             tensor("shape", np.array([1, 12, 256], np.int64))]
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo("output0", [1, 12, 256])], inits, opset=13),
              tmp / "yolo.onnx")
    for folder, n, seed in (("cal", 8, 1), ("held", 4, 2)):
        (tmp / folder).mkdir()
        r = np.random.default_rng(seed)
        for k in range(n):
            np.save(tmp / folder / f"{k}.npy", r.standard_normal((1, 3, 16, 16)).astype(np.float32))


def _yolo_config(tmp: Path, name: str, calibration: dict) -> Path:
    data = {"model_parameters": {"onnx_model": "yolo.onnx", "working_dir": f"wd_{name}", "output_model_file_prefix": "yolo"},
            "calibration_parameters": {"cal_data_dir": "cal", **calibration},
            "gate_parameters": {"data_dir": "held", "min_output_cosine": 0.9}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def yolo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("yolo")
    _yolo_head(tmp)
    default = _cli("release", "-c", _yolo_config(tmp, "default", {"calibration_type": "default"}), "-o", tmp / "rel_default")
    int8 = _cli("release", "-c", _yolo_config(tmp, "int8", {"calibration_type": "max", "auto_int16": False,
                                                            "optimization": "set_model_output_int8"}), "-o", tmp / "rel_int8")
    return tmp, default, int8


def test_collapsed_class_scores_cannot_pass_min_output_cosine(yolo):
    tmp, default, int8 = yolo
    assert default.exit_code == 0, default.output
    assert int8.exit_code == 4, int8.output
    assert int8.stderr.startswith("hbtool: gate failed: min_output_cosine: ")
    acc = json.loads((tmp / "rel_int8" / "manifest.json").read_text())["accuracy"]["outputs"]["output0"]
    assert acc["cosine"] > 0.99                  # the whole output hides it ...
    assert acc["worst_channel"] >= 4 and acc["worst_channel_cosine"] < 0.5   # ... a class-score channel shows it
    assert (tmp / "rel_int8" / "yolo.bin").exists() and (tmp / "rel_int8" / "reports" / "yolo_gates.xml").exists()


def test_diff_flags_the_cosine_drop_of_the_all_int8_release(yolo, tmp_path):
    tmp, _, _ = yolo
    res = _cli("diff", tmp / "rel_default", tmp / "rel_int8", "--max-cosine-drop", "0.01", "--json", tmp_path / "d.json")
    assert res.exit_code == 4
    assert res.stderr.startswith("hbtool: gate failed: diff: output 'output0' cosine ")
    assert "precision:" in res.stdout
    deltas = json.loads((tmp_path / "d.json").read_text())
    assert deltas["outputs"]["output0"]["drop"] > 0.5 and deltas["precision"]
    same = _cli("diff", tmp / "rel_default", tmp / "rel_default" / "manifest.json", "--max-cosine-drop", "0",
                "--max-fps-drop", "0", "--max-metric-drop", "0")
    assert same.exit_code == 0, same.output


# --------------------------------------------------------------------------------------------------- pack
def test_packed_models_simulate_by_name_as_their_standalone_artifacts(yolo, released, tmp_path):
    tmp_y, _, _ = yolo
    tmp_c, _, _ = released
    cnn, det = tmp_c / "rel1" / "tiny_cnn.bin", tmp_y / "rel_default" / "yolo.bin"
    packed = tmp_path / "models.bin"
    res = _cli("pack", cnn, det, "-o", packed)
    assert res.exit_code == 0, res.output
    info = _cli("info", packed, "--json")
    assert [m["name"] for m in json.loads(info.stdout)["models"]] == ["tiny_cnn", "yolo"]
    inputs = {"tiny_cnn": ("input", tmp_c / "rel1" / "check" / "inputs" / "input.npy"),
              "yolo": ("x", tmp_y / "rel_default" / "check" / "inputs" / "x.npy")}
    for name, standalone in (("tiny_cnn", cnn), ("yolo", det)):
        inp, path = inputs[name]
        a = _cli("simulate", packed, "--model-name", name, "-i", f"{inp}={path}", "-o", tmp_path / f"p_{name}")
        b = _cli("simulate", standalone, "-i", f"{inp}={path}", "-o", tmp_path / f"s_{name}")
        assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
        for f in (tmp_path / f"s_{name}").glob("*.npy"):
            assert f.read_bytes() == (tmp_path / f"p_{name}" / f.name).read_bytes()
    perf = _cli("perf", packed, "--model-name", "yolo", "--json", "-")
    assert perf.exit_code == 0 and json.loads(perf.stdout)["model"] == "yolo"
    again = _cli("pack", packed, cnn, "-o", tmp_path / "again.bin")
    assert again.exit_code == 2 and "a packed artifact is not packed again" in again.stderr
    which = _cli("simulate", packed, "-i", f"input={inputs['tiny_cnn'][1]}")
    assert which.exit_code == 2 and "--model-name" in which.stderr
    twice = _cli("pack", cnn, cnn, "-o", tmp_path / "twice.bin")
    assert twice.exit_code == 2 and "two models named 'tiny_cnn'" in twice.stderr
    assert not (tmp_path / "again.bin").exists() and not (tmp_path / "twice.bin").exists()


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("gates,message", [
    ({"min_fps": -1}, "gate_parameters.min_fps: expected more than 0"),
    ({"min_output_cosine": 2, "data_dir": "."}, "gate_parameters.min_output_cosine: expected from -1 to 1"),
    ({"bit_exact_samples": 0, "data_dir": "."}, "gate_parameters.bit_exact_samples: expected at least 1"),
    ({"max_cpu_nodes": 1.5}, "gate_parameters.max_cpu_nodes: expected an integer"),
    ({"min_fsp": 3}, "gate_parameters.min_fsp: unknown key"),
    ({"min_metric": 0.5}, "gate_parameters.min_metric: this gate measures held-out samples"),
])
def test_bad_gate_values_are_one_line_errors(tmp_path, gates, message):
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({"model_parameters": {"onnx_model": "m.onnx"}, "gate_parameters": gates}))
    res = _cli("gate", "-c", tmp_path / "cfg.yaml")
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hbtool: error: {message}") and "; fix: " in lines[0], lines
