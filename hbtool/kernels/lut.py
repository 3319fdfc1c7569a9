"""Lookup tables for elementwise nonlinear functions (GELU, Sigmoid, Exp, Reciprocal, ...).

Built from a float function ``f`` (a callable on float64 arrays, or a name in
:data:`LUT_FUNCTIONS`), the input scale and bits, and the output scale and bits. Table
entries are ``clamp(round(f(x_knot) / s_out))``:

* int8 input: a direct 256-entry table, ``y = T[q + 128]``.
* int16 input: 257 knots at ``q = -32768 + 256 k`` (the last one, ``q = 32768``, lies past the
  range and only serves interpolation) and linear interpolation between them:
  ``u = q + 32768``, ``i = u >> 8``, ``r = u & 255``,
  ``y = T[i] + rshift((T[i+1] - T[i]) * r, 8)``. The interpolated value lies between two
  table entries, so it needs no clamp; ``|(T[i+1]-T[i]) r| < 2**24``.

Functions with singularities take a ``domain``: knot positions are clamped into it before
``f`` is evaluated (``sqrt``, ``log``, ``pow`` with a fractional exponent clamp at 0 or at the
smallest positive double; ``reciprocal`` at 0 gives +inf), infinities saturate to the output
range and a NaN becomes 0.

Measured worst-case error against the float function over every input code, in output LSB
(``|y - f(q s_in) / s_out|`` after clamping the reference to the output range;
``tests/unit/kernels/test_numpy_and_onnx_forms_agree.py::test_lut_accuracy`` holds these). Scales are symmetric ranges,
``s = range / qmax``:

===========  ==============  ==============  =======  ========  ========  =========
function     input range     output range    8 -> 8   8 -> 16   16 -> 8   16 -> 16
===========  ==============  ==============  =======  ========  ========  =========
gelu         +-8             +-8             0.49     0.49      0.99      2.12
sigmoid      +-8             +-1             0.50     0.50      1.00      2.42
exp          +-8             +-e**2          0.50     0.50      0.87      15.2
tanh         +-4             +-1             0.50     0.49      0.94      3.89
===========  ==============  ==============  =======  ========  ========  =========

A direct table is exact up to the output rounding (0.5 LSB). The int16 input tables add the
interpolation error ``h**2 max|f''| / 8`` at the knot spacing ``h = 256 s_in`` (0.0625 for +-8):
a fraction of an int8 output LSB, a few int16 LSB (exp: 15 LSB = 0.0034 absolute at
``s_out = e**2 / 32767``). Halving the input range quarters it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from hbtool.kernels.base import Kernel, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING, ROUNDING_MODES, int_range, rounding_shift_numpy, rounding_shift_onnx
from hbtool.kernels.linear import check_activation
from hbtool.kernels.units import VECTOR

_TINY = np.finfo(np.float64).tiny
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def pow_fn(exponent: float) -> tuple[Callable, tuple[float, float] | None]:
    """``x ** p`` with its domain (``x >= 0`` unless p is an integer)."""
    p = float(exponent)
    dom = None if p == int(p) else (0.0, math.inf)
    if p < 0 and dom is not None:
        dom = (_TINY, math.inf)
    return (lambda x: np.power(x, p)), dom


def hardsigmoid_fn(alpha: float = 0.2, beta: float = 0.5) -> tuple[Callable, None]:
    """ONNX HardSigmoid ``max(0, min(1, alpha x + beta))`` (PyTorch uses alpha = 1/6)."""
    return (lambda x: np.clip(alpha * x + beta, 0.0, 1.0)), None


def leaky_relu_fn(alpha: float = 0.01) -> tuple[Callable, None]:
    return (lambda x: np.where(x >= 0, x, alpha * x)), None


def elu_fn(alpha: float = 1.0) -> tuple[Callable, None]:
    return (lambda x: np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))), None


def selu_fn(alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> tuple[Callable, None]:
    """ONNX Selu ``gamma * (x > 0 ? x : alpha (e**x - 1))`` (the defaults are ONNX's float32 constants)."""
    return (lambda x: gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))), None


#: named functions: ``name -> (f, domain or None)``
LUT_FUNCTIONS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], tuple[float, float] | None]] = {
    "gelu": (lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), None),
    "gelu_tanh": (lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))), None),
    "sigmoid": (_sigmoid, None),
    "tanh": (np.tanh, None),
    "erf": (_erf, None),
    "exp": (np.exp, None),
    "silu": (lambda x: x * _sigmoid(x), None),
    "swish": (lambda x: x * _sigmoid(x), None),
    "hardswish": (lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), None),
    "hardsigmoid": hardsigmoid_fn(),
    "softplus": (lambda x: np.logaddexp(0.0, x), None),
    "mish": (lambda x: x * np.tanh(np.logaddexp(0.0, x)), None),
    "elu": elu_fn(),
    "selu": selu_fn(),
    "softsign": (lambda x: x / (1.0 + np.abs(x)), None),
    "sin": (np.sin, None),
    "cos": (np.cos, None),
    "leaky_relu": leaky_relu_fn(),
    "sqrt": (np.sqrt, (0.0, math.inf)),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), (_TINY, math.inf)),
    "reciprocal": (lambda x: 1.0 / x, None),
    "log": (np.log, (_TINY, math.inf)),
    "abs": (np.abs, None),
    "neg": (np.negative, None),
    "relu": (lambda x: np.maximum(x, 0.0), None),
    "identity": (lambda x: x, None),
}


