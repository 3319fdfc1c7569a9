"""Export the architectures of the published-speed rows to ONNX; runs inside the export venv.

timm, torchvision and ultralytics stay out of the project venv (see benchmarks/zoo/export_timm.py
for how that venv is made; ``pip install ultralytics`` was added to it for this script).
``perf_published.py`` calls it once with every missing model:

    $HBTOOL_TIMM_PYTHON benchmarks/published/export_models.py JOBS.json

where JOBS.json is a list of ``{"source": "timm"|"torchvision"|"ultralytics", "name": ..., "size": [H, W],
"out": path}``. Weights are random (``torch.manual_seed(0)``, nothing is downloaded): speed does not
depend on them.

How each family is made deployable the way the published bins were:

* timm models are exported as the zoo's classification READMEs export them: ``create_model`` and
  ``eval()``, no fusion, except MobileOne and RepVGG, which the zoo re-parameterizes first
  (``REPARAMETERIZED_FAMILIES``; FastViT, RepGhost and RepViT are deployed in their multi-branch form).
* ultralytics models are built from their model YAML (``yolov8n.yaml``...), fused (Conv+BN), and
  patched the way the RDK model zoo's export patch patches them (``ZOO_PATCH`` at ``ZOO_COMMIT``):
  the head ends at the raw per-level convolution outputs (classes, box 4*reg_max, then mask
  coefficients / keypoints), **each permuted to NHWC**, plus the NHWC mask prototypes for -seg;
  NMS-free models (v10, 26) keep their one-to-one branches; the classifier head has no softmax;
  attention (PSA ``Attention``, YOLO12 ``AAttn``) takes its softmax over dim 1 after a permute, as
  max / exp / sum / divide; opset 11. DFL, decoding and NMS are not in the measured time.
"""

from __future__ import annotations

import json
import sys
import types
import warnings

import torch

OPSET = 17


#: timm families the zoo exports re-parameterized (D-Robotics/rdk_model_zoo ``samples/vision/classification/
#: <Family>/README.md`` at ``ZOO_CLASSIFICATION_COMMIT``: MobileOne calls ``reparameterize_model``, RepVGG
#: ``repvgg_model_convert``); every other classifier is ``timm.create_model(name, pretrained=True).eval()``
#: exported as is (opset 11), multi-branch training form included (FastViT, RepGhost, RepViT: their
#: READMEs export the model without fusing it, and the published speeds are of those bins)
ZOO_CLASSIFICATION_COMMIT = "be4f89bd178ffe9b668bd3d431e0499df6b37fb1"
REPARAMETERIZED_FAMILIES = ("mobileone", "repvgg")


def _timm(name: str):
    import timm
    from timm.utils.model import reparameterize_model

    model = timm.create_model(name, pretrained=False, num_classes=1000).eval()
    return reparameterize_model(model) if name.startswith(REPARAMETERIZED_FAMILIES) else model


def _torchvision(name: str):
    import torchvision

    kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    return getattr(torchvision.models, name)(weights=None, **kwargs).eval()


#: The RDK model zoo's export patch these forwards follow (D-Robotics/rdk_model_zoo, pinned):
#: ``samples/vision/ultralytics_yolo/x86/export_monkey_patch.py`` and, for YOLO26,
#: ``samples/vision/ultralytics_yolo26/conversion/onnx_export/export_yolo26_detect_bpu.py``.
ZOO_COMMIT = "7b13d744d3aa3f6d8b02badfc52a27ccc6ea5e84"
ZOO_PATCH = "samples/vision/ultralytics_yolo/x86/export_monkey_patch.py"
#: the patch exports at opset 11 (Horizon's converter takes opset 10/11)
ULTRALYTICS_OPSET = 11


def _nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def _zoo_head_forward(self, x):
    """The zoo's Detect/Segment/Pose/OBB forward: per level the class branch, then the box branch, then
    the mask-coefficient / keypoint / angle branch (``cv4``), each permuted to NHWC; Segment adds its
    mask prototypes, NHWC too. End-to-end heads (YOLOv10, YOLO26) use their one-to-one branches."""
    one2one = getattr(self, "one2one_cv2", None) is not None
    box = self.one2one_cv2 if one2one else self.cv2
    cls = self.one2one_cv3 if one2one else self.cv3
    extra = getattr(self, "one2one_cv4", None) if one2one else None
    extra = extra if extra is not None else getattr(self, "cv4", None)
    res = []
    for i in range(self.nl):
        res.append(_nhwc(cls[i](x[i])))
        res.append(_nhwc(box[i](x[i])))
        if extra is not None:
            res.append(_nhwc(extra[i](x[i])))
    proto = getattr(self, "proto", None)
    if proto is not None:
        p = proto(x) if type(proto).__name__ == "Proto26" else proto(x[0])
        res.extend(_nhwc(t) for t in (p if isinstance(p, (tuple, list)) else [p]))
    return res


