"""Peak memory of ``hbtool calibrate`` on a Swin-T-sized model with 1000 calibration samples.

Issue 6 asks for a peak resident set below 4 GB: statistics must be streamed, never the
activations of every sample kept. This script

1. exports the bundled Swin-T (``python -m samples.export --model swin_t``, seed 0 random
   weights, opset 17, static 1x3x224x224; cached as ``benchmarks/_models/swin_t_op17.onnx``),
2. writes ``--samples`` (default 1000) calibration samples as ``.npy`` files (raw 0-255 pixels,
   float32, 1x3x224x224, seeded) into a temporary folder,
3. runs ``hbtool calibrate`` (``python -m hbtool.cli``, :mod:`benchmarks.runner`) in a subprocess with a YAML config
   (ImageNet mean/std folded in, ``calibration_type: default``) and a temporary working dir,
4. reports the subprocess's peak RSS (``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``; the
   export and data generation run in this process, so the child's peak is hbtool's alone) and
   its wall time, and exits 1 when the peak is at or above ``--limit-gb`` (default 4).

    .venv/bin/python -m benchmarks.memory_calibrate [--samples 1000] [--json benchmarks/_out/memory_calibrate.json]

Generated files go to a temporary folder (removed at the end, ``--keep`` keeps it) and
benchmarks/_models/ (gitignored). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.configs import write_config
from benchmarks.paths import MODELS, ROOT
from benchmarks.runner import run_stage
from benchmarks.tables import write_result

MODELS_DIR = MODELS
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def swin_t_model() -> Path:
    path = MODELS_DIR / "swin_t_op17.onnx"
    if not path.exists():
        print(f"exporting Swin-T to {path} ...", flush=True)
        subprocess.run([sys.executable, "-m", "samples.export", "--model", "swin_t", "--out", str(MODELS_DIR)], cwd=ROOT, check=True)
    return path


def write_samples(folder: Path, n: int, seed: int = 0) -> None:
    """``n`` smooth random images (raw pixels 0-255, float32, 1x3x224x224), one ``.npy`` each."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for k in range(n):
        # a coarse random image upsampled: natural-ish statistics without any download
        coarse = rng.uniform(0, 255, (3, 14, 14)).astype(np.float32)
        img = np.repeat(np.repeat(coarse, 16, axis=1), 16, axis=2)
        img = np.clip(img + rng.normal(0, 8, img.shape), 0, 255).round().astype(np.float32)
        np.save(folder / f"cal_{k:04d}.npy", img[None])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--limit-gb", type=float, default=4.0)
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here too")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (data, config, outputs)")
    args = ap.parse_args(argv)

    model = swin_t_model()
    tmp = Path(tempfile.mkdtemp(prefix="hb_memory_"))
    try:
        t0 = time.perf_counter()
        write_samples(tmp / "cal", args.samples)
        print(f"wrote {args.samples} samples in {time.perf_counter() - t0:.0f} s to {tmp / 'cal'}", flush=True)
        cfg = {
            "model_parameters": {"onnx_model": str(model), "march": "bayes", "working_dir": str(tmp / "wd"), "output_model_file_prefix": "swin_t"},
            "input_parameters": {
                "input_name": "input", "input_shape": "1x3x224x224", "input_type_train": "rgb", "input_type_rt": "rgb",
                "input_layout_train": "NCHW", "norm_type": "data_mean_and_scale",
                "mean_value": " ".join(repr(m) for m in IMAGENET_MEAN),
                "scale_value": " ".join(repr(1.0 / s) for s in IMAGENET_STD),
            },
            "calibration_parameters": {"cal_data_dir": str(tmp / "cal"), "calibration_type": "default"},
        }
        cfg_path = write_config(tmp / "swin_t.yaml", cfg)
        print(f"running: hbtool calibrate -c {cfg_path} --max-rows 5", flush=True)
        stage = run_stage("calibrate", ["-c", str(cfg_path), "--max-rows", "5"], ROOT, 24 * 3600, verbose=False, log_dir=tmp)
        wall = stage["seconds"]
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        # ru_maxrss is KiB on Linux, bytes on macOS; RUSAGE_CHILDREN is the largest child, which is
        # hbtool (the export above, when it runs, is a smaller child)
        peak_bytes = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        if stage["rc"] != 0:
            print(stage["stdout"][-4000:], (tmp / "calibrate.stderr.txt").read_text()[-4000:], sep="\n")
            print(f"hbtool calibrate failed with exit code {stage['rc']}")
            return 2
        info = json.loads((tmp / "wd" / "swin_t_quant_info.json").read_text())
        result = {
            "model": str(model),
            "samples": args.samples,
            "num_samples_calibrated": info["num_samples"],
            "method": info["method"],
            "peak_rss_gb": round(peak_bytes / 1e9, 3),
            "peak_rss_gib": round(peak_bytes / 2**30, 3),
            "wall_s": round(wall, 1),
            "limit_gb": args.limit_gb,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        }
        print(json.dumps(result, indent=1))
        if args.json:
            write_result(args.json, json.dumps(result, indent=1) + "\n")
        ok = peak_bytes < args.limit_gb * 1e9
        print(f"peak RSS {peak_bytes / 1e9:.2f} GB {'<' if ok else '>='} {args.limit_gb} GB; wall {wall:.0f} s")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
