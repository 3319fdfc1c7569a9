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
    "RepVGG_B1g2": "the export venv's timm (1.0.31) has no repvgg_b1g2 (only b1g4): no ONNX, so not estimated",
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


#: The THIRD fresh hold-out (split ``fresh3``), copied on 2026-12-06 and committed before any estimate of these rows
#: was computed and before any cost-model or compiler change of this stop was evaluated on anything but the fit rows.
#: It exists because the family hold-out of issue 33 (``benchmarks/published/split.py``) was evaluated once and is spent.
#: Rule, so no row was picked by its error: every on-board row that D-Robotics/rdk_model_zoo publishes for the RDK X5
#: (``bayes-e``, BPU at 1.0 GHz), RDK X3 (``bernoulli2``) or RDK Ultra (``bayes``) whose (variant, march) is in none of
#: the calibration csv, ``HOLDOUT_X5_CLASSIFICATION``, ``HOLDOUT_FRESH`` and ``HOLDOUT_FRESH2``, and that hbtool rebuilds
#: with the publisher's recipe (timm / torchvision names; ultralytics YAMLs through the zoo's export patch). Tables read:
#: the newest snapshot's (``be4f89bd``) classification table (X5) and ultralytics and YOLO26 tables (X5); for X3 and
#: Ultra, which the newest snapshot no longer tabulates, the last tables that did: the X3 classification table of
#: ``demos/classification/README.md`` at 1100150e, the X3 YOLOv8 / YOLOv8-Seg and Ultra YOLO11 tables at 2519eb89.
#: Left out: a model's older table where a newer one of the same march is used (``demos/detect/YOLOv8`` X5 rows, the
#: YOLOv10 README's X5 rows), X5 tables at the 1.2 GHz overclock, rows hbtool cannot rebuild (YOLOv13, anchor-based
#: YOLOv5 v2.0 / v7.0, FCOS, PaddleOCR). FPS is the published multi-thread figure with its thread count (the
#: classification tables' 4-thread column; the best published one elsewhere, as ``HOLDOUT_FRESH``).
#: Rows of size l/x at 640x640 compile for more than 10 minutes each on the shared 2-core machine: they are taken in
#: ``split.evaluation_order`` (published latency ascending) and those not compiled when the parameters are frozen are
#: reported as not evaluated.
#: (variant, march, H, W, (source, name), latency ms 1 thread, published FPS, its threads, source path@commit)
_ZOO_CLS = "samples/vision/classification/README.md@be4f89bd"
_ZOO_YOLO = "samples/vision/ultralytics_yolo/README.md@be4f89bd"
_ZOO_YOLO26 = "samples/vision/ultralytics_yolo26/evaluator/README.md@be4f89bd"
_X3_CLS = "demos/classification/README.md@1100150e"
_X3_YOLOV8 = "demos/detect/YOLOv8/YOLOv8-Detect_YUV420SP/README_cn.md@2519eb89"
_X3_YOLOV8_SEG = "demos/Seg/YOLOv8-Seg/README_cn.md@2519eb89"
_ULTRA_YOLO11_2519 = "demos/detect/YOLO11/YOLO11-Detect_YUV420SP/README_cn.md@2519eb89"
HOLDOUT_FRESH3: tuple[tuple, ...] = (
    # RDK X5 classifiers (4 threads)
    ("ConvNeXt_nano", "bayes-e", 224, 224, ("timm", "convnext_nano"), 5.71, 200.18, 4, _ZOO_CLS),
    ("ConvNeXt_pico", "bayes-e", 224, 224, ("timm", "convnext_pico"), 3.37, 364.07, 4, _ZOO_CLS),
    ("ConvNeXt_atto", "bayes-e", 224, 224, ("timm", "convnext_atto"), 1.96, 732.10, 4, _ZOO_CLS),
    ("Efficientnet_B4", "bayes-e", 224, 224, ("timm", "efficientnet_b4"), 5.44, 212.75, 4, _ZOO_CLS),
    ("Efficientnet_B2", "bayes-e", 224, 224, ("timm", "efficientnet_b2"), 3.31, 376.77, 4, _ZOO_CLS),
    ("FasterNet_S", "bayes-e", 224, 224, ("timm", "fasternet_s"), 6.73, 162.83, 4, _ZOO_CLS),
    ("FasterNet_T1", "bayes-e", 224, 224, ("timm", "fasternet_t1"), 1.96, 708.40, 4, _ZOO_CLS),
    ("FasterNet_T0", "bayes-e", 224, 224, ("timm", "fasternet_t0"), 1.41, 1135.13, 4, _ZOO_CLS),
    ("MobileNetv1", "bayes-e", 224, 224, ("timm", "mobilenetv1_100"), 1.27, 1356.25, 4, _ZOO_CLS),
    ("Mobilenetv4_conv_medium", "bayes-e", 224, 224, ("timm", "mobilenetv4_conv_medium"), 2.42, 572.36, 4, _ZOO_CLS),
    ("Mobilenetv4_conv_small", "bayes-e", 224, 224, ("timm", "mobilenetv4_conv_small"), 1.18, 1436.22, 4, _ZOO_CLS),
    ("RepGhostNet_200", "bayes-e", 224, 224, ("timm", "repghostnet_200"), 2.89, 451.42, 4, _ZOO_CLS),
    ("RepGhostNet_130", "bayes-e", 224, 224, ("timm", "repghostnet_130"), 1.87, 743.56, 4, _ZOO_CLS),
    ("RepGhostNet_111", "bayes-e", 224, 224, ("timm", "repghostnet_111"), 1.71, 881.19, 4, _ZOO_CLS),
    ("RepVGG_B1g2", "bayes-e", 224, 224, ("timm", "repvgg_b1g2"), 9.77, 109.61, 4, _ZOO_CLS),
    ("ResNeXt50_32x4d", "bayes-e", 224, 224, ("timm", "resnext50_32x4d"), 5.89, 189.61, 4, _ZOO_CLS),
    # RDK X3 classifiers (4 threads); the table names RepGhost / RepVGG / Mobilenetv4 without size: by their parameters
    # (4.07 M, 12.78 M, 3.76 M) RepGhostNet_100, RepVGG_A1, MobileNetV4-conv-small
    ("GoogLeNet", "bernoulli2", 224, 224, ("torchvision", "googlenet"), 8.34, 243.51, 4, _X3_CLS),
    ("Mobilenetv4_conv_small", "bernoulli2", 224, 224, ("timm", "mobilenetv4_conv_small"), 1.43, 1309.17, 4, _X3_CLS),
    ("Mobilenetv2", "bernoulli2", 224, 224, ("timm", "mobilenetv2_100"), 2.41, 890.99, 4, _X3_CLS),
    ("RepGhostNet_100", "bernoulli2", 224, 224, ("timm", "repghostnet_100"), 2.09, 855.18, 4, _X3_CLS),
    ("RepVGG_A1", "bernoulli2", 224, 224, ("timm", "repvgg_a1"), 11.58, 174.94, 4, _X3_CLS),
    ("ResNet18", "bernoulli2", 224, 224, ("timm", "resnet18"), 8.87, 232.74, 4, _X3_CLS),
    # RDK X3 detectors (best published FPS: 8 threads)
    ("YOLOv8n", "bernoulli2", 640, 640, ("ultralytics", "yolov8n.yaml"), 99.8, 34.1, 8, _X3_YOLOV8),
    ("YOLOv8n-Seg", "bernoulli2", 640, 640, ("ultralytics", "yolov8n-seg.yaml"), 126.7, 27.3, 8, _X3_YOLOV8_SEG),
    # RDK Ultra (best published FPS: 4 threads)
    ("YOLO11l", "bayes", 640, 640, ("ultralytics", "yolo11l.yaml"), 20.0, 105.6, 4, _ULTRA_YOLO11_2519),
    # RDK X5 YOLO26 (2 threads). As published; but the table's m and l latencies look swapped: its 1-thread FPS
    # columns (m 24.8, l 19.5) match 1000 / the other's latency (40.1, 51.1 ms), as every other row's do its own
    # (docs/perf.md, costmodel4)
    ("YOLO26n Detect", "bayes-e", 640, 640, ("ultralytics", "yolo26n.yaml"), 11.6, 104.3, 2, _ZOO_YOLO26),
    ("YOLO26m Detect", "bayes-e", 640, 640, ("ultralytics", "yolo26m.yaml"), 51.1, 26.1, 2, _ZOO_YOLO26),
    ("YOLO26l Detect", "bayes-e", 640, 640, ("ultralytics", "yolo26l.yaml"), 40.1, 20.3, 2, _ZOO_YOLO26),
    ("YOLO26n Seg", "bayes-e", 640, 640, ("ultralytics", "yolo26n-seg.yaml"), 15.5, 87.6, 2, _ZOO_YOLO26),
    ("YOLO26n Pose", "bayes-e", 640, 640, ("ultralytics", "yolo26n-pose.yaml"), 12.5, 98.7, 2, _ZOO_YOLO26),
    ("YOLO26n Cls", "bayes-e", 224, 224, ("ultralytics", "yolo26n-cls.yaml"), 1.1, 1156.8, 2, _ZOO_YOLO26),
    # RDK X5 ultralytics YOLO, sizes b / l / x (2 threads)
    ("YOLOv10b", "bayes-e", 640, 640, ("ultralytics", "yolov10b.yaml"), 40.0, 26.9, 2, _ZOO_YOLO),
    ("YOLO11l", "bayes-e", 640, 640, ("ultralytics", "yolo11l.yaml"), 45.0, 23.7, 2, _ZOO_YOLO),
    ("YOLOv5lu", "bayes-e", 640, 640, ("ultralytics", "yolov5lu.yaml"), 52.7, 20.1, 2, _ZOO_YOLO),
    ("YOLOv8l", "bayes-e", 640, 640, ("ultralytics", "yolov8l.yaml"), 59.4, 17.7, 2, _ZOO_YOLO),
    ("YOLOv10x", "bayes-e", 640, 640, ("ultralytics", "yolov10x.yaml"), 68.9, 15.2, 2, _ZOO_YOLO),
    ("YOLOv8x", "bayes-e", 640, 640, ("ultralytics", "yolov8x.yaml"), 92.4, 11.2, 2, _ZOO_YOLO),
    ("YOLOv9e", "bayes-e", 640, 640, ("ultralytics", "yolov9e.yaml"), 119.5, 8.6, 2, _ZOO_YOLO),
    ("YOLO12l", "bayes-e", 640, 640, ("ultralytics", "yolo12l.yaml"), 181.6, 5.6, 2, _ZOO_YOLO),
    ("YOLO12x", "bayes-e", 640, 640, ("ultralytics", "yolo12x.yaml"), 311.9, 3.2, 2, _ZOO_YOLO),
    ("YOLOv8l-Seg", "bayes-e", 640, 640, ("ultralytics", "yolov8l-seg.yaml"), 74.9, 14.3, 2, _ZOO_YOLO),
    ("YOLOv8x-Seg", "bayes-e", 640, 640, ("ultralytics", "yolov8x-seg.yaml"), 115.6, 9.0, 2, _ZOO_YOLO),
    ("YOLOv9e-Seg", "bayes-e", 640, 640, ("ultralytics", "yolov9e-seg.yaml"), 135.4, 7.7, 2, _ZOO_YOLO),
    ("YOLO11l-Seg", "bayes-e", 640, 640, ("ultralytics", "yolo11l-seg.yaml"), 60.6, 18.0, 2, _ZOO_YOLO),
    ("YOLOv8l-Pose", "bayes-e", 640, 640, ("ultralytics", "yolov8l-pose.yaml"), 60.2, 17.4, 2, _ZOO_YOLO),
    ("YOLOv8x-Pose", "bayes-e", 640, 640, ("ultralytics", "yolov8x-pose.yaml"), 93.9, 11.0, 2, _ZOO_YOLO),
    ("YOLO11x-Pose", "bayes-e", 640, 640, ("ultralytics", "yolo11x-pose.yaml"), 97.8, 10.5, 2, _ZOO_YOLO),
)
FRESH3_BOARDS = {"bayes-e": "RDK X5", "bayes": "RDK Ultra", "bernoulli2": "RDK X3"}


