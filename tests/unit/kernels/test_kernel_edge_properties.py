"""Property tests of the integer kernels at their edges (hypothesis).

The contract (hbtool/kernels/__init__.py): every kernel's ``apply_numpy`` and its ONNX form
(run in onnxruntime) agree bit for bit, and both approximate the float operation. Here, for
every kernel, on data that sits on the edges (saturation at the int8/int16 bounds, rounding
ties, int16 intermediates near the exactness limits, all-zero and constant tensors, masked
softmax rows) and on scales far outside the usual range:

* numpy == onnxruntime, exactly;
* numpy is within a stated tolerance of a float64 reference, in output LSB (each test says
  which and why);
* ``build`` either works (and then the two properties hold) or raises ``ValueError`` (or its
  subclass ``RangeError``) with a message; any other exception, or a result outside the
  tolerance, is garbage and fails.

Budget: the default run draws about 400 examples (derandomized, stable in CI) in well under
40 s; ``HYPOTHESIS_PROFILE=nightly`` (``scripts/nightly.sh fuzz``, profile registered in
tests/conftest.py) runs ten times as many, randomized. onnxruntime sessions are cached by
model bytes, and models are written without input shapes, so one session serves every
input shape of a kernel.
"""

from __future__ import annotations

import functools
import math
import os
from fractions import Fraction
from typing import Any, Callable

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from hbtool.kernels import (
    LUT_FUNCTIONS,
    ROUNDING_MODES,
    Add,
    AvgPool,
    Conv,
    LayerNorm,
    Linear,
    Lut,
    MatMul,
    MaxPool,
    Mul,
    OnnxBuilder,
    RangeError,
    ReduceMean,
    Requantize,
    Softmax,
    int_range,
    rounding_shift_numpy,
    rounding_shift_onnx,
)
from hbtool.kernels.pool import pool_output_shape

NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"


def budget(n: int):
    """``n`` examples in the default run (derandomized), ``10 n`` randomized in the nightly profile."""
    return settings(max_examples=n * (10 if NIGHTLY else 1), deadline=None, derandomize=not NIGHTLY,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


# ----------------------------------------------------------------------------- onnxruntime
_SO = ort.SessionOptions()
_SO.log_severity_level = 3
_SO.intra_op_num_threads = 1


@functools.lru_cache(maxsize=256)
def _session(model_bytes: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model_bytes, _SO, providers=["CPUExecutionProvider"])


def run_onnx(kernel, *inputs: np.ndarray) -> np.ndarray:
    dt = np.float32 if kernel.onnx_input_type == TensorProto.FLOAT else np.float64
    sess = _session(kernel.onnx_model().SerializeToString())  # no input shapes: one session per kernel
    return sess.run(None, {f"x{i}": np.asarray(x).astype(dt) for i, x in enumerate(inputs)})[0]


def exact(kernel, *inputs: np.ndarray) -> np.ndarray:
    """numpy form == ONNX form, bit for bit; returns the numpy result."""
    ref = kernel.apply_numpy(*inputs)
    got = run_onnx(kernel, *inputs)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if not np.array_equal(got, ref):
        bad = np.argwhere(got != ref)[:5].tolist()
        raise AssertionError(f"{type(kernel).__name__}: {int((got != ref).sum())} of {ref.size} differ, e.g. at {bad}: "
                             f"numpy {ref[tuple(np.array(bad).T)]} onnx {got[tuple(np.array(bad).T)]}")
    return ref


def within(y: np.ndarray, ref: np.ndarray, tol: Any, what: str) -> None:
    """``|y - ref| <= tol`` elementwise (tol broadcasts), in output LSB."""
    err = np.abs(np.asarray(y, np.float64) - ref)
    over = err > np.asarray(tol) + 1e-9
    if np.any(over):
        i = tuple(np.argwhere(over)[0])
        raise AssertionError(f"{what}: {int(over.sum())} of {err.size} outside the tolerance; e.g. at {list(i)}: "
                             f"kernel {y[i]}, float {ref[i]!r}, error {err[i]:.4g} > {np.broadcast_to(tol, err.shape)[i]:.4g} LSB")


# ----------------------------------------------------------------------------- data
FILLS = ("random", "random", "extreme", "min", "max", "zero", "const", "alternating", "small")
seeds = st.integers(0, 2**32 - 1)
bits_st = st.sampled_from([8, 16])
fills = st.sampled_from(FILLS)
roundings = st.sampled_from(ROUNDING_MODES)


def int_data(rng: np.random.Generator, shape, bits: int, fill: str) -> np.ndarray:
    lo, hi = int_range(bits)
    if fill == "min":
        return np.full(shape, lo, np.int64)
    if fill == "max":
        return np.full(shape, hi, np.int64)
    if fill == "zero":
        return np.zeros(shape, np.int64)
    if fill == "const":
        return np.full(shape, int(rng.integers(lo, hi + 1)), np.int64)
    if fill == "extreme":
        return rng.choice(np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi]), size=shape).astype(np.int64)
    if fill == "alternating":
        return np.where(np.indices(shape).sum(axis=0) % 2 == 0, hi, lo).astype(np.int64)
    if fill == "small":
        return rng.integers(-3, 4, size=shape).astype(np.int64)
    return rng.integers(lo, hi + 1, size=shape).astype(np.int64)


def log_scale(lo: float, hi: float):
    """Scales ``m * 2**e`` with e uniform in [lo, hi] and arbitrary mantissas."""
    return st.builds(lambda e, m: m * 2.0**e, st.integers(int(lo), int(hi)), st.floats(1.0, 1.999))


usual_scales = log_scale(-14, 3)
# far outside the usual range, and the degenerate ones a calibration could produce
EXTREME_SCALES = st.one_of(log_scale(-90, 90), log_scale(-30, 30), log_scale(-12, 4),
                           st.sampled_from([0.0, -1.0, math.inf, math.nan, 5e-324, 1e-300, 1e300]))


