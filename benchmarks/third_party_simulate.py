"""Calibrate, compile and simulate third-party exports that are not part of this repository.

Builds models from the `transformers` package (random weights; nothing is downloaded),
exports them with torch.onnx.export the way users do, then runs hbtool calibrate (images:
``calibration_type: skip``; BERT: ``max`` on random token ids with padded attention masks),
compile (O3) and the simulator on a few inputs, against onnxruntime on the quantized and on the
float model, in one run. One table:

    model | nodes | float fallbacks | compile s | simulate ms | ORT float ms | ratio | within 1 LSB | max LSB | cos float-sim

Needs the `bench` extra. Run: python -m benchmarks.third_party_simulate [--models vit convnext ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from benchmarks import paths
from benchmarks.configs import write_config

OUT = paths.OUT / "third_party_simulate"
IMAGE = {"input_type_train": "rgb", "input_type_rt": "rgb", "input_layout_train": "NCHW", "norm_type": "data_mean_and_scale",
         "mean_value": "123.675 116.28 103.53", "scale_value": "0.01712475 0.017507 0.01742919"}


def _export(model: torch.nn.Module, args: tuple, path: Path, names: list[str], outputs: list[str], opset: int = 17) -> None:
    torch.onnx.export(model.eval(), args, str(path), input_names=names, output_names=outputs, opset_version=opset, dynamo=False)


def _image_case(name: str, model: torch.nn.Module, size: int = 224) -> dict:
    path = OUT / name / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _export(model, (torch.randn(1, 3, size, size),), path, ["pixel_values"], ["logits"])
    return {"path": path, "input": {"input_name": "pixel_values", "input_shape": f"1x3x{size}x{size}", **IMAGE},
            "calibration": {"calibration_type": "skip", "num_samples": 4}}


def vit() -> dict:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    return _image_case("hf_vit_tiny", ViTForImageClassification(ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                                                                            intermediate_size=768, num_labels=1000)))


def convnext() -> dict:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    torch.manual_seed(0)
    return _image_case("hf_convnext_tiny", ConvNextForImageClassification(ConvNextConfig(num_labels=1000)))


def mobilenet_v2() -> dict:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    torch.manual_seed(0)
    return _image_case("hf_mobilenet_v2", MobileNetV2ForImageClassification(MobileNetV2Config(num_labels=1000)))


def swin() -> dict:
    from transformers import SwinConfig, SwinForImageClassification

    torch.manual_seed(0)
    return _image_case("hf_swin_t", SwinForImageClassification(SwinConfig(num_labels=1000)))


def bert(seq: int = 128) -> dict:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    inner = BertModel(BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536))

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = inner

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    name = "hf_bert_6l"
    case = OUT / name
    path = case / f"{name}.onnx"
    case.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _export(Encoder(), (torch.randint(0, 30522, (1, seq)), torch.ones(1, seq, dtype=torch.int64)), path,
                ["input_ids", "attention_mask"], ["last_hidden_state"], opset=14)
    rng = np.random.default_rng(0)
    dirs = [case / "cal" / "input_ids", case / "cal" / "attention_mask"]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for k in range(8):
        length = int(rng.integers(seq // 4, seq + 1))
        mask = np.zeros((1, seq), np.int64)
        mask[:, :length] = 1
        np.save(dirs[0] / f"cal_{k:02d}.npy", rng.integers(1000, 30522, (1, seq)).astype(np.int64) * mask)
        np.save(dirs[1] / f"cal_{k:02d}.npy", mask)
    return {"path": path, "input": {"input_name": "input_ids;attention_mask", "input_shape": f"1x{seq};1x{seq}",
                                    "input_type_train": "featuremap;featuremap", "input_type_rt": "featuremap;featuremap",
                                    "norm_type": "no_preprocess;no_preprocess"},
            "calibration": {"calibration_type": "max", "cal_data_dir": f"{dirs[0]};{dirs[1]}", "cal_data_type": "int64;int64"},
            "feeds": [{"input_ids": np.load(dirs[0] / f"cal_{k:02d}.npy"), "attention_mask": np.load(dirs[1] / f"cal_{k:02d}.npy")}
                      for k in range(4)]}


BUILDERS = {"vit": vit, "convnext": convnext, "mobilenet_v2": mobilenet_v2, "swin": swin, "bert": bert}


def run(name: str, samples: int, threads: int) -> dict:
    from benchmarks._simcompare import compare_with_ort

    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.config import load_config
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.quant.data import random_calibration_data
    from hbtool.simulator.executor import Executor

    case = BUILDERS[name]()
    wd = case["path"].parent / "wd"
    prefix = case["path"].stem
    cfg_dict = {"model_parameters": {"onnx_model": str(case["path"]), "march": "bayes", "working_dir": str(wd), "output_model_file_prefix": prefix},
                "input_parameters": case["input"], "calibration_parameters": case["calibration"],
                "compiler_parameters": {"optimize_level": "O3"}}
    cfg_path = write_config(case["path"].parent / "config.yaml", cfg_dict)
    cfg = load_config(cfg_path)
    write_outputs(cfg, run_calibration(cfg), "")
    t = time.perf_counter()
    compiled = compile_model(cfg)
    compile_s = time.perf_counter() - t
    (wd / f"{prefix}.hbm").write_bytes(compiled.data)
    executor = Executor(from_bytes(compiled.data), threads=threads)
    feeds = case.get("feeds") or [random_calibration_data(cfg, samples, 1).sample(i) for i in range(samples)]
    return {"model": name, "nodes": len(compiled.program.nodes), "fallbacks": len(compiled.header.get("fallbacks", [])),
            "fallback_reasons": compiled.header.get("fallbacks", [])[:5], "compile_s": round(compile_s, 2),
            **compare_with_ort(executor, compiled.header, wd, prefix, feeds, threads)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(BUILDERS), choices=list(BUILDERS))
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=OUT / "results.json")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    for name in args.models:
        print(f"== {name}", flush=True)
        row = run(name, args.samples, args.threads)
        print(json.dumps(row, default=str), flush=True)
        rows.append(row)
    print("| model | nodes | float fallbacks | compile s | simulate ms | ORT float ms | ratio | within 1 LSB | max LSB | cos float-sim |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['nodes']} | {r['fallbacks']} | {r['compile_s']} | {r['simulate_ms']} | {r['ort_float_ms']} | "
              f"{r['ratio']}x | {100 * r['within_1lsb']:.3f}% | {r['max_lsb']:.2f} | {r['cos_float_vs_sim']:.5f} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