def fresh3_rows() -> list[Row]:
    """The third fresh hold-out (``HOLDOUT_FRESH3``), split ``fresh3``."""
    rows = []
    for variant, march, h, w, arch, latency, fps, threads, source in HOLDOUT_FRESH3:
        ARCHITECTURES.setdefault(variant, arch)
        if ARCHITECTURES[variant] != arch:
            raise ValueError(f"{variant}: built as {ARCHITECTURES[variant]} elsewhere, as {arch} in HOLDOUT_FRESH3")
        rows.append(Row("fresh3", variant, march, FRESH3_BOARDS[march], h, w, latency, fps, threads, None, source, "fresh3"))
    return rows


def fresh3_group(row, fit_families: set[str]) -> str:
    """Which part of ``fresh3`` a row belongs to, fixed with the split: ``unseen family`` when no calibration-csv row
    of its family exists (the parameters never met its architecture), ``fit family`` otherwise (a new size or a new
    march of an architecture the fit rows contain)."""
    from benchmarks.published.split import row_family

    return "fit family" if row_family(row) in fit_families else "unseen family"


#: The FOURTH fresh hold-out (split ``fresh4``), searched for on 2026-12-06 before any parameter of this stop was changed.
#: Rule: every on-board row published by D-Robotics for the RDK X5 (``bayes-e``, BPU at 1.0 GHz), RDK X3 (``bernoulli2``)
#: or RDK Ultra (``bayes``) whose (variant, march) is in none of the calibration csv, ``HOLDOUT_X5_CLASSIFICATION``,
#: ``HOLDOUT_FRESH``, ``HOLDOUT_FRESH2`` and ``HOLDOUT_FRESH3``, and that hbtool rebuilds with the publisher's recipe.
#: Searched: every commit of every branch of D-Robotics/rdk_model_zoo (main, rdk_x3, rdk_x5, rdk_s, the feature branches)
#: for README tables with RDK X3 / RDK Ultra / X5 rows: the X3 tables (classification at 1100150e and its history on
#: rdk_x3; YOLOv8 / YOLOv8-Seg / YOLOv10 / YOLOv5 / FCOS / PaddleOCR) and the Ultra YOLO11 table hold no (variant, march)
#: outside the splits but anchor-based YOLOv5 v2.0 / v7.0, FCOS and PaddleOCR (not rebuildable, ``SKIPPED``); the newest
#: X5 tables (classification, ultralytics YOLO, YOLO26 at be4f89bd and the rdk_x5 head 763b3bb, samples/vision/*) are
#: fully used (LPRNet's 266 FPS has no public definition in timm / torchvision / ultralytics). Other thread counts of a
#: row already in a split (the X3 YOLOv8n 2/4-thread FPS) are the same (variant, march) and so not new.
#: Result: no row qualifies, so this hold-out is EMPTY and no Done-when claim of this stop rests on one.
HOLDOUT_FRESH4: tuple[tuple, ...] = ()
