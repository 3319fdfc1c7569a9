"""The third fresh hold-out of published rows (benchmarks/published/rows.py) keeps its rule: new rows only,
each with its source and commit, built as its publisher built it."""

from __future__ import annotations

from benchmarks.published.rows import (ARCHITECTURES, HOLDOUT_FRESH3, fresh2_rows, fresh3_group, fresh3_rows, fresh_rows,
                                       holdout_rows)
from benchmarks.published.split import row_family


def test_fresh3_rows_are_new_and_cite_their_table():
    earlier = {(r.variant, r.march) for r in holdout_rows() + fresh_rows() + fresh2_rows()}
    rows = fresh3_rows()
    keys = [(r.variant, r.march) for r in rows]
    assert len(keys) == len(set(keys)) == len(HOLDOUT_FRESH3)
    assert not earlier & set(keys)
    for r in rows:
        assert "@" in r.source and r.split == "fresh3" and r.latency_ms > 0 and r.fps_multithread > 0
        assert r.arch == ARCHITECTURES[r.variant] and r.arch[0] in ("timm", "torchvision", "ultralytics")


def test_fresh3_group_by_family():
    rows = {(r.variant, r.march): r for r in fresh3_rows()}
    fit_families = {"repghostnet", "yolov8"}
    assert fresh3_group(rows[("RepGhostNet_200", "bayes-e")], fit_families) == "fit family"
    assert fresh3_group(rows[("ResNeXt50_32x4d", "bayes-e")], fit_families) == "unseen family"
    assert row_family(rows[("YOLOv8n-Seg", "bernoulli2")]) == "yolov8"
