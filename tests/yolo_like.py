"""A YOLOv8-style detector export: DFL-decoded boxes in pixels concatenated with sigmoid class scores.

Ultralytics' ``Detect`` head ends ``cat((dbox, cls.sigmoid()), 1)`` in one output of shape
``1 x (4 + nc) x anchors``: four box channels in pixels (0 to the image size and beyond) beside
class scores that are near 0 almost everywhere. Judged as one tensor the box channels hide the
scores; quantized with one scale the scores all become 0 (issue 30).

No trained weights ship with any wheel we may use, so the detector is built by hand with the
head's exact structure (per-level 1x1 heads, the level concatenation, the box/class split, DFL's
softmax over 16 bins and its fixed ``arange`` convolution, ``dist2bbox``, the stride multiply,
the final concatenation) and weights that make its scores behave like a trained model's: images
are coloured shapes on a textured background; a class is a colour, and its logit falls with the
mean L1 distance of a cell's pixels to that colour, so a cell inside a shape scores ~0.97 and
background ~1e-3, with partial scores at shape edges and between similar colours. Boxes come from
a fixed random box branch through the real DFL decoding, in pixels. Used by
tests/unit/quant/test_outputs_judged_channel_by_channel.py and benchmarks/yolo_scores.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

IMAGE = 320
STRIDES = (8, 16, 32)
REG_MAX = 16
PALETTE = np.array([
    (0.95, 0.1, 0.1), (0.1, 0.85, 0.1), (0.15, 0.2, 0.95), (0.95, 0.9, 0.1), (0.1, 0.9, 0.9), (0.9, 0.1, 0.9),
    (1.0, 0.55, 0.05), (0.95, 0.95, 0.95), (1.0, 0.6, 0.8), (0.6, 1.0, 0.2),
], np.float32)
#: per level, the box half-size in cells that DFL's 16 bins centre on (~150 px boxes: one object, few boxes after NMS)
BOX_CELLS = (9.0, 4.5, 2.5)
NUM_CLASSES = len(PALETTE)


def render_images(count: int, seed: int, size: int = IMAGE) -> tuple[np.ndarray, list[list[tuple[int, tuple[int, int, int, int]]]]]:
    """``count`` images (N, 3, size, size) in [0, 1] with 1-4 shapes each, and their (class, box) truths."""
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    images, truths = [], []
    for _ in range(count):
        base = rng.uniform(0.25, 0.45, 3)
        texture = rng.normal(0, 0.06, (size // 8, size // 8, 3))
        bg = np.clip(base + np.kron(texture, np.ones((8, 8, 1))) + rng.normal(0, 0.03, (size, size, 3)), 0, 1)
        img = Image.fromarray((bg * 255).astype(np.uint8))
        draw = ImageDraw.Draw(img)
        objs = []
        for _ in range(int(rng.integers(1, 5))):
            c = int(rng.integers(NUM_CLASSES))
            w, h = (int(v) for v in rng.integers(28, 120, 2))
            x0, y0 = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
            colour = tuple(int(v * 255) for v in np.clip(PALETTE[c] + rng.normal(0, 0.04, 3), 0, 1))
            (draw.ellipse if rng.random() < 0.4 else draw.rectangle)([x0, y0, x0 + w, y0 + h], fill=colour)
            objs.append((c, (x0, y0, x0 + w, y0 + h)))
        img = img.filter(ImageFilter.GaussianBlur(0.8))
        images.append(np.asarray(img, np.float32).transpose(2, 0, 1) / 255.0)
        truths.append(objs)
    return np.stack(images).astype(np.float32), truths


def build_torch_model(seed: int = 0):
    """The detector as a torch module (the Ultralytics Detect head's structure, inference path)."""
    import torch
    from torch import nn

    nc, feats = NUM_CLASSES, 6 * NUM_CLASSES
    g = torch.Generator().manual_seed(seed)

    class DFL(nn.Module):
        """Ultralytics' Distribution Focal Loss integral: softmax over 16 bins, then a fixed arange conv."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(REG_MAX, 1, 1, bias=False).requires_grad_(False)
            self.conv.weight.data[:] = torch.arange(REG_MAX, dtype=torch.float).view(1, REG_MAX, 1, 1)

        def forward(self, x):
            b, _, a = x.shape
            return self.conv(x.view(b, 4, REG_MAX, a).transpose(2, 1).softmax(1)).view(b, 4, a)

    class Detector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # colour distance features: relu(x - c) and relu(c - x) per class and channel (their sum is |x - c|)
            self.stem = nn.Conv2d(3, feats, 1)
            w = torch.zeros(feats, 3, 1, 1)
            b = torch.zeros(feats)
            for c in range(nc):
                for ch in range(3):
                    w[6 * c + 2 * ch, ch] = 1.0
                    b[6 * c + 2 * ch] = -float(PALETTE[c, ch])
                    w[6 * c + 2 * ch + 1, ch] = -1.0
                    b[6 * c + 2 * ch + 1] = float(PALETTE[c, ch])
            self.stem.weight.data, self.stem.bias.data = w, b
            self.mix = nn.Conv2d(feats, feats, 3, padding=1)   # a trained layer's worth of mixing, near identity
            self.mix.weight.data = torch.randn(feats, feats, 3, 3, generator=g) * 0.004
            self.mix.weight.data[:, :, 1, 1] += torch.eye(feats)
            self.mix.bias.data.zero_()
            self.cls = nn.ModuleList()
            self.box = nn.ModuleList()
            for k in range(len(STRIDES)):
                cls = nn.Conv2d(feats, nc, 1)
                cw = torch.zeros(nc, feats, 1, 1)
                for c in range(nc):
                    cw[c, 6 * c:6 * c + 6] = -8.0
                cls.weight.data = cw
                cls.bias.data = torch.full((nc,), 8.0 * 0.35) - 0.3 * k
                # bins peaked near the level's typical half-size, moved a little by the features
                box = nn.Conv2d(feats, 4 * REG_MAX, 1)
                box.weight.data = torch.randn(4 * REG_MAX, feats, 1, 1, generator=g) * 0.15
                bins = torch.arange(REG_MAX, dtype=torch.float).repeat(4)
                box.bias.data = -0.12 * (bins - BOX_CELLS[k]) ** 2 + torch.randn(4 * REG_MAX, generator=g) * 0.3
                self.cls.append(cls)
                self.box.append(box)
            self.dfl = DFL()
            anchors, strides = [], []
            for s in STRIDES:
                n = IMAGE // s
                sy, sx = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
                anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
                strides.append(torch.full((n * n, 1), float(s)))
            self.register_buffer("anchors", torch.cat(anchors).transpose(0, 1))   # (2, A)
            self.register_buffer("strides", torch.cat(strides).transpose(0, 1))   # (1, A)

        def forward(self, x):
            f = self.mix(torch.relu(self.stem(x)))
            levels = []
            for k, s in enumerate(STRIDES):
                p = nn.functional.avg_pool2d(f, s, s)
                y = torch.cat((self.box[k](p), self.cls[k](p)), 1)
                levels.append(y.view(1, 4 * REG_MAX + nc, -1))
            x_cat = torch.cat(levels, 2)
            box, cls = x_cat.split((4 * REG_MAX, nc), 1)
            lt, rb = self.dfl(box).chunk(2, 1)                 # dist2bbox, xywh
            anchors = self.anchors.unsqueeze(0)
            x1y1, x2y2 = anchors - lt, anchors + rb
            dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
            return torch.cat((dbox, cls.sigmoid()), 1)

    return Detector().eval()


def export_onnx(path: Path, seed: int = 0) -> Path:
    """Export the detector (opset 17, input ``images`` 1x3x320x320, output ``output0`` 1x(4+nc)xA)."""
    import torch

    model = build_torch_model(seed)
    torch.onnx.export(model, torch.zeros(1, 3, IMAGE, IMAGE), str(path), input_names=["images"], output_names=["output0"],
                      opset_version=17, dynamo=False)
    return path


# ------------------------------------------------------------------ detections and their agreement

def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of one xyxy box with many."""
    x1, y1 = np.maximum(a[0], b[:, 0]), np.maximum(a[1], b[:, 1])
    x2, y2 = np.minimum(a[2], b[:, 2]), np.minimum(a[3], b[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda r: (r[..., 2] - r[..., 0]) * (r[..., 3] - r[..., 1])  # noqa: E731
    return inter / np.maximum(area(a) + area(b) - inter, 1e-9)


def detections(output: np.ndarray, conf: float = 0.25, iou: float = 0.45) -> list[tuple[int, np.ndarray, float]]:
    """Ultralytics-style post-processing of one ``(4 + nc, A)`` output: best class per anchor, class-aware NMS."""
    boxes, scores = output[:4].T.astype(np.float64), output[4:].T.astype(np.float64)
    cls, best = scores.argmax(1), scores.max(1)
    keep = best > conf
    xyxy = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], 1)[keep]
    cls, best = cls[keep], best[keep]
    out = []
    for c in np.unique(cls):
        idx = np.where(cls == c)[0]
        idx = idx[np.argsort(-best[idx], kind="stable")]
        while idx.size:
            i = idx[0]
            out.append((int(c), xyxy[i], float(best[i])))
            idx = idx[1:][_iou(xyxy[i], xyxy[idx[1:]]) < iou]
    return out


def match_f1(reference: list, test: list, iou: float = 0.5) -> tuple[int, int, int]:
    """(true positives, reference count, test count): greedy same-class matches with IoU >= ``iou``."""
    used = set()
    tp = 0
    for c, box, _ in sorted(reference, key=lambda d: -d[2]):
        cands = [(k, d) for k, d in enumerate(test) if d[0] == c and k not in used]
        if not cands:
            continue
        ious = _iou(box, np.stack([d[1] for _, d in cands]))
        j = int(np.argmax(ious))
        if ious[j] >= iou:
            used.add(cands[j][0])
            tp += 1
    return tp, len(reference), len(test)


def f1_against_float(float_outputs: np.ndarray, test_outputs: np.ndarray) -> float:
    """F1 of the test model's detections against the float model's over a batch (N, 4 + nc, A)."""
    tp = nr = nt = 0
    for r, t in zip(float_outputs, test_outputs):
        a, b, c = match_f1(detections(r), detections(t))
        tp, nr, nt = tp + a, nr + b, nt + c
    if nr == 0 and nt == 0:
        return 1.0
    return 2 * tp / max(nr + nt, 1)


# ------------------------------------------------------------------ the pipeline on it (test and benchmark)

def build(march: str, model: Path, cal_dir: Path, work: Path, calibration: dict | None = None, input_shape: str | None = None):
    """Calibrate (default settings unless ``calibration``) and compile; (result, compiled). ``input_shape``
    fixes a model's dynamic input (NudeNet's YOLOv8n: ``1x3x320x320``)."""
    from hbtool.compiler.compile import compile_model
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration, write_outputs

    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(model), "working_dir": str(work), "march": march, "output_model_file_prefix": "y"},
        "input_parameters": {"input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess",
                             **({"input_name": "images", "input_shape": input_shape} if input_shape else {})},
        "calibration_parameters": {"cal_data_dir": str(cal_dir), **(calibration or {})},
    }, base_dir=work)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    return cfg, result, compile_model(cfg)


def quantized_outputs(result, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    from hbtool.ir.onnx_export import to_onnx

    sess = ort.InferenceSession(to_onnx(result.quantized, stage="quantized").SerializeToString(), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"images": images[i:i + 1]})[0] for i in range(len(images))])


def float_outputs(model: Path, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {"images": images[i:i + 1]})[0] for i in range(len(images))])


def fps(compiled) -> float:
    from hbtool.costmodel.schedule import estimate

    return float(estimate(compiled.header, None, program=compiled.program).fps)


def write_calibration(folder: Path, count: int, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    images, _ = render_images(count, seed)
    for i, img in enumerate(images):
        np.save(folder / f"{i:03d}.npy", img[None])
    return folder
