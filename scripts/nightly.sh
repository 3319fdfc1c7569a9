#!/usr/bin/env bash
# The checks too long for every commit, in one script a CI job can call on a schedule:
#   1. slow  - every test marked @pytest.mark.slow (the default run leaves them out: pyproject addopts -m "not slow"):
#              QAT recovery and 2-process data parallelism, big sample exports, the HTML report in a browser,
#              the numba first-run cost on a fresh cache;
#   2. fuzz  - the property tests with the long profiles: hypothesis "nightly" (tests/conftest.py: randomized, ten times
#              the examples), HBTOOL_KERNEL_EXAMPLES deep kernel search, FUZZ_EXAMPLES random pipelines, FUZZ_INT4_EXAMPLES
#              random 4-bit CNNs;
#   3. corpus - the conformance corpus's fast subset (python -m benchmarks.zoo.run --fast --strict): exported if missing, each
#              model through checker -> calibrate -> compile -> simulate; fails on any exported model not clean.
#
#   bash scripts/nightly.sh [slow|fuzz|corpus ...] [-- extra pytest args]   (no step named: all three)
#
# Exit status: non-zero when any step failed (every step still runs). A fuzz failure prints the falsifying
# example and a reproduction blob (@reproduce_failure). PYTHON overrides the interpreter (default .venv/bin/python).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}

steps=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do steps+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#steps[@]} -eq 0 ] && steps=(slow fuzz corpus)

slow() {
  "$PY" -m pytest -p no:cacheprovider -m slow "$@"
}

fuzz() {
  HYPOTHESIS_PROFILE=nightly \
  HBTOOL_KERNEL_EXAMPLES="${HBTOOL_KERNEL_EXAMPLES:-500}" \
  FUZZ_EXAMPLES="${FUZZ_EXAMPLES:-2000}" \
  FUZZ_INT4_EXAMPLES="${FUZZ_INT4_EXAMPLES:-200}" \
    "$PY" -m pytest -p no:cacheprovider -m "not slow" \
      tests/unit/kernels/test_kernel_edge_properties.py tests/unit/kernels/test_numpy_and_onnx_forms_agree.py tests/e2e/test_random_graphs_through_the_pipeline.py tests/e2e/test_random_int4_cnns_through_the_pipeline.py "$@"
}

corpus() {
  # a model that cannot be exported here (timm/Keras need their own venvs: HBTOOL_TIMM_PYTHON, HBTOOL_KERAS_PYTHON)
  # is reported by the export and left out of --strict; every exported one must go end to end clean
  "$PY" -m benchmarks.zoo.export --fast || echo "nightly: some corpus models not exported (see above)"
  "$PY" -m benchmarks.zoo.run --fast --strict
}

failed=()
for step in "${steps[@]}"; do
  case "$step" in
    slow|fuzz|corpus) echo "== nightly: $step"; "$step" "$@" || failed+=("$step") ;;
    *) echo "nightly.sh: unknown step '$step' (slow, fuzz, corpus)" >&2; exit 2 ;;
  esac
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== nightly: failed: ${failed[*]}" >&2
  exit 1
fi
echo "== nightly: all passed (${steps[*]})"
