"""Quantize and dequantize: the float <-> integer boundary of the accelerator part.

These two run on the CPU side of a deployed model (the input feeder and the output
reader), so they are float by nature. They are defined in float32 exactly as numpy
computes it, and the ONNX form does the same float32 operations:

* ``quantize``:   ``q = clamp(round_half_even(x / float32(s)), qmin, qmax)``, with NaN -> 0
* ``dequantize``: ``x = float32(q) * float32(s)``

Quantize is total on float32: +-inf saturates to qmax / qmin (the clamp does it) and NaN
becomes 0. A CPU node in front of the BPU can produce them (a float Div by a divisor that
quantized to 0: x / 0 = inf, 0 / 0 = NaN), and a NaN let through stays NaN in the DOUBLE
carried integers of the ONNX form until a kernel casts it to an index (int64 min: onnxruntime's
Gather fails deep inside a Softmax), while numpy's cast gives int64 min silently. Saturating
keeps the integer contract (every code within its bits) on any input.

Also here, the build-time helpers that turn float weights and biases into the
integers the kernels take: :func:`quantize_weight` (symmetric int8, range [-127, 127],
per tensor or per output channel) and :func:`quantize_bias` (int32 at ``s_x * s_w``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hbtool.kernels.base import Kernel, as_int, check_scales
from hbtool.kernels.builder import ElemType, OnnxBuilder
from hbtool.kernels.fixedpoint import int_range
from hbtool.kernels.requantize import channel_shape
from hbtool.kernels.units import CPU

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True, eq=False)
class Quantize(Kernel):
    """float32 -> integer-valued (int64 in numpy, DOUBLE in ONNX)."""

    unit = CPU
    merges_samples = True

    scale: np.ndarray  # float32, scalar or broadcast-shaped
    bits: int = 8
    onnx_input_type = ElemType.FLOAT

    @classmethod
    def build(cls, scale: Any, bits: int = 8, axis: int | None = None) -> "Quantize":
        check_scales("Quantize", scale=scale)
        s = channel_shape(np.asarray(scale, np.float32), axis)
        if not np.all(s > 0):
            raise ValueError("quantization scales must be > 0")
        int_range(bits)
        return cls(scale=s, bits=bits)

    def channel_arrays(self) -> tuple[np.ndarray, ...]:
        return (self.scale,)

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        qmin, qmax = int_range(self.bits)
        with np.errstate(invalid="ignore", over="ignore"):
            v = np.rint(np.asarray(x, np.float32) / self.scale)
        v = np.where(np.isnan(v), np.float32(0), v)
        return np.clip(v, qmin, qmax).astype(np.int64)

    def emit(self, b: OnnxBuilder, x: str) -> str:
        qmin, qmax = int_range(self.bits)
        v = b.op("Round", b.div(x, b.const(self.scale, np.float32, "scale")))
        v = b.where(b.op("IsNaN", v), b.const(0.0, np.float32), v)
        v = b.clip(v, qmin, qmax, np.float32)
        return b.cast(v, np.float64)


@dataclass(frozen=True, eq=False)
class Dequantize(Kernel):
    """integer -> float32 ``q * s``."""

    unit = CPU
    merges_samples = True

    scale: np.ndarray  # float32
    onnx_output_type = ElemType.FLOAT

    @classmethod
    def build(cls, scale: Any, axis: int | None = None) -> "Dequantize":
        check_scales("Dequantize", scale=scale)
        s = channel_shape(np.asarray(scale, np.float32), axis)
        if not np.all(s > 0):
            raise ValueError("quantization scales must be > 0")
        return cls(scale=s)

    def channel_arrays(self) -> tuple[np.ndarray, ...]:
        return (self.scale,)

    def apply_numpy(self, q: np.ndarray) -> np.ndarray:
        return as_int(q).astype(np.float32) * self.scale

    def emit(self, b: OnnxBuilder, q: str) -> str:
        return b.mul(b.cast(q, np.float32), b.const(self.scale, np.float32, "scale"))


def quantize_numpy(x: np.ndarray, scale: Any, bits: int = 8) -> np.ndarray:
    """Shorthand for ``Quantize.build(scale, bits).apply_numpy(x)`` (per-tensor scale)."""
    return Quantize.build(scale, bits).apply_numpy(x)


def dequantize_numpy(q: np.ndarray, scale: Any) -> np.ndarray:
    """Shorthand for ``Dequantize.build(scale).apply_numpy(q)`` (per-tensor scale)."""
    return Dequantize.build(scale).apply_numpy(q)


def quantize_weight(w: np.ndarray, axis: int | None = None, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric weight quantization: ``(q, scale)`` with q in [-(2**(bits-1)-1), 2**(bits-1)-1].

    ``axis`` is the output-channel axis for per-channel scales (0 for Conv ``[Cout, ...]``,
    1 or -1 for a MatMul weight ``[K, N]``); ``None`` gives one scale. An all-zero channel
    gets scale 1. Returns int64 q and float64 scale (scalar or 1-D).
    """
    w = np.asarray(w, np.float64)
    qmax = 2 ** (bits - 1) - 1
    if axis is None:
        amax = np.abs(w).max(initial=0.0)
        scale = np.float64(amax / qmax if amax > 0 else 1.0)
        q = np.clip(np.rint(w / scale), -qmax, qmax)
        return q.astype(np.int64), np.asarray(scale)
    axis = axis % w.ndim
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=red, initial=0.0)
    scale = np.where(amax > 0, amax / qmax, 1.0)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -qmax, qmax)
    return q.astype(np.int64), scale


def quantize_bias(bias: np.ndarray, scale_in: float, scale_w: Any) -> np.ndarray:
    """int32 bias at scale ``scale_in * scale_w[c]`` (round half even, saturated to int32)."""
    s = float(scale_in) * np.asarray(scale_w, np.float64)
    q = np.rint(np.asarray(bias, np.float64) / s)
    return np.clip(q, INT32_MIN, INT32_MAX).astype(np.int64)
