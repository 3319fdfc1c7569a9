"""Straight-through estimators: exact integers forward, float gradients backward.

QAT here never approximates the chip in its forward pass: every value is the integer the
kernel computes (:mod:`hbtool.qat.module`). What training needs in addition is a gradient,
and that comes from a float *surrogate* of the same node, ``f(dequantized inputs) / s_out``
clamped to the output range (zero gradient where the integer output saturates, as the usual
clipped straight-through estimator).

:func:`straight_through` joins the two: its value is ``exact`` itself (bit for bit: no
arithmetic touches it), its gradient is the surrogate's.
Because the surrogate divides by the output scale, a scale held as a torch parameter gets
LSQ's gradient ``round(v) - v`` (``qmin``/``qmax`` where clipped) without extra code;
:func:`lsq_grad_scale` is LSQ's step-size gradient scale ``1 / sqrt(N * qmax)``.
"""

from __future__ import annotations

import math

import torch


class _StraightThrough(torch.autograd.Function):
    """Forward: ``exact`` itself (no arithmetic, so bit for bit); backward: the gradient to ``surrogate``.

    Why a Function rather than ``exact + (s - s.detach())``: that costs two passes over every
    activation tensor forward and one backward, a sixth of a recogniser's step."""

    @staticmethod
    def forward(ctx, exact: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
        ctx.shape = surrogate.shape
        return exact

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, grad if grad.shape == ctx.shape else grad.sum_to_size(ctx.shape)


def straight_through(exact: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    """``exact`` in value, the gradient of ``surrogate``."""
    if not surrogate.requires_grad:
        return exact
    if exact.shape != surrogate.shape:
        exact = exact.expand(torch.broadcast_shapes(exact.shape, surrogate.shape))
    return _StraightThrough.apply(exact.detach(), surrogate)


def fake_quant_codes(x: torch.Tensor, scale: torch.Tensor, exact_scale: torch.Tensor, qmin: int, qmax: int) -> torch.Tensor:
    """Codes of a float tensor: ``clip(rint(x / s))`` exactly as ``Quantize`` computes it (float32
    division, round half to even, NaN to 0), with the clipped straight-through gradient.

    ``exact_scale`` is the float32 scale the integer kernel uses; ``scale`` the (possibly
    trainable) parameter holding the same value."""
    xf = x.detach().to(torch.float32)
    exact = torch.nan_to_num(torch.round(xf / exact_scale), nan=0.0).clamp(qmin, qmax)
    return straight_through(exact, torch.clamp(x / scale, qmin, qmax))


def lsq_grad_scale(numel: int, qmax: int) -> float:
    """LSQ's gradient scale of a step size (Esser et al. 2020): ``1 / sqrt(numel * qmax)``."""
    return 1.0 / math.sqrt(max(1, numel) * max(1, qmax))
