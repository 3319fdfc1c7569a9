"""Simulate inputs in the chip's run-time format: raw ``.nv12`` frames, ``.npy`` buffers and images.

Used by :mod:`.inputs` for an artifact input that has a ``runtime`` description. A PATH is one
file or a folder of them (sorted by name, hidden files skipped):

* ``.nv12``: raw frames, ``H*W*3/2`` bytes each (the Y plane then the interleaved UV plane);
  a file may hold several frames back to back (one sample each);
* ``.npy``: one sample (the buffer's shape, or without the batch axis) per file;
* images (:data:`hbtool.io.files.IMAGE_SUFFIXES`: ``.png``, ``.jpg``, ``.webp``, ...): read as a
  calibration image is (:mod:`hbtool.io.images`: RGB, gray for a gray model, resized bilinearly
  to the input's height and width, in the training colour order), then converted as the camera
  pipeline would (:func:`hbtool.io.runtime_input.to_runtime`).

A size that does not fit is a one-line InputError naming the bytes or shape expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hbtool.config.types import InputSpec
from hbtool.errors import InputError
from hbtool.io.files import IMAGE_SUFFIXES, NPY_SUFFIXES, NV12_SUFFIXES, visible_files
from hbtool.io.images import decode_image, image_to_train_pixels
from hbtool.io.runtime_input import nv12_bytes, to_runtime

KNOWN = IMAGE_SUFFIXES + NV12_SUFFIXES + NPY_SUFFIXES


def spec_of(desc: dict[str, Any]) -> InputSpec:
    """The InputSpec an artifact input description stands for (the fields the conversion reads)."""
    rt = desc["runtime"]
    return InputSpec(name=desc["name"], shape=tuple(rt["train_shape"]), type_train=desc.get("type") or "rgb",
                     type_rt=desc.get("type_rt") or rt["format"], layout_train=desc.get("layout"),
                     layout_rt=desc.get("layout_rt"), norm_type="no_preprocess", mean=None, scale=None,
                     cal_data_dir=None, cal_data_type="uint8", space_and_range=rt.get("space_and_range") or "regular")


class RuntimeReader:
    """Samples of one run-time input, read on demand (see the module docstring)."""

    def __init__(self, desc: dict[str, Any], path: Path):
        self.name = desc["name"]
        self.shape = tuple(int(d) for d in desc["shape"])
        self.dtype = np.dtype(desc["dtype"])
        self.spec = spec_of(desc)
        self.runtime = desc["runtime"]
        self.path = path
        files = visible_files(path) if path.is_dir() else [path]
        known = [p for p in files if p.suffix.lower() in KNOWN]
        if not known:
            raise InputError(f"--input {self.name}={path}: no .nv12, .npy or image file",
                             f"give {self.describe()} as raw .nv12 frames, .npy arrays or images")
        self.items: list[tuple[Path, int]] = []   # (file, frame index within it)
        for p in known:
            for k in range(self._frames(p)):
                self.items.append((p, k))

    def describe(self) -> str:
        return f"{self.runtime['format']} buffers of shape {self.shape} {self.dtype.name}"

    def _frame_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def _frames(self, p: Path) -> int:
        suffix = p.suffix.lower()
        if suffix in NV12_SUFFIXES:
            if self.runtime["format"] != "nv12":
                raise InputError(f"--input {self.name}={p}: a raw nv12 file, but the input takes {self.describe()}",
                                 "give .npy arrays or images for this input")
            h, w = int(self.runtime["height"]), int(self.runtime["width"])
            size, frame = p.stat().st_size, nv12_bytes(h, w) * self.shape[0]
            if size == 0 or size % frame:
                raise InputError(f"--input {self.name}={p}: {size} bytes, but an nv12 frame of {w}x{h} is {frame} bytes "
                                 f"(H*W*3/2; Y plane then interleaved UV)", f"give whole frames of {frame} bytes each")
            return size // frame
        if suffix in NPY_SUFFIXES:
            try:
                arr = np.load(p, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise InputError(f"--input {self.name}={p}: cannot read it as .npy ({exc})", "save it with numpy.save") from None
            if tuple(arr.shape) not in (self.shape, self.shape[1:]) or arr.dtype.kind not in "iuf":
                raise InputError(f"--input {self.name}={p}: array {tuple(arr.shape)} {arr.dtype}, but the input takes "
                                 f"{self.describe()}", f"save each sample as shape {self.shape} {self.dtype.name}")
            return 1
        if self.shape[0] != 1:
            raise InputError(f"--input {self.name}={p}: an image is one sample of batch 1, but the input's batch is "
                             f"{self.shape[0]}", "give .npy buffers in the input's full shape")
        return 1

    def __len__(self) -> int:
        return len(self.items)

    def read(self, i: int) -> np.ndarray:
        p, k = self.items[i]
        suffix = p.suffix.lower()
        if suffix in NV12_SUFFIXES:
            frame = self._frame_bytes()
            with open(p, "rb") as f:
                f.seek(k * frame)
                data = f.read(frame)
            return np.frombuffer(data, np.uint8).reshape(self.shape)
        if suffix in NPY_SUFFIXES:
            return np.asarray(np.load(p, allow_pickle=False)).reshape(self.shape)
        return to_runtime(self._image(p), self.spec)

    def _image(self, p: Path) -> np.ndarray:
        """The image as training-type pixels (1, train layout), like a calibration image with resizing on."""
        h, w = int(self.runtime["height"]), int(self.runtime["width"])
        pixels = decode_image(p, h, w, gray=self.spec.type_train == "gray", resize=True, label=f"--input {self.name}")
        return image_to_train_pixels(pixels, self.spec)
