"""Pooling and mean reductions.

* ``AvgPool``: integer window sums, then :class:`Requantize` with ``M 2**-n ~ s_in / (s_out count)``.
  With ``count_include_pad=0`` and padding, or ``ceil_mode=1`` (the last windows overhang the
  end; they are summed over extra zero padding), the count differs at the borders: the
  multiplier becomes a map over the output positions (``spatial_shape`` is then needed at
  build). ONNX: window sums are a depthwise FLOAT Conv with all-one weights, split into
  digits like :mod:`hbtool.kernels.conv` when ``2**(in_bits-1) * area > 2**24`` (int16 with
  windows over 512 elements), recombined in DOUBLE.
* ``ReduceMean`` (and GlobalAveragePool as ``ReduceMean`` over the spatial axes) over any
  axes (channels-last ``(B, H, W, C)`` heads reduce axes 1 and 2): ``ReduceSum`` in DOUBLE
  (exact: ``count 2**(in_bits-1) < 2**52``), then the requantizer. ``ReduceSum``: the same
  with ``M 2**-n ~ s_in / s_out``.
* ``MaxPool``: a plain integer max (same scale in and out); ONNX MaxPool runs on DOUBLE.
  Padding never wins the max. ``ceil_mode`` follows the ONNX rule, where a last window that
  would start in the end padding is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hbtool.kernels.base import Kernel, check, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.conv import conv_geometry, emit_float_conv, pad_numpy, plan_float_conv, windows_numpy
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING, int_range
from hbtool.kernels.linear import check_activation
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.units import VECTOR


def pool_output_shape(spatial: Sequence[int], kshape: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                      dilations: Sequence[int], ceil_mode: bool) -> list[int]:
    """ONNX pooling output size (with the drop of a last window starting in the end padding)."""
    nd = len(kshape)
    out = []
    for i in range(nd):
        span = spatial[i] + pads[i] + pads[i + nd] - dilations[i] * (kshape[i] - 1) - 1
        o = (math.ceil(span / strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (o - 1) * strides[i] >= spatial[i] + pads[i]:
            o -= 1
        out.append(int(o))
    return out


@dataclass(frozen=True, eq=False)
class AvgPool(Kernel):
    """``requantize(window_sum(x))`` with ``M 2**-n ~ s_in / (s_out count)``."""

    unit = VECTOR
    vector_class = "pool"
    merges_samples = True

    kernel_shape: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    channels: int
    in_bits: int
    requant: Requantize

    @classmethod
    def build(
        cls,
        kernel_shape: Sequence[int],
        scale_in: float,
        scale_out: float,
        channels: int,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        count_include_pad: bool = False,
        spatial_shape: Sequence[int] | None = None,
        in_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        rounding: str = DEFAULT_ROUNDING,
        ceil_mode: bool = False,
    ) -> "AvgPool":
        """``channels`` sizes the depthwise ONNX Conv; ``spatial_shape`` is needed for border counts and ``ceil_mode``.

        ``ceil_mode``: the ONNX output size rounded up; the last windows then reach past the end
        padding, so the kernel pads further (zeros) and divides each window by what it covers."""
        check_scales("AvgPool", scale_in=scale_in, scale_out=scale_out)
        k = tuple(int(v) for v in kernel_shape)
        s, p, _ = conv_geometry(len(k), strides, pads, None)
        int_range(in_bits)
        area = int(np.prod(k))
        nd = len(k)
        extra = [0] * nd
        if ceil_mode:
            if spatial_shape is None:
                raise ValueError("AvgPool with ceil_mode=1 needs spatial_shape")
            out = pool_output_shape(spatial_shape, k, s, p, (1,) * nd, True)
            extra = [max(0, (out[i] - 1) * s[i] + k[i] - int(spatial_shape[i]) - p[i] - p[i + nd]) for i in range(nd)]
        if (any(p) and not count_include_pad) or any(extra):
            if spatial_shape is None:
                raise ValueError("AvgPool with padding and count_include_pad=0 needs spatial_shape")
            # the elements a window divides by: the input's, and the declared padding's with count_include_pad;
            # never the overhang of a ceil_mode window past the padding (onnxruntime's divisor)
            counted = np.ones((1, 1) + tuple(int(v) for v in spatial_shape), np.int64)
            if count_include_pad:
                counted = pad_numpy(counted, p, 1)
                counted = pad_numpy(counted, [0] * nd + extra)
            else:
                counted = pad_numpy(counted, list(p[:nd]) + [p[nd + i] + extra[i] for i in range(nd)])
            counts = windows_numpy(counted, k, s, (1,) * nd).sum(axis=tuple(range(-nd, 0)))[0, 0]
            ratio = float(scale_in) / (float(scale_out) * counts.astype(np.float64))
            p = tuple(p[:nd]) + tuple(p[nd + i] + extra[i] for i in range(nd))  # the ceil_mode windows, in floor mode
        else:
            ratio = float(scale_in) / (float(scale_out) * area)
        rq = Requantize.build(ratio, out_bits, acc_bound=2 ** (in_bits - 1) * area, relu=relu, rounding=rounding)
        plan_float_conv(np.ones((int(channels), 1) + k, np.int64), in_bits)
        return cls(kernel_shape=k, strides=s, pads=p, channels=int(channels), in_bits=in_bits, requant=rq)

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        x = check_activation(x, self.in_bits)
        nd = len(self.kernel_shape)
        win = windows_numpy(pad_numpy(x, self.pads), self.kernel_shape, self.strides, (1,) * nd)
        return self.requant.apply_trusted(win.sum(axis=tuple(range(-nd, 0))))

    def emit(self, b: OnnxBuilder, x: str) -> str:
        w = np.ones((self.channels, 1) + self.kernel_shape, np.int64)
        attrs = dict(kernel_shape=list(self.kernel_shape), strides=list(self.strides), pads=list(self.pads),
                     group=self.channels)
        return self.requant.emit(b, emit_float_conv(b, x, w, attrs, self.in_bits))


@dataclass(frozen=True, eq=False)
class ReduceMean(Kernel):
    """Mean over ``axes`` = ``requantize(sum)`` with ``M 2**-n ~ s_in / (s_out count)``."""

    unit = VECTOR
    vector_class = "pool"
    reduction = "mean"
    merges_samples = True

    axes: tuple[int, ...]
    keepdims: bool
    count: int
    in_bits: int
    requant: Requantize

    @classmethod
    def build(
        cls,
        axes: Sequence[int],
        count: int,
        scale_in: float,
        scale_out: float,
        keepdims: bool = True,
        in_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        rounding: str = DEFAULT_ROUNDING,
    ) -> "ReduceMean":
        """``count``: the number of elements reduced (product of the reduced dimensions)."""
        check_scales(cls.__name__, scale_in=scale_in, scale_out=scale_out)
        int_range(in_bits)
        rq = Requantize.build(cls._ratio(float(scale_in), float(scale_out), int(count)), out_bits,
                              acc_bound=2 ** (in_bits - 1) * int(count), relu=relu, rounding=rounding)
        return cls(axes=tuple(int(a) for a in axes), keepdims=bool(keepdims), count=int(count), in_bits=in_bits,
                   requant=rq)

    @staticmethod
    def _ratio(scale_in: float, scale_out: float, count: int) -> float:
        """The requantization ratio of the integer sum: the mean divides it by the count."""
        return scale_in / (scale_out * count)

    @classmethod
    def global_avgpool(cls, rank: int, count: int, scale_in: float, scale_out: float, **kw: Any) -> "ReduceMean":
        """GlobalAveragePool of a ``[N, C, *spatial]`` tensor of ``rank`` dims (count = prod(spatial))."""
        return cls.build(tuple(range(2, rank)), count, scale_in, scale_out, keepdims=True, **kw)

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        x = check_activation(x, self.in_bits)
        check(int(np.prod([x.shape[a] for a in self.axes])) == self.count, "reduced element count differs from build")
        # sums kept as dimensions until after the requantizer: a sum over every axis without
        # keepdims would be a numpy scalar, which the requantizer's in-place clip refuses
        y = self.requant.apply_trusted(x.sum(axis=self.axes, keepdims=True))
        return y if self.keepdims else y.reshape([d for k, d in enumerate(y.shape) if k not in self._positive_axes(x.ndim)])

    def _positive_axes(self, rank: int) -> set[int]:
        return {a % rank for a in self.axes}

    def emit(self, b: OnnxBuilder, x: str) -> str:
        return self.requant.emit(b, b.reduce("ReduceSum", x, self.axes, self.keepdims))


@dataclass(frozen=True, eq=False)
class ReduceSum(ReduceMean):
    """Sum over ``axes`` = ``requantize(sum)`` with ``M 2**-n ~ s_in / s_out``: the mean's integer
    form with no division by the count (same sum, same bounds, same ONNX form)."""

    reduction = "sum"

    @staticmethod
    def _ratio(scale_in: float, scale_out: float, count: int) -> float:
        return scale_in / scale_out


@dataclass(frozen=True, eq=False)
class MaxPool(Kernel):
    """Integer max over windows (input and output share the scale)."""

    unit = VECTOR
    vector_class = "pool"
    merges_samples = True

    kernel_shape: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool = False

    @classmethod
    def build(cls, kernel_shape: Sequence[int], strides: Sequence[int] | None = None,
              pads: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
              ceil_mode: bool = False) -> "MaxPool":
        k = tuple(int(v) for v in kernel_shape)
        s, p, d = conv_geometry(len(k), strides, pads, dilations)
        return cls(kernel_shape=k, strides=s, pads=p, dilations=d, ceil_mode=bool(ceil_mode))

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        x = check_activation(x, 16)
        nd = len(self.kernel_shape)
        spatial = x.shape[2:]
        out = pool_output_shape(spatial, self.kernel_shape, self.strides, self.pads, self.dilations, self.ceil_mode)
        pads = list(self.pads)
        for i in range(nd):  # extra end padding so the last (partial) windows exist
            need = (out[i] - 1) * self.strides[i] + self.dilations[i] * (self.kernel_shape[i] - 1) + 1
            pads[i + nd] = max(pads[i + nd], need - spatial[i] - pads[i])
        win = windows_numpy(pad_numpy(x, pads, -(2**40)), self.kernel_shape, self.strides, self.dilations)
        win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in out)]
        return win.max(axis=tuple(range(-nd, 0)))

    def emit(self, b: OnnxBuilder, x: str) -> str:
        return b.op("MaxPool", x, kernel_shape=list(self.kernel_shape), strides=list(self.strides),
                    pads=list(self.pads), dilations=list(self.dilations), ceil_mode=int(self.ceil_mode))
