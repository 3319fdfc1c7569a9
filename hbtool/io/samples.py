"""One input's folder of samples: validated up front, read one sample at a time.

Used by calibration (``cal_data_dir``), QAT (``train_data_dir``) and ``hbtool simulate`` (a
folder given to ``--input``). Samples are raw values in the input's training colour order and
layout, with the batch axis: **pixel values 0-255 as float32** for image inputs (the mean/scale
preprocessing is part of the model, :mod:`hbtool.quant.preprocess`), featuremaps as stored, cast
to the model input's dtype (for example int64 token ids).

Folders and files
-----------------
* Samples are matched across inputs by sorted file name: the k-th file of every folder makes
  sample k, so every folder must hold the same number of samples.
* Known files (the suffix decides, case-insensitive, :mod:`hbtool.io.files`; other files and
  hidden files are ignored):

  - images (``.png .jpg .jpeg .bmp .ppm .pgm .tif .tiff .webp``): 8-bit images, image inputs
    only, read by :mod:`hbtool.io.images` (training colour order: ``rgb``, ``bgr``, ``gray`` =
    Pillow's ITU-R 601-2 luma, ``yuv444`` = full-range BT.601 from RGB,
    :func:`hbtool.io.colour.rgb_to_yuv444`), resized to the input's H x W with Pillow's bilinear
    filter when the size differs (unless resizing is off), laid out as the input's layout.
  - ``.npy``: one sample per file, shaped as ``input_shape`` or ``input_shape[1:]``; or, when
    it is the folder's only file, many samples stacked on axis 0: shape
    ``(N * input_shape[0], *input_shape[1:])`` gives N samples (read by memory map, one sample
    at a time).
  - ``.bin``: a raw ``numpy.tofile`` dump of one sample in ``input_shape`` (training layout),
    element type ``cal_data_type`` (Horizon's meaning; uint8 for image folders unless the
    folder name ends in ``_f32``, float32 for featuremaps; see the config docs).
  - ``.rgb .bgr .yuv444 .rgbchw``: what Horizon's preprocessing scripts write and ``hb_mapper``
    reads: the same raw dump as ``.bin`` (element type ``cal_data_type``, shape ``input_shape``
    in the training layout; the name is not a conversion, as in hb_mapper). ``.rgbchw`` says
    its layout: it is read as N x C x H x W and transposed when the training layout is NHWC.
  - ``.nv12``: one 8-bit NV12 frame per batch item, the Y plane (H x W bytes) then the
    interleaved UV plane (H/2 x W/2 pairs), ``H * W * 3 / 2`` bytes; converted to the training
    colour by the chip's own integer conversion (:func:`hbtool.io.colour.runtime_to_train`:
    chroma upsampled by nearest neighbour, BT.601 in the input's ``input_space_and_range``;
    yuv444 as is), so the float model sees what the chip computes from the same frame: values
    at ``2**-14``, not rounded or clipped to 0-255.

Dtypes and values
-----------------
Input names, shapes and dtypes come from the config, and from the graph (the imported model)
for what the config leaves out; without a graph an unnamed single input is called ``input``
(:func:`resolve_inputs`). The target dtype of an input is the model input's dtype when a graph
is given (the pipeline always passes one). Without a graph: image inputs take float32;
featuremaps take ``cal_data_type`` when it is an integer type, else the first file decides
(integer ``.npy`` -> int64, bool -> bool, floating -> float32). Floats for float inputs are cast
(float64 -> float32); floats for integer inputs must hold whole numbers in the dtype's range
(else an error naming the file); NaN or Inf anywhere is an error naming the file and the count.

Validation happens up front, before any caller writes output: the folder listing, every
``.npy`` header and its values (memory-mapped, one sample at a time), every ``.bin`` size and
values, every image header (and its size when resizing is off); the first image of each folder
is decoded fully. Later images are decoded when read, and a decode failure then still names the
file. Memory stays flat in the number of samples: files are read when a batch needs them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hbtool.config.types import InputSpec
from hbtool.errors import InputError
from hbtool.io.colour import round_pixels, runtime_to_train
from hbtool.io.files import IMAGE_SUFFIXES, KNOWN_SUFFIXES, NPY_SUFFIXES, NV12_SUFFIXES, visible_files
from hbtool.io.images import check_mode, decode_image, image_header, image_to_train_pixels, size_error

log = logging.getLogger(__name__)

_KNOWN_TEXT = " ".join(KNOWN_SUFFIXES)
_RAW_TYPES = ("uint8", "int8", "int16", "float32", "int32", "int64")


# ------------------------------------------------------------------------------ resolution
@dataclass(frozen=True)
class InputInfo:
    """What the loader needs of one input: its model name, shape and target dtype."""

    spec: InputSpec
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype | None        # None: not known yet (featuremap without a graph)

    @property
    def label(self) -> str:
        return f"input '{self.name}'"

    @property
    def hw(self) -> tuple[int, int]:
        if self.spec.layout_train == "NHWC":
            return self.shape[1], self.shape[2]
        return self.shape[2], self.shape[3]


def resolve_inputs(specs: list[InputSpec], graph: Any | None) -> list[InputInfo]:
    """Names, shapes and dtypes of the configured inputs, checked against the graph if given."""
    if not specs:
        raise InputError("no model input is configured (input_parameters is empty)",
                         "set input_parameters (input_type_train, input_shape, ...) for each "
                         "model input")
    if graph is not None and len(graph.inputs) > len(specs):
        raise InputError(
            f"the model has {len(graph.inputs)} inputs ({', '.join(graph.inputs)}) but "
            f"input_parameters describes {len(specs)}",
            "list every model input in input_parameters.input_name and give one "
            "calibration_parameters.cal_data_dir per input, ';'-separated")
    infos = []
    for i, spec in enumerate(specs):
        name = spec.name
        if name is None:
            if graph is not None and len(graph.inputs) == 1:
                name = graph.inputs[0]
            elif graph is None and len(specs) == 1:
                name = "input"
            else:
                raise InputError(f"input {i + 1} has no name",
                                 "set input_parameters.input_name to the model's input names")
        elif graph is not None and name not in graph.inputs:
            raise InputError(f"input_parameters.input_name: the model has no input '{name}' "
                             f"(its inputs: {', '.join(graph.inputs) or 'none'})",
                             "use the model's input names")
        shape = spec.shape
        if shape is None and graph is not None:
            gshape = graph.shape(name)
            if gshape is not None and all(isinstance(d, (int, np.integer)) and d > 0 for d in gshape):
                shape = tuple(int(d) for d in gshape)
        if shape is None:
            raise InputError(f"the shape of input '{name}' is not known",
                             "set input_parameters.input_shape, e.g. 1x3x224x224")
        dtype = None
        if graph is not None and graph.dtype(name) is not None:
            dtype = np.dtype(graph.dtype(name))
        elif spec.is_image:
            dtype = np.dtype(np.float32)
        elif np.dtype(spec.cal_data_type).kind in "iu":
            dtype = np.dtype(spec.cal_data_type)
        infos.append(InputInfo(spec, name, tuple(int(d) for d in shape), dtype))
    return infos


def default_dtype_for(stored: np.dtype) -> np.dtype:
    """Target dtype of a featuremap without a graph, from the first file's dtype."""
    if stored.kind == "b":
        return np.dtype(bool)
    if stored.kind in "iu":
        return np.dtype(np.int64)
    return np.dtype(np.float32)


