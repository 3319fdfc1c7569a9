"""Checker on third-party transformer exports that are not part of this repository.

Builds the models from the `transformers` package (random weights: placement and graph
cleaning do not depend on the values), exports them with torch.onnx.export the way users do,
with dynamic axes so the shape-computation subgraphs of a real export appear, then runs
`hbtool checker` on them and prints one table:

    model | exported nodes | shape ops left | IR nodes | BPU | CPU | subgraphs | checker s | max rel err vs ORT

Needs the `bench` extra (`pip install -e .[bench]`). Run: python -m benchmarks.third_party_checker
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from benchmarks.paths import OUT

SHAPE_COMPUTATION_OPS = ("Shape", "ConstantOfShape", "Range", "Mod", "NonZero", "Size")


def export_hf_swin_t(path: Path) -> tuple[Path, dict, dict]:
    from transformers import SwinConfig, SwinForImageClassification

    torch.manual_seed(0)
    cfg = SwinConfig(image_size=224, patch_size=4, embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7, num_labels=1000)
    model = SwinForImageClassification(cfg).eval()
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, (x,), str(path), input_names=["pixel_values"], output_names=["logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"pixel_values": {0: "batch", 2: "height", 3: "width"}})
    shapes = {"pixel_values": (1, 3, 224, 224)}
    feeds = {"pixel_values": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    return path, shapes, feeds


def export_hf_bert(path: Path) -> tuple[Path, dict, dict]:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    bert = BertModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    model = Encoder().eval()
    ids = torch.randint(0, 30522, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "pooler_output"],
                      opset_version=14, dynamo=False, dynamic_axes={"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}})
    shapes = {"input_ids": (1, 128), "attention_mask": (1, 128)}
    rng = np.random.default_rng(0)
    m = np.ones((1, 128), np.int64)
    m[:, 100:] = 0
    feeds = {"input_ids": rng.integers(0, 30522, (1, 128)).astype(np.int64), "attention_mask": m}
    return path, shapes, feeds


def _ort(model_path_or_bytes, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model_path_or_bytes, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def check(name: str, path: Path, shapes: dict, feeds: dict, out_dir: Path) -> dict:
    from hbtool.checker.run import run_checker

    raw = onnx.load(str(path), load_external_data=False)
    t0 = time.perf_counter()
    res = run_checker(path, input_shapes=shapes, output_dir=out_dir / name)
    seconds = time.perf_counter() - t0
    ops = Counter(n.op_type for n in res.graph.nodes)
    shape_left = sum(ops.get(k, 0) for k in SHAPE_COMPUTATION_OPS)
    ref = _ort(str(path), feeds)
    got = _ort(str(res.files["optimized_float_model"]), feeds)
    err = max(float(np.abs(r - g).max() / max(np.abs(r).max(), 1e-12)) for r, g in zip(ref, got))
    must_be_bpu = {"Conv", "MatMul", "Linear", "Gemm", "LayerNormalization", "Softmax", "Gelu", "Add"}
    off = [n for n in res.graph.nodes if n.op_type in must_be_bpu and n.meta.get("on") != "BPU"]
    return {
        "model": name,
        "exported": len(raw.graph.node),
        "shape_ops_left": shape_left,
        "ir": len(res.graph.nodes),
        "bpu": res.summary["bpu_nodes"],
        "cpu": res.summary["cpu_nodes"],
        "subgraphs": res.summary["subgraphs"],
        "seconds": seconds,
        "err": err,
        "core_ops_off_bpu": [(n.name, n.op_type, n.meta.get("reason")) for n in off],
        "cpu_reasons": Counter((n.op_type, n.meta.get("reason")) for n in res.graph.nodes if n.meta.get("on") != "BPU"),
        "ops": ops,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["hf_swin_t", "hf_bert"])
    ap.add_argument("--out", type=Path, default=OUT / "third_party_checker")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    builders = {"hf_swin_t": export_hf_swin_t, "hf_bert": export_hf_bert}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path, shapes, feeds = builders[name](Path(tmp) / f"{name}.onnx")
            rows.append(check(name, path, shapes, feeds, args.out))
    print(f"{'model':<12} {'exported':>8} {'shape ops left':>14} {'IR':>5} {'BPU':>5} {'CPU':>4} {'subg':>4} {'checker s':>9} {'max rel err':>11}")
    for r in rows:
        print(f"{r['model']:<12} {r['exported']:>8} {r['shape_ops_left']:>14} {r['ir']:>5} {r['bpu']:>5} {r['cpu']:>4} {r['subgraphs']:>4} {r['seconds']:>9.2f} {r['err']:>11.2e}")
    for r in rows:
        print(f"\n{r['model']}: IR op types {dict(r['ops'])}")
        for (op, why), count in r["cpu_reasons"].items():
            print(f"  CPU x{count} {op}: {why}")
        if r["core_ops_off_bpu"]:
            print(f"  core ops NOT on the BPU: {r['core_ops_off_bpu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
