"""InputConvert: the chip's input buffer (nv12, yuv444, rgb, bgr, gray) -> the model's normalised tensor.

On the chip an image input arrives in its run-time format (``input_type_rt``): the camera
pyramid delivers nv12, a DDR input may be rgb/bgr/yuv444/gray in NHWC or NCHW. The model was
trained on another colour order or layout (``input_type_train``) and a mean/scale
normalisation (``norm_type``). This kernel is the first op of the integer program for such an
input and does all of it in integers:

1. ``p = x + offset``: the pixel values 0-255 (``offset = 128`` for the ``*_128`` types, whose
   buffer holds ``value - 128`` as int8, as Horizon's quantized model takes them);
2. nv12 only: the buffer ``(N, 3H/2, W)`` is the Y plane (rows ``0..H-1``) and the
   interleaved UV plane (rows ``H..``, ``U, V`` byte pairs), ``H*W*3/2`` bytes; the chroma is
   upsampled by **nearest neighbour**: each U/V sample covers its 2x2 block of Y samples (what
   the pyramid / BPU input path does, no interpolation);
3. ``acc[c] = sum_k A[c, k] p[k] + B[c]``: one integer matrix per pixel, ``A`` and ``B`` the
   real colour conversion and ``-mean`` in fixed point at ``2**-F`` (:data:`FRACTION_BITS`);
   ``B`` holds ``-A o``, the YUV offset ``o`` (chroma 128, video range's Y 16) subtracted in
   integers, so zero chroma gives R = G = B = Y exactly (:func:`fixed_point_conversion`);
   the sign of a negative ``scale_value`` is folded into ``A`` and ``B``;
4. ``y[c] = requantize(acc[c])`` per channel, ratio ``|scale[c]| 2**-F / s_out``
   (:class:`~.requantize.Requantize`): the mean/scale normalisation and the output step;
5. the output in the training layout (NCHW or NHWC).

Colour (BT.601, :func:`yuv_to_rgb_matrix`): full range (JFIF, ``input_space_and_range:
regular``, Horizon's default), ``R = Y + 1.402 (V-128)``, ``G = Y - 0.344136 (U-128) -
0.714136 (V-128)``, ``B = Y + 1.772 (U-128)``; video range (``bt601_video``: Y in 16-235,
U/V in 16-240) first expands ``Y' = (Y-16) 255/219``, ``U' = (U-128) 255/224``. The
converted RGB is not clipped to 0-255: the conversion is one linear map, as in a 1x1
convolution (the float reference applies the same matrix).

Bounds: ``|p| <= 255``, ``|A| < 2**F * 2.1``, so ``|acc| < 3 * 255 * 2**15.1 + |B| < 2**26``:
both forms are exact (the ONNX form's products and 3-term sums of doubles below ``2**53``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from hbtool.kernels.base import Kernel, as_int, check, check_scales
from hbtool.kernels.builder import ElemType, OnnxBuilder
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.units import VECTOR

#: fraction bits of the colour matrix and the mean: a rounding error below 3 * 255 * 2**-15 pixel values
FRACTION_BITS = 14
#: the run-time formats and their channels, in the order the kernel's matrix reads them
FORMAT_CHANNELS = {"nv12": ("Y", "U", "V"), "yuv444": ("Y", "U", "V"), "rgb": ("R", "G", "B"),
                   "bgr": ("B", "G", "R"), "gray": ("Y",)}
#: training colour orders the output can be in
TRAIN_CHANNELS = {"rgb": ("R", "G", "B"), "bgr": ("B", "G", "R"), "yuv444": ("Y", "U", "V"), "gray": ("Y",)}

# BT.601's luma weights: the one place hbtool writes the colour conversion's coefficients
# (hbtool.io.colour, the camera's RGB -> YUV, and the float preprocessing read these matrices)
_KR, _KB = 0.299, 0.114
_KG = 1.0 - _KR - _KB
#: BT.601 video range: ``[Y, U, V] = VIDEO_OFFSET + full-range [Y, U-128, V-128] * VIDEO_SPAN / 255``
VIDEO_OFFSET = np.array([16.0, 128.0, 128.0])
VIDEO_SPAN = np.array([219.0, 224.0, 224.0])
#: the chroma offset of full-range YUV: ``[Y, U, V] = M [R, G, B] + YUV_OFFSET``
YUV_OFFSET = np.array([0.0, 128.0, 128.0])


def rgb_to_yuv_matrix() -> np.ndarray:
    """Full-range BT.601 (JFIF) ``[Y, U-128, V-128] = M [R, G, B]`` (float64, 3x3)."""
    y = np.array([_KR, _KG, _KB])
    u = (np.array([0.0, 0.0, 1.0]) - y) / (2.0 * (1.0 - _KB))
    v = (np.array([1.0, 0.0, 0.0]) - y) / (2.0 * (1.0 - _KR))
    return np.stack([y, u, v])


def yuv_to_rgb_matrix(video_range: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(M, t)`` with ``[R, G, B] = M [Y, U, V] + t`` for BT.601 full range or video range (see module doc)."""
    m = np.linalg.inv(rgb_to_yuv_matrix())
    offset = YUV_OFFSET
    if video_range:
        m = m @ np.diag(255.0 / VIDEO_SPAN)
        offset = VIDEO_OFFSET
    return m, -(m @ offset)


