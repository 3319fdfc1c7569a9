"""Integer kernels of the BPU: one definition, two executable forms that agree bit for bit.

The chip model
==============

The accelerator computes only with integers. A tensor is a pair ``(q, scale)``: an integer
array ``q`` and a float ``scale > 0`` (per tensor, or per channel for weights), with the real
value ``q * scale``. Quantization is symmetric (zero point 0):

* activations: int8 in [-128, 127] or int16 in [-32768, 32767];
* weights: int8, symmetric, in [-127, 127], per output channel or per tensor (the 4-bit path:
  int4 in [-7, 7], Conv/Linear ``weight_bits=4``, and uint4/int4 inputs, ``input_range``;
  see docs/int4.md);
* biases: int32 at scale ``s_x * s_w[c]``;
* requantization: a 15-bit multiplier ``M`` in [2**14, 2**15) and a right shift ``n >= 0``
  (up to 52) approximate a real ratio ``r = M 2**-n`` (relative error below 2**-14);
  see :func:`quantize_multiplier`; a ratio of 2**15 or more (an output step finer than the
  accumulator's, as around a zero-range tensor) shifts ``M`` left instead (:mod:`.requantize`);
* right shifts round by one mode per kernel, ``half_up`` by default
  (``floor((x + 2**(n-1)) / 2**n)``), or ``half_even``, ``half_away`` (from zero), ``floor``;
  see :func:`rounding_shift_numpy`;
* nonlinear functions are tables (direct for int8 inputs, 257-knot interpolated for int16);
  Softmax and LayerNorm are integer algorithms (:mod:`.softmax`, :mod:`.layernorm`).

Only :class:`Quantize` / :class:`Dequantize` touch floats at run time; they sit at the CPU
side of the model boundary.

Two forms
=========

Every kernel is a frozen dataclass of integer parameters made by ``Kernel.build(...)``
(float work happens there, once), and offers (see :mod:`.base`):

``apply_numpy(*q) -> int64 array``
    the emulator form (``hbtool simulate``): int64 numpy arithmetic only; float64/float32
    BLAS products are used for matrix products and convolutions where every partial sum is
    provably an exactly representable integer.
``emit(builder, *names) -> name`` / ``onnx_nodes(inputs, output, prefix)`` / ``onnx_function`` / ``onnx_model``
    the ONNX form (the ``*_quantized_model.onnx``), standard operators that stock
    onnxruntime runs, integers carried as DOUBLE tensors (exact below 2**53). Conv and the
    AvgPool window sums run as FLOAT convolutions on digit-split integers, exact below 2**24.
    The guarantee is for onnxruntime's CPU execution provider (any graph optimization
    level, any thread count): it holds for any summation order, but not for GPU providers
    that run float convolutions in TF32 or with Winograd/FFT algorithms.

Every intermediate of both forms is bounded below 2**52 (rounding shifts) or 2**53 (other
products); each module's docstring gives its bounds and ``build`` / the numpy form check
them (:class:`RangeError`).

Modules
=======

========================  ==========================================================
:mod:`.fixedpoint`        multipliers, rounding shifts, floor division, integer sqrt
:mod:`.quantize`          Quantize, Dequantize, weight and bias quantization helpers
:mod:`.requantize`        Requantize (acc -> int8/int16, per channel, fused clamps)
:mod:`.linear`            Linear (x @ W + b), MatMul (activation x activation), Log2MatMul (log2 codes x activation)
:mod:`.conv`              Conv (1-3 spatial dims, groups, strides, pads, dilations)
:mod:`.conv_transpose`    ConvTranspose (as a Conv of the zero-inserted input; output_padding too)
:mod:`.eltwise`           Add / Sub, Mul
:mod:`.lut`               Lut (GELU, Sigmoid, Exp, Reciprocal, ... and any callable)
:mod:`.softmax`           Softmax over any axis (the last by default), masks honoured (linear or log2 output); LogSoftmax
:mod:`.select`            PRelu (per-channel slopes), elementwise Max / Min (MinMax), ArgMax / ArgMin
:mod:`.layernorm`         LayerNorm over the last axis or consecutive axes anywhere (optional power-of-two factors)
:mod:`.normalize`         Div by a feature map (exact integer division), ReduceL2 (integer sqrt of the sum of squares)
:mod:`.pool`              AvgPool, ReduceMean / GlobalAveragePool, ReduceSum (any axes), MaxPool
:mod:`.resize`            BilinearResize; the ONNX source-index rule nearest Resize moves codes by
:mod:`.colour`            InputConvert (the chip's nv12/yuv444/rgb/bgr/gray buffer -> the normalised input, BT.601)
:mod:`.packing`           two int4 weights per byte (the artifact's 4-bit weights; nibble order)
:mod:`.builder`           OnnxBuilder, the node writer the ONNX forms share
========================  ==========================================================
"""

from hbtool.kernels.base import Kernel, RangeError
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.colour import InputConvert
from hbtool.kernels.conv import Conv
from hbtool.kernels.conv_transpose import ConvTranspose
from hbtool.kernels.eltwise import Add, Mul
from hbtool.kernels.fixedpoint import (
    DEFAULT_ROUNDING,
    MAX_SHIFT,
    ROUNDING_MODES,
    floor_div_numpy,
    floor_div_onnx,
    int_range,
    isqrt_numpy,
    isqrt_onnx,
    quantize_multiplier,
    rounding_shift_numpy,
    rounding_shift_onnx,
)
from hbtool.kernels.layernorm import LayerNorm
from hbtool.kernels.linear import Linear, Log2MatMul, MatMul
from hbtool.kernels.lut import LUT_FUNCTIONS, Lut
from hbtool.kernels.normalize import Div, ReduceL2
from hbtool.kernels.pool import AvgPool, MaxPool, ReduceMean, ReduceSum
from hbtool.kernels.quantize import (
    Dequantize,
    Quantize,
    dequantize_numpy,
    quantize_bias,
    quantize_numpy,
    quantize_weight,
)
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.resize import BilinearResize
from hbtool.kernels.select import ArgMax, MinMax, PRelu
from hbtool.kernels.softmax import LogSoftmax, Softmax

__all__ = [
    "Add", "ArgMax", "AvgPool", "BilinearResize", "Conv", "ConvTranspose", "DEFAULT_ROUNDING", "Dequantize", "Div", "InputConvert", "Kernel", "LUT_FUNCTIONS",
    "LayerNorm", "Linear",
    "Log2MatMul", "LogSoftmax", "Lut", "MAX_SHIFT", "MatMul", "MaxPool", "MinMax", "Mul", "PRelu", "OnnxBuilder", "Quantize", "ROUNDING_MODES", "RangeError",
    "ReduceL2", "ReduceMean", "ReduceSum", "Requantize", "Softmax", "dequantize_numpy", "floor_div_numpy", "floor_div_onnx", "int_range",
    "isqrt_numpy", "isqrt_onnx", "quantize_bias", "quantize_multiplier", "quantize_numpy", "quantize_weight",
    "rounding_shift_numpy", "rounding_shift_onnx",
]
