"""Train the tiny digits classifiers and write the committed sample files.

    python -m samples.tiny.train                 # data files + all three models
    python -m samples.tiny.train --only tiny_vit # one model (data files are rewritten too)

Deterministic: fixed split, ``torch.manual_seed``, ``torch.use_deterministic_algorithms``,
2 threads. Writes ``samples/tiny/<name>.onnx`` (opset 17, TorchScript exporter, input
``input`` 1x3x32x32 normalised float, output ``logits``), ``samples/tiny/metrics.json``,
``samples/data/digits_heldout.npz`` and ``samples/data/digits_cal/*.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import CAL_DIR, HELDOUT_PATH, MEAN, METRICS_PATH, MODELS, SCALE, onnx_path
from .data import HELDOUT_FRACTION, SPLIT_SEED, load_split
from .models import BUILDERS

NUM_CAL = 64
OPSET = 17


@dataclass
class Recipe:
    epochs: int
    lr: float
    weight_decay: float
    batch: int = 64
    warmup_epochs: int = 0
    label_smoothing: float = 0.0
    seed: int = 0


RECIPES = {
    "tiny_cnn": Recipe(epochs=30, lr=3e-3, weight_decay=1e-4),
    "tiny_swin": Recipe(epochs=80, lr=2e-3, weight_decay=0.05, warmup_epochs=3, label_smoothing=0.1),
    "tiny_vit": Recipe(epochs=40, lr=2e-3, weight_decay=0.05, warmup_epochs=3, label_smoothing=0.1),
}


def normalize_t(x_uint8: torch.Tensor) -> torch.Tensor:
    return (x_uint8.float() - MEAN) * SCALE


def augment(x_uint8: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random affine (rotation +-10 deg, scale 0.9-1.1, shift +-2 px) on raw pixels, then normalise."""
    n = x_uint8.shape[0]
    raw = x_uint8.float() / 255.0
    angle = (torch.rand(n, generator=gen) * 2 - 1) * math.radians(10)
    scale = 1.0 + (torch.rand(n, generator=gen) * 2 - 1) * 0.1
    shift = (torch.rand(n, 2, generator=gen) * 2 - 1) * (2.0 * 2 / 32)
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    grid = F.affine_grid(theta, list(raw.shape), align_corners=False)
    raw = F.grid_sample(raw, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return normalize_t((raw * 255.0).round())


@torch.no_grad()
def accuracy(model: nn.Module, x_uint8: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    logits = torch.cat([model(normalize_t(torch.from_numpy(x_uint8[i : i + 256]))) for i in range(0, len(y), 256)])
    return float((logits.argmax(1).numpy() == y).mean())


def train_model(name: str, x_tr: np.ndarray, y_tr: np.ndarray, log=print) -> tuple[nn.Module, dict]:
    recipe = RECIPES[name]
    torch.manual_seed(recipe.seed)
    model = BUILDERS[name]()
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and "pos_embed" not in n and "cls_token" not in n
             and "relative_position_bias_table" not in n]
    no_decay = [p for n, p in model.named_parameters() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr)
    xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
    steps_per_epoch = math.ceil(len(yt) / recipe.batch)
    total = recipe.epochs * steps_per_epoch
    warm = recipe.warmup_epochs * steps_per_epoch

    def lr_at(step: int) -> float:
        if step < warm:
            return recipe.lr * (step + 1) / warm
        return recipe.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))

    step, t0 = 0, time.time()
    for epoch in range(recipe.epochs):
        model.train()
        perm = torch.randperm(len(yt), generator=gen)
        loss_sum = 0.0
        for i in range(0, len(yt), recipe.batch):
            idx = perm[i : i + recipe.batch]
            xb, yb = augment(xt[idx], gen), yt[idx]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = F.cross_entropy(model(xb), yb, label_smoothing=recipe.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * len(idx)
            step += 1
        if (epoch + 1) % 5 == 0 or epoch + 1 == recipe.epochs:
            log(f"  {name} epoch {epoch + 1}/{recipe.epochs} loss {loss_sum / len(yt):.4f} ({time.time() - t0:.0f}s)")
    model.eval()
    info = {"epochs": recipe.epochs, "recipe": asdict(recipe), "params": sum(p.numel() for p in model.parameters())}
    log(f"  {name}: trained in {time.time() - t0:.0f}s")
    return model, info


def export_tiny(model: nn.Module, path: Path) -> None:
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.zeros(1, 3, 32, 32),), str(path), dynamo=False, opset_version=OPSET,
                          input_names=["input"], output_names=["logits"], do_constant_folding=True)


def onnx_accuracy(path: Path, x_uint8: np.ndarray, y: np.ndarray) -> float:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = ((x_uint8.astype(np.float32) - MEAN) * SCALE).astype(np.float32)
    pred = [int(np.argmax(sess.run(None, {"input": x[i : i + 1]})[0])) for i in range(len(y))]
    return float((np.array(pred) == y).mean())


def write_data(x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, y_te: np.ndarray) -> None:
    from PIL import Image

    HELDOUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(HELDOUT_PATH, images=x_te, labels=y_te)
    CAL_DIR.mkdir(parents=True, exist_ok=True)
    for old in CAL_DIR.glob("*.png"):
        old.unlink()
    pick = np.random.RandomState(SPLIT_SEED + 1).permutation(len(y_tr))[:NUM_CAL]
    for k, i in enumerate(sorted(pick)):
        Image.fromarray(np.ascontiguousarray(x_tr[i].transpose(1, 2, 0)), "RGB").save(
            CAL_DIR / f"cal_{k:02d}_label{int(y_tr[i])}.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m samples.tiny.train", description="Train the tiny digits models.")
    parser.add_argument("--only", choices=MODELS, action="append", help="train only this model (repeatable)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    x_tr, y_tr, x_te, y_te = load_split()
    print(f"digits: {len(y_tr)} train / {len(y_te)} held-out images, 3x32x32 uint8")
    write_data(x_tr, y_tr, x_te, y_te)

    metrics = json.loads(METRICS_PATH.read_text()) if METRICS_PATH.exists() else {}
    metrics["dataset"] = {"name": "sklearn digits, bilinear 8x8->32x32, 0-255 uint8, gray replicated to rgb",
                          "train": int(len(y_tr)), "heldout": int(len(y_te)), "split_seed": SPLIT_SEED,
                          "heldout_fraction": HELDOUT_FRACTION, "input_normalisation": "(x - 127.5) / 127.5"}
    for name in args.only or MODELS:
        model, info = train_model(name, x_tr, y_tr)
        path = onnx_path(name)
        export_tiny(model, path)
        info["train_top1"] = accuracy(model, x_tr, y_tr)
        info["heldout_top1"] = accuracy(model, x_te, y_te)
        info["heldout_top1_onnxruntime"] = onnx_accuracy(path, x_te, y_te)
        info["onnx_bytes"] = path.stat().st_size
        metrics[name] = info
        print(f"{name}: held-out top-1 {info['heldout_top1']:.4f} (onnxruntime {info['heldout_top1_onnxruntime']:.4f}),"
              f" train {info['train_top1']:.4f}, {info['params']} params -> {path}")
        METRICS_PATH.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
