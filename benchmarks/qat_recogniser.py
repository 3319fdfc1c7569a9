"""Label-free QAT of a real trained text recogniser from the conformance corpus (issue 13's bar).

Renders text lines (benchmarks/zoo/data.py), calibrates with hbtool's default calibration (every
BPU activation quantized, int16 where calibration chooses it), measures PTQ, trains with
distillation from the float model (``hbtool.qat.run_qat``, no labels), measures again, and
checks that compile + simulate of the exported ``*_qat_model.onnx`` equals the QAT module.

Metrics on held-out rendered lines (CTC greedy decode, benchmarks/zoo/metrics.py):
* agreement: exact transcription equality with the float model;
* char accuracy: 1 - edit distance / length against the rendered text (the ground truth).

The validation lines are the first ``--val`` indices from 50,000 whose text no training line
carries, each text once (``unseen_ids``), with 95% bootstrap intervals over those lines (for char accuracy, of the paired difference to float).

    python -m benchmarks.qat_recogniser --model ppocrv6_tiny_rec --train 4096 --val 200 --steps 200

``--time-steps N --device cuda`` only times N training steps (the GPU vs CPU step time).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import _text
from benchmarks.configs import corpus_config
from benchmarks.paths import OUT
from benchmarks.zoo import data as zoo_data
from benchmarks.zoo import metrics as zoo_metrics
from benchmarks.zoo.corpus import CORPUS
from benchmarks.zoo.data import truth  # the ground truth of a rendered line

TRAIN_OFFSET, VAL_OFFSET = 100_000, 50_000
# the corpus renderer re-parses the standard library for every line; once is enough here
_text.stdlib_sentences = functools.lru_cache(maxsize=None)(_text.stdlib_sentences)


def render(spec, count: int, offset: int, path: Path) -> np.ndarray:
    """``count`` rendered lines as one stacked uint8 .npy (cached)."""
    if path.exists() and np.load(path, mmap_mode="r").shape[0] == count:
        return np.load(path, mmap_mode="r")
    arr = np.concatenate([zoo_data.image_sample(spec, offset + k) for k in range(count)]).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, arr)
    return arr


def render_ids(spec, ids: list[int], path: Path) -> np.ndarray:
    """The lines of sample indices ``ids`` as one stacked uint8 .npy (cached with the ids beside it)."""
    tag = path.with_suffix(".ids.json")
    if path.exists() and tag.exists() and json.loads(tag.read_text()) == ids:
        return np.load(path, mmap_mode="r")
    arr = np.concatenate([zoo_data.image_sample(spec, i) for i in ids]).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, arr)
    tag.write_text(json.dumps(ids))
    return arr


def unseen_ids(spec, count: int, seen: set[str], start: int) -> list[int]:
    """The first ``count`` sample indices from ``start`` whose text no training line carries, each
    text once: a held-out set of unseen text (the rendered lines are sentence prefixes, so many
    indices repeat a training text)."""
    ids, texts, k = [], set(), start
    while len(ids) < count:
        t = truth(spec, k)
        if t not in seen and t not in texts:
            ids.append(k)
            texts.add(t)
        k += 1
        if k - start > 200 * count:
            raise SystemExit(f"only {len(ids)} unseen texts in {200 * count} lines: use fewer --train lines")
    return ids


def charset(spec) -> list[str]:
    from benchmarks.zoo import run as zoo_run

    return zoo_run._charset(spec)


def outputs(module, images: np.ndarray, device: str, chunk: int = 32) -> np.ndarray:
    outs = []
    with torch.no_grad():
        for s in range(0, len(images), chunk):
            x = torch.from_numpy(np.asarray(images[s:s + chunk], np.float32)).to(device)
            outs.append(module(x)[0].cpu().numpy())
    return np.concatenate(outs)


def transcripts(out: np.ndarray, chars: list[str]) -> list[str]:
    return [zoo_metrics.ctc_greedy(o, chars) for o in out]


def line_accuracy(got: list[str], gt: list[str]) -> np.ndarray:
    """Per line: 1 - edit distance / length against the ground truth."""
    return np.array([1 - zoo_metrics._edit_distance(a, b) / max(len(b), 1) for a, b in zip(got, gt)])


def scores(got: list[str], flt: list[str], gt: list[str], boot: int = 10_000) -> dict[str, float]:
    """Agreement and char accuracy, with 95% bootstrap intervals over the lines; for a model other
    than float also the paired interval of its char accuracy minus float's (the same lines resampled)."""
    rng = np.random.default_rng(0)
    agree = np.array([a == b for a, b in zip(got, flt)], np.float64)
    acc, acc_f = line_accuracy(got, gt), line_accuracy(flt, gt)
    picks = rng.integers(0, len(got), (boot, len(got)))
    row = {"agreement": float(agree.mean()), "char_acc": float(acc.mean())}
    row["agreement_ci95"] = [float(v) for v in np.percentile(agree[picks].mean(axis=1), [2.5, 97.5])]
    diff = acc - acc_f
    if np.any(diff != 0) or np.any(agree != 1):
        row["char_acc_minus_float"] = float(diff.mean())
        row["char_acc_minus_float_ci95"] = [float(v) for v in np.percentile(diff[picks].mean(axis=1), [2.5, 97.5])]
    return row


