"""Conv: ``y = requantize(conv(x_q, W_q) + b_q)``, 1-D/2-D/3-D, groups, strides, pads, dilations.

Weights ``[Cout, Cin/group, *k]`` int8, bias int32 ``[Cout]`` at scale ``s_x * s_w[c]``,
per-output-channel multiplier (channel axis 1 of ``[N, C, *spatial]``). ``pads`` use the ONNX
layout ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``; ``auto_pad`` must be resolved by
the caller.

numpy form (the emulator's hot path): im2col through ``numpy.lib.stride_tricks`` views and
one float GEMM per group (a tap loop for depthwise convs). Exact: every partial sum is an
integer bounded by ``max|x| * max_c sum|W_c| <= 2**(in_bits-1) * sum|W_c| < 2**52``; float32
is used when that data bound is at most ``2**24``, float64 otherwise.

ONNX form: onnxruntime has no DOUBLE Conv, so the convolution runs in FLOAT on integer
values split into digits small enough that every partial sum stays at or below ``2**24``
(exactly representable), and the partial convolutions are recombined in DOUBLE:

* weights (int8): ``w = 16 * w_hi + w_lo`` with ``w_hi = floor((w + 8) / 16)`` in [-8, 8] and
  ``w_lo`` in [-8, 7];
* int16 activations: ``x = 256 * x_hi + x_lo`` with ``x_hi = floor((x + 128) / 256)`` in
  [-128, 128] and ``x_lo`` in [-128, 127].

``build`` takes the fewest parts that satisfy ``max|x part| * max_c sum|W part_c| <= 2**24``
(1, 2 or 4 float convolutions) and raises if even the full split does not. Guaranteed
(any weights): no split for kernel volume ``K = Cin/group * prod(k)`` up to 1024 (int8 x) or
4 (int16 x); with both splits every ``K <= 16384`` (``128 * 8 * K <= 2**24``), for int8 and
int16 activations alike. Real weights (``sum|w|`` far below ``127 K``) go well beyond that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from hbtool.ir.macs import conv_macs
from hbtool.kernels.base import Kernel, as_int, check, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING, EXACT_LIMIT, int_range
from hbtool.kernels.linear import F32_EXACT, check_activation, check_codes, check_input_range, check_weight_bits
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.units import TENSOR


# --------------------------------------------------------------------------- geometry
def conv_geometry(nd: int, strides: Sequence[int] | None, pads: Sequence[int] | None,
                  dilations: Sequence[int] | None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Normalise ONNX strides/pads/dilations for ``nd`` spatial dimensions."""
    s = tuple(int(v) for v in (strides or [1] * nd))
    p = tuple(int(v) for v in (pads or [0] * (2 * nd)))
    d = tuple(int(v) for v in (dilations or [1] * nd))
    if len(s) != nd or len(p) != 2 * nd or len(d) != nd:
        raise ValueError(f"strides/pads/dilations do not match {nd} spatial dimensions")
    if min(s) < 1 or min(d) < 1 or min(p) < 0:
        raise ValueError("strides and dilations must be >= 1, pads >= 0")
    return s, p, d


def pad_numpy(x: np.ndarray, pads: Sequence[int], value: Any = 0) -> np.ndarray:
    nd = len(pads) // 2
    if not any(pads):
        return x
    # an array of the padding value with ``x`` copied into its middle: the same array as ``np.pad``'s constant mode,
    # without its per-call overhead (about 35 us, as much as the whole im2col copy of a 512 x 7 x 7 plane)
    lead = x.ndim - nd
    out = np.full(x.shape[:lead] + tuple(x.shape[lead + i] + pads[i] + pads[i + nd] for i in range(nd)), value, x.dtype)
    out[(slice(None),) * lead + tuple(slice(pads[i], pads[i] + x.shape[lead + i]) for i in range(nd))] = x
    return out