def rounding_error(mode: str) -> float:
    """The most a rounding to an integer moves a value: half an LSB, a whole one for floor."""
    return 1.0 if mode == "floor" else 0.5


def ref_shift(x: int, n: int, mode: str) -> int:
    """Exact ``x / 2**n`` rounded by ``mode`` (Fractions)."""
    v = Fraction(x, 2**n)
    fl = math.floor(v)
    frac = v - fl
    if mode == "floor" or frac < Fraction(1, 2):
        return fl
    if frac > Fraction(1, 2):
        return fl + 1
    return {"half_up": fl + 1, "half_even": fl + (fl % 2), "half_away": fl + (1 if x > 0 else 0)}[mode]


# =============================================================================== rounding
@functools.lru_cache(maxsize=None)
def _shift_session(n: int, mode: str) -> ort.InferenceSession:
    from onnx import helper

    b = OnnxBuilder("t")
    b.bind_output(rounding_shift_onnx(b, "x", n, mode), "y")
    g = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], initializer=b.initializers)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return _session(m.SerializeToString())


@budget(80)
@given(mode=roundings, n=st.integers(1, 52), k=st.integers(-(2**30), 2**30), sign=st.sampled_from([1, -1]))
def test_rounding_shift_at_ties_and_their_neighbours(mode, n, k, sign):
    """Exact ties ``(j + 1/2) 2**n`` and the integers next to them, up to the 2**52 limit, every mode."""
    tie = sign * (k * 2**n + 2 ** (n - 1))
    xs = [t for t in (tie - 1, tie, tie + 1, -tie, 2**52 - 1, -(2**52) + 1) if abs(t) < 2**52]
    assume(len(xs) > 2)
    x = np.array(xs, np.int64)
    want = np.array([ref_shift(int(v), n, mode) for v in xs])
    assert np.array_equal(rounding_shift_numpy(x, n, mode), want)
    assert np.array_equal(_shift_session(n, mode).run(None, {"x": x.astype(np.float64)})[0], want)


# =============================================================================== requantize
def requant_tolerance(acc: np.ndarray, ratio: Any, mode: str) -> np.ndarray:
    """|y - clip(acc r)|: the rounding, the 15-bit multiplier (relative 2**-15), the capped shift
    of tiny ratios (absolute 2**-53 per unit of acc) and the pre-shift (< 2**-22 LSB)."""
    a = np.abs(acc.astype(np.float64))
    return rounding_error(mode) + a * np.abs(ratio) * 2.0**-15 + a * 2.0**-53 + 2.0**-20


def check_requantize(k: Requantize, acc: np.ndarray, ratio: Any, mode: str) -> None:
    y = exact(k, acc)
    ref = np.clip(acc.astype(np.float64) * ratio, k.lo, k.hi)
    within(y, ref, requant_tolerance(acc, ratio, mode), "Requantize vs float")


def acc_data(rng, shape, bound: int, fill: str) -> np.ndarray:
    if fill in ("max", "min"):
        return np.full(shape, bound if fill == "max" else -bound, np.int64)
    if fill == "zero":
        return np.zeros(shape, np.int64)
    if fill == "const":
        return np.full(shape, int(rng.integers(-bound, bound + 1)), np.int64)
    if fill in ("extreme", "alternating"):
        return rng.choice(np.array([-bound, -bound + 1, -1, 0, 1, bound - 1, bound], np.int64), size=shape)
    if fill == "small":
        return np.clip(rng.integers(-3, 4, size=shape), -bound, bound).astype(np.int64)
    mag = rng.integers(0, 53, size=shape)  # magnitudes spread over every bit length
    v = np.minimum(np.floor(rng.random(shape) * np.ldexp(1.0, mag)).astype(np.int64), bound)
    return np.where(rng.random(shape) < 0.5, -v, v)


@budget(60)
@given(seed=seeds, bits=bits_st, mode=roundings, rexp=st.floats(-60, 14.99), acc_log=st.integers(1, 52),
       per_channel=st.booleans(), relu=st.booleans(), fill=fills)
def test_requantize_saturates_and_rounds_within_tolerance(seed, bits, mode, rexp, acc_log, per_channel, relu, fill):
    """Ratios from 2**-60 (the shift caps at 52) to just under 2**15, accumulators up to 2**52 - 1 (pre-shift and
    accumulator clamp paths), outputs saturating at the int8/int16 bounds."""
    rng = np.random.default_rng(seed)
    bound = 2**acc_log - 1 if acc_log < 52 else 2**52 - 1
    ratio = 2.0 ** (rexp + rng.uniform(-0.5, 0.5, 6)) if per_channel else np.float64(2.0**rexp)
    ratio = np.minimum(ratio, 2.0**15 - 1)
    k = Requantize.build(ratio, bits, axis=-1 if per_channel else None, acc_bound=bound, relu=relu, rounding=mode)
    acc = acc_data(rng, (3, 6), bound, fill)
    check_requantize(k, acc, ratio, mode)
    with pytest.raises(RangeError):  # the declared accumulator bound is enforced
        k.apply_numpy(np.array([bound + 1]))


