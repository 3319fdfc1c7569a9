"""Export the architectures of the published-speed rows to ONNX; runs inside the export venv.

timm, torchvision and ultralytics stay out of the project venv (see benchmarks/zoo/export_timm.py
for how that venv is made; ``pip install ultralytics`` was added to it for this script).
``perf_published.py`` calls it once with every missing model:

    $HBTOOL_TIMM_PYTHON benchmarks/published/export_models.py JOBS.json

where JOBS.json is a list of ``{"source": "timm"|"torchvision"|"ultralytics", "name": ..., "size": [H, W],
"out": path}``. Weights are random (``torch.manual_seed(0)``, nothing is downloaded): speed does not
depend on them.

How each family is made deployable the way the published bins were:

* timm re-parameterisable models (MobileOne, RepVGG, RepGhost, FastViT, RepViT...) are fused with
  ``timm.utils.reparameterize_model`` first: the zoo deploys the fused single-branch form.
* ultralytics models are built from their model YAML (``yolov8n.yaml``...), fused (Conv+BN), and
  the detection head is cut where the zoo's export script cuts it: the graph ends at the raw
  per-level convolution outputs of every head branch (box 4*reg_max, classes, and mask
  coefficients / keypoints; the mask prototypes for -seg). NMS-free models (v10, 26) keep their
  one-to-one branches, as deployed. DFL, decoding and NMS are not in the measured time.
"""

from __future__ import annotations

import json
import sys
import types
import warnings

import torch

OPSET = 17


def _timm(name: str):
    import timm
    from timm.utils.model import reparameterize_model

    model = timm.create_model(name, pretrained=False, num_classes=1000).eval()
    return reparameterize_model(model)


def _torchvision(name: str):
    import torchvision

    kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    return getattr(torchvision.models, name)(weights=None, **kwargs).eval()


def _raw_head_forward(self, x):
    """Every head branch's last convolution, per level (the zoo's cut), plus mask prototypes."""
    heads = self.one2one if getattr(self, "one2one_cv2", None) is not None else self.one2many
    outs = []
    for i in range(self.nl):
        for branch in heads.values():
            if branch is not None and not isinstance(branch, (torch.Tensor,)):
                outs.append(branch[i](x[i]))
    proto = getattr(self, "proto", None)
    if proto is not None:
        p = proto(x) if type(proto).__name__ == "Proto26" else proto(x[0])
        outs.extend(p if isinstance(p, (tuple, list)) else [p])
    return outs


def _ultralytics(name: str):
    from ultralytics import YOLO
    from ultralytics.nn.modules.head import Detect

    model = YOLO(name).model
    model.fuse(verbose=False) if hasattr(model, "fuse") else None
    model = model.eval()
    for m in model.modules():
        if isinstance(m, Detect):
            m.forward = types.MethodType(_raw_head_forward, m)
        if hasattr(m, "export"):
            m.export = True
    return model


BUILDERS = {"timm": _timm, "torchvision": _torchvision, "ultralytics": _ultralytics}


def main() -> None:
    jobs = json.load(open(sys.argv[1], encoding="utf-8"))
    failed = []
    for job in jobs:
        torch.manual_seed(0)
        h, w = job["size"]
        try:
            model = BUILDERS[job["source"]](job["name"])
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(model, (torch.randn(1, 3, h, w),), job["out"], dynamo=False,
                                  opset_version=OPSET, input_names=["images"])
            print(f"exported {job['name']} -> {job['out']}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next model
            failed.append(job["name"])
            print(f"FAILED {job['name']}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    if failed:
        print("failed: " + ", ".join(failed), flush=True)


if __name__ == "__main__":
    main()
