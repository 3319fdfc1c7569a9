"""Which files are samples, how a folder of them is listed, and safe names for files hbtool writes.

One list of suffixes for every input kind, so an image a calibration folder accepts is also an
image ``hbtool simulate`` accepts (and the other way round). The suffix decides, case-insensitive.
"""

from __future__ import annotations

import re
from pathlib import Path

#: 8-bit images Pillow decodes (16-bit and float images are refused when read)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
NPY_SUFFIXES = (".npy",)
#: a raw ``numpy.tofile`` dump of one sample
RAW_SUFFIXES = (".bin",)
#: what Horizon's preprocessing scripts write (numpy.tofile of the preprocessed sample)
HORIZON_RAW_SUFFIXES = (".rgb", ".rgbchw", ".bgr", ".yuv444")
#: raw NV12 frames: the Y plane then the interleaved UV plane, ``H*W*3/2`` bytes each
NV12_SUFFIXES = (".nv12",)
KNOWN_SUFFIXES = IMAGE_SUFFIXES + NPY_SUFFIXES + RAW_SUFFIXES + HORIZON_RAW_SUFFIXES + NV12_SUFFIXES


def has_suffix(path: Path, suffixes: tuple[str, ...]) -> bool:
    return path.suffix.lower() in suffixes


def visible_files(folder: Path) -> list[Path]:
    """The files of ``folder`` sorted by name, hidden files (``.name``) and sub-folders skipped.

    Samples of several inputs are paired by this order: the k-th file of every folder makes sample k.
    """
    entries = sorted((p for p in folder.iterdir() if not p.name.startswith(".")), key=lambda p: p.name)
    return [p for p in entries if p.is_file()]


def safe_file_name(name: str) -> str:
    """A tensor name as a file name: every character outside ``A-Za-z0-9_.-`` becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"