def cached_transcripts(path: Path, compute) -> list[str]:
    """Transcripts of the float / PTQ model on the validation lines, computed once per work folder."""
    if path.exists():
        return json.loads(path.read_text())
    texts = compute()
    path.write_text(json.dumps(texts))
    return texts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="ppocrv6_tiny_rec")
    ap.add_argument("--train", type=int, default=4096)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--loss", default="kl", choices=("distill", "kl"))
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--schedule", default="cosine", choices=("constant", "cosine"))
    ap.add_argument("--train-scales", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--time-steps", type=int, default=0, help="only time this many training steps")
    ap.add_argument("--work", default=str(OUT / "qat_recogniser"))
    ap.add_argument("--out", default=None, help="write the numbers as JSON here")
    ap.add_argument("--eval-checkpoint", default=None, help="only evaluate the weights of this qat checkpoint")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from hbtool.config import config_from_dict
    from hbtool.qat.module import FloatGraphModule
    from hbtool.qat.train import build_model, run_qat
    from hbtool.quant.calibrate import run_calibration

    spec = next(s for s in CORPUS if s.name == args.model)
    work = Path(args.work) / args.model
    t0 = time.perf_counter()
    train = render(spec, args.train, TRAIN_OFFSET, work / "train" / "lines.npy")
    train_texts = {truth(spec, TRAIN_OFFSET + k) for k in range(args.train)}
    val_ids = unseen_ids(spec, args.val, train_texts, VAL_OFFSET)
    val = render_ids(spec, val_ids, work / "val.npy")
    render_s = time.perf_counter() - t0
    raw = corpus_config(spec, work, [work / "train"], "default", 32)
    raw["qat_parameters"] = {"train_data_dir": str(work / "train"), "steps": args.time_steps or args.steps, "lr": args.lr,
                             "batch_size": args.batch, "optimizer": "adam", "val_samples": 8, "device": args.device,
                             "loss": args.loss, "temperature": args.temperature, "lr_schedule": args.schedule,
                             "train_scales": args.train_scales}
    cfg = config_from_dict(raw, base_dir=work)
    t1 = time.perf_counter()
    calibration = run_calibration(cfg)
    cal_s = time.perf_counter() - t1
    chars = charset(spec)
    row: dict = {"model": args.model, "train_lines": args.train, "val_lines": args.val, "batch": args.batch, "lr": args.lr,
                 "loss": args.loss, "temperature": args.temperature, "schedule": args.schedule, "train_scales": args.train_scales,
                 "threads": args.threads, "device": args.device, "render_s": round(render_s, 1), "calibrate_s": round(cal_s, 1),
                 "calibration": calibration.method}
    if not args.time_steps:
        gt = [truth(spec, i) for i in val_ids]
        row["val_texts_seen_in_training"] = sum(t in train_texts for t in gt)   # 0 by construction (unseen_ids)
        row["val_index_span"] = [val_ids[0], val_ids[-1]]
        tag = f"{args.val}_{calibration.method}"
        ref = cached_transcripts(work / f"float_{tag}.json", lambda: transcripts(
            outputs(FloatGraphModule(calibration.graph).to_device(args.device), val, args.device), chars))
        ptq = cached_transcripts(work / f"ptq_{tag}.json", lambda: transcripts(
            outputs(build_model(cfg, calibration).to_device(args.device), val, args.device), chars))
        # scored on the lines whose text no training line carries (the held-out set proper)
        keep = [k for k, t in enumerate(gt) if t not in train_texts]
        row["val_lines_scored"] = len(keep)

        def held_out(texts: list[str]) -> dict[str, float]:
            return scores([texts[k] for k in keep], [ref[k] for k in keep], [gt[k] for k in keep])

        row["float"] = held_out(ref)
        row["ptq"] = held_out(ptq)
        print(json.dumps(row), flush=True)
    if args.eval_checkpoint:
        model = build_model(cfg, calibration).to_device(args.device)
        model.load_state_dict(torch.load(args.eval_checkpoint, map_location=args.device, weights_only=False)["model"])
        texts = transcripts(outputs(model, val, args.device), chars)
        Path(args.eval_checkpoint).with_suffix(".transcripts.json").write_text(json.dumps(texts))
        row["qat"] = held_out(texts)
        print(json.dumps(row), flush=True)
        return
    stamps = []

    def progress(step, total, loss):
        stamps.append(time.perf_counter())
        loads.append(os.getloadavg()[0])
        if step % 4 == 0 or step == total:
            print(f"step {step}/{total} loss {loss:.5f} {stamps[-1] - t2:.0f}s", flush=True)

    loads = [os.getloadavg()[0]]

    t2, c2 = time.perf_counter(), time.process_time()
    result = run_qat(cfg, progress=progress, calibration=calibration, export=not args.time_steps)
    row["qat_s"] = round(time.perf_counter() - t2, 1)
    row["qat_cpu_s"] = round(time.process_time() - c2, 1)  # CPU seconds of this process (both threads)
    row["hbtool_qat_s"] = round(row["calibrate_s"] + row["qat_s"], 1)  # what `hbtool qat` does: calibrate, train, export
    loads.append(os.getloadavg()[0])
    row["load_avg_1min"] = [round(min(loads), 1), round(max(loads), 1)]
    if len(stamps) > 2:
        row["step_s"] = round(float(np.median(np.diff(stamps))), 3)
    if not args.time_steps:
        qat = outputs(result.model, val, args.device)
        texts = transcripts(qat, chars)
        (work / "qat_transcripts.json").write_text(json.dumps(texts))
        row["qat"] = held_out(texts)
        # the exported model, compiled and simulated, is the module
        import shutil

        from hbtool.compiler.artifact import from_bytes
        from hbtool.compiler.compile import calibrated_path, compile_model
        from hbtool.simulator.executor import Executor

        shutil.copy(result.path, calibrated_path(cfg))
        ex = Executor(from_bytes(compile_model(cfg).data))
        sim = np.concatenate([ex.run({spec.input_name: np.asarray(val[k:k + 1], np.float32)})[ex.output_names[0]] for k in range(8)])
        lsb = result.model.plan.tensors[calibration.graph.outputs[0]].scale
        row["sim_vs_module_max_lsb"] = float(np.abs(sim - qat[:8]).max() / lsb)
    row["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