# --------------------------------------------------------------------------------- values
def check_values(arr: np.ndarray, target: np.dtype, where: str, label: str) -> None:
    """NaN/Inf, and whole numbers in range for integer targets; InputError naming ``where``."""
    if arr.size == 0:
        return
    kind = arr.dtype.kind
    if kind == "f":
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        if bad:
            raise InputError(f"{where}: {bad} of {arr.size} values are NaN or Inf",
                             "fix or remove that sample: calibration needs finite values")
    if target.kind in "iub":
        if kind == "f":
            frac = int(np.count_nonzero(arr != np.floor(arr)))
            if frac:
                raise InputError(
                    f"{where}: {frac} of {arr.size} values are not whole numbers, but {label} "
                    f"takes {target.name}",
                    f"store {target.name} values (e.g. token ids as integers), or check that "
                    f"the folder belongs to {label}")
        if target.kind == "b":
            lo, hi = 0, 1
        else:
            info = np.iinfo(target)
            lo, hi = int(info.min), int(info.max)
        amin, amax = arr.min(), arr.max()
        if amin < lo or amax > hi:
            raise InputError(
                f"{where}: values range from {amin} to {amax}, outside {target.name} "
                f"({lo} to {hi}) that {label} takes",
                f"check that the folder belongs to {label} and holds {target.name} data")