def conversion_matrix(fmt: str, train: str, video_range: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(M, t)``: training-order channel values ``= M p + t`` for pixels ``p`` of run-time format ``fmt``."""
    src, dst = FORMAT_CHANNELS[fmt], TRAIN_CHANNELS[train]
    yuv_in = src[0] == "Y" and len(src) == 3
    yuv_out = dst[0] == "Y" and len(dst) == 3
    if len(src) == 1 or len(dst) == 1:
        if len(src) != len(dst):
            raise ValueError(f"cannot convert {fmt} to {train}")
        return np.eye(1), np.zeros(1)
    if yuv_in and not yuv_out:
        m, t = yuv_to_rgb_matrix(video_range)     # rows R, G, B
        rows = [("R", "G", "B").index(c) for c in dst]
        return m[rows], t[rows]
    if yuv_in == yuv_out:                          # a channel permutation (rgb <-> bgr, yuv -> yuv)
        if yuv_in and video_range:                 # video-range yuv to the full range the model was trained on
            d = np.diag(255.0 / VIDEO_SPAN)
            return d, YUV_OFFSET - d @ VIDEO_OFFSET
        return np.array([[1.0 if s == c else 0.0 for s in src] for c in dst]), np.zeros(3)
    raise ValueError(f"cannot convert {fmt} to {train} (a model trained on yuv444 takes nv12 or yuv444)")


def input_offset(fmt: str, video_range: bool = False) -> np.ndarray:
    """The pixel value the converter subtracts in integers before its matrix: YUV's zero chroma (128) and, in
    video range, its black (Y 16); nothing for RGB and gray."""
    src = FORMAT_CHANNELS[fmt]
    if src[0] == "Y" and len(src) == 3:
        return VIDEO_OFFSET if video_range else YUV_OFFSET
    return np.zeros(len(src))


def fixed_point_conversion(fmt: str, train: str, mean: Sequence[float] = (0.0,), scale: Sequence[float] = (1.0,),
                           video_range: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(A, B)``, int64 at ``2**-FRACTION_BITS``: ``sign(scale) ((M p + t) - mean) ~ (A p + B) 2**-F`` per channel.

    ``A p + B = A (p - o) + round((M o + t - mean) 2**F)`` with ``o`` the :func:`input_offset`: the offset is
    subtracted in integers, so zero chroma (U = V = 128) gives R = G = B = Y exactly. The integer colour
    matrix of the chip's converter; with the default mean 0 and scale 1 it is the colour conversion alone
    (what :mod:`hbtool.io.colour` gives calibration, so both see the same values).
    """
    m, t = conversion_matrix(fmt, train, video_range)
    offset = input_offset(fmt, video_range)
    c = m.shape[0]
    mean_c = np.broadcast_to(np.asarray(mean, np.float64).reshape(-1), (c,))
    scale_c = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (c,))
    if not np.all(np.isfinite(scale_c)) or np.any(scale_c == 0):
        raise ValueError("scale values must be finite and nonzero")
    sign = np.sign(scale_c)
    one = float(2**FRACTION_BITS)
    weight = np.rint(m * one * sign[:, None]).astype(np.int64)
    at_offset = m @ offset + t                    # the value of the pixel ``o``: 0, or 128 for yuv -> yuv
    bias = np.rint((at_offset - mean_c) * one * sign).astype(np.int64) - weight @ offset.astype(np.int64)
    return weight, bias


