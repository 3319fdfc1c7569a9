#!/usr/bin/env bash
# The main job on the bundled samples: checker -> calibrate, then float vs quantized accuracy on
# the held-out split. (compile, simulate and perf join this script as they land.)
set -euo pipefail
cd "$(dirname "$0")/.."
HB=.venv/bin/hbtool
PY=.venv/bin/python
for name in tiny_cnn tiny_swin tiny_vit; do
  echo "=== $name: checker ==="
  "$HB" checker -c "configs/$name.yaml" --output-dir "work_dirs/$name/checker" --max-rows 5
  echo "=== $name: calibrate ==="
  "$HB" calibrate -c "configs/$name.yaml" --max-rows 5
  echo "=== $name: accuracy on the held-out split ==="
  "$PY" -m samples.tiny.evaluate -c "configs/$name.yaml"
done
