"""MobileNet's depthwise layers (3 x 3, stride 1 or 2, one output channel per input channel) as one loop each, on
planes of any size (``fused.depthwise_3x3``), and the requantizing form the depthwise loops use.

Before, these layers ran as :func:`.fused.depthwise_rows` on output planes of 28 x 28 and larger and as a one-node
onnxruntime session and a requantizing pass on smaller ones, where that loop's per-row set-up lost. The loops here
lay the sums out at the output plane's own width (the stride-1 plane flat, masked at its two edge columns; the
stride-2 plane split into its four phases, padded on all sides or TensorFlow's way), so each tap, the copy and the
requantization run once over a plane: measured in docs/simulate.md (session sim11).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import numpy as np

from hbtool.kernels.linear import F32_EXACT, F64_EXACT
from hbtool.simulator import fused

if TYPE_CHECKING:  # accel imports this module
    from hbtool.simulator.accel import RequantParams

# A switch only for ``benchmarks.simulate_profile --without depthwise-3x3``.
LOOP_3X3 = True
# The smallest output plane a stride-2 layer takes the phase loop at: its split of each input row into four phases
# is a loop per row, which on MobileNetV2's 576 x 14 x 14 -> 7 x 7 layer took 0.122 ms against the session's 0.085
# (one thread, best of 30), while from 192 x 28 x 28 (a 14 x 14 output) up it took 0.68-0.74x the earlier routes.
PHASES_MIN_PLANE = 14 * 14


def takes_3x3_loop(kernel, in_shape: tuple | None) -> bool:
    """Whether a Conv on inputs of ``in_shape`` (one sample, NCHW; None: unknown) runs as ``fused.depthwise_3x3``.

    A 3 x 3 depthwise kernel with one output channel per input channel, no dilation, whose sums are exact in float64
    (the loops sum in float32 where ``2**(in_bits-1) * sum|w| <= 2**24``): at stride 1 (int8 or int16 codes) padded
    by one zero on every side; at stride 2 (int8 codes, a plane of even height and width, an output plane of at least
    :data:`PHASES_MIN_PLANE`) by one zero on every side or, as TensorFlow's "same" padding has it, only below and to
    the right (pads ``[0, 0, 1, 1]``)."""
    w = kernel.weight
    pads = [int(p) for p in kernel.pads]
    if not (LOOP_3X3 and w.ndim == 4 and tuple(w.shape[1:]) == (1, 3, 3) and int(kernel.group) == w.shape[0] > 1
            and pads[2:] == [1, 1] and pads[0] == pads[1] and all(int(d) == 1 for d in kernel.dilations)
            and kernel.in_bits <= 16 and (1 << (kernel.in_bits - 1)) * int(kernel.wsum) < F64_EXACT):
        return False
    if in_shape is None or len(in_shape) != 4 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in in_shape[2:]):
        return False
    strides = [int(s) for s in kernel.strides]
    if strides == [1, 1]:
        return pads[0] == 1
    H, W = int(in_shape[2]), int(in_shape[3])
    return (strides == [2, 2] and pads[0] in (0, 1) and kernel.in_bits <= 8 and H % 2 == 0 and W % 2 == 0
            and (H // 2) * (W // 2) >= PHASES_MIN_PLANE)


@functools.lru_cache(maxsize=1)
def int64_requant_vectorises() -> bool:
    """Whether this CPU multiplies and shifts int64 lanes in vector registers (AVX-512DQ: ``vpmullq``, ``vpsraq``),
    as numba compiles the loops for the host. There the int64 form of the depthwise loops' requantization is the
    faster one (MobileNetV2's planes, one thread, hot: 32 x 112 x 112 0.78x the float64 form's time, 384 x 14 x 14
    0.83x); AVX2 has neither, and the float64 form vectorises (:func:`.fused._requant_row`)."""
    try:
        import llvmlite.binding as ll

        return bool(ll.get_host_cpu_features().get("avx512dq", False))
    except Exception:  # pragma: no cover  (no llvmlite: numba is missing too and no loop runs)
        return False


def requant_form(rq: "RequantParams", bias: np.ndarray, bound: int, float64_allowed: bool = True) -> int:
    """The form (``fused.REQUANT_*``) a depthwise loop requantizes its sums in: generic for other roundings, a clamp
    or a pre-shift; for floor / half_up the int64 form where it vectorises (:func:`int64_requant_vectorises`), else
    float64 where every value of it is an integer below ``2**53`` (``bound``: the largest ``|sum|``), else int64."""
    if not rq.simple:
        return fused.REQUANT_GENERIC
    if int64_requant_vectorises() or not float64_allowed:
        return fused.REQUANT_INT64
    largest = (int(np.abs(bias).max(initial=0)) + bound) * int(np.abs(rq.M).max(initial=0)) + int(rq.half.max(initial=0))
    return fused.REQUANT_FLOAT64 if largest < F64_EXACT else fused.REQUANT_INT64


def run_3x3(kernel, rq: "RequantParams", bias: np.ndarray, float64_allowed: bool = True) -> Callable[[np.ndarray], np.ndarray]:
    """The run function of :func:`takes_3x3_loop`'s route: int8/int16 codes in, requantized codes out
    (``float64_allowed``: :func:`requant_form`'s, the accelerator's ``DEPTHWISE_FLOAT64_REQUANT`` switch)."""
    bound = (1 << (kernel.in_bits - 1)) * int(kernel.wsum)
    w = np.ascontiguousarray(np.asarray(kernel.weight)[:, 0], np.float32 if bound <= F32_EXACT else np.float64)
    stride, before = int(kernel.strides[0]), int(kernel.pads[0])
    form = requant_form(rq, bias, bound, float64_allowed)

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype not in (np.int8, np.int16) or not x.flags.c_contiguous or (stride == 2 and x.dtype != np.int8):
            # int8 pairs at stride 2 (the phase loop reads them as int16); else the accelerator's int16 storage
            x = np.ascontiguousarray(x, np.int8 if stride == 2 else np.int16)
        n, C, H, W = x.shape
        oh, ow = (H, W) if stride == 1 else (H // 2, W // 2)
        out = np.empty((n * C, oh * ow), rq.out_dtype)
        fused.depthwise_3x3(x.reshape(n * C, H, W), w, bias, rq.M, rq.n, rq.half, rq.clamp, rq.pre, rq.lo, rq.hi, rq.mode,
                            form, stride, before, out)
        return out.reshape(n, C, oh, ow)

    run.depthwise_loop = True
    return run