def make_table(f: Callable, x: np.ndarray, scale_out: float, out_bits: int,
               domain: tuple[float, float] | None) -> np.ndarray:
    """``clamp(round(f(x) / s_out))`` with the domain clamp, inf saturation and NaN -> 0."""
    qmin, qmax = int_range(out_bits)
    if domain is not None:
        x = np.clip(x, domain[0], domain[1])
    with np.errstate(all="ignore"):
        v = np.asarray(f(x), np.float64) / float(scale_out)
    v = np.where(np.isnan(v), 0.0, v)
    return np.clip(np.rint(np.clip(v, qmin - 1.0, qmax + 1.0)), qmin, qmax).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Lut(Kernel):
    """Elementwise ``f`` by table lookup (int8 input) or interpolated table (int16 input)."""

    unit = VECTOR
    merges_samples = True

    table: np.ndarray  # int64: 256 entries (int8 in) or 2**(16 - knot_bits) + 1 knots (int16 in)
    in_bits: int
    out_bits: int
    rounding: str = DEFAULT_ROUNDING
    name: str = "f"
    knot_bits: int = 8  # int16 input: knots every 2**knot_bits codes

    @classmethod
    def build(
        cls,
        f: str | Callable[[np.ndarray], np.ndarray] | tuple,
        scale_in: float,
        in_bits: int,
        scale_out: float,
        out_bits: int,
        domain: tuple[float, float] | None = None,
        rounding: str = DEFAULT_ROUNDING,
        knot_bits: int = 8,
    ) -> "Lut":
        """``f``: a name in :data:`LUT_FUNCTIONS`, a float64 array function, or a ``(function, domain)``
        pair such as ``pow_fn(1.5)``; ``domain`` (lo, hi) clamps the function's input."""
        check_scales("Lut", scale_in=scale_in, scale_out=scale_out)
        if rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding mode must be one of {ROUNDING_MODES}, not {rounding!r}")
        if isinstance(f, tuple):  # (callable, domain), as pow_fn() and friends return
            f, fdom = f
            domain = domain if domain is not None else fdom
        name = f if isinstance(f, str) else getattr(f, "__name__", "f")
        if isinstance(f, str):
            if f not in LUT_FUNCTIONS:
                raise ValueError(f"unknown LUT function {f!r}; known: {sorted(LUT_FUNCTIONS)}")
            f, default_domain = LUT_FUNCTIONS[f]
            domain = domain if domain is not None else default_domain
        int_range(in_bits)
        if in_bits == 8:
            codes = np.arange(-128, 128, dtype=np.float64)
        else:
            if not 4 <= knot_bits <= 8:
                raise ValueError("knot_bits must be within 4..8")
            codes = -32768.0 + float(1 << knot_bits) * np.arange((1 << (16 - knot_bits)) + 1, dtype=np.float64)
        table = make_table(f, codes * float(scale_in), scale_out, out_bits, domain)
        return cls(table=table, in_bits=in_bits, out_bits=out_bits, rounding=rounding, name=name, knot_bits=knot_bits)

    def apply_numpy(self, q: np.ndarray) -> np.ndarray:
        q = check_activation(q, self.in_bits)
        if self.in_bits == 8:
            return self.table[q + 128]
        kb = self.knot_bits
        u = q + 32768
        i = u >> kb
        t0 = self.table[i]
        return t0 + rounding_shift_numpy((self.table[i + 1] - t0) * (u & ((1 << kb) - 1)), kb, self.rounding)

    def emit(self, b: OnnxBuilder, q: str) -> str:
        if self.in_bits == 8:
            idx = b.cast(b.add(q, b.const(128.0)), np.int64)
            return b.op("Gather", b.const(self.table.astype(np.float64), hint="table"), idx)
        kb = self.knot_bits
        step = float(1 << kb)
        u = b.add(q, b.const(32768.0))
        i = b.floor(b.mul(u, b.const(1.0 / step)))
        r = b.sub(u, b.mul(i, b.const(step)))
        idx = b.cast(i, np.int64)
        t0 = b.op("Gather", b.const(self.table[:-1].astype(np.float64), hint="table"), idx)
        dt = b.op("Gather", b.const(np.diff(self.table).astype(np.float64), hint="slope"), idx)
        return b.add(t0, rounding_shift_onnx(b, b.mul(dt, r), kb, self.rounding))

    @property
    def vector_class(self) -> str:
        """int16 inputs read an interpolated table: the vector unit's slower ``lut_int16`` class."""
        return "lut_int16" if int(self.in_bits) > 8 else "lut"
