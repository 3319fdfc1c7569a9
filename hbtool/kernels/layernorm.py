"""Integer LayerNorm over the last axis, or over any run of consecutive axes (N elements, N up to 8192).

``axes`` (negative, consecutive, default ``(-1,)``) are the normalised axes: ``(-3,)`` is
ConvNeXt's channel LayerNorm of an NCHW tensor (each pixel normalised over its C channels),
``(-3, -2, -1)`` ONNX ``LayerNormalization(axis=1)`` of NCHW (over C, H and W). The sums run
over those axes wherever they sit -- the vector unit walks a non-last axis with a stride, no
transpose -- and ``G``/``B`` are shaped ``normalised shape + (1,) * trailing axes`` so that they
broadcast onto the input; every step below is otherwise unchanged, and integer sums do not
depend on their order, so both forms stay exact. Power-of-two factors need ``axes == (-1,)``.
With ``param_shape`` G/B may instead vary over axes that are not normalised
(InstanceNormalization: axes ``(-2, -1)``, G/B ``(C, 1, 1)``); ``norm_dims`` then records the
normalised dims.

Input int8/int16 ``q`` at scale ``s_in`` (optionally with FQ-ViT-style power-of-two
factors: channel c really has scale ``s_in 2**alpha_c``, and the kernel starts from
``x = q << alpha_c``), per-channel float ``gamma``/``beta``, ``eps``, output int8/int16 at
``s_out``. All steps are integer; ``f``, ``E``, ``G``, ``B`` and ``shift`` are precomputed.

1. mean with ``f`` fractional bits: ``S = sum(x)``, ``mu = floor((S 2**(f+1) + N) / 2N)``
   (``round(2**f S / N)``); ``d = x 2**f - mu`` (exact centred values with ``f`` extra bits,
   so the rounding of the mean costs at most ``2**-(f+1)`` input LSB).
2. ``V = sum(d**2)`` and ``w = max(V + E, 1)`` where ``E = max(1, round(eps N 4**f / s_in**2))``
   is eps in the units of V (at least 1 when eps > 0, so a constant row never divides by
   zero however small eps is against ``s_in**2``; 0 only when eps == 0).
   ``var + eps = s_in**2 w / (N 4**f)``. When eps alone passes the 2**52 budget (an input scale
   tiny against sqrt(eps)), ``f = 0`` and the centred values are first shifted right by the
   smallest ``d_shift`` that fits: ``d = rshift(x - mu, d_shift)``, ``E = round(eps N / s_in**2 /
   4**d_shift)``; V and E shrink by ``4**d_shift`` and ``d / sqrt(w)`` stays. The shift's rounding
   moves the normalised value by at most ``sqrt(N) 2**-25`` (``E >= 2**49`` then), which shows
   only at output scales that fine (an output calibrated on such tiny normalised values).
3. normalisation, like a count-leading-zeros: the largest even shift ``2k`` (k <= 31, found
   by a 5-step binary search) with ``t = w 4**k < 2**52``; then ``t`` is in [2**50, 2**52).
4. ``s = isqrt(t)`` (exact, 25-26 bits), ``R = floor(2**50 / s)`` (~2**24-2**25):
   ``1/sqrt(w) ~= R 2**k / 2**50``.
4b. eps outside the root (``d / (sqrt(var) + eps)``, ``eps_outside``): ``E = 0`` and
   ``s = isqrt(t) + rshift(C 2**k, m)`` before the division, with ``C = round(c 2**m) < 2**27``,
   ``c = eps sqrt(N) 2**f / s_in`` (eps in the units of ``sqrt(V)``), so ``s ~= (sqrt(w) + c) 2**k``;
   ``C 2**k < 2**52`` since ``k <= 25``. A larger ``s`` only shrinks ``R`` and ``u`` (bounds below hold);
   ``R`` keeps 2**50 / s bits, fewer only where eps dominates the root and the output is near 0.
5. ``u = rshift(d R 2**k, 20)``: ``d / sqrt(w)`` in Q30, ``|u| <= 2**30 (1 + 2**-23)`` because
   ``d**2 <= V <= w``.
6. ``y = clamp(rshift(u G_c + B_c, shift))`` with ``G_c = round(gamma_c sqrt(N) / s_out 2**g)``,
   ``B_c = round(beta_c / s_out 2**shift)``, ``shift = 30 + g`` (``s_out`` may be one scale per
channel, ``s_out,c``: PTF output for a next LayerNorm); ``g`` is chosen so that
   ``|G_c| <= 2**20`` and ``|B_c| <= 2**50`` (beta beyond the saturation point is clipped first).

Bounds (all checked at build): ``f`` (at most 16) is the largest with
``V_max + E < 2**52`` where ``V_max = N (W**2 4**f + 1) / 4`` and ``W = (2**bits - 1) 2**alpha_max``
is the widest spread of x: int16 input gives f = 8 at N = 48, f = 4 at N = 8192; int8 input
f = 16 at N = 48, f = 14 at N = 768, f = 12 at N = 8192. Then ``|S 2**(f+1)| < 2**52`` (exact division), ``|d R 2**k| <= 2**50(1+2**-24)``,
``|u G + B| < 2**51 + 2**28``: every DOUBLE intermediate of the ONNX form is an exact integer.

Accuracy (``tests/unit/kernels/test_numpy_and_onnx_forms_agree.py::test_layernorm_accuracy``): the scale path has a
relative error near 2**-20 (G holds 20 bits), the mean ``2**-(f+1)`` input LSB. Against float64
LayerNorm of the dequantized input rounded to the output grid, on rows with per-channel
spread and offsets (N = 48 .. 8192, gamma ~ N(1, 0.3), beta ~ N(0, 0.3), eps = 1e-5, a
constant row included): never more than 1 LSB apart; identical on >= 99.99 % of the
elements for int8 output and >= 98 % for int16 output (the rest are float ties within
~0.01 LSB of a rounding boundary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hbtool.kernels.base import Kernel, check, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import (
    DEFAULT_ROUNDING,
    EXACT_LIMIT,
    MAX_SHIFT,
    ROUNDING_MODES,
    floor_div_numpy,
    floor_div_onnx,
    int_range,
    isqrt_numpy,
    isqrt_onnx,
    rounding_shift_numpy,
    rounding_shift_onnx,
)
from hbtool.kernels.linear import check_activation
from hbtool.kernels.units import VECTOR

MAX_MEAN_BITS = 16
_NORM_STEPS = (16, 8, 4, 2, 1)


# ----------------------------------------------------------------------------- the steps of LayerNorm.build
def _checked_axes(axes: Any, ptf_alpha: Any) -> tuple[int, ...]:
    axes = tuple(int(a) for a in np.atleast_1d(np.asarray(axes)).reshape(-1))
    if not axes or axes[-1] >= 0 or list(axes) != list(range(axes[0], axes[-1] + 1)):
        raise ValueError(f"LayerNorm axes must be negative and consecutive, got {axes}")
    if ptf_alpha is not None and axes != (-1,):
        raise ValueError("LayerNorm power-of-two factors need the last axis")
    return axes


def _params(gamma: Any, beta: Any, n: int | None, ptf_alpha: Any, norm_shape: Any,
            param_shape: Any) -> tuple[int, np.ndarray, np.ndarray, tuple[int, ...] | None]:
    """``(N, gamma, beta, param_shape)``: the normalised length and the flat float parameters (None: 1 / 0)."""
    for v in (gamma, beta, ptf_alpha):
        if v is not None and n is None:
            n = int(np.asarray(v).size)
    if n is None or n < 1:
        raise ValueError("LayerNorm needs its length: pass gamma, beta or n")
    if param_shape is not None:
        param_shape = tuple(int(d) for d in param_shape)
        if norm_shape is None or ptf_alpha is not None:
            raise ValueError("LayerNorm with gamma over other axes needs norm_shape and no power-of-two factors")
        n = int(np.prod(norm_shape))
    N = int(n)
    P = N if param_shape is None else int(np.prod(param_shape))
    gam = np.ones(P) if gamma is None else np.asarray(gamma, np.float64).reshape(-1)
    bet = np.zeros(P) if beta is None else np.asarray(beta, np.float64).reshape(-1)
    if gam.size != P or bet.size != P:
        raise ValueError("gamma and beta must have the normalised length (or param_shape's size)")
    return N, gam, bet, param_shape


def _ptf_factors(ptf_alpha: Any, N: int) -> tuple[np.ndarray | None, int]:
    """The power-of-two factors (None when all are 0) and the largest."""
    if ptf_alpha is None:
        return None, 0
    alpha = np.asarray(ptf_alpha, np.int64).reshape(-1)
    if alpha.size != N or alpha.min() < 0 or alpha.max() > 8:
        raise ValueError("ptf_alpha must hold N integers in 0..8")
    amax = int(alpha.max())
    return (None if amax == 0 else alpha), amax


def _mean_bits(N: int, in_bits: int, amax: int, eps: float, s_in: float) -> tuple[int, int, int]:
    """``(f, E, d_shift)`` of steps 1-2 (module docstring): the most mean bits that keep ``V + E < 2**52``,
    else ``f = 0`` and the smallest right shift of the centred values that does. ``eps`` 0: none inside the root."""
    W = (2**in_bits - 1) << amax

    def eps_units(f: int) -> int:
        if eps == 0:
            return 0
        v = eps * N * 4.0**f / s_in / s_in  # not s_in**2: it underflows to 0 for tiny scales
        return max(1, int(math.floor(v + 0.5))) if v < 2.0**62 else 2**62

    for f in range(MAX_MEAN_BITS, -1, -1):
        vmax = -(-(N * (W * W * 4**f + 1)) // 4)
        if vmax + eps_units(f) < EXACT_LIMIT:
            return f, eps_units(f), 0
    vmax0 = -(-(N * (W * W + 1)) // 4)
    if vmax0 >= EXACT_LIMIT // 2:
        raise ValueError(f"LayerNorm of {N} int{in_bits} values (PTF up to 2**{amax}) can exceed 2**52")
    # eps alone passes 2**52: shift d right (V and E shrink by 4**j, d / sqrt(V + E) stays); the bound
    # on V allows the shift's rounding (|d_j| <= |d| / 2**j + 1)
    v = eps * N / s_in / s_in
    for d_shift in range(1, MAX_SHIFT + 1):
        vmax_j = (vmax0 >> (2 * d_shift)) + ((2 * N * W) >> d_shift) + N + 2
        e_j = v / 4.0**d_shift
        if vmax_j + e_j < EXACT_LIMIT - 1:
            break
    room = EXACT_LIMIT - 1 - vmax_j  # e_j too large even at the last shift: d is 0 there anyway
    return 0, (min(max(1, int(math.floor(e_j + 0.5))), room) if e_j < room else room), d_shift


def _eps_outside_root(eps: float, N: int, f: int, s_in: float) -> tuple[int, int]:
    """``(C, m)`` of step 4b: eps in the units of ``sqrt(V)``, ``m`` fractional bits."""
    c = eps * math.sqrt(N) * 2.0**f / s_in
    eps_root_shift = min(40, 26 - math.frexp(c)[1])
    if eps_root_shift < 0:
        raise ValueError("LayerNorm eps outside the root is over 2**26 input steps: it swamps the spread")
    return int(math.floor(math.ldexp(c, eps_root_shift) + 0.5)), eps_root_shift


def _affine(gam: np.ndarray, bet: np.ndarray, s_out: np.ndarray, N: int, out_bits: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(G, B, shift)`` of step 6."""
    gr = gam * math.sqrt(N) / s_out
    lim = np.abs(gr) + 2 ** (out_bits - 1) + 2
    br = np.clip(bet / s_out, -lim, lim)
    top = float(max(np.abs(gr).max(), np.abs(br).max(), 2.0**-40))
    g = min(20 - math.frexp(top)[1], 22)
    if g < -30 or not math.isfinite(top):
        raise ValueError("gamma / scale_out or beta / scale_out too large (over 2**50)")
    shift = 30 + g
    G = np.floor(np.ldexp(gr, g) + 0.5).astype(np.int64)
    B = np.floor(np.ldexp(br, shift) + 0.5).astype(np.int64)
    return G, B, shift


