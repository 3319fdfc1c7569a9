#!/usr/bin/env bash
# Nightly fuzzing of the integer kernels: the hypothesis property tests with the "nightly" profile
# (tests/conftest.py: ten times the examples, randomized, so every night searches new inputs), plus
# the kernel tests of tests/test_kernels.py with a deeper randomized search.
#   bash scripts/fuzz_nightly.sh [extra pytest args]
# A failure prints the falsifying example and a reproduction blob (@reproduce_failure).
set -euo pipefail
cd "$(dirname "$0")/.."
export HYPOTHESIS_PROFILE=nightly
export HBTOOL_KERNEL_EXAMPLES="${HBTOOL_KERNEL_EXAMPLES:-500}"
exec .venv/bin/python -m pytest -p no:cacheprovider tests/test_kernel_properties.py tests/test_kernels.py "$@"
