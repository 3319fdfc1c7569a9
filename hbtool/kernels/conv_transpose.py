"""ConvTranspose: ``y = requantize(conv_transpose(x_q, W_q) + b_q)``, 1-D/2-D (any rank), groups,
strides, pads, output_padding, dilations.

Weights in the ONNX layout ``[Cin, Cout/group, *k]`` int8, bias int32 ``[Cout]`` at scale
``s_x * s_w[c]``, a multiplier per output channel (axis 1 of ``[N, C, *spatial]``). Output size
per spatial dimension: ``(in - 1) * stride + dilation * (k - 1) + 1 - pad_begin - pad_end +
output_padding`` (``output_shape`` / ``auto_pad`` must be resolved to pads by the caller).

A transposed convolution is an ordinary stride-1 convolution of the input with ``stride - 1``
zeros inserted between its samples, padded by ``dilation * (k - 1) - pad_begin`` in front and
``dilation * (k - 1) - pad_end + output_padding`` behind (a negative pad crops), with the
weight transposed to ``[Cout, Cin/group, *k]`` and flipped spatially
(:func:`equivalent_conv_weight`). That is the numpy form: :func:`~hbtool.kernels.conv.conv_acc_numpy`
on the zero-inserted input, exact for the same bound as Conv (each output sums a subset of the
products a Conv with the equivalent weight would, ``<= max|x| * max_c sum|W_c|``).

ONNX form: FLOAT ``ConvTranspose`` nodes of onnxruntime on the digit-split integers of Conv
(:func:`~hbtool.kernels.conv.emit_float_conv`), the split chosen from the equivalent weight's
rows; every partial sum of its GEMM + col2im is a sum of a subset of one output's products,
hence an integer at or below ``2**24``: exact in any order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hbtool.ir.macs import conv_transpose_macs
from hbtool.kernels.base import Kernel, as_int, check, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.conv import conv_acc_numpy, conv_geometry, emit_float_conv, plan_float_conv
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING, EXACT_LIMIT, int_range
from hbtool.kernels.linear import check_activation
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.units import TENSOR


def equivalent_conv_weight(w: np.ndarray, group: int) -> np.ndarray:
    """The ``[Cout, Cin/group, *k]`` Conv weight (transposed per group, flipped) of a ``[Cin, Cout/group, *k]`` one."""
    cin, og = w.shape[:2]
    k = w.shape[2:]
    cg = cin // group
    eq = w.reshape((group, cg, og) + k).swapaxes(1, 2).reshape((group * og, cg) + k)
    return np.ascontiguousarray(eq[(slice(None), slice(None)) + (slice(None, None, -1),) * len(k)])


def transpose_output_shape(spatial: Sequence[int], kshape: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                           dilations: Sequence[int], output_padding: Sequence[int]) -> tuple[int, ...]:
    nd = len(kshape)
    return tuple((spatial[i] - 1) * strides[i] + dilations[i] * (kshape[i] - 1) + 1 - pads[i] - pads[i + nd] + output_padding[i]
                 for i in range(nd))


def resolve_pads(spatial: Sequence[int], kshape: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                 output_padding: Sequence[int], pads: Sequence[int] | None, auto_pad: str = "NOTSET",
                 output_shape: Sequence[int] | None = None) -> list[int]:
    """Explicit ``pads`` of an ONNX ConvTranspose given ``auto_pad`` / ``output_shape`` (as onnxruntime reads them).

    The total padding of a dimension is ``stride * (in - 1) + output_padding + dilation * (k - 1) + 1 - out``
    with ``out`` from ``output_shape`` (its last ``nd`` entries) or ``in * stride`` for ``SAME_*``;
    ``SAME_UPPER`` puts the odd unit at the end, ``SAME_LOWER`` and ``output_shape`` alone at the
    beginning. ``VALID`` is no padding. Raises ValueError for a negative total (an output larger
    than the transposed conv makes).
    """
    nd = len(kshape)
    if output_shape is None and auto_pad in ("NOTSET", "", None):
        return [int(p) for p in (pads or [0] * (2 * nd))]
    if output_shape is None and auto_pad == "VALID":
        return [0] * (2 * nd)
    if output_shape is not None:
        out = [int(o) for o in list(output_shape)[-nd:]]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [int(spatial[i]) * int(strides[i]) for i in range(nd)]
    else:
        raise ValueError(f"unknown auto_pad {auto_pad!r}")
    head, tail = [], []
    for i in range(nd):
        total = strides[i] * (spatial[i] - 1) + output_padding[i] + dilations[i] * (kshape[i] - 1) + 1 - out[i]
        if total < 0:
            raise ValueError(f"ConvTranspose output {out[i]} is larger than the transposed conv makes")
        small = total // 2
        if auto_pad == "SAME_UPPER":
            head.append(small), tail.append(total - small)
        else:
            head.append(total - small), tail.append(small)
    return head + tail


def zero_insert_numpy(x: np.ndarray, kshape: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                      dilations: Sequence[int], output_padding: Sequence[int]) -> np.ndarray:
    """The input of the equivalent stride-1 Conv: zeros between samples, then the pads (negative ones crop)."""
    nd = len(kshape)
    sp = x.shape[2:]
    inner = [(sp[i] - 1) * strides[i] + 1 for i in range(nd)]
    before = [dilations[i] * (kshape[i] - 1) - pads[i] for i in range(nd)]
    after = [dilations[i] * (kshape[i] - 1) - pads[i + nd] + output_padding[i] for i in range(nd)]
    full = [max(b, 0) + n + max(a, 0) for b, n, a in zip(before, inner, after)]
    z = np.zeros(tuple(x.shape[:2]) + tuple(full), x.dtype)
    z[(slice(None), slice(None)) + tuple(slice(max(b, 0), max(b, 0) + n, s) for b, n, s in zip(before, inner, strides))] = x
    crop = tuple(slice(max(-b, 0), f - max(-a, 0)) for b, a, f in zip(before, after, full))
    return z[(slice(None), slice(None)) + crop]


@dataclass(frozen=True, eq=False)
class ConvTranspose(Kernel):
    """``requantize(conv_transpose(x, W) + b)`` per output channel; make it with :meth:`build`."""

    unit = TENSOR
    merges_samples = True

    weight: np.ndarray  # int64 [Cin, Cout/group, *k] (ONNX layout)
    bias: np.ndarray | None  # int64 [Cout]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    output_padding: tuple[int, ...]
    group: int
    in_bits: int
    requant: Requantize
    acc_bound: int
    wsum: int

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
        output_padding: Sequence[int] | None = None,
        group: int = 1,
        in_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
    ) -> "ConvTranspose":
        """``scale_w``: a scalar or ``[Cout]`` per-output-channel weight scales."""
        check_scales("ConvTranspose", scale_in=scale_in, scale_w=scale_w, scale_out=scale_out)
        w = as_int(weight_q, "weight")
        if w.ndim < 3:
            raise ValueError("ConvTranspose weight must be [Cin, Cout/group, *kernel]")
        check(w.size == 0 or (int(w.min()) >= -128 and int(w.max()) <= 127), "weights must be int8")
        group = int(group)
        if group < 1 or w.shape[0] % group:
            raise ValueError("input channels not divisible by group")
        nd = w.ndim - 2
        s, p, d = conv_geometry(nd, strides, pads, dilations)
        op = tuple(int(v) for v in (output_padding or [0] * nd))
        if len(op) != nd or min(op) < 0 or any(o >= max(si, di) for o, si, di in zip(op, s, d)):
            raise ValueError("output_padding must be >= 0 and below max(stride, dilation) in every dimension")
        cout = w.shape[1] * group
        b = None if bias_q is None else as_int(bias_q, "bias").reshape(-1)
        if b is not None and b.size != cout:
            raise ValueError("bias length must equal the output channels")
        int_range(in_bits)
        eq = equivalent_conv_weight(w, group)
        wsum = int(np.abs(eq).reshape(cout, -1).sum(axis=1).max(initial=0))
        bound = 2 ** (in_bits - 1) * wsum + (int(np.abs(b).max(initial=0)) if b is not None else 0)
        if bound >= EXACT_LIMIT:
            raise ValueError("ConvTranspose accumulator bound reaches 2**52")
        plan_float_conv(eq, in_bits)  # raises now if no exact ONNX form exists
        ratio = float(scale_in) * np.asarray(scale_w, np.float64) / float(scale_out)
        if ratio.ndim and ratio.size != cout:
            raise ValueError(f"ConvTranspose needs {cout} per-channel weight scales, got {ratio.size}")
        rq = Requantize.build(ratio, out_bits, axis=-(nd + 1) if ratio.ndim else None, acc_bound=bound,
                              relu=relu, lo=lo, hi=hi, rounding=rounding)
        return cls(weight=w, bias=b, strides=s, pads=p, dilations=d, output_padding=op, group=group, in_bits=in_bits,
                   requant=rq, acc_bound=bound, wsum=wsum)

    @property
    def out_channels(self) -> int:
        return int(self.weight.shape[1]) * self.group

    @property
    def onnx_attrs(self) -> dict:
        return dict(kernel_shape=list(self.weight.shape[2:]), strides=list(self.strides), pads=list(self.pads),
                    dilations=list(self.dilations), output_padding=list(self.output_padding), group=self.group)

    def output_spatial(self, spatial: Sequence[int]) -> tuple[int, ...]:
        return transpose_output_shape(spatial, self.weight.shape[2:], self.strides, self.pads, self.dilations, self.output_padding)

    def accumulate_numpy(self, x: np.ndarray) -> np.ndarray:
        """The int64 accumulator ``conv_transpose(x, W) + b`` (before requantization)."""
        x = check_activation(x, self.in_bits)
        check(x.ndim == self.weight.ndim, "input rank does not match the weight")
        check(x.shape[1] == self.weight.shape[0], "input channels do not match the weight")
        check(min(self.output_spatial(x.shape[2:]), default=1) >= 1, "ConvTranspose output would be empty")
        xmax = int(np.abs(x).max(initial=0))
        z = zero_insert_numpy(x, self.weight.shape[2:], self.strides, self.pads, self.dilations, self.output_padding)
        nd = self.weight.ndim - 2
        eq = equivalent_conv_weight(self.weight, self.group)
        acc = conv_acc_numpy(z, eq, (1,) * nd, (0,) * (2 * nd), self.dilations, self.group, xmax * self.wsum)
        if self.bias is not None:
            acc += self.bias.reshape((-1,) + (1,) * nd)
        return acc

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        return self.requant.apply_trusted(self.accumulate_numpy(x))

    def emit(self, b: OnnxBuilder, x: str) -> str:
        eq = equivalent_conv_weight(self.weight, self.group)
        acc = emit_float_conv(b, x, self.weight, self.onnx_attrs, self.in_bits, op_type="ConvTranspose", bound_weight=eq)
        if self.bias is not None:
            acc = b.add(acc, b.int_const(self.bias.reshape((-1,) + (1,) * (self.weight.ndim - 2)), np.float64, "bias"))
        return self.requant.emit(b, acc)

    def macs(self, in_shape, out_shape) -> int:
        return 0 if in_shape is None else conv_transpose_macs(in_shape, self.weight.shape)