# ------------------------------------------------------------------------------ npy files
def _npy_header(path: Path, label: str) -> tuple[tuple[int, ...], np.dtype]:
    fix = "save each sample with numpy.save (a .npy file), or remove the file"
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise InputError(f"{path}: not a numpy .npy file ({exc}) in the calibration data of "
                         f"{label}", fix) from None
    dtype = np.dtype(dtype)
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
        raise InputError(f"{path}: holds {dtype} data, not numbers ({label})",
                         "store plain numeric arrays (float32, uint8, int64, ...)")
    return tuple(int(d) for d in shape), dtype


def _npy_map(path: Path, label: str) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot read the .npy data ({exc}) for {label}",
                         "save the array again with numpy.save") from None
    if not isinstance(arr, np.ndarray):
        raise InputError(f"{path}: is an .npz archive, not a single .npy array ({label})",
                         "save one array per file with numpy.save")
    return arr


# -------------------------------------------------------------------------------- readers
class InputFolder:
    """One input's folder of samples: validated on creation, samples read on demand (see the module doc)."""

    def __init__(self, info: InputInfo, folder: Path, resize: bool):
        self.info = info
        self.folder = folder
        self.resize = resize
        self.files: list[tuple[Path, str]] = []
        self.stack: tuple[Path, int] | None = None      # (file, samples) for a stacked .npy
        self.dtype: np.dtype = info.dtype or np.dtype(np.float32)
        self._npy_batched: dict[Path, bool] = {}        # single .npy: True when it has the batch axis
        self._scan()

    # ----- validation
    def _scan(self) -> None:
        known = self._list_known()
        self.files = known
        first_image = True
        for path, kind in known:
            if kind == "npy":
                self._scan_npy(path, single=len(known) == 1)
            elif kind in ("bin", "chw"):
                self._scan_bin(path)
            elif kind == "nv12":
                self._scan_nv12(path)
            else:
                self._scan_image(path, decode=first_image)
                first_image = False

    def _list_known(self) -> list[tuple[Path, str]]:
        """``(file, kind)`` of the folder's sample files in name order; InputError for a folder without any."""
        info, folder = self.info, self.folder
        if not folder.exists():
            raise InputError(f"calibration data folder of {info.label} not found: {folder}",
                             "check calibration_parameters.cal_data_dir (relative paths are "
                             "taken from the YAML file's folder)")
        if not folder.is_dir():
            raise InputError(f"calibration data folder of {info.label} is a file, not a folder: "
                             f"{folder}", "give the folder that holds the sample files")
        files = visible_files(folder)
        if not files:
            raise InputError(f"calibration data folder of {info.label} is empty: {folder}",
                             f"put the calibration samples ({_KNOWN_TEXT}) in it")
        known = [(p, self._kind(p)) for p in files if p.suffix.lower() in KNOWN_SUFFIXES]
        if not known:
            shown = ", ".join(p.name for p in files[:3]) + (", ..." if len(files) > 3 else "")
            raise InputError(
                f"calibration data folder of {info.label} has no file of a known type "
                f"({_KNOWN_TEXT}): {folder} holds {shown}",
                f"store images as {'/'.join(IMAGE_SUFFIXES)}, arrays as .npy (numpy.save), raw dumps as "
                ".bin/.rgb/.bgr/.rgbchw/.yuv444 (numpy.tofile) or frames as .nv12")
        ignored = len(files) - len(known)
        if ignored:
            log.info("%s: ignoring %d file(s) of unknown type in %s", info.label, ignored, folder)
        if info.spec.is_image is False and any(k == "image" for _, k in known):
            first = next(p for p, k in known if k == "image")
            raise InputError(f"{first}: an image file for {info.label}, whose input_type_train "
                             "is featuremap", "store featuremap samples as .npy or .bin files")
        return known

    @staticmethod
    def _kind(path: Path) -> str:
        suffix = path.suffix.lower()
        if suffix in IMAGE_SUFFIXES:
            return "image"
        if suffix in NV12_SUFFIXES:
            return "nv12"
        if suffix == ".rgbchw":
            return "chw"
        return "npy" if suffix in NPY_SUFFIXES else "bin"

    def _settle_dtype(self, stored: np.dtype) -> None:
        if self.info.dtype is None:
            self.info = InputInfo(self.info.spec, self.info.name, self.info.shape,
                                  default_dtype_for(stored))
            self.dtype = self.info.dtype  # type: ignore[assignment]

    def _scan_npy(self, path: Path, single: bool) -> None:
        info = self.info
        shape, dtype = _npy_header(path, info.label)
        self._settle_dtype(dtype)
        want = info.shape
        if shape == want:
            self._npy_batched[path] = True
        elif want[0] == 1 and shape == want[1:]:
            self._npy_batched[path] = False
        elif single and len(shape) == len(want) and shape[1:] == want[1:] \
                and shape[0] % want[0] == 0 and shape[0] > 0:
            self.stack = (path, shape[0] // want[0])
        else:
            stacked = f"; or, as the folder's only file, ({'N' if want[0] == 1 else f'N*{want[0]}'}, " \
                      f"{', '.join(map(str, want[1:]))}) for N stacked samples"
            raise InputError(
                f"{path}: array shape {shape} does not fit {info.label}, which takes {want}",
                f"save each sample as shape {want}" + (f" or {want[1:]}" if want[0] == 1 else "")
                + stacked)
        arr = _npy_map(path, info.label)
        if self.stack is not None:
            rows = want[0]
            for k in range(self.stack[1]):
                check_values(arr[k * rows:(k + 1) * rows], self.dtype,
                              f"{path} (sample {k})", info.label)
        else:
            check_values(arr, self.dtype, str(path), info.label)
        del arr

    def _scan_bin(self, path: Path) -> None:
        info = self.info
        stored = np.dtype(info.spec.cal_data_type)
        self._settle_dtype(stored)
        numel = math.prod(info.shape)
        expected = numel * stored.itemsize
        size = path.stat().st_size
        if size != expected:
            fits = [t for t in _RAW_TYPES if numel * np.dtype(t).itemsize == size]
            hint = f"; the size fits {' or '.join(fits)} data" if fits else ""
            raise InputError(
                f"{path}: {size} bytes, but {info.label} takes {expected} bytes "
                f"({'x'.join(map(str, info.shape))} {stored.name}){hint}",
                "dump each sample with numpy.tofile in input_shape, and set "
                "calibration_parameters.cal_data_type to the element type of the files")
        check_values(np.fromfile(path, dtype=stored), self.dtype, str(path), info.label)

    def _nv12_geometry(self, path: Path) -> tuple[int, int, int]:
        """(batch, H, W) of an nv12 sample of this input; InputError when nv12 cannot describe it."""
        info = self.info
        if len(info.shape) != 4 or info.spec.layout_train is None:
            raise InputError(f"{path}: an nv12 file for {info.label}, which is not a 4-D image input",
                             "store the samples as .npy or raw .bin in input_shape")
        h, w = info.hw
        if h % 2 or w % 2 or info.spec.type_train not in ("rgb", "bgr", "yuv444"):
            why = (f"an odd size {h}x{w}" if h % 2 or w % 2
                   else f"input_type_train {info.spec.type_train}")
            raise InputError(f"{path}: nv12 calibration data cannot feed {info.label} ({why})",
                             "nv12 needs an rgb, bgr or yuv444 input of even height and width; "
                             "store the samples as .rgb/.bin raw dumps instead")
        return info.shape[0], h, w

    def _scan_nv12(self, path: Path) -> None:
        n, h, w = self._nv12_geometry(path)
        expected = n * h * w * 3 // 2
        size = path.stat().st_size
        if size != expected:
            raise InputError(
                f"{path}: {size} bytes, but an nv12 sample of {self.info.label} takes {expected} "
                f"bytes ({n} x {h}x{w} frame(s) of H*W*3/2 bytes)",
                f"write each sample as the Y plane then the interleaved UV plane of a {w}x{h} "
                "frame, or resize the model input to the frames' size")

    def _read_nv12(self, path: Path) -> np.ndarray:
        info = self.info
        n, h, w = self._nv12_geometry(path)
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size != n * h * w * 3 // 2:
            raise InputError(f"{path}: changed size while calibrating ({raw.size} bytes)",
                             "do not modify the calibration data while hbtool runs")
        pixels = runtime_to_train(raw.reshape(n, h * 3 // 2, w), "nv12", info.spec.type_train, h, w,
                                  video_range=info.spec.space_and_range == "bt601_video")
        if self.dtype.kind in "iu":  # an integer model input takes the values as an 8-bit buffer would hold them
            pixels = round_pixels(pixels)
        if info.spec.layout_train == "NCHW":
            pixels = pixels.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(pixels).astype(self.dtype, copy=False)

    def _scan_image(self, path: Path, decode: bool) -> None:
        info = self.info
        if info.shape[0] != 1:
            raise InputError(f"{path}: an image gives one sample of batch 1, but {info.label} "
                             f"has input_shape {'x'.join(map(str, info.shape))}",
                             "set the first dimension of input_shape to 1, or store samples as "
                             ".npy in the full shape")
        size, mode = image_header(path, info.label)
        check_mode(path, mode, info.label)
        h, w = info.hw
        if not self.resize and size != (w, h):
            raise size_error(path, size, h, w, info.label)
        if decode:
            self._read_image(path)

    # ----- reading
    def __len__(self) -> int:
        return self.stack[1] if self.stack is not None else len(self.files)

    def source(self, i: int) -> str:
        if self.stack is not None:
            return f"{self.stack[0]}[{i}]"
        return str(self.files[i][0])

    def read(self, i: int) -> np.ndarray:
        """Sample ``i`` in the input's full shape and target dtype."""
        info = self.info
        if self.stack is not None:
            path, _ = self.stack
            rows = info.shape[0]
            arr = np.array(_npy_map(path, info.label)[i * rows:(i + 1) * rows])
            return self._cast(arr, f"{path} (sample {i})")
        path, kind = self.files[i]
        if kind == "image":
            return self._read_image(path)
        if kind == "npy":
            arr = np.array(_npy_map(path, info.label))
            if not self._npy_batched.get(path, True):
                arr = arr[None]
            return self._cast(arr, str(path))
        if kind == "nv12":
            return self._read_nv12(path)
        stored = np.dtype(info.spec.cal_data_type)
        arr = np.fromfile(path, dtype=stored)
        if arr.size != math.prod(info.shape):
            raise InputError(f"{path}: changed size while calibrating ({arr.nbytes} bytes)",
                             "do not modify the calibration data while hbtool runs")
        if kind == "chw" and info.spec.layout_train == "NHWC" and len(info.shape) == 4:
            n, h, w, c = info.shape
            return self._cast(arr.reshape(n, c, h, w).transpose(0, 2, 3, 1), str(path))
        return self._cast(arr.reshape(info.shape), str(path))

    def _cast(self, arr: np.ndarray, where: str) -> np.ndarray:
        if arr.dtype == self.dtype:
            return np.ascontiguousarray(arr)
        if self.dtype.kind in "iub" and arr.dtype.kind == "f":
            check_values(arr, self.dtype, where, self.info.label)
        return np.ascontiguousarray(arr.astype(self.dtype))

    def _read_image(self, path: Path) -> np.ndarray:
        info = self.info
        h, w = info.hw
        pixels = decode_image(path, h, w, gray=info.spec.type_train == "gray", resize=self.resize, label=info.label)
        out = image_to_train_pixels(pixels, info.spec)
        if out.shape != info.shape:  # channel count of the shape disagrees with the type
            raise InputError(f"{path}: decoded to {out.shape} but {info.label} takes "
                             f"{info.shape}", "check input_shape, input_type_train and "
                                              "input_layout_train")
        return out.astype(self.dtype, copy=False)
