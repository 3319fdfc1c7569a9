"""Run-time input formats: what the chip receives for an image input, and the camera's conversion to it.

An image input whose ``input_type_rt`` / ``input_layout_rt`` differ from the training ones
(or that is a ``*_128`` type) is fed to the compiled model, and to its
``*_quantized_model.onnx``, as the chip receives it; the integer program converts it first
(:class:`hbtool.kernels.colour.InputConvert`). The float models (original, optimized,
calibrated) keep taking the training type: raw pixels 0-255 as float32 in the training
layout. An input whose run-time type and layout equal the training ones keeps the float32
pixel input as before (quantized on the CPU side at the model boundary).

Buffers (:func:`runtime_shape`, :func:`runtime_dtype`):

==============  ======================================================================
``nv12``        uint8 ``(N, 3H/2, W)``: the Y plane ``H x W``, then the interleaved UV
                plane ``H/2 x W/2`` of ``U, V`` pairs; ``H*W*3/2`` bytes per image
``yuv444``      uint8 ``(N, H, W, 3)`` (NHWC) or ``(N, 3, H, W)`` (NCHW), Y U V
``rgb``/``bgr`` uint8, 3 channels in that order, NHWC or NCHW
``gray``        uint8, 1 channel
``*_128``       the same with int8 ``value - 128`` (Horizon's ``RGB_128`` ... types)
==============  ======================================================================

The camera's conversion (:func:`to_runtime`), how ``hbtool simulate`` turns images into the
run-time format and how calibrate feeds its quantized model: pixel values are rounded to
whole numbers and clipped to 0-255; then :mod:`hbtool.io.colour`'s one RGB -> YUV (full-range
BT.601 (JFIF) in float64, or ``bt601_video``); nv12 chroma is the mean of each 2x2 block of the
full-resolution U and V; every value is then rounded half up (``floor(v + 0.5)``) and clipped
to 0-255.
"""

from __future__ import annotations

import numpy as np

from hbtool.config.types import InputSpec
from hbtool.errors import InputError
from hbtool.io.colour import rgb_to_yuv, round_pixels, to_video_range, yuv_to_nv12

_128 = "_128"


def base_type(type_rt: str) -> str:
    """``rgb_128`` -> ``rgb``; other types unchanged."""
    return type_rt[: -len(_128)] if type_rt.endswith(_128) else type_rt


def offset_of(type_rt: str) -> int:
    """128 for the ``*_128`` types (the buffer holds ``value - 128``), else 0."""
    return 128 if type_rt.endswith(_128) else 0


def needs_conversion(spec: InputSpec) -> bool:
    """Whether the artifact takes this input in a run-time format of its own (see the module doc)."""
    if not spec.is_image or spec.type_rt == "featuremap":
        return False
    if spec.type_rt != spec.type_train:
        return True
    return spec.layout_rt is not None and spec.layout_rt != spec.layout_train


def runtime_layout(spec: InputSpec) -> str:
    """The buffer's layout: ``nv12``, or ``input_layout_rt`` (the training layout when not given)."""
    if base_type(spec.type_rt) == "nv12":
        return "nv12"
    return spec.layout_rt or spec.layout_train or "NCHW"


def _hw(spec: InputSpec, train_shape: tuple[int, ...]) -> tuple[int, int]:
    if len(train_shape) != 4:
        raise InputError(f"input {spec.label}: input_type_rt {spec.type_rt} needs a 4-D image input, the model's is "
                         f"{tuple(train_shape)}", "set input_parameters.input_shape, e.g. 1x3x224x224")
    return (int(train_shape[2]), int(train_shape[3])) if spec.layout_train == "NCHW" else (int(train_shape[1]), int(train_shape[2]))


def runtime_shape(spec: InputSpec, train_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The buffer's shape for a model input of training shape ``train_shape`` (see the module doc)."""
    h, w = _hw(spec, train_shape)
    n = int(train_shape[0])
    fmt = base_type(spec.type_rt)
    if fmt == "nv12":
        if h % 2 or w % 2:
            raise InputError(f"input {spec.label}: nv12 needs an even height and width, got {h}x{w}",
                             "use an input_shape with even height and width")
        return (n, h * 3 // 2, w)
    c = 1 if fmt == "gray" else 3
    return (n, h, w, c) if runtime_layout(spec) == "NHWC" else (n, c, h, w)


def runtime_dtype(spec: InputSpec) -> np.dtype:
    return np.dtype(np.int8 if offset_of(spec.type_rt) else np.uint8)


def to_runtime(x: np.ndarray, spec: InputSpec) -> np.ndarray:
    """Training-type pixels (a batch in the training layout, values 0-255) -> the run-time buffer, as the camera makes it."""
    x = np.asarray(x, np.float64)
    nhwc = x if spec.layout_train == "NHWC" else np.transpose(x, (0, 2, 3, 1))
    nhwc = round_pixels(nhwc)
    fmt = base_type(spec.type_rt)
    train = spec.type_train
    video = spec.space_and_range == "bt601_video"
    if train == "bgr":
        nhwc, train = nhwc[..., ::-1], "rgb"
    if fmt in ("nv12", "yuv444"):
        if train == "yuv444":
            yuv = to_video_range(nhwc) if video else nhwc
        else:
            yuv = rgb_to_yuv(nhwc, video)
        if fmt == "nv12":
            out = yuv_to_nv12(yuv).astype(np.float64)
        else:
            out = round_pixels(yuv)
    elif fmt == "bgr":
        out = nhwc[..., ::-1]
    else:  # rgb, gray: the same values
        out = nhwc
    if fmt != "nv12" and runtime_layout(spec) == "NCHW":
        out = np.transpose(out, (0, 3, 1, 2))
    off = offset_of(spec.type_rt)
    return np.ascontiguousarray((out - off).astype(runtime_dtype(spec)))


def nv12_bytes(height: int, width: int) -> int:
    return height * width * 3 // 2


def runtime_specs(input_names: list[str], specs) -> dict[str, InputSpec]:
    """``{model input name: spec}`` of the inputs that take a run-time format (:func:`needs_conversion`)."""
    out: dict[str, InputSpec] = {}
    for k, spec in enumerate(specs or []):
        name = spec.name if spec.name is not None else (input_names[0] if len(input_names) == 1 and k == 0 else None)
        if name is not None and name in input_names and needs_conversion(spec):
            out[name] = spec
    return out