def windows_numpy(xp: np.ndarray, kshape: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int]) -> np.ndarray:
    """Read-only view ``[N, C, *out, *k]`` of the sliding windows of a padded ``[N, C, *S]`` array."""
    nd = len(kshape)
    sp = xp.shape[2:]
    out = [(sp[i] - dilations[i] * (kshape[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    check(min(out, default=1) >= 1, "kernel larger than the padded input")
    st = xp.strides
    shape = tuple(xp.shape[:2]) + tuple(out) + tuple(kshape)
    stri = tuple(st[:2]) + tuple(st[2 + i] * strides[i] for i in range(nd)) + tuple(st[2 + i] * dilations[i] for i in range(nd))
    return as_strided(xp, shape, stri, writeable=False)


def conv_acc_numpy(x: np.ndarray, w: np.ndarray, strides: Sequence[int], pads: Sequence[int],
                   dilations: Sequence[int], group: int, bound: int) -> np.ndarray:
    """Exact integer convolution (no bias): ``x [N, C, *S]``, ``w [Cout, C/group, *k]`` -> int64.

    ``bound`` bounds every partial sum (``max|x| * max_c sum|w_c|``) and picks float32
    (``<= 2**24``) or float64 (``< 2**53``) for the products.
    """
    check(bound < 2**53, "convolution bound reaches 2**53")
    dt = np.float32 if bound <= F32_EXACT else np.float64
    nd = w.ndim - 2
    N, C = x.shape[:2]
    cout = w.shape[0]
    G = int(group)
    check(C % G == 0 and cout % G == 0 and w.shape[1] == C // G, "channels do not match the weight and group")
    Cg, Og = C // G, cout // G
    kshape = w.shape[2:]
    win = windows_numpy(pad_numpy(x.astype(dt), pads), kshape, strides, dilations)  # [N, C, *out, *k]
    out = win.shape[2:2 + nd]
    P = int(np.prod(out))
    T = int(np.prod(kshape))
    wf = w.astype(dt)
    if Cg == 1:  # depthwise (with channel multiplier Og): a loop over the kernel taps
        acc = np.zeros((N, G, Og) + tuple(out), dt)
        wt = wf.reshape(G, Og, T)
        exp = (slice(None), slice(None), None) + (Ellipsis,)
        wshape = (1, G, Og) + (1,) * nd
        for t, tap in enumerate(np.ndindex(*kshape)):
            acc += win[(Ellipsis,) + tap][exp] * wt[:, :, t].reshape(wshape)
        return acc.reshape((N, cout) + tuple(out)).astype(np.int64)
    perm = (0,) + tuple(range(2, 2 + nd)) + (1,) + tuple(range(2 + nd, 2 + 2 * nd))
    cols = win.transpose(perm).reshape(N * P, G, Cg * T)  # the im2col copy
    w2 = wf.reshape(G, Og, Cg * T).transpose(0, 2, 1)  # [G, K, Og]
    if G == 1:
        acc = cols[:, 0, :] @ w2[0]
    else:
        acc = np.matmul(cols.transpose(1, 0, 2), w2).transpose(1, 0, 2).reshape(N * P, cout)
    acc = acc.reshape((N,) + tuple(out) + (cout,))
    return np.moveaxis(acc, -1, 1).astype(np.int64)


# --------------------------------------------------------------------------- exact float conv in ONNX
def _narrow(w: np.ndarray) -> np.ndarray:
    """``w`` as int16 when its values allow the digit arithmetic there (weight codes: int8, int4), else as it is.

    The weights arrive as int64; the splits and bounds of a model's convolutions on int64 arrays (four passes each,
    three times per convolution) were half of lowering ResNet50 (0.6 of 1.2 s). The same integers either way."""
    if w.dtype.kind != "i" or w.dtype.itemsize <= 2 or w.size == 0:
        return w
    if int(w.min()) < -(2 ** 15) + 16 or int(w.max()) > 2 ** 15 - 16:
        return w
    return w.astype(np.int16)


def split_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w = 16 * hi + lo`` with hi in [-8, 8], lo in [-8, 7] (balanced digits); int16 digits for weight codes."""
    w = _narrow(w)
    hi = (w + 8) >> 4
    return hi, w - 16 * hi


def plan_float_conv(w: np.ndarray, in_bits: int) -> tuple[bool, bool]:
    """(split_x, split_w): the cheapest digit split keeping float32 partial sums <= 2**24."""
    def worst(parts: Sequence[np.ndarray]) -> int:
        # sums of int16 rows are taken in int64 (numpy's default for narrower integers): no overflow
        return max(int(np.abs(p).reshape(p.shape[0], -1).sum(axis=1, dtype=np.int64).max(initial=0)) for p in parts)

    w = _narrow(w)
    xmax = 2 ** (in_bits - 1)
    ws = worst([w])
    wsplit = worst(split_weight(w))
    options = [(False, False, xmax * ws), (False, True, xmax * wsplit)]
    if in_bits > 8:
        options += [(True, False, 128 * ws), (True, True, 128 * wsplit)]
    for sx, sw, bound in options:
        if bound <= F32_EXACT:
            return sx, sw
    raise ValueError(
        f"convolution too large for an exact float32 ONNX form (kernel volume {int(np.prod(w.shape[1:]))}, "
        f"split partial-sum bound {128 * wsplit} > 2**24)"
    )


def emit_float_conv(b: OnnxBuilder, x: str, w: np.ndarray, attrs: dict, in_bits: int, op_type: str = "Conv",
                    bound_weight: np.ndarray | None = None) -> str:
    """Exact integer convolution of a DOUBLE integer tensor through FLOAT Conv nodes -> DOUBLE.

    ``op_type="ConvTranspose"`` runs ONNX ConvTranspose nodes on ``w`` (layout ``[Cin, Cout/group, *k]``);
    ``bound_weight`` is then the same weight as ``[Cout, Cin/group, *k]``, whose rows give the
    partial-sum bounds that choose the digit split (the split itself is elementwise).
    """
    split_x, split_w = plan_float_conv(w if bound_weight is None else bound_weight, in_bits)
    if split_x:
        x_hi = b.floor(b.mul(b.add(x, b.const(128.0)), b.const(1.0 / 256)))
        x_lo = b.sub(x, b.mul(x_hi, b.const(256.0)))
        xs = [(256.0, b.cast(x_hi, np.float32)), (1.0, b.cast(x_lo, np.float32))]
    else:
        xs = [(1.0, b.cast(x, np.float32))]
    if split_w:
        w_hi, w_lo = split_weight(w)
        ws = [(16.0, w_hi), (1.0, w_lo)]
    else:
        ws = [(1.0, w)]
    total = None
    for fx, xf in xs:
        for fw, wp in ws:
            part = b.cast(b.op(op_type, xf, b.int_const(wp, np.float32, "weight"), **attrs), np.float64)
            if fx * fw != 1.0:
                part = b.mul(part, b.const(fx * fw))
            total = part if total is None else b.add(total, part)
    return total


# --------------------------------------------------------------------------- kernel
@dataclass(frozen=True, eq=False)
class Conv(Kernel):
    """``requantize(conv(x, W) + b)`` per output channel; make it with :meth:`build`."""

    unit = TENSOR
    merges_samples = True

    weight: np.ndarray  # int64 [Cout, Cin/group, *k]
    bias: np.ndarray | None  # int64 [Cout]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int
    in_bits: int
    requant: Requantize
    acc_bound: int
    wsum: int
    #: 4: int4 weights (-8..7), stored two per byte in the artifact (:mod:`.packing`)
    weight_bits: int = 8
    #: the integer range the input's codes are held to (``(0, 15)`` uint4, ``(-8, 7)`` int4; None: the in_bits range)
    input_range: tuple[int, int] | None = None

    @classmethod
    def build(
        cls,
        weight_q: Any,
        bias_q: Any,
        scale_in: float,
        scale_w: Any,
        scale_out: float,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        dilations: Sequence[int] | None = None,
        group: int = 1,
        in_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
        weight_bits: int = 8,
        input_range: tuple[int, int] | None = None,
    ) -> "Conv":
        check_scales("Conv", scale_in=scale_in, scale_w=scale_w, scale_out=scale_out)
        w = as_int(weight_q, "weight")
        if w.ndim < 3:
            raise ValueError("Conv weight must be [Cout, Cin/group, *kernel]")
        check_weight_bits(w, weight_bits)
        input_range = check_input_range(input_range, in_bits)
        if w.shape[0] % group:
            raise ValueError("output channels not divisible by group")
        s, p, d = conv_geometry(w.ndim - 2, strides, pads, dilations)
        b = None if bias_q is None else as_int(bias_q, "bias").reshape(-1)
        if b is not None and b.size != w.shape[0]:
            raise ValueError("bias length must equal the output channels")
        int_range(in_bits)
        wsum = int(np.abs(w).reshape(w.shape[0], -1).sum(axis=1).max(initial=0))
        bound = 2 ** (in_bits - 1) * wsum + (int(np.abs(b).max(initial=0)) if b is not None else 0)
        if bound >= EXACT_LIMIT:
            raise ValueError("Conv accumulator bound reaches 2**52")
        plan_float_conv(w, in_bits)  # raises now if no exact ONNX form exists
        ratio = float(scale_in) * np.asarray(scale_w, np.float64) / float(scale_out)
        rq = Requantize.build(ratio, out_bits, axis=-(w.ndim - 1) if ratio.ndim else None, acc_bound=bound,
                              relu=relu, lo=lo, hi=hi, rounding=rounding)
        return cls(weight=w, bias=b, strides=s, pads=p, dilations=d, group=int(group), in_bits=in_bits,
                   requant=rq, acc_bound=bound, wsum=wsum, weight_bits=int(weight_bits), input_range=input_range)

    @property
    def onnx_attrs(self) -> dict:
        return dict(kernel_shape=list(self.weight.shape[2:]), strides=list(self.strides), pads=list(self.pads),
                    dilations=list(self.dilations), group=self.group)

    def accumulate_numpy(self, x: np.ndarray) -> np.ndarray:
        """The int64 accumulator ``conv(x, W) + b`` (before requantization)."""
        x = check_activation(x, self.in_bits)
        check_codes(x, self.input_range)
        check(x.ndim == self.weight.ndim, "input rank does not match the weight")
        xmax = int(np.abs(x).max(initial=0))
        acc = conv_acc_numpy(x, self.weight, self.strides, self.pads, self.dilations, self.group, xmax * self.wsum)
        if self.bias is not None:
            acc += self.bias.reshape((-1,) + (1,) * (self.weight.ndim - 2))
        return acc

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        return self.requant.apply_trusted(self.accumulate_numpy(x))

    def emit(self, b: OnnxBuilder, x: str) -> str:
        acc = emit_float_conv(b, x, self.weight, self.onnx_attrs, self.in_bits)
        if self.bias is not None:
            acc = b.add(acc, b.int_const(self.bias.reshape((-1,) + (1,) * (self.weight.ndim - 2)), np.float64, "bias"))
        return self.requant.emit(b, acc)

    def macs(self, in_shape, out_shape) -> int:
        return conv_macs(out_shape, self.weight.shape)
