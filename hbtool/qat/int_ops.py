"""Integer kernel steps in torch int64: the same integers as the kernels' numpy forms, without
leaving torch.

Why: the QAT forward runs every weighted kernel's requantization once per step on tensors of
a whole batch; in numpy that is a device-to-host copy, single-threaded int64 arithmetic and a
copy back, a tenth of a recogniser's step. torch's int64 arithmetic (add, multiply, arithmetic
shifts, comparisons) is exact like numpy's, so these functions are the numpy forms
(:func:`hbtool.kernels.fixedpoint.rounding_shift_numpy`,
:meth:`hbtool.kernels.requantize.Requantize.apply_trusted`, :meth:`hbtool.kernels.lut.Lut.apply_numpy`)
written again, term for term;
tests/test_qat_int_ops.py checks them against the numpy forms on random and tie inputs.
"""

from __future__ import annotations

import numpy as np
import torch

from hbtool.kernels.lut import Lut
from hbtool.kernels.requantize import Requantize


def _long(a: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(np.asarray(a, np.int64))).to(device)


def rounding_shift(x: torch.Tensor, n: torch.Tensor, mode: str) -> torch.Tensor:
    """``x / 2**n`` rounded by ``mode`` (int64 ``x``, int64 ``n >= 0`` broadcasting against it)."""
    if mode == "floor":
        return torch.bitwise_right_shift(x, n)
    half = torch.where(n > 0, torch.bitwise_left_shift(torch.ones_like(n), torch.clamp(n - 1, min=0)), torch.zeros_like(n))
    if mode == "half_up":
        return torch.bitwise_right_shift(x + half, n)
    if mode == "half_away":
        mag = torch.bitwise_right_shift(x.abs() + half, n)
        return torch.where(x < 0, -mag, mag)
    if mode != "half_even":
        raise ValueError(f"unknown rounding mode {mode!r}")
    q = torch.bitwise_right_shift(x, n)
    rem = x - torch.bitwise_left_shift(q, n)
    up = (rem > half) | ((rem == half) & (n > 0) & ((q & 1) == 1))
    return q + up.to(torch.int64)


def requantize(rq: Requantize, acc: torch.Tensor) -> torch.Tensor:
    """:meth:`Requantize.apply_trusted` of an int64 accumulator tensor (its producer keeps it within ``acc_bound``)."""
    device = acc.device
    if rq.clamp_acc is not None:
        c = _long(rq.clamp_acc, device)
        acc = torch.minimum(torch.maximum(acc, -c), c)
    n = _long(rq.n, device)
    if rq.pre_shift is not None:
        pre = _long(rq.pre_shift, device)
        acc = rounding_shift(acc, pre, rq.rounding)
        n = n - pre
    y = rounding_shift(acc * _long(rq.M, device), n, rq.rounding)
    return torch.clamp(y, rq.lo, rq.hi)


def lut(kernel: Lut, q: torch.Tensor) -> torch.Tensor:
    """:meth:`Lut.apply_numpy` (8-bit: a table look-up; 16-bit: knots and a rounded linear step) of int64 codes."""
    table = _long(kernel.table, q.device)
    if kernel.in_bits == 8:
        return table[q + 128]
    kb = kernel.knot_bits
    u = q + 32768
    i = torch.bitwise_right_shift(u, kb)
    t0 = table[i]
    shift = torch.tensor(kb, dtype=torch.int64, device=q.device)
    return t0 + rounding_shift((table[i + 1] - t0) * (u & ((1 << kb) - 1)), shift, kernel.rounding)


#: kernels whose numpy form has a torch int64 twin here: ``kernel class -> f(kernel, *int64 inputs)``
TORCH_FORMS = {Lut: lut}