@budget(40)
@given(seed=seeds, bits=bits_st, mode=roundings, shift=st.integers(1, 40), j=st.integers(-(2**10), 2**10))
def test_requantize_power_of_two_ratios_round_ties_by_mode(seed, bits, mode, shift, j):
    """``ratio = 2**-s``: the output is exactly the rounding shift of the accumulator, ties included, while
    ``acc * M`` stays below 2**52 (M = 2**14, so |acc| < 2**38). Beyond that the requantizer pre-shifts the
    accumulator, and values within 2**-22 LSB of a tie may round either way (documented in requantize.py;
    test_requantize_saturates_and_rounds_within_tolerance holds that path to its tolerance)."""
    bound = 2**38 - 1
    k = Requantize.build(2.0**-shift, bits, acc_bound=bound, rounding=mode)
    assert k.pre_shift is None and k.clamp_acc is None
    lo, hi = int_range(bits)
    base = j * 2**shift + 2 ** (shift - 1)  # a tie
    acc = np.array([base - 1, base, base + 1, -base, -base - 1, -base + 1], np.int64)
    acc = acc[np.abs(acc) <= bound]
    assume(acc.size)
    y = exact(k, acc)
    want = np.clip([ref_shift(int(a), shift, mode) for a in acc], lo, hi)
    assert np.array_equal(y, want)


# =============================================================================== Add / Mul
def check_add(k: Add, a: np.ndarray, b: np.ndarray, sa, sb, so, sub: bool, mode: str) -> None:
    y = exact(k, a, b)
    sign = -1.0 if sub else 1.0
    ref = np.clip((a * (sa / so) + sign * b * (sb / so)).astype(np.float64), k.lo, k.hi)
    # A and B are the ratios rounded to 2**-n: half a unit of 2**-n per unit of |a| and |b|
    tol = rounding_error(mode) + (np.abs(a) + np.abs(b)) * np.ldexp(0.5, -np.asarray(k.n)) + 1e-9
    within(y, ref, tol, "Add vs float")


def check_mul(k: Mul, a: np.ndarray, b: np.ndarray, ratio: float, mode: str) -> None:
    y = exact(k, a, b)
    acc = a * b
    within(y, np.clip(acc * ratio, k.requant.lo, k.requant.hi), requant_tolerance(acc, ratio, mode), "Mul vs float")


@budget(60)
@given(seed=seeds, a_bits=bits_st, b_bits=bits_st, out_bits=bits_st, sa=usual_scales, sb=usual_scales, so=usual_scales,
       op=st.sampled_from(["add", "sub", "mul"]), relu=st.booleans(), mode=roundings, fa=fills, fb=fills,
       bshape=st.sampled_from([(2, 3, 5), (5,), (1, 1), ()]))
def test_add_mul(seed, a_bits, b_bits, out_bits, sa, sb, so, op, relu, mode, fa, fb, bshape):
    """Both operands at their int8/int16 extremes (|a A + b B| up to 2**31, |a b| up to 2**30), broadcasting."""
    rng = np.random.default_rng(seed)
    a = int_data(rng, (2, 3, 5), a_bits, fa)
    b = int_data(rng, bshape, b_bits, fb)
    if op == "mul":
        try:
            k = Mul.build(sa, sb, so, a_bits, b_bits, out_bits, relu=relu, rounding=mode)
        except ValueError as e:  # a product ratio over 2**15 cannot be a right-shift requantizer
            assert "too large" in str(e) and sa * sb / so >= 2**15 - 0.5
            return
        check_mul(k, a, b, sa * sb / so, mode)
        return
    try:
        k = Add.build(sa, sb, so, a_bits, b_bits, out_bits, sub=(op == "sub"), relu=relu, rounding=mode)
    except ValueError as e:
        assert "too large" in str(e) and max(sa, sb) / so >= 2**15 - 0.5
        return
    check_add(k, a, b, sa, sb, so, op == "sub", mode)


# =============================================================================== LUT
LUT_NAMES = ["gelu", "sigmoid", "tanh", "exp", "silu", "hardswish", "reciprocal", "sqrt", "rsqrt", "log", "softplus"]


def lut_reference(name: str, x: np.ndarray, s_out: float, out_bits: int) -> np.ndarray:
    """``clip(f(x) / s_out)`` with the function's domain clamp, inf saturating and NaN as 0 (float64)."""
    f, dom = LUT_FUNCTIONS[name]
    if dom is not None:
        x = np.clip(x, dom[0], dom[1])
    with np.errstate(all="ignore"):
        v = np.asarray(f(x), np.float64) / s_out
    lo, hi = int_range(out_bits)
    return np.clip(np.where(np.isnan(v), 0.0, v), lo, hi)


def check_lut(k: Lut, name: str, q: np.ndarray, s_in: float, s_out: float, mode: str) -> None:
    y = exact(k, q)
    if k.in_bits == 8:  # a direct table: the float function rounded once
        within(y, lut_reference(name, q * s_in, s_out, k.out_bits), 0.5, f"int8 Lut {name} vs float")
        return
    # int16: every knot is the float function rounded once, and between knots the kernel interpolates
    # the table: within the rounding of the float interpolation (and never outside its two knots)
    kb = k.knot_bits
    knots = -32768.0 + (1 << kb) * np.arange(k.table.size)
    within(k.table, lut_reference(name, knots * s_in, s_out, k.out_bits), 0.5, f"int16 Lut {name} knots vs float")
    u = q + 32768
    i = u >> kb
    t0, t1 = k.table[i].astype(np.float64), k.table[i + 1].astype(np.float64)
    interp = t0 + (t1 - t0) * (u & ((1 << kb) - 1)) / (1 << kb)
    within(y, interp, rounding_error(mode), f"int16 Lut {name} vs interpolated table")
    assert np.all((y >= np.minimum(t0, t1)) & (y <= np.maximum(t0, t1)))


@budget(60)
@given(seed=seeds, name=st.sampled_from(LUT_NAMES), in_bits=bits_st, out_bits=bits_st, rin=st.floats(0.01, 64),
       rout=st.floats(0.01, 64), mode=roundings, fill=fills)
