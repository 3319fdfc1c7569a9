"""Integer kernel steps in torch int64: the same integers as the kernels' numpy forms, without
leaving torch.

Why: the QAT forward runs every weighted kernel's requantization once per step on tensors of
a whole batch; in numpy that is a device-to-host copy, single-threaded int64 arithmetic and a
copy back, a tenth of a recogniser's step. torch's int64 arithmetic (add, multiply, arithmetic
shifts, comparisons) is exact like numpy's, so these functions are the numpy forms
(:func:`hbtool.kernels.fixedpoint.rounding_shift_numpy`,
:meth:`hbtool.kernels.requantize.Requantize.apply_trusted`, and Add, Mul and Softmax's ``apply_numpy``)
written again, term for term;
tests/unit/qat/test_torch_int_requantization.py checks them against the numpy forms on random and tie inputs.

Where they run: on an accelerator, where the numpy form would mean a copy to the host and
back. On the CPU the numpy forms are faster (measured on 4M-element tensors, 2 threads:
requantization 43 ms in numpy against 146 ms in torch int64, Add 61 against 181 ms; torch
allocates every int64 temporary afresh), so there :func:`requantize_codes` and
:func:`kernel_codes` call the kernels' own numpy forms.
"""

from __future__ import annotations

import numpy as np
import torch

from hbtool.kernels.eltwise import Add, Mul
from hbtool.kernels.fixedpoint import int_range
from hbtool.kernels.lut import Lut
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.softmax import Softmax


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


def lut_of_codes(kernel: Lut, x: torch.Tensor) -> torch.Tensor:
    """:meth:`Lut.apply_numpy` of integer codes held in a float32 tensor, as float32 codes.

    Why not the knots-and-step algorithm in torch int64: that is two int64 gathers and a shift
    over the whole tensor (a quarter of a recogniser's QAT step). Instead the kernel's
    output for every one of its ``2**in_bits`` input codes is one small numpy call; a single
    ``index_select`` with int32 indices then reads them, about 15x faster, and the values are
    the numpy form's by construction (outputs of at most 16 bits are exact in float32)."""
    lo, hi = int_range(kernel.in_bits)
    every = kernel.table if kernel.in_bits == 8 else kernel.apply_numpy(np.arange(lo, hi + 1, dtype=np.int64))
    table = torch.from_numpy(np.asarray(every, np.float32)).to(x.device)
    idx = (x.reshape(-1) - lo).to(torch.int32)
    return table.index_select(0, idx).reshape(x.shape)


def add(kernel: Add, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:meth:`Add.apply_numpy`: ``clamp(rshift(a A + sign b B, n))`` (``A``, ``B``, ``n`` scalars or per last-axis channel)."""
    device = a.device
    acc = a * _long(kernel.A, device) + b * _long(kernel.sign * np.asarray(kernel.B), device)
    return torch.clamp(rounding_shift(acc, _long(kernel.n, device), kernel.rounding), kernel.lo, kernel.hi)


def mul(kernel: Mul, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """:meth:`Mul.apply_numpy`: the product of the codes, requantized."""
    return requantize(kernel.requant, a * b)


def softmax(kernel: Softmax, q: torch.Tensor) -> torch.Tensor:
    """:meth:`Softmax.apply_numpy`: table exponentials of ``max - q``, their sum, one rounded division per element."""
    device, axis = q.device, kernel.axis
    u = q.amax(dim=axis, keepdim=True) - q
    t_lo = _long(kernel.t_lo, device)
    if kernel.in_bits == 8:
        e = t_lo[u]
    else:
        exp_bits = torch.tensor(kernel.exp_bits, dtype=torch.int64, device=device)
        e = rounding_shift(_long(kernel.t_hi, device)[torch.bitwise_right_shift(u, 8)] * t_lo[u & 255], exp_bits,
                           kernel.rounding)
    if kernel.mask_min:
        e = torch.where((q == int_range(kernel.in_bits)[0]) & (u > 0), torch.zeros_like(e), e)
    if e.numel() == 0:
        return e
    p = kernel.log2_prob_bits if kernel.log2_bits else kernel.p
    total = e.sum(dim=axis, keepdim=True)
    y = torch.div(torch.bitwise_left_shift(e, p) + torch.bitwise_right_shift(total, 1), total, rounding_mode="floor")
    if kernel.log2_bits:
        return (y.unsqueeze(-1) < _long(kernel.log2_thresholds, device)).sum(dim=-1)
    return torch.clamp(y, 0, 2**kernel.p - 1)


def requantize_codes(rq: Requantize, acc: torch.Tensor) -> torch.Tensor:
    """The requantized int64 accumulator as float32 codes: numpy on the CPU, torch int64 elsewhere (module docstring)."""
    if acc.device.type == "cpu":
        return torch.from_numpy(rq.apply_trusted(acc.numpy()).astype(np.float32))
    return requantize(rq, acc).to(torch.float32)


def kernel_codes(kernel, xs: list[torch.Tensor]) -> torch.Tensor:
    """A kernel's integer result on float32 code tensors, as float32 codes, by the fastest exact form for the device."""
    if isinstance(kernel, Lut):  # one index_select on any device
        return lut_of_codes(kernel, *xs)
    torch_form = TORCH_FORMS.get(type(kernel))
    if torch_form is not None and xs and xs[0].device.type != "cpu":
        return torch_form(kernel, *[x.to(torch.int64) for x in xs]).to(torch.float32)
    device = xs[0].device if xs else torch.device("cpu")
    out = kernel.apply_numpy(*[x.cpu().numpy().astype(np.int64) for x in xs])
    return torch.from_numpy(np.asarray(out, np.float32)).to(device)


#: kernels whose numpy form has a torch int64 twin here: ``kernel class -> f(kernel, *int64 inputs)``
TORCH_FORMS = {Add: add, Mul: mul, Softmax: softmax}
