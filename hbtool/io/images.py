"""Image files as samples: decoded by Pillow to the input's size, then put in its training colour and layout.

Calibration folders, QAT training folders and ``hbtool simulate``'s image inputs all read images
here, so an image means the same pixels everywhere: RGB (gray = Pillow's ITU-R 601-2 luma for a
gray input), alpha dropped, palettes expanded, EXIF orientation not applied (as in a plain
``Image.open`` training pipeline), resized with Pillow's bilinear filter when the size differs
(unless resizing is off). 16-bit and float images are refused: the input takes 8-bit pixels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hbtool.config.types import InputSpec
from hbtool.errors import InputError
from hbtool.io.colour import rgb_to_yuv444

_BAD_MODES = ("I", "F")   # Pillow's 32-bit integer and float modes ("I;16..." are 16-bit)
_FIX_DECODE = "replace or remove the file (an 8-bit PNG, JPEG, BMP, PPM, TIFF or WebP image)"


def image_error(path: Path, exc: BaseException, label: str) -> InputError:
    return InputError(f"{path}: cannot be decoded as an image ({type(exc).__name__}: {exc}) for {label}", _FIX_DECODE)


def check_mode(path: Path, mode: str, label: str) -> None:
    """InputError for a 16-bit or float image."""
    if mode in _BAD_MODES or mode.startswith("I;16"):
        raise InputError(f"{path}: {mode} image (16-bit or float pixels) for {label}; images must be 8-bit",
                         "convert it to an 8-bit image, or store the array as .npy")


def size_error(path: Path, size: tuple[int, int], height: int, width: int, label: str) -> InputError:
    return InputError(f"{path}: image is {size[0]}x{size[1]} (width x height) but {label} takes {width}x{height}, "
                      "and preprocess_on: false turns resizing off",
                      f"resize the images to {width}x{height}, or set calibration_parameters.preprocess_on: true to "
                      "resize them when read")


def image_header(path: Path, label: str) -> tuple[tuple[int, int], str]:
    """``((width, height), mode)`` of an image file without decoding its pixels; InputError if unreadable."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.size, im.mode
    except Exception as exc:  # Pillow raises many kinds for broken files
        raise image_error(path, exc, label) from None


def decode_image(path: Path, height: int, width: int, *, gray: bool, resize: bool, label: str) -> np.ndarray:
    """The image's pixels as float32 ``H x W`` (gray) or ``H x W x 3`` (RGB) at the input's size.

    A size other than ``height x width`` is resized bilinearly, or an InputError when ``resize`` is off.
    """
    from PIL import Image

    try:
        with Image.open(path) as im:
            check_mode(path, im.mode, label)
            im.load()
            im = im.convert("L" if gray else "RGB")
            if im.size != (width, height):
                if not resize:
                    raise size_error(path, im.size, height, width, label)
                im = im.resize((width, height), Image.Resampling.BILINEAR)
            return np.asarray(im, dtype=np.float32)
    except InputError:
        raise
    except Exception as exc:  # truncated or corrupt data shows only when decoding
        raise image_error(path, exc, label) from None


def image_to_train_pixels(pixels: np.ndarray, spec: InputSpec) -> np.ndarray:
    """Decoded RGB (or gray) pixels, H x W (x C) -> one sample (1, ...) of the input's training type and layout."""
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if spec.type_train == "bgr":
        pixels = pixels[..., ::-1]
    elif spec.type_train == "yuv444":
        pixels = rgb_to_yuv444(pixels)
    if spec.layout_train == "NCHW":
        pixels = pixels.transpose(2, 0, 1)
    return np.ascontiguousarray(pixels[None])
