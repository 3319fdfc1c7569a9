"""The published on-board speed rows and the architecture hbtool builds for each.

``published_perf_calibration.csv`` in the reference folder (``HBTOOL_REFERENCE``, :mod:`benchmarks.paths`) is the fit set
(57 rows copied from D-Robotics/rdk_model_zoo, see the reference folder's ``published_perf.md``); ``HOLDOUT`` are further points of the same
repository that the parameters were NOT fitted to (read from its READMEs; see ``docs/perf.md``
for how they were kept apart). ``ARCHITECTURES`` maps a row's variant to how its ONNX is made:
``(source, name)`` with source ``timm``, ``torchvision`` or ``ultralytics`` (a model YAML with
random weights); a variant missing there cannot be rebuilt faithfully and is reported as skipped.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from benchmarks.paths import MODELS, ROOT, reference  # noqa: F401  ROOT: re-exported for perf_published

CALIBRATION_CSV = "published_perf_calibration.csv"
CACHE = MODELS / "published"

#: variant -> (source, name); ultralytics names are model YAMLs (scale letter in the name)
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "GoogLeNet": ("torchvision", "googlenet"),
    "MobileNetv1": ("timm", "mobilenetv1_100"),
    "YOLOv8m-CLS": ("ultralytics", "yolov8m-cls.yaml"),
    "YOLO11n-CLS": ("ultralytics", "yolo11n-cls.yaml"),
    "YOLO11l-CLS": ("ultralytics", "yolo11l-cls.yaml"),
    "YOLOv5su": ("ultralytics", "yolov5su.yaml"),
    "YOLOv5xu": ("ultralytics", "yolov5xu.yaml"),
    "YOLOv8m": ("ultralytics", "yolov8m.yaml"),
    "YOLOv9t": ("ultralytics", "yolov9t.yaml"),
    "YOLOv9c": ("ultralytics", "yolov9c.yaml"),
    "YOLOv10n": ("ultralytics", "yolov10n.yaml"),
    "YOLOv10s": ("ultralytics", "yolov10s.yaml"),
    "YOLOv10l": ("ultralytics", "yolov10l.yaml"),
    "YOLO11s": ("ultralytics", "yolo11s.yaml"),
    "YOLO11x": ("ultralytics", "yolo11x.yaml"),
    "YOLO12m": ("ultralytics", "yolo12m.yaml"),
    "YOLOv8m-Seg": ("ultralytics", "yolov8m-seg.yaml"),
    "YOLOv9c-Seg": ("ultralytics", "yolov9c-seg.yaml"),
    "YOLO11s-Seg": ("ultralytics", "yolo11s-seg.yaml"),
    "YOLO11x-Seg": ("ultralytics", "yolo11x-seg.yaml"),
    "YOLOv8m-Pose": ("ultralytics", "yolov8m-pose.yaml"),
    "YOLO11n-Pose": ("ultralytics", "yolo11n-pose.yaml"),
    "YOLO11l-Pose": ("ultralytics", "yolo11l-pose.yaml"),
    "YOLO26s Detect": ("ultralytics", "yolo26s.yaml"),
    "YOLO26x Detect": ("ultralytics", "yolo26x.yaml"),
}
#: rows hbtool cannot rebuild faithfully, and why (reported, never estimated from a stand-in)
SKIPPED: dict[str, str] = {
    "VargConvNet": "no public definition in timm/torchvision",
    "YOLOv13n": "YOLOv13 is not in the ultralytics package",
    "YOLOv13x": "YOLOv13 is not in the ultralytics package",
    "YOLOv5s_v2.0": "anchor-based YOLOv5 v2.0 (the original repository), not in the ultralytics package",
    "YOLOv5x_v2.0": "anchor-based YOLOv5 v2.0 (the original repository), not in the ultralytics package",
    "YOLOv5m_v7.0": "anchor-based YOLOv5 v7.0 (the original repository), not in the ultralytics package",
    "YOLOv5x_v7.0": "anchor-based YOLOv5 v7.0 (the original repository), not in the ultralytics package",
    "fcos_efficientnetb0": "Horizon's FCOS sample, not a public ONNX",
    "PP-OCRv3_det": "PaddleOCR model (paddle2onnx), not in the export venv",
    "PP-OCRv3_rec": "PaddleOCR model (paddle2onnx), not in the export venv",
    "YOLOE-11S-Seg": "prompt-free YOLOE adds a vocabulary head the YAML does not build as deployed",
}


#: Precision settings of the zoo's own config for a row, where they change what is computed (hb_mapper
#: keeps everything int8 unless asked). (march, variant) -> (calibration_parameters keys, where it is written).
#: Per-node ``node_info`` int16 requests (a few Softmax nodes in most X5 classifier configs) are not carried
#: over: their node names depend on the export, and a handful of int16 Softmaxes moves no row by more than
#: a few per cent. J5 (``bayes``) promotes LUT inputs to int16 by hbtool's own default; the zoo's Ultra
#: YOLO bins are int8 (ultralytics_YOLO/x86/mapper.py: calibration_type default, Softmax int8), so the
#: Ultra rows turn ``auto_int16`` off.
_CFG = "demos/classification/{}/yaml/{}_config.yaml"
ROW_CALIBRATION: dict[tuple[str, str], tuple[dict, str]] = {
    ("bayes-e", "EfficientFormer_l1"): ({"optimization": "set_all_nodes_int16"}, _CFG.format("EfficientFormer", "EfficientFormer_l1") + "@01b43180"),
    ("bayes-e", "EfficientFormer_l3"): ({"optimization": "set_all_nodes_int16"}, _CFG.format("EfficientFormer", "EfficientFormer_l3") + "@01b43180"),
    ("bayes-e", "EfficientFormerv2_s0"): ({"optimization": "set_all_nodes_int16"}, _CFG.format("EfficientFormerV2", "EfficientFormerv2_s0") + "@6a2ee489"),
}
ULTRA_CALIBRATION = ({"auto_int16": False}, "demos/Vision/ultralytics_YOLO/x86/mapper.py@934a3486 (int8, Softmax int8)")


def row_calibration(march: str, variant: str) -> dict:
    """The calibration_parameters keys of the row's published build (empty: hbtool's quick-path defaults)."""
    if march == "bayes":
        return dict(ULTRA_CALIBRATION[0])
    return dict(ROW_CALIBRATION.get((march, variant), ({}, ""))[0])


@dataclass(frozen=True)
class Row:
    model: str
    variant: str
    march: str
    board: str
    height: int
    width: int
    latency_ms: float | None
    fps_multithread: float | None
    threads: int | None
    fps_1thread: float | None
    source: str                  # where the point was published (repo path)
    split: str                   # "fit" (calibration csv) or "holdout"

    @property
    def arch(self) -> tuple[str, str] | None:
        if self.variant in ARCHITECTURES:
            return ARCHITECTURES[self.variant]
        return None

    @property
    def calibration(self) -> dict:
        return row_calibration(self.march, self.variant)

    @property
    def onnx(self) -> Path | None:
        a = self.arch
        if a is None:
            return None
        stem = a[1].replace(".yaml", "").replace("/", "_")
        return CACHE / f"{a[0]}_{stem}_{self.height}x{self.width}.onnx"


def _num(s: str) -> float | None:
    s = (s or "").strip()
    return float(s) if s else None


def calibration_rows(path: Path | None = None) -> list[Row]:
    """The fit rows, from ``path`` (default: ``published_perf_calibration.csv`` of ``HBTOOL_REFERENCE``)."""
    path = path or reference(CALIBRATION_CSV)
    rows = []
    with open(path, encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            h, w = (int(v) for v in r["input_hw"].split("x"))
            if r["timm_name"] and r["variant"] not in ARCHITECTURES:
                ARCHITECTURES[r["variant"]] = ("timm", r["timm_name"])
            threads = _num(r["threads"])
            rows.append(Row(r["model"], r["variant"], r["march"], r["board"], h, w, _num(r["latency_ms"]),
                            _num(r["fps_multithread"]), int(threads) if threads else None, _num(r["fps_1thread"]),
                            r["source_path"], "fit"))
    return rows


#: Held-out points: D-Robotics/rdk_model_zoo demos/classification/README.md (commit 0a290df9b294d216efa9efb64fdc4c52f7d64f3b),
#: the RDK X5 table's rows that are NOT in the calibration csv: (variant, timm name, latency ms, FPS with 4 threads).
#: Read once to build this list; no parameter was changed after looking at their errors (see docs/perf.md).
HOLDOUT_X5_CLASSIFICATION: tuple[tuple[str, str, float, float], ...] = (
    ("EdgeNeXt_base", "edgenext_base", 8.80, 113.35),
    ("EdgeNeXt_x_small", "edgenext_x_small", 2.88, 345.73),
    ("EdgeNeXt_xx_small", "edgenext_xx_small", 2.47, 403.49),
    ("EfficientFormer_l1", "efficientformer_l1", 5.88, 191.605),
    ("EfficientFormerv2_s2", "efficientformerv2_s2", 6.99, 152.40),
    ("EfficientFormerv2_s0", "efficientformerv2_s0", 5.79, 198.45),
    ("EfficientViT_MSRA_m5", "efficientvit_m5", 6.34, 174.70),
    ("FastViT_S12", "fastvit_s12", 5.86, 193.87),
    ("FastViT_T12", "fastvit_t12", 4.97, 234.78),
    ("RepVGG_B1g4", "repvgg_b1g4", 7.58, 144.39),
    ("RepVGG_A2", "repvgg_a2", 6.07, 186.04),
    ("RepVGG_A1", "repvgg_a1", 2.67, 482.20),
    ("RepViT_m1_1", "repvit_m1_1", 2.32, 590.42),
    ("RepViT_m1_0", "repvit_m1_0", 1.97, 692.29),
    ("MobileOne_S3", "mobileone_s3", 2.93, 437.85),
    ("MobileOne_S2", "mobileone_s2", 2.11, 653.68),
    ("MobileOne_S0", "mobileone_s0", 0.80, 2453.17),
    ("Mobilenetv2", "mobilenetv2_100", 1.42, 1152.07),
    ("ResNet18", "resnet18", 2.95, 448.79),
)
HOLDOUT_SOURCE = "demos/classification/README.md@0a290df9"


#: The FRESH hold-out (split "fresh"): detection, segmentation, pose and classification points of the
#: ultralytics YOLO tables, copied on 2026-12-02 before any estimate of them was computed and before the
#: parameters of this stop were changed. Rule, so no row was picked by its error: every RDK X5 row of
#: ``demos/Vision/ultralytics_YOLO/README.md`` (commit 0a224ffb0dec72425c59bafe12a77d37847f89c0, BPU at
#: 1.0 GHz) of the smallest sizes (n, s; t for YOLOv9) that is not in the calibration csv and that the
#: ultralytics package builds (YOLOv13 is not in it), and the RDK Ultra rows of
#: ``demos/detect/YOLO11/YOLO11-Detect_YUV420SP/README_cn.md`` (commit 2519eb891563cc9130ab7452905efc37f385fdf7)
#: not in the csv up to size m (l and x compile too slowly for the time box). That README's X5 table is
#: at the 1.2 GHz overclock and is left out.
#: (variant, march, H, W, ultralytics YAML, latency ms 1 thread, best published FPS, its threads, FPS 1 thread, source)
_X5_YOLO = "demos/Vision/ultralytics_YOLO/README.md@0a224ffb"
_ULTRA_YOLO11 = "demos/detect/YOLO11/YOLO11-Detect_YUV420SP/README_cn.md@2519eb89"
HOLDOUT_FRESH: tuple[tuple, ...] = (
    ("YOLOv5nu", "bayes-e", 640, 640, "yolov5nu.yaml", 6.3, 291.8, 2, 157.4, _X5_YOLO),
    ("YOLOv8n", "bayes-e", 640, 640, "yolov8n.yaml", 7.0, 247.2, 2, 141.9, _X5_YOLO),
    ("YOLOv8s", "bayes-e", 640, 640, "yolov8s.yaml", 13.6, 93.2, 2, 73.5, _X5_YOLO),
    ("YOLOv9s", "bayes-e", 640, 640, "yolov9s.yaml", 13.0, 98.9, 2, 77.0, _X5_YOLO),
    ("YOLOv10n", "bayes-e", 640, 640, "yolov10n.yaml", 8.7, 171.9, 2, 114.2, _X5_YOLO),
    ("YOLO11n", "bayes-e", 640, 640, "yolo11n.yaml", 8.2, 188.9, 2, 121.6, _X5_YOLO),
    ("YOLO12n", "bayes-e", 640, 640, "yolo12n.yaml", 39.4, 27.4, 2, 25.3, _X5_YOLO),
    ("YOLO12s", "bayes-e", 640, 640, "yolo12s.yaml", 63.4, 16.5, 2, 15.8, _X5_YOLO),
    ("YOLOv8n-Seg", "bayes-e", 640, 640, "yolov8n-seg.yaml", 10.4, 181.9, 2, 96.0, _X5_YOLO),
    ("YOLOv8s-Seg", "bayes-e", 640, 640, "yolov8s-seg.yaml", 19.6, 68.7, 2, 50.9, _X5_YOLO),
    ("YOLO11n-Seg", "bayes-e", 640, 640, "yolo11n-seg.yaml", 11.7, 152.6, 2, 85.6, _X5_YOLO),
    ("YOLOv8n-Pose", "bayes-e", 640, 640, "yolov8n-pose.yaml", 7.0, 241.8, 2, 143.1, _X5_YOLO),
    ("YOLOv8s-Pose", "bayes-e", 640, 640, "yolov8s-pose.yaml", 14.1, 88.2, 2, 70.6, _X5_YOLO),
    ("YOLO11s-Pose", "bayes-e", 640, 640, "yolo11s-pose.yaml", 16.3, 73.9, 2, 61.1, _X5_YOLO),
    ("YOLOv8n-CLS", "bayes-e", 224, 224, "yolov8n-cls.yaml", 0.7, 2023.2, 2, 1374.6, _X5_YOLO),
    ("YOLOv8s-CLS", "bayes-e", 224, 224, "yolov8s-cls.yaml", 1.4, 848.0, 2, 701.0, _X5_YOLO),
    ("YOLO11s-CLS", "bayes-e", 224, 224, "yolo11s-cls.yaml", 2.1, 572.2, 2, 484.3, _X5_YOLO),
    ("YOLO11n", "bayes", 640, 640, "yolo11n.yaml", 6.8, 450.0, 4, 145.8, _ULTRA_YOLO11),
    ("YOLO11m", "bayes", 640, 640, "yolo11m.yaml", 14.1, 159.9, 4, 70.8, _ULTRA_YOLO11),
)


#: The SECOND fresh hold-out (split ``fresh2``), copied on 2026-12-04 before any estimate of these rows was
#: computed and before the cost-model changes of that stop were evaluated on anything but the fit rows.
#: Rule, so no row was picked by its error: every RDK X5 row of the same README as ``HOLDOUT_FRESH``
#: (``demos/Vision/ultralytics_YOLO/README.md`` at 0a224ffb, BPU at 1.0 GHz) of size m, and every classification
#: row, that is neither in the calibration csv nor in ``HOLDOUT_FRESH`` (the l and x detectors compile too
#: slowly for one stop's time box). Same fields as ``HOLDOUT_FRESH``; FPS at 2 threads as published.
HOLDOUT_FRESH2: tuple[tuple, ...] = (
    ("YOLOv5mu", "bayes-e", 640, 640, "yolov5mu.yaml", 26.5, 42.4, 2, 37.7, _X5_YOLO),
    ("YOLOv9m", "bayes-e", 640, 640, "yolov9m.yaml", 32.5, 33.8, 2, 30.8, _X5_YOLO),
    ("YOLOv10m", "bayes-e", 640, 640, "yolov10m.yaml", 29.4, 37.9, 2, 34.0, _X5_YOLO),
    ("YOLO11m", "bayes-e", 640, 640, "yolo11m.yaml", 34.5, 31.7, 2, 29.0, _X5_YOLO),
    ("YOLO11m-Seg", "bayes-e", 640, 640, "yolo11m-seg.yaml", 50.3, 22.1, 2, 19.9, _X5_YOLO),
    ("YOLO11m-Pose", "bayes-e", 640, 640, "yolo11m-pose.yaml", 35.6, 30.5, 2, 28.0, _X5_YOLO),
    ("YOLOv8l-CLS", "bayes-e", 224, 224, "yolov8l-cls.yaml", 7.9, 130.8, 2, 126.6, _X5_YOLO),
    ("YOLOv8x-CLS", "bayes-e", 224, 224, "yolov8x-cls.yaml", 13.1, 78.3, 2, 76.4, _X5_YOLO),
    ("YOLO11m-CLS", "bayes-e", 224, 224, "yolo11m-cls.yaml", 3.8, 282.2, 2, 262.6, _X5_YOLO),
    ("YOLO11x-CLS", "bayes-e", 224, 224, "yolo11x-cls.yaml", 10.0, 103.2, 2, 100.2, _X5_YOLO),
)

def holdout_rows() -> list[Row]:
    rows = []
    for variant, timm_name, latency, fps in HOLDOUT_X5_CLASSIFICATION:
        ARCHITECTURES.setdefault(variant, ("timm", timm_name))
        rows.append(Row("holdout", variant, "bayes-e", "RDK X5", 224, 224, latency, fps, 4, None, HOLDOUT_SOURCE, "holdout"))
    return rows


def fresh_rows(table: tuple[tuple, ...] = HOLDOUT_FRESH, split: str = "fresh") -> list[Row]:
    """A fresh hold-out (``HOLDOUT_FRESH``, split ``fresh``; ``HOLDOUT_FRESH2``, split ``fresh2``)."""
    rows = []
    for variant, march, h, w, yaml_name, latency, fps, threads, fps1, source in table:
        ARCHITECTURES.setdefault(variant, ("ultralytics", yaml_name))
        board = {"bayes-e": "RDK X5", "bayes": "RDK Ultra"}[march]
        rows.append(Row(split, variant, march, board, h, w, latency, fps, threads, fps1, source, split))
    return rows


def fresh2_rows() -> list[Row]:
    """The second fresh hold-out (``HOLDOUT_FRESH2``), split ``fresh2``."""
    return fresh_rows(HOLDOUT_FRESH2, "fresh2")
