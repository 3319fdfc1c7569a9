"""Calibration data: the arrays the model-with-preprocessing takes, read from the user's folders.

When ``norm_type`` is set, the mean/scale preprocessing is part of the model
(:mod:`hbtool.quant.preprocess`), so image inputs are fed **raw pixel values 0-255 as float32**
in the training colour order (``input_type_train``) and layout (``input_layout_train``), with
the batch axis. Featuremap inputs are fed as stored, cast to the model input's dtype (for
example int64 token ids).

Folders and files
-----------------
* One folder per input (``calibration_parameters.cal_data_dir``, ``;``-separated). Samples
  are matched across inputs by sorted file name: the k-th file of every folder makes sample k,
  so every folder must hold the same number of samples.
* Known files (the suffix decides, case-insensitive; other files and hidden files are
  ignored):

  - ``.png .jpg .jpeg .bmp``: 8-bit images, image inputs only. Read with Pillow, converted to
    the training colour order (``rgb``, ``bgr``, ``gray`` = Pillow's ITU-R 601-2 luma,
    ``yuv444`` = full-range BT.601 from RGB, see :func:`rgb_to_yuv444`), resized to the input's
    H x W with Pillow's bilinear filter when the size differs, laid out as the input's layout.
    Alpha is dropped, palettes are expanded, EXIF orientation is not applied (as in a plain
    ``Image.open`` training pipeline); 16-bit and float images are refused.
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
    interleaved UV plane (H/2 x W/2 pairs), ``H * W * 3 / 2`` bytes; chroma is upsampled
    (nearest) and converted to the training colour (full-range BT.601, the inverse of
    :func:`rgb_to_yuv444`; yuv444 as is), values 0-255.

Resizing
--------
Horizon resizes calibration images only with ``preprocess_on: true``. hbtool resizes by default
and treats an *explicit* ``preprocess_on: false`` in the YAML as "never resize": an image of the
wrong size is then an error. The ``resize`` argument of :func:`load_calibration_data` overrides
both.

Dtypes and values
-----------------
Input names, shapes and dtypes come from the config, and from the graph (the imported model)
for what the config leaves out; without a graph an unnamed single input is called ``input``.
The target dtype of an input is the model input's dtype when a graph is given (the pipeline
always passes one). Without a graph: image inputs take float32; featuremaps take
``cal_data_type`` when it is an integer type, else the first file decides (integer ``.npy`` ->
int64, bool -> bool, floating -> float32). Floats for float inputs are cast (float64 ->
float32); floats for integer inputs must hold whole numbers in the dtype's range (else an error
naming the file); NaN or Inf anywhere is an error naming the file and the count.

Validation happens up front, before any caller writes output: the folder listings, every
``.npy`` header and its values (memory-mapped, one sample at a time), every ``.bin`` size and
values, every image header (and its size when resizing is off); the first image of each folder
is decoded fully. Later images are decoded when read, and a decode failure then still names the
file.

Memory stays flat in the number of samples: files are read when a batch needs them.

Random data for ``calibration_type: skip``
------------------------------------------
:func:`random_calibration_data` (also ``CalibrationSet.random``) makes reproducible random
samples of the right shape and dtype: whole-number pixels uniform in 0-255 (float32) for image
inputs, N(0, 1) for float featuremaps, uniform integers in ``[0, high)`` for integer inputs,
where ``high`` is the smallest table size the input indexes through a ``Gather`` in the graph
(capped at 100), else 2 (valid for masks, token type ids and any vocabulary), and random bools
for bool inputs. Sample k depends only on ``(seed, k)``, not on the batch size.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from hbtool.config.types import HbConfig, InputSpec
from hbtool.errors import InputError

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
NPY_SUFFIXES = (".npy",)
RAW_SUFFIXES = (".bin",)
# Horizon's preprocessing scripts write these (numpy.tofile of the preprocessed sample)
HORIZON_RAW_SUFFIXES = (".rgb", ".rgbchw", ".bgr", ".yuv444")
NV12_SUFFIXES = (".nv12",)
KNOWN_SUFFIXES = IMAGE_SUFFIXES + NPY_SUFFIXES + RAW_SUFFIXES + HORIZON_RAW_SUFFIXES + NV12_SUFFIXES
_KNOWN_TEXT = " ".join(KNOWN_SUFFIXES)

_RAW_TYPES = ("uint8", "int8", "int16", "float32", "int32", "int64")
SKIP_DEFAULT_SAMPLES = 8          # random samples for calibration_type skip without num_samples
RANDOM_INT_HIGH_DEFAULT = 2       # random integer inputs: [0, 2) unless the graph says more
RANDOM_INT_HIGH_CAP = 100


# ----------------------------------------------------------------------------------- colour
def rgb_to_yuv444(rgb: np.ndarray) -> np.ndarray:
    """Full-range BT.601 YUV (as JPEG and OpenCV's ``COLOR_RGB2YUV``) of an ``H x W x 3`` RGB array.

    ``Y = 0.299 R + 0.587 G + 0.114 B``, ``U = 0.564 (B - Y) + 128``,
    ``V = 0.713 (R - Y) + 128``, rounded and clipped to 0-255 like an 8-bit buffer
    (``input_space_and_range: regular``).
    """
    rgb = np.asarray(rgb, dtype=np.float32)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = 0.564 * (b - y) + 128.0
    v = 0.713 * (r - y) + 128.0
    return np.clip(np.rint(np.stack([y, u, v], axis=-1)), 0, 255).astype(np.float32)


def nv12_to_yuv444(frame: np.ndarray, h: int, w: int) -> np.ndarray:
    """An NV12 frame (``h*w*3/2`` uint8) as an ``h x w x 3`` YUV array (chroma repeated 2x2)."""
    y = frame[:h * w].reshape(h, w).astype(np.float32)
    uv = frame[h * w:].reshape(h // 2, w // 2, 2).astype(np.float32)
    uv = uv.repeat(2, axis=0).repeat(2, axis=1)
    return np.concatenate([y[..., None], uv], axis=-1)


def yuv444_to_rgb(yuv: np.ndarray) -> np.ndarray:
    """Full-range BT.601 RGB of an ``H x W x 3`` YUV array, rounded and clipped to 0-255."""
    y, u, v = yuv[..., 0], yuv[..., 1] - 128.0, yuv[..., 2] - 128.0
    r = y + 1.402 * v
    g = y - 0.344136 * u - 0.714136 * v
    b = y + 1.772 * u
    return np.clip(np.rint(np.stack([r, g, b], axis=-1)), 0, 255).astype(np.float32)


# ------------------------------------------------------------------------------ resolution
@dataclass(frozen=True)
class _InputInfo:
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


def _specs_of(cfg_or_specs: HbConfig | Sequence[InputSpec]) -> list[InputSpec]:
    if isinstance(cfg_or_specs, HbConfig):
        return list(cfg_or_specs.inputs)
    return list(cfg_or_specs)


def _resolve_inputs(specs: list[InputSpec], graph: Any | None) -> list[_InputInfo]:
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
        infos.append(_InputInfo(spec, name, tuple(int(d) for d in shape), dtype))
    return infos


def _default_dtype_for(stored: np.dtype) -> np.dtype:
    """Target dtype of a featuremap without a graph, from the first file's dtype."""
    if stored.kind == "b":
        return np.dtype(bool)
    if stored.kind in "iu":
        return np.dtype(np.int64)
    return np.dtype(np.float32)


# --------------------------------------------------------------------------------- values
def _check_values(arr: np.ndarray, target: np.dtype, where: str, label: str) -> None:
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


# ------------------------------------------------------------------------------ images
def _image_error(path: Path, exc: BaseException, label: str) -> InputError:
    return InputError(f"{path}: cannot be decoded as an image ({type(exc).__name__}: {exc}) "
                      f"in the calibration data of {label}",
                      "replace or remove the file (8-bit PNG, JPEG or BMP)")


_BAD_MODES = ("I", "F")


def _check_mode(path: Path, mode: str, label: str) -> None:
    if mode in _BAD_MODES or mode.startswith("I;16"):
        raise InputError(f"{path}: {mode} image (16-bit or float pixels) for {label}; "
                         "calibration images must be 8-bit",
                         "convert it to an 8-bit image, or store the array as .npy")


# -------------------------------------------------------------------------------- readers
class _FileInput:
    """One input's calibration folder: validated on creation, samples read on demand."""

    def __init__(self, info: _InputInfo, folder: Path, resize: bool):
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
        info, folder = self.info, self.folder
        if not folder.exists():
            raise InputError(f"calibration data folder of {info.label} not found: {folder}",
                             "check calibration_parameters.cal_data_dir (relative paths are "
                             "taken from the YAML file's folder)")
        if not folder.is_dir():
            raise InputError(f"calibration data folder of {info.label} is a file, not a folder: "
                             f"{folder}", "give the folder that holds the sample files")
        entries = sorted((p for p in folder.iterdir() if not p.name.startswith(".")),
                         key=lambda p: p.name)
        files = [p for p in entries if p.is_file()]
        if not files:
            raise InputError(f"calibration data folder of {info.label} is empty: {folder}",
                             f"put the calibration samples ({_KNOWN_TEXT}) in it")
        known = [(p, self._kind(p)) for p in files if p.suffix.lower() in KNOWN_SUFFIXES]
        if not known:
            shown = ", ".join(p.name for p in files[:3]) + (", ..." if len(files) > 3 else "")
            raise InputError(
                f"calibration data folder of {info.label} has no file of a known type "
                f"({_KNOWN_TEXT}): {folder} holds {shown}",
                "store images as .png/.jpg/.bmp, arrays as .npy (numpy.save), raw dumps as "
                ".bin/.rgb/.bgr/.rgbchw/.yuv444 (numpy.tofile) or frames as .nv12")
        ignored = len(files) - len(known)
        if ignored:
            log.info("%s: ignoring %d file(s) of unknown type in %s", info.label, ignored, folder)
        self.files = known
        if info.spec.is_image is False and any(k == "image" for _, k in known):
            first = next(p for p, k in known if k == "image")
            raise InputError(f"{first}: an image file for {info.label}, whose input_type_train "
                             "is featuremap", "store featuremap samples as .npy or .bin files")

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
            self.info = _InputInfo(self.info.spec, self.info.name, self.info.shape,
                                   _default_dtype_for(stored))
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
                _check_values(arr[k * rows:(k + 1) * rows], self.dtype,
                              f"{path} (sample {k})", info.label)
        else:
            _check_values(arr, self.dtype, str(path), info.label)
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
        _check_values(np.fromfile(path, dtype=stored), self.dtype, str(path), info.label)

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
        frames = []
        for frame in raw.reshape(n, -1):
            yuv = nv12_to_yuv444(frame, h, w)
            if info.spec.type_train == "yuv444":
                pixels = yuv
            else:
                pixels = yuv444_to_rgb(yuv)
                if info.spec.type_train == "bgr":
                    pixels = pixels[..., ::-1]
            frames.append(pixels.transpose(2, 0, 1) if info.spec.layout_train == "NCHW" else pixels)
        return np.ascontiguousarray(np.stack(frames)).astype(self.dtype, copy=False)

    def _scan_image(self, path: Path, decode: bool) -> None:
        from PIL import Image

        info = self.info
        if info.shape[0] != 1:
            raise InputError(f"{path}: an image gives one sample of batch 1, but {info.label} "
                             f"has input_shape {'x'.join(map(str, info.shape))}",
                             "set the first dimension of input_shape to 1, or store samples as "
                             ".npy in the full shape")
        try:
            with Image.open(path) as im:
                size, mode = im.size, im.mode
        except Exception as exc:  # Pillow raises many kinds for broken files
            raise _image_error(path, exc, info.label) from None
        _check_mode(path, mode, info.label)
        h, w = info.hw
        if not self.resize and size != (w, h):
            raise InputError(
                f"{path}: image is {size[0]}x{size[1]} (width x height) but {info.label} takes "
                f"{w}x{h}, and preprocess_on: false turns resizing off",
                f"resize the images to {w}x{h}, or set calibration_parameters.preprocess_on: "
                "true to resize them when read")
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
            _check_values(arr, self.dtype, where, self.info.label)
        return np.ascontiguousarray(arr.astype(self.dtype))

    def _read_image(self, path: Path) -> np.ndarray:
        from PIL import Image

        info = self.info
        spec = info.spec
        h, w = info.hw
        try:
            with Image.open(path) as im:
                _check_mode(path, im.mode, info.label)
                im.load()
                im = im.convert("L" if spec.type_train == "gray" else "RGB")
                if im.size != (w, h):
                    if not self.resize:
                        raise InputError(
                            f"{path}: image is {im.size[0]}x{im.size[1]} but {info.label} takes "
                            f"{w}x{h}, and preprocess_on: false turns resizing off",
                            f"resize the images to {w}x{h}, or set "
                            "calibration_parameters.preprocess_on: true")
                    im = im.resize((w, h), Image.Resampling.BILINEAR)
                pixels = np.asarray(im, dtype=np.float32)
        except InputError:
            raise
        except Exception as exc:  # truncated or corrupt data shows only when decoding
            raise _image_error(path, exc, info.label) from None
        out = image_to_train_pixels(pixels, spec)
        if out.shape != info.shape:  # channel count of the shape disagrees with the type
            raise InputError(f"{path}: decoded to {out.shape} but {info.label} takes "
                             f"{info.shape}", "check input_shape, input_type_train and "
                                              "input_layout_train")
        return out.astype(self.dtype, copy=False)


def image_to_train_pixels(pixels: np.ndarray, spec) -> np.ndarray:
    """Decoded RGB (or gray) pixels, H x W (x C) -> one sample (1, ...) of the input's training type and layout.

    Shared by calibration and by simulate's image inputs, so both see an image the same way.
    """
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if spec.type_train == "bgr":
        pixels = pixels[..., ::-1]
    elif spec.type_train == "yuv444":
        pixels = rgb_to_yuv444(pixels)
    if spec.layout_train == "NCHW":
        pixels = pixels.transpose(2, 0, 1)
    return np.ascontiguousarray(pixels[None])


class _RandomInput:
    """Random samples for calibration_type skip; sample k depends only on (seed, input, k)."""

    def __init__(self, info: _InputInfo, n: int, seed: int, index: int, high: int):
        self.info = info
        self.n = n
        self.seed = seed
        self.index = index
        self.high = high
        self.dtype = info.dtype or (np.dtype(np.float32) if info.spec.is_image
                                    else np.dtype(info.spec.cal_data_type))

    def __len__(self) -> int:
        return self.n

    def source(self, i: int) -> str:
        return f"random(seed={self.seed})[{i}]"

    def read(self, i: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.index, i])
        shape, dtype = self.info.shape, self.dtype
        if self.info.spec.is_image:
            return rng.integers(0, 256, size=shape).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, size=shape).astype(bool)
        if dtype.kind in "iu":
            return rng.integers(0, self.high, size=shape).astype(dtype)
        return rng.standard_normal(size=shape).astype(dtype)


