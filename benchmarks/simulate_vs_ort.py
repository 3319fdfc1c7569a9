"""hbtool compile + simulate against onnxruntime float32: same model, same inputs, one run.

For each model (``--models``, default ``resnet50 swin_t``; also ``efficientnet_lite4``,
``deit_tiny``, ``minilm``, ``tiny_cnn``, ``tiny_swin``, ``tiny_vit``):

1. calibrate with hbtool (``calibration_type: skip`` for the random-weight standard models:
   the speed and exactness checks do not need real statistics; ``default`` on real data for
   the tiny samples and MiniLM), untimed;
2. compile twice at O3: wall time of each, and whether the two artifacts are byte-identical;
3. run ``--samples`` inputs (batch 1) through ``hbtool simulate``'s executor and through
   onnxruntime on the float model (``--threads``, default 2: this machine's cores) and on
   ``<prefix>_quantized_model.onnx``;
4. print: compile s, simulate ms/sample, ORT float ms/sample, ratio, share of output elements
   equal to the quantized model's within 1 LSB, max LSB difference, and float-vs-simulated
   cosine against float-vs-quantized cosine.

    .venv/bin/python -m benchmarks.simulate_vs_ort [--models resnet50 swin_t] [--samples 20] \
        [--json benchmarks/_out/simulate_vs_ort.json]

Models are exported once into benchmarks/_models/ (samples.export; nothing is downloaded).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import paths

ROOT = paths.ROOT
MODELS_DIR = paths.MODELS
OUT = paths.OUT / "simulate_vs_ort"

STANDARD = {
    "resnet50": ("resnet50", (1, 3, 224, 224)),
    "swin_t": ("swin_t", (1, 3, 224, 224)),
    "efficientnet_lite4": ("efficientnet_lite4", (1, 3, 300, 300)),
    "deit_tiny": ("deit_tiny", (1, 3, 224, 224)),
}


def _export(arch: str) -> Path:
    path = MODELS_DIR / f"{arch}_op17.onnx"
    if not path.exists():
        import subprocess

        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "samples.export", "--model", arch, "--out", str(MODELS_DIR)], check=True, cwd=ROOT)
        produced = sorted(MODELS_DIR.glob(f"{arch}*op17*.onnx"), key=lambda p: p.stat().st_mtime)[-1]
        if produced != path:
            produced.rename(path)
    return path


def _config(name: str, samples: int) -> tuple[Path, list[dict[str, np.ndarray]] | None]:
    """YAML config path, and the evaluation feeds when the model has real ones."""
    from benchmarks.configs import write_config

    if name.startswith("tiny_"):
        images = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")["images"][:samples].astype(np.float32)
        return ROOT / "configs" / f"{name}.yaml", [{"input": images[i:i + 1]} for i in range(len(images))]
    wd = OUT / name
    wd.mkdir(parents=True, exist_ok=True)
    if name == "minilm":
        from benchmarks.calibrate_vs_ort import minilm_case

        case = minilm_case(64, samples)
        cfg = json.loads(json.dumps(case.hb_config))
        cfg["model_parameters"]["working_dir"] = str(wd)
        path = write_config(wd / "config.yaml", cfg)
        return path, list(case.eval_hb)
    arch, shape = STANDARD[name]
    model = _export(arch)
    cfg = {
        "model_parameters": {"onnx_model": str(model), "march": "bayes", "working_dir": str(wd), "output_model_file_prefix": name},
        "input_parameters": {"input_name": "input", "input_shape": "x".join(map(str, shape)), "input_type_train": "rgb",
                             "input_type_rt": "rgb", "input_layout_train": "NCHW", "norm_type": "data_mean_and_scale",
                             "mean_value": "123.675 116.28 103.53", "scale_value": "0.01712475 0.017507 0.01742919"},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": 4},
        "compiler_parameters": {"optimize_level": "O3"},
    }
    path = write_config(wd / "config.yaml", cfg)
    return path, None


def _feeds(cfg, n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    from hbtool.quant.data import random_calibration_data

    data = random_calibration_data(cfg, n, seed)
    return [data.sample(i) for i in range(n)]


def run_model(name: str, samples: int, threads: int) -> dict:
    from benchmarks._simcompare import compare_with_ort

    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.config import load_config
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.simulator.executor import Executor

    cfg_path, real_feeds = _config(name, samples)
    cfg = load_config(cfg_path)
    wd = Path(cfg.model.working_dir)
    prefix = cfg.model.output_model_file_prefix
    if not (wd / f"{prefix}_calibrated_model.onnx").exists():
        res = run_calibration(cfg)
        write_outputs(cfg, res, "")
    times, blobs = [], []
    for _ in range(2):
        t = time.perf_counter()
        result = compile_model(cfg)
        times.append(time.perf_counter() - t)
        blobs.append(result.data)
    (wd / f"{prefix}.hbm").write_bytes(blobs[0])
    executor = Executor(from_bytes(blobs[0]), threads=threads)
    feeds = real_feeds or _feeds(cfg, samples)
    return {"model": name, "compile_s": [round(x, 2) for x in times], "identical_bytes": blobs[0] == blobs[1],
            "artifact_bytes": len(blobs[0]), **compare_with_ort(executor, result.header, wd, prefix, feeds, threads)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "swin_t"])
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for name in args.models:
        print(f"== {name}", flush=True)
        row = run_model(name, args.samples, args.threads)
        rows.append(row)
        print(json.dumps(row), flush=True)
    head = "| model | compile s (2 runs) | identical bytes | simulate ms | ORT float ms | ratio | within 1 LSB | max LSB | cos float-sim | cos float-quant |"
    print(head)
    print("|" + "---|" * head.count("|")[:-1] if False else "|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['compile_s'][0]} / {r['compile_s'][1]} | {r['identical_bytes']} | {r['simulate_ms']} | "
              f"{r['ort_float_ms']} | {r['ratio']}x | {100 * r['within_1lsb']:.3f}% | {r['max_lsb']:.2f} | "
              f"{r['cos_float_vs_sim']:.5f} | {r['cos_float_vs_quant']:.5f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
