"""The family hold-out of the published rows: which model families the cost model may be fitted to.

Rule (written and committed before any estimate of issue 33's rebuilt rows was computed, and never
changed after): a row's **family** is its architecture's name without size, scale or task
(:func:`family`: ``yolov8n-seg.yaml`` -> ``yolov8``, ``efficientformerv2_s0`` -> ``efficientformerv2``,
``resnet18`` -> ``resnet``); a family is **held out** when the SHA-1 of its name, read as an integer,
is divisible by 3 (:func:`is_holdout_family`), about a third of the families.

Why a hash: it does not depend on the order or number of rows (adding a row never moves a family),
it cannot be steered by anyone who has seen an error, and it is one line anyone can recompute. Why by
family, not by row: sizes of one architecture share their op mix, so a model fitted on YOLOv8m and
checked on YOLOv8n has seen the answer; a held-out family is an architecture the parameters never met.
Task heads (-seg, -pose, -cls) stay in their generation's family for the same reason.

Which rows a fit may use: the calibration csv's rows of the fit families (the reference folder's
note: fit to the csv only). The hold-out is every row (csv or README) of a held-out family,
evaluated once after the parameters are frozen. README rows of fit families are neither: they are
reported as a third split, ``seen-family``.
"""

from __future__ import annotations

import hashlib
import re

FIT, HOLDOUT, SEEN_FAMILY = "fit", "family-holdout", "seen-family"
MODULUS = 3

_YOLO = re.compile(r"^(yolo(?:v\d+|\d+|e-?\d+))")


def family(source: str, name: str) -> str:
    """The architecture family of a row's build ``(source, name)``: no size, scale or task."""
    n = name.lower().replace(".yaml", "").split("/")[-1]
    if source == "ultralytics":
        m = _YOLO.match(n)
        return m.group(1) if m else n
    n = n.split("_")[0]             # timm / torchvision: the name before the size (edgenext_small, mobileone_s1)
    return re.sub(r"(?<!v)\d+$", "", n) or n   # resnet18 -> resnet; a version after "v" stays (mobilenetv3)


def is_holdout_family(fam: str) -> bool:
    return int(hashlib.sha1(fam.encode("utf-8")).hexdigest(), 16) % MODULUS == 0


def row_family(row) -> str:
    """A row's family (rows without a build: their published model name)."""
    arch = row.arch
    if arch is None:   # a row hbtool cannot rebuild: its variant name (YOLOv13n -> yolov13, fcos_efficientnetb0 -> fcos)
        name = row.variant.split(" ")[0]
        return family("ultralytics" if _YOLO.match(name.lower()) else "", name)
    return family(arch[0], arch[1])


def split_of(row) -> str:
    """FIT (a csv row of a fit family), HOLDOUT (any row of a held-out family) or SEEN_FAMILY."""
    if is_holdout_family(row_family(row)):
        return HOLDOUT
    return FIT if row.split == "fit" else SEEN_FAMILY


def evaluation_order(rows) -> list:
    """The order in which rows are exported and compiled when the time box cannot hold them all.

    A quick-path compile of a 640x640 YOLO of size l/x takes over 10 minutes and ~9 GB on a shared
    2-core machine, so not every row can be compiled in one stop. Rows are taken by published
    single-thread latency, fastest first (a proxy for compile time that says nothing about the
    cost model's error on them), and evaluated up to the last one whose compile finished; the rest
    are reported as not evaluated. Fixed here, with the split, before any estimate."""
    return sorted(rows, key=lambda r: (r.latency_ms if r.latency_ms else float("inf"), r.march, r.variant))
