"""Top-1 accuracy of a tiny sample's float, quantized and simulated models on the committed held-out split.

    python -m samples.tiny.evaluate -c configs/tiny_swin.yaml [--json out.json]

Reads `<working_dir>/<prefix>_original_float_model.onnx` and `<prefix>_quantized_model.onnx`
written by `hbtool calibrate` (both take raw 0-255 pixels: the preprocessing is folded in),
runs both in onnxruntime on `samples/data/digits_heldout.npz`, and, when `hbtool compile` has
written `<prefix>.bin`, runs the artifact in hbtool's bit-exact simulator; one line per model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

HELDOUT = Path(__file__).resolve().parents[1] / "data" / "digits_heldout.npz"


def top1(model_path: Path, images: np.ndarray, labels: np.ndarray) -> float:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    hits = 0
    for x, y in zip(images, labels):
        logits = sess.run(None, {name: x[None].astype(np.float32)})[0]
        hits += int(np.argmax(logits) == y)
    return hits / len(labels)


def top1_artifact(path: Path, images: np.ndarray, labels: np.ndarray) -> float:
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor

    ex = Executor(read_artifact(path))
    name, out = ex.input_names[0], ex.output_names[0]
    hits = sum(int(np.argmax(ex.run({name: x[None].astype(np.float32)})[out]) == y) for x, y in zip(images, labels))
    return hits / len(labels)


def evaluate(config: Path, extra: dict[str, Path] | None = None) -> dict[str, float]:
    from hbtool.config import load_config

    cfg = load_config(config)
    wd, prefix = Path(cfg.model.working_dir), cfg.model.output_model_file_prefix
    data = np.load(HELDOUT)
    images, labels = data["images"], data["labels"]
    models = {"float": wd / f"{prefix}_original_float_model.onnx", "quantized": wd / f"{prefix}_quantized_model.onnx"}
    models.update(extra or {})
    acc = {k: top1(p, images, labels) for k, p in models.items() if p.exists()}
    if (wd / f"{prefix}.bin").exists():
        acc["simulated"] = top1_artifact(wd / f"{prefix}.bin", images, labels)
    return acc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-c", "--config", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    acc = evaluate(args.config)
    for k, v in acc.items():
        print(f"{args.config.stem}: {k:<10} top-1 {100 * v:.2f}%")
    if "float" in acc and "quantized" in acc:
        print(f"{args.config.stem}: quantization loss {100 * (acc['float'] - acc['quantized']):+.2f} points")
    if args.json:
        args.json.write_text(json.dumps(acc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