# ----------------------------------------------------------------------------------- the set
class CalibrationSet:
    """Calibration samples for every model input, read lazily.

    ``num_samples`` (also ``len()``) is the total, for progress bars; ``iter_batches`` yields
    ``{input name: array}`` with up to ``batch_size`` samples concatenated on axis 0 (each
    sample has the input's full shape, so its first dimension is ``input_shape[0]``, usually 1).
    """

    def __init__(self, readers: list[_FileInput] | list[_RandomInput], num_samples: int):
        self._readers = readers
        self.num_samples = num_samples

    @property
    def input_names(self) -> list[str]:
        return [r.info.name for r in self._readers]

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one sample per input (``input_shape``)."""
        return {r.info.name: r.info.shape for r in self._readers}

    @property
    def dtypes(self) -> dict[str, np.dtype]:
        return {r.info.name: r.dtype for r in self._readers}

    def __len__(self) -> int:
        return self.num_samples

    def num_batches(self, batch_size: int) -> int:
        return -(-self.num_samples // max(1, int(batch_size)))

    def sources(self, i: int) -> dict[str, str]:
        """Where sample ``i`` comes from, per input (file path, or stacked-file row)."""
        return {r.info.name: r.source(i) for r in self._readers}

    def sample(self, i: int) -> dict[str, np.ndarray]:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} of {self.num_samples}")
        return {r.info.name: r.read(i) for r in self._readers}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self.num_samples):
            yield self.sample(i)

    def iter_batches(self, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        """Batches of ``batch_size`` samples (the last may be smaller), read when needed."""
        if int(batch_size) < 1:
            raise InputError(f"batch size {batch_size} is below 1",
                             "set calibration_parameters.batch_size to 1 or more")
        bs = int(batch_size) if self._batchable() else 1
        for start in range(0, self.num_samples, bs):
            stop = min(start + bs, self.num_samples)
            if stop - start == 1:
                yield self.sample(start)
                continue
            parts = [self.sample(i) for i in range(start, stop)]
            yield {name: np.concatenate([p[name] for p in parts], axis=0)
                   for name in self.input_names}

    def _batchable(self) -> bool:
        """Samples stack on axis 0 only when every input's first axis is a batch axis of 1 (an
        ``edge_index`` of shape 2 x E, or a rank-0 input, has none: its samples run one by one)."""
        return all(len(r.info.shape) >= 1 and r.info.shape[0] == 1 for r in self._readers)

    @classmethod
    def random(cls, cfg_or_specs: HbConfig | Sequence[InputSpec], n: int, seed: int = 0,
               graph: Any | None = None) -> "CalibrationSet":
        return random_calibration_data(cfg_or_specs, n, seed, graph)


# ---------------------------------------------------------------------------------- entries
def _resize_policy(cfg: HbConfig) -> bool:
    """Resize unless the YAML says ``preprocess_on: false`` explicitly (unset means resize)."""
    return cfg.calibration.preprocess_on is not False


def load_calibration_data(cfg: HbConfig, graph: Any | None = None,
                          max_samples: int | None = None, *,
                          resize: bool | None = None) -> CalibrationSet:
    """Validate the calibration folders of ``cfg`` and return a lazily read CalibrationSet.

    ``graph`` (the imported model) supplies input names, shapes and dtypes the config leaves
    out. ``max_samples`` (default ``calibration_parameters.num_samples``) keeps the first N
    samples in file-name order. ``resize`` forces image resizing on or off (default: see the
    module doc). With ``calibration_type: skip`` it returns random data instead
    (:func:`random_calibration_data`, ``num_samples`` or 8 samples, seed 0).
    Raises InputError (or ConfigError) before anything is read lazily if something is wrong.
    """
    if max_samples is None:
        max_samples = cfg.calibration.num_samples
    if cfg.calibration.calibration_type == "skip":
        return random_calibration_data(cfg, max_samples or SKIP_DEFAULT_SAMPLES, 0, graph)
    infos = _resolve_inputs(list(cfg.inputs), graph)
    folders = cfg.require_calibration_data()
    do_resize = _resize_policy(cfg) if resize is None else bool(resize)
    readers = [_FileInput(info, folder, do_resize) for info, folder in zip(infos, folders)]
    counts = [len(r) for r in readers]
    for r, c in zip(readers[1:], counts[1:]):
        if c != counts[0]:
            first = readers[0]
            raise InputError(
                f"calibration folders do not match: {first.folder} ({first.info.label}) holds "
                f"{counts[0]} samples but {r.folder} ({r.info.label}) holds {c}",
                "give every input's folder the same number of samples; files are paired by "
                "sorted file name")
    n = counts[0]
    if max_samples is not None:
        n = min(n, int(max_samples))
    return CalibrationSet(readers, n)


def _index_bound(graph: Any | None, info: _InputInfo) -> int | None:
    """The exclusive bound of an integer input's values from the ops that index with it
    (:mod:`hbtool.quant.index_ranges`); an input whose range cannot be read is an error."""
    from hbtool.quant.index_ranges import UnknownIndexRange, index_bound

    if graph is None:
        return None
    try:
        return index_bound(graph, info.name)
    except UnknownIndexRange as exc:
        raise InputError(f"{info.label} is an integer index whose valid range hbtool cannot read (it reaches "
                         f"'{exc.node}' ({exc.op_type}) through arithmetic or a table of dynamic size), so no random "
                         "data can be generated for it",
                         "give calibration data (cal_data_dir with .npy samples of real indices) instead of "
                         "calibration_type skip / perf --fast") from None


def random_calibration_data(cfg_or_specs: HbConfig | Sequence[InputSpec], n: int, seed: int = 0,
                            graph: Any | None = None) -> CalibrationSet:
    """``n`` reproducible random samples per input, for ``calibration_type: skip``.

    Image inputs: whole-number pixels uniform in 0-255 (float32). Float featuremaps: N(0, 1).
    Integer inputs: uniform in ``[0, high)``, ``high`` the smallest table the input indexes by
    Gather in ``graph`` (at most 100), else 2. Bool inputs: random bools. Sample k depends only
    on ``(seed, input index, k)``.
    """
    if int(n) < 1:
        raise InputError(f"{n} random samples requested", "ask for at least one sample")
    infos = _resolve_inputs(_specs_of(cfg_or_specs), graph)
    readers = []
    for k, info in enumerate(infos):
        bound = _index_bound(graph, info) if info.dtype is not None and info.dtype.kind in "iu" else None
        high = RANDOM_INT_HIGH_DEFAULT if bound is None else max(1, min(bound, RANDOM_INT_HIGH_CAP))
        readers.append(_RandomInput(info, int(n), int(seed), k, high))
    return CalibrationSet(readers, int(n))


__all__ = ["CalibrationSet", "load_calibration_data", "random_calibration_data",
           "rgb_to_yuv444", "nv12_to_yuv444", "yuv444_to_rgb", "IMAGE_SUFFIXES", "NPY_SUFFIXES",
           "RAW_SUFFIXES", "HORIZON_RAW_SUFFIXES", "NV12_SUFFIXES"]