def test_lut_int8_and_int16(seed, name, in_bits, out_bits, rin, rout, mode, fill):
    """int8 tables over every code (all 256 of them, plus the edge fills) and int16 interpolation to the last knot."""
    rng = np.random.default_rng(seed)
    s_in, s_out = rin / int_range(in_bits)[1], rout / int_range(out_bits)[1]
    k = Lut.build(name, s_in, in_bits, s_out, out_bits, rounding=mode)
    q = int_data(rng, (4, 16), in_bits, fill)
    if in_bits == 8 and fill == "random":
        q = np.arange(-128, 128).reshape(16, 16)
    check_lut(k, name, q, s_in, s_out, mode)


# =============================================================================== Softmax
def softmax_reference(q: np.ndarray, s: float, in_bits: int, mask_min: bool) -> np.ndarray:
    """float64 softmax of ``q s`` over the last axis; the integer minimum is a clamped mask (-inf) unless the
    whole row is masked, which then comes out uniform."""
    x = q.astype(np.float64) * s
    qmin = int_range(in_bits)[0]
    if mask_min:
        masked = (q == qmin) & (q.max(axis=-1, keepdims=True) > qmin)
        x = np.where(masked, -np.inf, x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def check_softmax(k: Softmax, q: np.ndarray, s: float) -> None:
    y = exact(k, q)
    p = k.p
    assert y.min(initial=0) >= 0 and y.max(initial=0) <= 2**p - 1
    ref = softmax_reference(q, s, k.in_bits, k.mask_min) * 2.0**p
    # the output rounding (half an LSB), the clamp of 1.0 to 1 - 2**-p (one LSB), and the exponentials: every
    # e carries up to one unit of 2**-E, so the row sum up to N units (relative), the entry one unit
    n = q.shape[-1]
    tol = 1.0 + (n + 2) * 2.0 ** (p - k.exp_bits)
    within(y, ref, tol, f"Softmax int{k.in_bits}->int{k.out_bits} (E={k.exp_bits}) vs float")


def softmax_data(rng, shape, bits: int, fill: str, mask: str) -> np.ndarray:
    q = int_data(rng, shape, bits, fill)
    qmin = int_range(bits)[0]
    if mask == "some":  # an additive -1e4 mask, clamped to the integer minimum by calibration
        q = np.where(rng.random(shape) < 0.4, qmin, q)
    elif mask == "tail":  # padding positions at the end of each row (BERT-style)
        q[..., rng.integers(1, shape[-1] + 1):] = qmin
    elif mask == "rows":  # whole rows masked
        q[::2] = qmin
    return q


@budget(60)
@given(seed=seeds, in_bits=bits_st, out_bits=bits_st, scale=log_scale(-16, 2), n=st.integers(1, 64), fill=fills,
       mask=st.sampled_from(["none", "some", "tail", "rows"]), mask_min=st.booleans(),
       exp_bits=st.sampled_from([12, 16, 20, 25]), mode=roundings)
def test_softmax_masks_and_saturation(seed, in_bits, out_bits, scale, n, fill, mask, mask_min, exp_bits, mode):
    """Masked (integer-minimum) logits, fully masked rows, constant rows, rows spanning the whole int16 range."""
    rng = np.random.default_rng(seed)
    k = Softmax.build(scale, in_bits, out_bits, exp_bits=exp_bits, mask_min=mask_min, rounding=mode)
    check_softmax(k, softmax_data(rng, (4, n), in_bits, fill, mask), scale)


# =============================================================================== LayerNorm
def layernorm_reference(q, s_in, gamma, beta, eps, s_out, out_bits):
    """float64 LayerNorm of ``q s_in``, computed in input units (``N q - sum q`` is exact, so a constant row
    normalises to exactly 0; ``s_in`` only enters through ``eps / s_in**2``, so huge scales cannot overflow)."""
    N = q.shape[-1]
    dq = (N * q - q.sum(axis=-1, keepdims=True)).astype(np.float64)  # N (x - mean) / s_in, exact
    var = (dq * dq).sum(axis=-1, keepdims=True) / float(N) ** 3  # var / s_in**2
    with np.errstate(all="ignore"):
        den = np.sqrt(var + eps / s_in / s_in)
        z = np.where(den > 0, (dq / N) / den, 0.0)  # a constant row with eps = 0 normalises to 0
    lo, hi = int_range(out_bits)
    return np.clip((z * gamma + beta) / s_out, lo, hi)


def check_layernorm(k: LayerNorm, q, s_in, gamma, beta, eps, s_out) -> None:
    y = exact(k, q)
    ref = layernorm_reference(q, s_in, gamma, beta, eps, s_out, k.out_bits)
    # the module docstring: at most 1 LSB from the float result rounded to the grid (1.5 from the float result),
    # plus the 20-bit gamma (relative 2**-10 here, generously), plus the mean's rounding: it is kept with f
    # fractional bits (f from the 2**52 bound: 7 for int16 rows of 97), off by up to 2**-(f+1) input LSB, which
    # moves z by 2**-(f+1) / sigma (sigma: the row's standard deviation with eps, in input LSB) and the output by
    # |gamma| / s_out times that: more than an LSB only for rows a few int16 LSB wide at a fine output scale
    n = q.shape[-1]
    dq = (n * q - q.sum(axis=-1, keepdims=True)).astype(np.float64)
    sigma = np.sqrt((dq * dq).sum(axis=-1, keepdims=True) / float(n) ** 3 + eps / s_in / s_in)
    with np.errstate(all="ignore"):
        mean_term = np.where(sigma > 0, np.abs(gamma) / s_out * 2.0 ** -(k.f + 1) / sigma, 0.0)
    # eps enters as the integer E = round(eps N 4**f / s_in**2 / 4**d_shift), at least 1: the kernel normalises
    # with that eps, which differs from eps where eps is tiny against the variance (a negligible difference)
    eps_used = k.E * 4.0**k.d_shift * s_in * s_in / (n * 4.0**k.f)
    eps_term = np.abs(layernorm_reference(q, s_in, gamma, beta, eps_used, s_out, k.out_bits) - ref)
    # when eps dominates (d_shift > 0) the centred values are rounded to whole units of sqrt(w) >= sqrt(E):
    # z = d sqrt(N) / sqrt(w) has an absolute resolution of sqrt(N / E), which shows at fine output scales
    shift_term = rounding_error(k.rounding) * math.sqrt(n / max(k.E, 1)) * np.abs(gamma) / s_out if k.d_shift else 0.0
    # and z is carried in Q30 (u): an absolute resolution of sqrt(N) 2**-30, again only visible at tiny s_out
    q30_term = rounding_error(k.rounding) * math.sqrt(n) * 2.0**-30 * np.abs(gamma) / s_out
    within(y, ref, 1.5 + 2.0**-10 * np.abs(ref) + mean_term + eps_term + shift_term + q30_term,
           f"LayerNorm int{k.in_bits}->int{k.out_bits} (f={k.f}, E={k.E}) vs float")


def ln_data(rng, shape, bits: int, fill: str) -> np.ndarray:
    if fill == "small":  # a large mean, a tiny spread: the mean must be exact to a fraction of an LSB
        lo, hi = int_range(bits)
        centre = int(rng.integers(lo + 3, hi - 3))
        return centre + rng.integers(-3, 4, size=shape)
    return int_data(rng, shape, bits, fill)


@budget(60)
@given(seed=seeds, in_bits=bits_st, out_bits=bits_st, n=st.sampled_from([1, 2, 3, 16, 48, 97, 768]), fill=fills,
       s_in=log_scale(-14, 2), s_out=log_scale(-10, 1), eps=st.sampled_from([0.0, 1e-12, 1e-5, 1e-2, 1.0]),
       affine=st.sampled_from(["none", "random", "zero_gamma", "large_beta"]), mode=roundings)
def test_layernorm_constant_rows_and_extremes(seed, in_bits, out_bits, n, fill, s_in, s_out, eps, affine, mode):
    """Constant and all-zero rows (variance 0, with eps 0 too), rows at both int16 bounds, a large mean with a
    tiny spread, gamma 0, beta far past saturation."""
    rng = np.random.default_rng(seed)
    gamma = np.ones(n)
    beta = np.zeros(n)
    if affine == "random":
        gamma, beta = rng.normal(1, 0.5, n), rng.normal(0, 0.5, n)
    elif affine == "zero_gamma":
        gamma, beta = np.zeros(n), rng.normal(0, 0.5, n)
    elif affine == "large_beta":
        beta = rng.choice([-1.0, 1.0], n) * s_out * 2.0**20
    k = LayerNorm.build(s_in, gamma, beta, eps, s_out, in_bits, out_bits, rounding=mode)
    check_layernorm(k, ln_data(rng, (3, n), in_bits, fill), s_in, gamma, beta, eps, s_out)


@budget(30)
@given(seed=seeds, in_bits=bits_st, out_bits=bits_st, n=st.sampled_from([4, 16, 97, 768]), e=st.integers(-52, -26),
       eps=st.sampled_from([1e-6, 1e-5, 1e-3, 1.0]), fill=st.sampled_from(["random", "extreme", "alternating", "small"]),
       affine=st.booleans(), mode=roundings)
def test_layernorm_input_scale_tiny_against_eps(seed, in_bits, out_bits, n, e, eps, fill, affine, mode):
    """eps / s_in**2 alone passes the 2**52 budget (inputs of 1e-9 and below): the kernel shifts the centred values
    instead of clamping eps (which normalised with the wrong eps: 38 % off at s_in = 1.2e-10, 100 % at 3e-13).
    The output scale is calibrated on the float output, so the tiny normalised values fill the output range."""
    rng = np.random.default_rng(seed)
    s_in = 1.5 * 2.0**e
    gamma, beta = (rng.normal(1, 0.5, n), rng.normal(0, 1e-3, n)) if affine else (np.ones(n), np.zeros(n))
    q = ln_data(rng, (3, n), in_bits, fill)
    dq = (n * q - q.sum(axis=-1, keepdims=True)).astype(np.float64)
    zf = (dq / n) / np.sqrt((dq * dq).sum(axis=-1, keepdims=True) / float(n) ** 3 + eps / s_in / s_in)
    s_out = float(max(np.abs(zf * gamma + beta).max(), 1e-30)) / int_range(out_bits)[1]
    try:
        k = LayerNorm.build(s_in, gamma, beta, eps, s_out, in_bits, out_bits, rounding=mode)
    except ValueError as err:  # gamma / s_out beyond 2**50: refused, not garbage
        assert "too large" in str(err)
        return
    check_layernorm(k, q, s_in, gamma, beta, eps, s_out)


# =============================================================================== Linear / MatMul
def weight_data(rng, shape, fill: str) -> np.ndarray:
    if fill == "max":  # every weight +-127: the accumulator bound is reached
        return np.full(shape, 127, np.int64)
    if fill == "alternating":
        return np.where(np.indices(shape).sum(axis=0) % 2 == 0, 127, -127).astype(np.int64)
    if fill == "zero":
        return np.zeros(shape, np.int64)
    return rng.integers(-127, 128, size=shape).astype(np.int64)


def check_linear(k: Linear, x, ratio, mode) -> None:
    y = exact(k, x)
    acc = x @ k.weight + (k.bias if k.bias is not None else 0)  # int64 matmul: exact
    assert np.array_equal(k.accumulate_numpy(x), acc)
    rq = k.requant
    within(y, np.clip(acc * ratio, rq.lo, rq.hi), requant_tolerance(acc, ratio, mode), "Linear vs float")


def check_matmul(k: MatMul, a, b, ratio, mode) -> None:
    y = exact(k, a, b)
    acc = np.matmul(a, b)
    assert np.array_equal(k.accumulate_numpy(a, b), acc)
    within(y, np.clip(acc * ratio, k.requant.lo, k.requant.hi), requant_tolerance(acc, ratio, mode), "MatMul vs float")


@budget(40)
@given(seed=seeds, in_bits=bits_st, out_bits=bits_st, K=st.sampled_from([1, 5, 64, 1032, 1033, 4000]),
       N=st.integers(1, 8), fx=fills, fw=st.sampled_from(["random", "max", "alternating", "zero"]),
       per_channel=st.booleans(), bias=st.booleans(), relu=st.booleans(), s_out=log_scale(-6, 8), mode=roundings)
def test_linear_near_the_float32_and_accumulator_limits(seed, in_bits, out_bits, K, N, fx, fw, per_channel, bias,
                                                        relu, s_out, mode):
    """K around the float32 switch (128 * 127 * 1032 < 2**24 < 128 * 127 * 1033) and int16 inputs with all-127
    weights (partial sums far over 2**24: the float64 path), biases at the int32 extremes."""
    rng = np.random.default_rng(seed)
    w = weight_data(rng, (K, N), fw)
    b = rng.choice(np.array([-(2**31), 2**31 - 1, 0, 12345]), N) if bias else None
    s_in = 2.0**-7
    s_w = rng.uniform(1e-3, 2e-2, N) if per_channel else np.float64(0.01)
    k = Linear.build(w, b, s_in, s_w, s_out, in_bits, out_bits, relu=relu, rounding=mode)
    x = int_data(rng, (2, K), in_bits, fx)
    check_linear(k, x, s_in * s_w / s_out, mode)


@budget(40)
@given(seed=seeds, a_bits=bits_st, b_bits=bits_st, out_bits=bits_st, K=st.sampled_from([1, 3, 16, 100, 700]),
       fa=fills, fb=fills, s_out=log_scale(-8, 10), mode=roundings)
def test_matmul_int16_products_near_the_limits(seed, a_bits, b_bits, out_bits, K, fa, fb, s_out, mode):
    """Batched A @ B with both operands at their bounds: int16 x int16 sums up to K 2**30 (accumulator clamp and
    pre-shift in the requantizer)."""
    rng = np.random.default_rng(seed)
    sa, sb = 2.0**-9, 2.0**-11
    k = MatMul.build(sa, sb, s_out, K, a_bits, b_bits, out_bits, rounding=mode)
    a = int_data(rng, (2, 1, 3, K), a_bits, fa)
    b = int_data(rng, (3, K, 4), b_bits, fb)
    check_matmul(k, a, b, sa * sb / s_out, mode)


# =============================================================================== Conv
def conv_reference_acc(x, w, strides, pads, dilations, group) -> np.ndarray:
    """Exact int64 convolution by a loop over kernel taps (independent of the kernel's im2col)."""
    nd = w.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    out = [(xp.shape[2 + i] - dilations[i] * (w.shape[2 + i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    N, C = x.shape[:2]
    cout, cg = w.shape[:2]
    og = cout // group
    acc = np.zeros((N, cout, *out), np.int64)
    for tap in np.ndindex(*w.shape[2:]):
        sl = tuple(slice(tap[i] * dilations[i], tap[i] * dilations[i] + strides[i] * (out[i] - 1) + 1, strides[i])
                   for i in range(nd))
        patch = xp[(slice(None), slice(None)) + sl]  # [N, C, *out]
        for g in range(group):
            wg = w[g * og:(g + 1) * og, :, *tap]  # [og, cg]
            acc[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch[:, g * cg:(g + 1) * cg], wg)
    return acc


@budget(40)
@given(seed=seeds, in_bits=bits_st, out_bits=bits_st, nd=st.sampled_from([1, 2]), groups=st.sampled_from([1, 2, "dw"]),
       k=st.integers(1, 3), stride=st.integers(1, 3), dil=st.integers(1, 2), pad=st.integers(0, 2), fx=fills,
       fw=st.sampled_from(["random", "max", "alternating"]), relu=st.booleans(), mode=roundings,
       cin=st.sampled_from([2, 4, 64]))
def test_conv_with_every_digit_split(seed, in_bits, out_bits, nd, groups, k, stride, dil, pad, fx, fw, relu, mode, cin):
    """All-127 weights and int16 inputs force the weight and activation digit splits of the ONNX form."""
    rng = np.random.default_rng(seed)
    g = cin if groups == "dw" else groups
    cout = cin if groups == "dw" else 4
    w = weight_data(rng, (cout, cin // g) + (k,) * nd, fw)
    spatial = [dil * (k - 1) + int(rng.integers(1, 6)) for _ in range(nd)]
    pads = [int(rng.integers(0, pad + 1)) for _ in range(2 * nd)]
    s_in, s_w, s_out = 2.0**-6, rng.uniform(1e-3, 1e-2, cout), 2.0 ** float(rng.uniform(-2, 6))
    bias = rng.integers(-(2**20), 2**20, cout)
    try:
        kern = Conv.build(w, bias, s_in, s_w, s_out, strides=[stride] * nd, pads=pads, dilations=[dil] * nd, group=g,
                          in_bits=in_bits, out_bits=out_bits, relu=relu, rounding=mode)
    except ValueError as e:  # only when no digit split keeps float32 partial sums exact
        assert "too large for an exact float32" in str(e) and 128 * 8 * (cin // g) * k**nd > 2**24
        return
    x = int_data(rng, [2, cin] + spatial, in_bits, fx)
    y = exact(kern, x)
    acc = conv_reference_acc(x, w, [stride] * nd, pads, [dil] * nd, g) + bias.reshape((-1,) + (1,) * nd)
    assert np.array_equal(kern.accumulate_numpy(x), acc)
    ratio = (s_in * s_w / s_out).reshape((-1,) + (1,) * nd)
    rq = kern.requant
    within(y, np.clip(acc * ratio, rq.lo, rq.hi), requant_tolerance(acc, ratio, mode), "Conv vs float")


# =============================================================================== pooling
def window_sums_and_counts(x, kshape, strides, pads):
    nd = len(kshape)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    ones = np.pad(np.ones(x.shape[2:], np.int64), [(pads[i], pads[i + nd]) for i in range(nd)])
    out = [(xp.shape[2 + i] - kshape[i]) // strides[i] + 1 for i in range(nd)]
    sums = np.zeros(x.shape[:2] + tuple(out), np.int64)
    counts = np.zeros(tuple(out), np.int64)
    for tap in np.ndindex(*kshape):
        sl = tuple(slice(tap[i], tap[i] + strides[i] * (out[i] - 1) + 1, strides[i]) for i in range(nd))
        sums += xp[(slice(None), slice(None)) + sl]
        counts += ones[sl]
    return sums, counts


@budget(40)
@given(seed=seeds, in_bits=bits_st, out_bits=bits_st, nd=st.sampled_from([1, 2]), k=st.integers(1, 4),
       stride=st.integers(1, 3), pad=st.integers(0, 2), include=st.booleans(), fill=fills, mode=roundings,
       rs=st.floats(0.25, 4.0))
def test_avgpool_border_counts_and_saturation(seed, in_bits, out_bits, nd, k, stride, pad, include, fill, mode, rs):
    """Padding with and without counting it (a multiplier per border position), all-min/all-max windows."""
    rng = np.random.default_rng(seed)
    pads = [min(pad, k - 1)] * (2 * nd)
    spatial = [k + int(rng.integers(0, 5)) for _ in range(nd)]
    s_in = 2.0**-5
    s_out = s_in * rs
    kern = AvgPool.build([k] * nd, s_in, s_out, 3, strides=[stride] * nd, pads=pads, count_include_pad=include,
                         spatial_shape=spatial, in_bits=in_bits, out_bits=out_bits, rounding=mode)
    x = int_data(rng, [2, 3] + spatial, in_bits, fill)
    y = exact(kern, x)
    sums, counts = window_sums_and_counts(x, [k] * nd, [stride] * nd, pads)
    ratio = s_in / (s_out * (k**nd if include or not any(pads) else counts))
    rq = kern.requant
    within(y, np.clip(sums * ratio, rq.lo, rq.hi), requant_tolerance(sums, ratio, mode), "AvgPool vs float")


@budget(30)
@given(seed=seeds, in_bits=bits_st, out_bits=bits_st, fill=fills, keepdims=st.booleans(),
       axes=st.sampled_from([(2, 3), (1,), (3,), (1, 2, 3)]), rs=st.floats(0.1, 10.0), mode=roundings)
def test_reduce_mean(seed, in_bits, out_bits, fill, keepdims, axes, rs, mode):
    rng = np.random.default_rng(seed)
    x = int_data(rng, (2, 5, 4, 7), in_bits, fill)
    count = int(np.prod([x.shape[a] for a in axes]))
    s_in = 2.0**-4
    kern = ReduceMean.build(axes, count, s_in, s_in * rs, keepdims, in_bits, out_bits, rounding=mode)
    y = exact(kern, x)
    sums = x.sum(axis=axes, keepdims=keepdims)
    ratio = 1.0 / (rs * count)
    rq = kern.requant
    within(y, np.clip(sums * ratio, rq.lo, rq.hi), requant_tolerance(sums, ratio, mode), "ReduceMean vs float")


@budget(30)
@given(seed=seeds, bits=bits_st, k=st.integers(1, 4), stride=st.integers(1, 3), pad=st.integers(0, 2),
       dil=st.integers(1, 2), ceil=st.booleans(), fill=fills)
def test_maxpool_padding_never_wins(seed, bits, k, stride, pad, dil, ceil, fill):
    """All-minimum inputs with padding: the max is the integer minimum, never a padding value."""
    rng = np.random.default_rng(seed)
    pads = [min(pad, k - 1)] * 4
    spatial = [dil * (k - 1) + 1 + int(rng.integers(0, 5)) for _ in range(2)]
    kern = MaxPool.build([k, k], [stride] * 2, pads, [dil] * 2, ceil)
    x = int_data(rng, [1, 2] + spatial, bits, fill)
    y = exact(kern, x)
    out = pool_output_shape(spatial, [k, k], [stride] * 2, pads, [dil] * 2, ceil)
    assert y.shape == (1, 2, *out)
    ref = np.empty(y.shape, np.int64)
    for oh, ow in np.ndindex(*out):
        hs = [oh * stride - pads[0] + dil * i for i in range(k)]
        ws = [ow * stride - pads[1] + dil * j for j in range(k)]
        hs = [h for h in hs if 0 <= h < spatial[0]]
        ws = [v for v in ws if 0 <= v < spatial[1]]
        ref[:, :, oh, ow] = x[:, :, hs][:, :, :, ws].max(axis=(2, 3))
    assert np.array_equal(y, ref)


# =============================================================================== scales far outside the range
def _random_ints(rng, shape, bits):
    return int_data(rng, shape, bits, str(rng.choice(["random", "extreme", "max", "min"])))


# kind -> (build(scales, bits, rng) -> (kernel, check(kernel, rng) -> None)); three scales each
def _requant_case(s, bits, rng):
    with np.errstate(all="ignore"):
        ratio = np.float64(s[0]) / np.float64(s[1])  # Requantize takes the ratio s_acc / s_out
    k = Requantize.build(ratio, bits, acc_bound=2**40)
    return k, lambda: check_requantize(k, acc_data(rng, (4, 8), 2**40, "random"), ratio, k.rounding)


def _add_case(s, bits, rng):
    k = Add.build(s[0], s[1], s[2], bits, bits, bits)
    return k, lambda: check_add(k, _random_ints(rng, (4, 8), bits), _random_ints(rng, (4, 8), bits), s[0], s[1], s[2], False, k.rounding)


def _mul_case(s, bits, rng):
    k = Mul.build(s[0], s[1], s[2], bits, bits, bits)
    return k, lambda: check_mul(k, _random_ints(rng, (4, 8), bits), _random_ints(rng, (4, 8), bits), s[0] * s[1] / s[2], k.requant.rounding)


def _lut_case(s, bits, rng):
    k = Lut.build("tanh", s[0], bits, s[1], bits)
    return k, lambda: check_lut(k, "tanh", _random_ints(rng, (4, 8), bits), s[0], s[1], k.rounding)


def _softmax_case(s, bits, rng):
    k = Softmax.build(s[0], bits, bits)
    return k, lambda: check_softmax(k, softmax_data(rng, (4, 9), bits, "random", "some"), s[0])


def _layernorm_case(s, bits, rng):
    gamma, beta = rng.normal(1, 0.3, 16), rng.normal(0, 0.3, 16)
    k = LayerNorm.build(s[0], gamma, beta, 1e-5, s[1], bits, bits)
    return k, lambda: check_layernorm(k, _random_ints(rng, (4, 16), bits), s[0], gamma, beta, 1e-5, s[1])


def _linear_case(s, bits, rng):
    w = rng.integers(-127, 128, (16, 4))
    k = Linear.build(w, None, s[0], s[1], s[2], bits, bits)
    return k, lambda: check_linear(k, _random_ints(rng, (3, 16), bits), s[0] * s[1] / s[2], k.requant.rounding)


def _matmul_case(s, bits, rng):
    k = MatMul.build(s[0], s[1], s[2], 8, bits, bits, bits)
    return k, lambda: check_matmul(k, _random_ints(rng, (2, 3, 8), bits), _random_ints(rng, (2, 8, 4), bits),
                                   s[0] * s[1] / s[2], k.requant.rounding)


def _conv_case(s, bits, rng):
    w = rng.integers(-127, 128, (4, 3, 3, 3))

    def run():
        x = _random_ints(rng, (1, 3, 5, 5), bits)
        y = exact(k, x)
        acc = conv_reference_acc(x, w, [1, 1], [1, 1, 1, 1], [1, 1], 1)
        ratio = s[0] * s[1] / s[2]
        within(y, np.clip(acc * ratio, k.requant.lo, k.requant.hi), requant_tolerance(acc, ratio, "half_up"), "Conv vs float")

    k = Conv.build(w, None, s[0], s[1], s[2], pads=[1, 1, 1, 1], in_bits=bits, out_bits=bits)
    return k, run


def _avgpool_case(s, bits, rng):
    k = AvgPool.build([2, 2], s[0], s[1], 3, strides=[2, 2], in_bits=bits, out_bits=bits)

    def run():
        x = _random_ints(rng, (1, 3, 4, 4), bits)
        sums, _ = window_sums_and_counts(x, [2, 2], [2, 2], [0] * 4)
        ratio = s[0] / (s[1] * 4)
        within(exact(k, x), np.clip(sums * ratio, k.requant.lo, k.requant.hi), requant_tolerance(sums, ratio, "half_up"),
               "AvgPool vs float")

    return k, run


def _reduce_mean_case(s, bits, rng):
    k = ReduceMean.build((2, 3), 12, s[0], s[1], True, bits, bits)

    def run():
        x = _random_ints(rng, (2, 3, 3, 4), bits)
        sums = x.sum(axis=(2, 3), keepdims=True)
        ratio = s[0] / (s[1] * 12)
        within(exact(k, x), np.clip(sums * ratio, k.requant.lo, k.requant.hi), requant_tolerance(sums, ratio, "half_up"),
               "ReduceMean vs float")

    return k, run


SCALE_CASES: dict[str, Callable] = {
    "requantize": _requant_case, "add": _add_case, "mul": _mul_case, "lut": _lut_case, "softmax": _softmax_case,
    "layernorm": _layernorm_case, "linear": _linear_case, "matmul": _matmul_case, "conv": _conv_case,
    "avgpool": _avgpool_case, "reduce_mean": _reduce_mean_case,
}


@pytest.mark.parametrize("kind", list(SCALE_CASES))
@budget(30)
@given(seed=seeds, s0=EXTREME_SCALES, s1=EXTREME_SCALES, s2=EXTREME_SCALES, bits=bits_st)
def test_scales_far_outside_the_range_work_or_are_refused_with_a_message(kind, seed, s0, s1, s2, bits):
    """Scales from 2**-90 to 2**90, zero (a tensor whose range is zero), negative, inf, NaN, subnormal: ``build``
    works and the kernel is exact and accurate, or it raises ValueError / RangeError saying why. Nothing else."""
    rng = np.random.default_rng(seed)
    try:
        kernel, check = SCALE_CASES[kind]((s0, s1, s2), bits, rng)
    except ValueError as e:  # RangeError is a ValueError
        assert str(e).strip(), f"{kind}: ValueError without a message"
        event("refused" if not _degenerate(kind, (s0, s1, s2)) else "refused (degenerate scale)")
        return
    event("built and checked")
    assert not _degenerate(kind, (s0, s1, s2)), f"{kind}: built with a degenerate scale in {(s0, s1, s2)}; must raise ValueError"
    check()


def _degenerate(kind: str, s) -> bool:
    """Scales a kernel must refuse: not finite or not > 0 (for Requantize: a ratio that is not finite and >= 0)."""
    if kind == "requantize":
        with np.errstate(all="ignore"):
            r = np.float64(s[0]) / np.float64(s[1])
        return not (math.isfinite(r) and r >= 0)
    used = 2 if kind in ("lut", "layernorm", "avgpool", "reduce_mean") else 1 if kind == "softmax" else 3
    return any(not (math.isfinite(v) and v > 0) for v in s[:used])
