"""Export ``timm`` models to ONNX; runs inside the separate export venv, not the project's.

timm (and its torch/torchvision pins) stay out of the project venv. Recreate the venv with

    python3 -m venv ~/venvs/zoo-export
    ~/venvs/zoo-export/bin/pip install torch==2.14.1 torchvision==0.29.1 timm onnx
    export HBTOOL_TIMM_PYTHON=~/venvs/zoo-export/bin/python     # or export.py --timm-python

(On this machine that resolved to the CUDA build of torch, 5.6 GB in all; ultralytics was left
out for that reason: it would add opencv and more.) ``export.py`` calls this script with that
venv's python, one model per call:

    $HBTOOL_TIMM_PYTHON benchmarks/zoo/export_timm.py NAME OPSET SIZE OUT.onnx [--zero-init-last]

Weights are timm's own initialisation under ``torch.manual_seed(0)`` (``pretrained=False``;
nothing downloaded). ``--zero-init-last`` keeps timm's ``zero_init_last=True`` (the last BN of
every residual block has gamma = 0, so that branch's output is identically zero, a zero-range
tensor); without it a ResNet is built with ``zero_init_last=False``. Other models keep timm's
defaults (RegNet's is ``zero_init_last=True`` as well).
"""

from __future__ import annotations

import argparse
import warnings

import timm
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("opset", type=int)
    ap.add_argument("size", type=int)
    ap.add_argument("out")
    ap.add_argument("--zero-init-last", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    kwargs = {}
    if args.name.startswith("resnet"):
        kwargs["zero_init_last"] = args.zero_init_last
    model = timm.create_model(args.name, pretrained=False, num_classes=1000, **kwargs).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, args.size, args.size),), args.out, dynamo=False,
                          opset_version=args.opset, input_names=["pixel_values"], output_names=["output"])


if __name__ == "__main__":
    main()