def _zoo_classify_forward(self, x):
    """The zoo's Classify forward: no softmax at the end (the logits are the output)."""
    x = torch.cat(x, 1) if isinstance(x, list) else x
    return self.linear(self.drop(self.pool(self.conv(x)).flatten(1)))


def _softmax_dim1(attn):
    """The patch's softmax: over dim 1 after a permute, as max / exp / sum / divide."""
    attn = attn.permute(0, 3, 1, 2).contiguous()
    e = torch.exp(attn - attn.max(dim=1, keepdim=True).values)
    return (e / e.sum(dim=1, keepdim=True)).permute(0, 2, 3, 1).contiguous()


def _zoo_attention_forward(self, x):
    """The zoo's Attention (PSA) forward."""
    B, C, H, W = x.shape
    N = H * W
    qkv = self.qkv(x)
    q, k, v = qkv.view(B, self.num_heads, self.key_dim * 2 + self.head_dim, N).split([self.key_dim, self.key_dim, self.head_dim], dim=2)
    attn = _softmax_dim1((q.transpose(-2, -1) @ k) * self.scale)
    x = (v @ attn.transpose(-2, -1)).view(B, C, H, W) + self.pe(v.reshape(B, C, H, W))
    return self.proj(x)


def _zoo_aattn_forward(self, x):
    """The zoo's AAttn (YOLO12 area attention) forward; ``all_head_dim`` where the patch writes C (equal there)."""
    B, _, H, W = x.shape
    C = self.all_head_dim
    N = H * W
    qkv = self.qkv(x).flatten(2).transpose(1, 2)
    if self.area > 1:
        qkv = qkv.reshape(B * self.area, N // self.area, C * 3)
        B, N, _ = qkv.shape
    q, k, v = qkv.view(B, N, self.num_heads, self.head_dim * 3).permute(0, 2, 3, 1).split([self.head_dim] * 3, dim=2)
    attn = _softmax_dim1((q.transpose(-2, -1) @ k) * (self.head_dim**-0.5))
    x = (v @ attn.transpose(-2, -1)).permute(0, 3, 1, 2)
    v = v.permute(0, 3, 1, 2)
    if self.area > 1:
        x = x.reshape(B // self.area, N * self.area, C)
        v = v.reshape(B // self.area, N * self.area, C)
        B, N, _ = x.shape
    x = x.reshape(B, H, W, C).permute(0, 3, 1, 2).contiguous()
    v = v.reshape(B, H, W, C).permute(0, 3, 1, 2).contiguous()
    return self.proj(x + self.pe(v))


def _ultralytics(name: str):
    from ultralytics import YOLO
    from ultralytics.nn.modules.block import AAttn, Attention
    from ultralytics.nn.modules.head import Classify, Detect

    model = YOLO(name).model
    model.fuse(verbose=False) if hasattr(model, "fuse") else None
    model = model.eval()
    for m in model.modules():
        if isinstance(m, Detect):
            m.forward = types.MethodType(_zoo_head_forward, m)
        elif isinstance(m, Classify):
            m.forward = types.MethodType(_zoo_classify_forward, m)
        elif type(m) is AAttn:
            m.forward = types.MethodType(_zoo_aattn_forward, m)
        elif type(m) is Attention:
            m.forward = types.MethodType(_zoo_attention_forward, m)
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
                opset = ULTRALYTICS_OPSET if job["source"] == "ultralytics" else OPSET
                torch.onnx.export(model, (torch.randn(1, 3, h, w),), job["out"], dynamo=False,
                                  opset_version=opset, input_names=["images"])
            print(f"exported {job['name']} -> {job['out']}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next model
            failed.append(job["name"])
            print(f"FAILED {job['name']}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    if failed:
        print("failed: " + ", ".join(failed), flush=True)


if __name__ == "__main__":
    main()
