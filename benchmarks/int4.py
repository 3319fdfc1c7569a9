"""int8 vs int4 (the 4-bit path, docs/int4.md): accuracy, artifact weight bytes and estimated FPS.

Models:

* ``tiny_cnn`` (samples/tiny, trained on digits): top-1 on the 539 held-out images, PTQ and
  PTQ+QAT (label-free distillation as tests/e2e/test_qat_recovers_ptq_loss.py drives it), each simulated
  from its compiled artifact;
* corpus CNNs (benchmarks/_models/zoo, see docs/conformance.md): calibrated on 8 generated
  samples, top-1 agreement of the simulated artifact with the float model and output cosine on
  ``--eval`` held-out samples.

For every artifact the script also checks that ``hbtool simulate`` equals the quantized ONNX bit
for bit on the evaluated samples. Weight bytes are the tensor-unit weight arrays as the
artifact stores them (int8: one byte, int4: packed two per byte); "constants" adds biases,
multipliers and tables. FPS is ``hbtool perf``'s estimate (march bayes, one core).

    .venv/bin/python -m benchmarks.int4 [--models tiny_cnn pplcnet_orientation ...] [--qat-steps 40]

Writes the markdown table to stdout and ``int4.md`` / ``int4.json`` in ``--out`` (benchmarks/_out/int4).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.configs import corpus_config, write_config
from benchmarks.paths import OUT, ROOT
from benchmarks.tables import markdown_table, write_results

INT4_OUT = OUT / "int4"
CORPUS_DEFAULT = ("pplcnet_orientation", "ppocrv5_textline_cls")


def artifact_numbers(data: bytes) -> dict:
    """Weight bytes, all constant bytes, the 4-bit node count and the estimated FPS of an artifact."""
    from hbtool.compiler.artifact import from_bytes
    from hbtool.perf.run import estimate

    art = from_bytes(data)
    weights = consts = four = 0
    for node in art.header["program"]["nodes"]:
        k = (node.get("meta") or {}).get("kernel") if isinstance(node, dict) else None
        if k is None:
            continue
        consts += k.param_bytes()
        w = getattr(k, "weight", None)
        if isinstance(w, np.ndarray) and hasattr(k, "weight_bits"):
            weights += (w.size + 1) // 2 if k.weight_bits == 4 else w.size
            four += int(k.weight_bits == 4)
    return {"weight_bytes": weights, "const_bytes": consts, "int4_nodes": four, "fps": estimate(art.header, None).fps, "art": art}


def simulate(art, feeds: list[dict], quantized_onnx: Path) -> tuple[list[np.ndarray], int]:
    """Simulated first outputs and how many samples equal the quantized ONNX bit for bit."""
    import onnxruntime as ort

    from hbtool.simulator.executor import Executor

    ex = Executor(art)
    sess = ort.InferenceSession(str(quantized_onnx), providers=["CPUExecutionProvider"])
    outs, exact = [], 0
    for f in feeds:
        got = ex.run(f)
        ref = sess.run(None, f)
        exact += int(all(np.array_equal(got[n], r) for n, r in zip(ex.output_names, ref)))
        outs.append(got[ex.output_names[0]])
    return outs, exact


def quantized_onnx_of(cfg, calibrated: Path, out: Path) -> Path:
    """The quantized ONNX of a calibrated model (the QAT export), lowered as compile lowers it."""
    from hbtool.compiler.source import load_calibrated, lower_calibrated
    from hbtool.ir.onnx_export import to_onnx
    from hbtool.march.description import load_march
    from hbtool.quant.quantized_model import build_quantized_graph

    lowered = lower_calibrated(load_calibrated(calibrated), load_march(cfg.model.march), None, cfg.compiler.rounding, cfg.inputs)
    out.write_bytes(to_onnx(build_quantized_graph(lowered.program), stage="quantized").SerializeToString())
    return out


def tiny_cnn(precision: str, qat_steps: int, work: Path) -> dict:
    from hbtool.compiler.compile import calibrated_path, compile_model
    from hbtool.config import load_config
    from hbtool.qat.train import run_qat
    from hbtool.quant.calibrate import run_calibration, write_outputs

    held = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")
    images, labels = held["images"].astype(np.float32), held["labels"]
    feeds = [{"input": images[i:i + 1]} for i in range(len(images))]
    cfg = load_config(ROOT / "configs" / "tiny_cnn.yaml", overrides={
        "model_parameters": {"working_dir": str(work / f"tiny_cnn_{precision}")},
        "calibration_parameters": {"default_precision": precision, "auto_int16": False},
        "qat_parameters": {"steps": max(qat_steps, 1), "lr": 1e-3, "optimizer": "adam", "batch_size": 32, "train_scales": True,
                           "augment": ["crop", "color"]}})
    wd = Path(cfg.model.working_dir)
    row: dict = {"model": "tiny_cnn", "precision": precision, "metric": "top-1 (labels)"}
    calibration = run_calibration(cfg)
    write_outputs(cfg, calibration, "")
    nums = artifact_numbers(compile_model(cfg).data)
    outs, exact = simulate(nums.pop("art"), feeds, wd / "tiny_cnn_quantized_model.onnx")
    row.update(nums, ptq=float(np.mean([int(o.argmax()) for o in outs] == labels)), bit_exact=f"{exact}/{len(feeds)}")
    if qat_steps:
        t0 = time.time()
        result = run_qat(cfg, calibration=calibration)
        shutil.copy(result.path, calibrated_path(cfg))
        art = artifact_numbers(compile_model(cfg).data)["art"]
        q_onnx = quantized_onnx_of(cfg, Path(calibrated_path(cfg)), wd / "tiny_cnn_qat_quantized_model.onnx")
        q_outs, q_exact = simulate(art, feeds, q_onnx)
        row["qat"] = float(np.mean([int(o.argmax()) for o in q_outs] == labels))
        row["qat_bit_exact"] = f"{q_exact}/{len(feeds)}"
        row["qat_seconds"] = round(time.time() - t0, 1)
    return row


def corpus(name: str, precision: str, eval_n: int, work: Path) -> dict:
    import onnxruntime as ort

    from benchmarks.zoo.corpus import select
    from benchmarks.zoo.data import float_samples, samples

    from hbtool.compiler.compile import compile_model
    from hbtool.config import load_config
    from hbtool.quant.calibrate import run_calibration, write_outputs

    spec = select([name])[0]
    case = work / f"{name}_{precision}"
    shutil.rmtree(case, ignore_errors=True)
    (case / "cal").mkdir(parents=True)
    for k, s in enumerate(samples(spec, 8, 0)):
        np.save(case / "cal" / f"cal_{k:02d}.npy", s[spec.input_name])
    raw = corpus_config(spec, case, [case / "cal"], "default", 8)
    raw["calibration_parameters"]["default_precision"] = precision
    cfg = load_config(write_config(case / "config.yaml", raw))
    calibration = run_calibration(cfg)
    write_outputs(cfg, calibration, "")
    nums = artifact_numbers(compile_model(cfg).data)
    held = samples(spec, eval_n, 100)
    outs, exact = simulate(nums.pop("art"), held, case / "model_output" / f"{spec.name}_quantized_model.onnx")
    fsess = ort.InferenceSession(str(spec.onnx_path), providers=["CPUExecutionProvider"])
    ref = [fsess.run(None, f)[0] for f in float_samples(spec, held)]
    agree = float(np.mean([int(np.argmax(o)) == int(np.argmax(r)) for o, r in zip(outs, ref)]))
    cos = float(np.mean([float(np.dot(o.ravel(), r.ravel()) / max(np.linalg.norm(o) * np.linalg.norm(r), 1e-30)) for o, r in zip(outs, ref)]))
    return {"model": name, "precision": precision, "metric": f"top-1 agreement with float ({eval_n} samples)", "ptq": agree,
            "cosine": cos, "bit_exact": f"{exact}/{len(held)}", **nums}


def markdown(rows: list[dict]) -> str:
    header = ("model", "precision", "4-bit nodes", "PTQ", "PTQ+QAT", "output cosine", "weight bytes", "vs int8", "all constants",
              "est. FPS", "vs int8", "simulate == ONNX")
    base = {r["model"]: r for r in rows if r["precision"] == "int8"}  # rows of an int4-only run compare with themselves
    cells = []
    for r in rows:
        b = base.get(r["model"], r)
        cells.append([r["model"], r["precision"], r["int4_nodes"], f"{r['ptq']:.4f}", f"{r.get('qat', float('nan')):.4f}",
                      f"{r.get('cosine', float('nan')):.4f}", r["weight_bytes"], f"{r['weight_bytes'] / b['weight_bytes']:.1%}",
                      r["const_bytes"], f"{r['fps']:.0f}", f"{r['fps'] / b['fps']:.2f}x",
                      r["bit_exact"] + (f" (QAT {r['qat_bit_exact']})" if "qat_bit_exact" in r else "")])
    return markdown_table(header, cells).rstrip("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=["tiny_cnn", *CORPUS_DEFAULT])
    ap.add_argument("--qat-steps", type=int, default=40)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--out", type=Path, default=INT4_OUT)
    ap.add_argument("--precisions", nargs="*", default=["int8", "int4"])
    args = ap.parse_args()
    out = args.out
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        for precision in args.precisions:
            t0 = time.time()
            row = tiny_cnn(precision, args.qat_steps, work) if name == "tiny_cnn" else corpus(name, precision, args.eval, work)
            row["seconds"] = round(time.time() - t0, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            write_results(out, {"int4.json": rows, "int4.md": markdown(rows) + "\n"})
    print(markdown(rows))


if __name__ == "__main__":
    main()
