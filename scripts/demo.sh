#!/usr/bin/env bash
# The main job on the bundled samples. For now: the checker on each bundled trained model
# (calibrate, compile, simulate and perf join this script as they land).
set -euo pipefail
cd "$(dirname "$0")/.."
HB=.venv/bin/hbtool
OUT=${OUT:-work_dirs/demo}
mkdir -p "$OUT"
for name in tiny_cnn tiny_swin tiny_vit; do
  echo "=== checker: $name ==="
  "$HB" checker -c "configs/$name.yaml" --output-dir "$OUT/$name" --max-rows 12
done