def _broadcast_shapes(G: np.ndarray, B: np.ndarray, N: int, axes: tuple[int, ...], norm_shape: Any,
                      param_shape: tuple[int, ...] | None) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """G and B shaped to broadcast onto the input (module docstring), and ``norm_dims``."""
    if param_shape is not None:
        norm_dims = tuple(int(d) for d in norm_shape)
        if len(norm_dims) != len(axes):
            raise ValueError(f"norm_shape {norm_dims} does not fit axes {axes}")
        return G.reshape(param_shape), B.reshape(param_shape), norm_dims
    if axes != (-1,) or norm_shape is not None:
        shape = (N,) if norm_shape is None else tuple(int(d) for d in norm_shape)
        if len(shape) != len(axes) or int(np.prod(shape)) != N:
            raise ValueError(f"norm_shape {shape} does not fit {N} elements over axes {axes}")
        bshape = shape + (1,) * (-1 - axes[-1])
        return G.reshape(bshape), B.reshape(bshape), ()
    return G, B, ()


@dataclass(frozen=True, eq=False)
class LayerNorm(Kernel):
    """LayerNorm over the last axis (or ``axes``); make it with :meth:`build`."""

    unit = VECTOR
    vector_class = "layernorm"
    merges_samples = True

    n: int
    in_bits: int
    out_bits: int
    f: int
    E: int
    G: np.ndarray  # int64 [N]
    B: np.ndarray  # int64 [N]
    shift: int
    lo: int
    hi: int
    alpha: np.ndarray | None = None  # int64 [N] power-of-two factors
    rounding: str = DEFAULT_ROUNDING
    d_shift: int = 0  # right shift of the centred values when eps dominates (step 2)
    axes: tuple[int, ...] = (-1,)  # the normalised axes, negative and consecutive (module docstring)
    eps_root: int = 0  # eps outside the root, ``d / (sqrt(var) + eps)``: C of step 4b (0: eps inside)
    eps_root_shift: int = 0  # m of step 4b
    norm_dims: tuple[int, ...] = ()  # the normalised dims when G/B vary over other axes (InstanceNorm); () = G's

    @property
    def norm_shape(self) -> tuple[int, ...]:
        """The shape of the normalised axes (G without its trailing broadcast ones, unless ``norm_dims``)."""
        if self.norm_dims:
            return tuple(int(d) for d in self.norm_dims)
        return tuple(int(d) for d in np.shape(self.G)[: len(self.axes)])

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        first, last = self.axes[0], self.axes[-1]
        check(len(shape) >= -first, f"LayerNorm over axes {self.axes} needs rank >= {-first}, got {len(shape)}")
        got = tuple(shape[first: last + 1 if last < -1 else None])
        check(got == self.norm_shape, f"normalised dimensions are {got}, built for {self.norm_shape}")

    @classmethod
    def build(
        cls,
        scale_in: float,
        gamma: Any = None,
        beta: Any = None,
        eps: float = 1e-5,
        scale_out: float = 1.0,
        in_bits: int = 16,
        out_bits: int = 8,
        n: int | None = None,
        ptf_alpha: Any = None,
        rounding: str = DEFAULT_ROUNDING,
        axes: Any = (-1,),
        norm_shape: Any = None,
        eps_outside: bool = False,
        param_shape: Any = None,
    ) -> "LayerNorm":
        """Integer parameters of LayerNorm(eps) followed by ``gamma``/``beta`` (None: 1 / 0).

        ``n`` is the normalised length (needed only when gamma and beta are both None);
        ``scale_out``: a scalar, or ``[N]`` per-channel output scales;
        ``ptf_alpha``: per-channel power-of-two factors (ints 0..8) of the input scale;
        ``axes``: the normalised axes, negative and consecutive; ``norm_shape``: their sizes
        (default: ``(N,)`` for one axis; gamma and beta are read in that shape's C order);
        ``eps_outside``: eps added to the root, ``(x - mean) / (sqrt(var) + eps)`` (step 4b);
        ``param_shape``: gamma/beta's own shape, right-aligned against the input, when they vary
        over axes that are not normalised (InstanceNormalization: ``(C, 1, 1)`` over H, W; then
        ``norm_shape`` is needed and ``scale_out`` is a scalar).
        """
        axes = _checked_axes(axes, ptf_alpha)
        check_scales("LayerNorm", scale_in=scale_in, scale_out=scale_out)
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {rounding!r}")
        N, gam, bet, param_shape = _params(gamma, beta, n, ptf_alpha, norm_shape, param_shape)
        qmin, qmax = int_range(out_bits)
        int_range(in_bits)
        s_in, eps = float(scale_in), float(eps)
        s_out = np.asarray(scale_out, np.float64)
        if s_out.ndim > 1 or (s_out.ndim == 1 and (s_out.size != N or param_shape is not None)):
            raise ValueError("scale_out must be a scalar or one scale per normalised channel")
        if not (s_in > 0 and bool(np.all(s_out > 0)) and eps >= 0):
            raise ValueError("scales must be > 0 and eps >= 0")
        alpha, amax = _ptf_factors(ptf_alpha, N)
        f, E, d_shift = _mean_bits(N, in_bits, amax, 0.0 if eps_outside else eps, s_in)
        check(N * (2 ** (in_bits - 1) << (amax + f + 1)) + 4 * N < 2**53, "LayerNorm mean division bound")
        eps_root, eps_root_shift = _eps_outside_root(eps, N, f, s_in) if eps_outside and eps > 0 else (0, 0)
        G, B, shift = _affine(gam, bet, s_out, N, out_bits)
        G, B, norm_dims = _broadcast_shapes(G, B, N, axes, norm_shape, param_shape)
        return cls(n=N, in_bits=in_bits, out_bits=out_bits, f=f, E=int(E), G=G, B=B, shift=shift, lo=qmin, hi=qmax,
                   alpha=alpha, rounding=rounding, d_shift=d_shift, axes=axes, eps_root=eps_root, eps_root_shift=eps_root_shift,
                   norm_dims=norm_dims)

    # ------------------------------------------------------------------------- numpy
    def apply_numpy(self, q: np.ndarray) -> np.ndarray:
        q = check_activation(q, self.in_bits)
        self._check_shape(q.shape)
        N, axes = self.n, self.axes
        x = q << self.alpha if self.alpha is not None else q
        S = x.sum(axis=axes, keepdims=True)
        mu = floor_div_numpy((S << (self.f + 1)) + N, np.int64(2 * N))
        d = (x << self.f) - mu
        if self.d_shift:
            d = rounding_shift_numpy(d, self.d_shift, self.rounding)
        w = np.maximum((d * d).sum(axis=axes, keepdims=True) + self.E, 1)
        check(bool(np.all(w < EXACT_LIMIT)), "LayerNorm variance sum reaches 2**52")
        t, p = w, np.ones_like(w)
        for step in _NORM_STEPS:
            c = t < 2 ** (52 - 2 * step)
            t = np.where(c, t << (2 * step), t)
            p = np.where(c, p << step, p)
        s = isqrt_numpy(t)
        if self.eps_root:
            s = s + rounding_shift_numpy(self.eps_root * p, self.eps_root_shift, self.rounding)
        R = (1 << 50) // s
        u = rounding_shift_numpy(d * R * p, 20, self.rounding)
        z = u * self.G + self.B
        return np.clip(rounding_shift_numpy(z, self.shift, self.rounding), self.lo, self.hi)

    # -------------------------------------------------------------------------- onnx
    def emit(self, b: OnnxBuilder, q: str) -> str:
        N = self.n
        x = q
        if self.alpha is not None:
            x = b.mul(x, b.int_const(1 << self.alpha, np.float64, "ptf"))
        S = b.reduce("ReduceSum", x, self.axes)
        mu = floor_div_onnx(b, b.add(b.mul(S, b.const(2.0 ** (self.f + 1))), b.const(float(N))), b.const(2.0 * N))
        d = b.sub(b.mul(x, b.const(2.0**self.f)), mu) if self.f else b.sub(x, mu)
        if self.d_shift:
            d = rounding_shift_onnx(b, d, self.d_shift, self.rounding)
        V = b.reduce("ReduceSum", b.mul(d, d), self.axes)
        t = b.op("Max", b.add(V, b.const(float(self.E))), b.const(1.0))
        p = b.const(1.0)
        for step in _NORM_STEPS:
            c = b.op("Less", t, b.const(2.0 ** (52 - 2 * step)))
            t = b.where(c, b.mul(t, b.const(4.0**step)), t)
            p = b.where(c, b.mul(p, b.const(2.0**step)), p)
        s = isqrt_onnx(b, t)
        if self.eps_root:
            s = b.add(s, rounding_shift_onnx(b, b.mul(p, b.const(float(self.eps_root))), self.eps_root_shift, self.rounding))
        R = b.floor(b.div(b.const(2.0**50), s))
        u = rounding_shift_onnx(b, b.mul(b.mul(d, R), p), 20, self.rounding)
        z = b.add(b.mul(u, b.int_const(self.G, np.float64, "gamma")), b.const(self.B.astype(np.float64), hint="beta"))
        return b.clip(rounding_shift_onnx(b, z, self.shift, self.rounding), float(self.lo), float(self.hi))