def buffer_pixels(x: np.ndarray, fmt: str, height: int, width: int, layout_in: str) -> np.ndarray:
    """A run-time buffer's pixel values (offset already added) as ``(N, H, W, C_in)``: nv12 chroma upsampled by
    nearest neighbour (each U/V sample covers its 2x2 block of Y samples), NCHW transposed."""
    h, w = height, width
    if fmt == "nv12":
        n = x.shape[0]
        y = x[:, :h, :, None]
        uv = x[:, h:, :].reshape(n, h // 2, 1, w // 2, 1, 2)
        uv = np.broadcast_to(uv, (n, h // 2, 2, w // 2, 2, 2)).reshape(n, h, w, 2)
        return np.concatenate([y, uv], axis=-1)
    return x if layout_in == "NHWC" else np.transpose(x, (0, 2, 3, 1))


def colour_sums(pixels: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``A p + B`` per pixel (int64, at ``2**-FRACTION_BITS``) of ``(..., C_in)`` integer pixels."""
    return (pixels[..., None, :] * weight).sum(axis=-1) + bias


@dataclass(frozen=True, eq=False)
class InputConvert(Kernel):
    """Run-time image buffer (uint8, or int8 ``*_128``) -> normalised int8/int16 tensor in the training layout."""

    unit = VECTOR

    fmt: str                 # nv12 | yuv444 | rgb | bgr | gray (the buffer's format)
    offset: int              # 0, or 128 for the *_128 formats
    layout_in: str           # NHWC | NCHW of the buffer (nv12: "nv12")
    layout_out: str          # NHWC | NCHW of the output (the training layout)
    height: int
    width: int
    weight: np.ndarray       # int64 (C_out, C_in) at 2**-FRACTION_BITS
    bias: np.ndarray         # int64 (C_out,) at 2**-FRACTION_BITS
    requant: Requantize
    train: str = "rgb"
    video_range: bool = False

    @property
    def onnx_input_type(self) -> int:  # type: ignore[override]
        return ElemType.INT8 if self.offset else ElemType.UINT8

    @classmethod
    def build(cls, fmt: str, train: str, height: int, width: int, mean: Sequence[float], scale: Sequence[float],
              scale_out: float | Sequence[float], out_bits: int = 8, layout_in: str = "NHWC", layout_out: str = "NCHW",
              offset: int = 0, video_range: bool = False, rounding: str = DEFAULT_ROUNDING) -> "InputConvert":
        """The conversion of an ``height x width`` buffer of ``fmt`` to training type ``train``, normalised by
        ``(value - mean) * scale`` per channel (one value or one per channel) and quantized at ``scale_out``."""
        if fmt not in FORMAT_CHANNELS or train not in TRAIN_CHANNELS:
            raise ValueError(f"unknown conversion {fmt} -> {train}")
        if fmt == "nv12" and (height % 2 or width % 2):
            raise ValueError(f"nv12 needs an even height and width, got {height}x{width}")
        if offset not in (0, 128):
            raise ValueError("offset must be 0 or 128")
        weight, bias = fixed_point_conversion(fmt, train, mean, scale, video_range)
        c = weight.shape[0]
        scale_c = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (c,))
        one = float(2**FRACTION_BITS)
        s_out = np.broadcast_to(np.asarray(scale_out, np.float64).reshape(-1), (c,))
        check_scales("InputConvert", scale_out=s_out)
        bound = int(np.abs(weight).sum(axis=1).max()) * 255 + int(np.abs(bias).max())
        requant = Requantize.build(np.abs(scale_c) / one / s_out, out_bits, axis=-1, acc_bound=bound, rounding=rounding)
        return cls(fmt=fmt, offset=int(offset), layout_in="nv12" if fmt == "nv12" else layout_in, layout_out=layout_out,
                   height=int(height), width=int(width), weight=weight, bias=bias, requant=requant, train=train,
                   video_range=bool(video_range))

    # ------------------------------------------------------------------ shapes
    @property
    def channels_in(self) -> int:
        return len(FORMAT_CHANNELS[self.fmt])

    def input_shape(self, batch: int = 1) -> tuple[int, ...]:
        """The buffer's shape: nv12 ``(N, 3H/2, W)``; else ``(N, H, W, C)`` or ``(N, C, H, W)``."""
        h, w, c = self.height, self.width, self.channels_in
        if self.fmt == "nv12":
            return (batch, h * 3 // 2, w)
        return (batch, h, w, c) if self.layout_in == "NHWC" else (batch, c, h, w)

    @property
    def input_dtype(self) -> np.dtype:
        return np.dtype(np.int8 if self.offset else np.uint8)

    # ------------------------------------------------------------------- forms
    def _pixels_numpy(self, x: np.ndarray) -> np.ndarray:
        """The buffer as ``(N, H, W, C_in)`` int64 pixel values 0-255."""
        x = as_int(x, "image buffer")
        check(tuple(x.shape[1:]) == self.input_shape()[1:], f"{self.fmt} buffer of shape {tuple(x.shape)}, expected "
              f"(N, {', '.join(str(d) for d in self.input_shape()[1:])})")
        lo, hi = (-128, 127) if self.offset else (0, 255)
        if x.size:
            check(lo <= int(x.min()) and int(x.max()) <= hi, f"image buffer values outside [{lo}, {hi}]")
        return buffer_pixels(x + self.offset, self.fmt, self.height, self.width, self.layout_in)

    def accumulate(self, x: np.ndarray) -> np.ndarray:
        """The integer sums ``A p + B`` (int64 ``(N, H, W, C_out)`` at ``2**-FRACTION_BITS``) the requantize reads."""
        return colour_sums(self._pixels_numpy(x), self.weight, self.bias)

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        acc = self.accumulate(x)
        y = self.requant.apply_trusted(acc)
        return np.ascontiguousarray(np.transpose(y, (0, 3, 1, 2))) if self.layout_out == "NCHW" else y

    def emit(self, b: OnnxBuilder, x: str) -> str:
        h, w = self.height, self.width
        p = b.cast(x, np.float64)
        if self.offset:
            p = b.add(p, b.const(float(self.offset)))
        i64 = lambda v: b.const(np.array(v, np.int64), np.int64, "shape")  # noqa: E731
        if self.fmt == "nv12":
            y = b.op("Slice", p, i64([0]), i64([h]), i64([1]))
            y = b.op("Unsqueeze", y, i64([3]))
            uv = b.op("Slice", p, i64([h]), i64([h * 3 // 2]), i64([1]))
            uv = b.op("Reshape", uv, i64([-1, h // 2, 1, w // 2, 1, 2]))
            uv = b.op("Expand", uv, i64([1, h // 2, 2, w // 2, 2, 2]))
            uv = b.op("Reshape", uv, i64([-1, h, w, 2]))
            p = b.op("Concat", y, uv, axis=-1)
        elif self.layout_in == "NCHW":
            p = b.op("Transpose", p, perm=[0, 2, 3, 1])
        prod = b.mul(b.op("Unsqueeze", p, i64([3])), b.const(self.weight.astype(np.float64), hint="A"))
        acc = b.add(b.reduce("ReduceSum", prod, [-1], keepdims=False), b.const(self.bias.astype(np.float64), hint="B"))
        out = self.requant.emit(b, acc)
        return b.op("Transpose", out, perm=[0, 3, 1, 2]) if self.layout_out == "NCHW" else out

    # ------------------------------------------------------------------ reports
    @property
    def multiply_adds_per_element(self) -> int:
        """Integer multiply-adds per output element (the perf model's count of the conversion)."""
        return int(np.count_nonzero(self.weight, axis=1).max(initial=1))
