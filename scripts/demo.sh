#!/usr/bin/env bash
# The main job on the bundled samples: checker -> calibrate -> compile -> simulate -> perf, then
# float vs quantized vs simulated top-1 on the held-out split and the estimated FPS.
set -euo pipefail
cd "$(dirname "$0")/.."
HB=.venv/bin/hbtool
PY=.venv/bin/python
"$PY" -c "import numpy as np; d = np.load('samples/data/digits_heldout.npz'); np.save('work_dirs_heldout_images.npy', d['images'][:64].astype(np.float32))"
trap 'rm -f work_dirs_heldout_images.npy' EXIT
for name in tiny_cnn tiny_swin tiny_vit; do
  wd="work_dirs/$name"
  echo "=== $name: checker ==="
  "$HB" checker -c "configs/$name.yaml" --output-dir "$wd/checker" --max-rows 5
  echo "=== $name: calibrate ==="
  "$HB" calibrate -c "configs/$name.yaml" --max-rows 5
  echo "=== $name: compile ==="
  "$HB" compile -c "configs/$name.yaml"
  echo "=== $name: simulate (64 held-out images, compared with the quantized model) ==="
  "$HB" simulate "$wd/$name.bin" --input input=work_dirs_heldout_images.npy --output-dir "$wd/simulate" \
    --compare "$wd/${name}_quantized_model.onnx"
  if "$HB" perf --help > /dev/null 2>&1; then
    echo "=== $name: perf ==="
    "$HB" perf "$wd/$name.bin" --json "$wd/perf.json" --output-dir "$wd/perf"
  fi
  echo "=== $name: accuracy on the held-out split ==="
  "$PY" -m samples.tiny.evaluate -c "configs/$name.yaml"
done
