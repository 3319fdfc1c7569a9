"""The CI examples of docs/ci.md run as written: the GitHub Actions and GitLab CI jobs use the same
``hbtool`` command lines, and those lines succeed in a fresh workspace, without and then with a baseline."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _yaml_blocks() -> list[dict]:
    text = (ROOT / "docs" / "ci.md").read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def _hbtool_lines() -> tuple[list[str], list[str]]:
    github, gitlab = (b for b in _yaml_blocks() if "jobs" in b or "model-release" in b)
    if "jobs" not in github:
        github, gitlab = gitlab, github
    gh = [step["run"] for job in github["jobs"].values() for step in job["steps"] if "hbtool" in str(step.get("run", ""))]
    gl = [line for line in gitlab["model-release"]["script"] if "hbtool" in line]
    return gh, gl


def test_github_and_gitlab_examples_run_the_same_hbtool_lines():
    gh, gl = _hbtool_lines()
    assert gh == gl and len(gh) == 3
    assert gh[0].startswith(".venv/bin/hbtool release -c configs/")


def test_ci_example_lines_run(tmp_path):
    lines, _ = _hbtool_lines()
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    wrapper = tmp_path / ".venv" / "bin" / "hbtool"   # what scripts/setup.sh installs, over this checkout
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m hbtool.cli \"$@\"\n")
    wrapper.chmod(0o755)

    def run_job(lines: list[str]) -> None:
        for line in lines:
            proc = subprocess.run(["bash", "-ec", line], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"

    run_job(lines)   # first run: no baseline yet, so the diff line does nothing
    junit = ET.parse(tmp_path / "release" / "junit.xml").getroot()
    assert int(junit.get("tests")) >= 5 and junit.get("failures") == "0"
    (tmp_path / "baseline" / "tiny_cnn").mkdir(parents=True)
    shutil.copy(tmp_path / "release" / "tiny_cnn" / "manifest.json", tmp_path / "baseline" / "tiny_cnn")
    # with the baseline committed, the diff line compares (the release lines are unchanged: a rebuild gives the
    # same bytes, tests/e2e/test_gates_release_verify_diff_pack.py); a regression beyond its limits would exit 4 and fail the job
    diff = [line for line in lines if " diff " in line]
    run_job(diff)   # the same build: no regression
    manifest = json.loads((tmp_path / "baseline" / "tiny_cnn" / "manifest.json").read_text())
    manifest["perf"]["fps"] *= 2   # the baseline was twice as fast: a 50% FPS drop
    (tmp_path / "baseline" / "tiny_cnn" / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run(["bash", "-ec", diff[0]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4 and "hbtool: gate failed: diff: fps " in proc.stderr, proc.stderr
