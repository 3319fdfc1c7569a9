"""Faster forms of the integer kernels for ``simulate``, bit-identical to their numpy forms.

The numpy forms in :mod:`hbtool.kernels` define the arithmetic; the emulator must run
thousands of images, so its hot paths are replaced here by equivalent computations:

* **Products** (Linear, MatMul, Conv and ConvTranspose accumulators) run in onnxruntime (MLAS):
  Linear as a uint8 x int8 integer GEMM (int16 activations as two base-256 digits in one
  call) where a worst-case self-test shows this CPU's kernel exact
  (:func:`_cpu_integer_gemm_never_saturates`, :func:`_integer_gemm_is_exact`), else as uint8 x
  uint8 (weights offset by 128) where that kernel is exact (:func:`_cpu_unsigned_gemm_is_exact`);
  pointwise int8 convolutions as uint8 x uint8 integer GEMMs; everything else as float GEMMs or convolutions on operands holding small integers,
  exact because every partial sum is an integer the float type represents exactly, in any
  summation order: float32 while the worst-case partial sum is at most ``2**24``, otherwise
  float64 (``2**53``; Linear and MatMul). Convolution has only a float32 kernel in
  onnxruntime, so past ``2**24`` its operands are split into digits (int16 activations as
  ``256 * hi + lo``, int8 weights as ``16 * hi + lo``, the kernels' own ONNX forms use the
  same splits) and the parts recombined.
* **Depthwise convolutions on large planes** run product and requantization in one fused loop
  (:func:`depthwise_in_loop`): on a ``28 x 28`` plane or larger it beats the one-node session,
  whose layout reorders and separate requantizing pass cost more than the convolution.
* **Everything after the product** (bias, digit recombination, requantization) and the
  elementwise and row kernels (Add, Mul, LayerNorm, Softmax, table lookups) run as the
  single-pass integer loops of :mod:`.fused`, writing int16 tensors instead of int64.
* **Tables**: an elementwise kernel of one int8/int16 input (LUT activations) is evaluated
  once on all 256 / 65536 codes by its own numpy form; running it is one gather.

The fast forms trust their inputs to lie in the declared ranges (the producing kernel
guarantees it), unlike the numpy forms, which check. Every accelerated kernel is checked
against the kernel's numpy form in the tests; anything not covered here runs the kernel's
numpy form unchanged.
"""

from __future__ import annotations

import functools
import itertools
import math
from types import SimpleNamespace
from typing import Callable

import numpy as np

from hbtool.kernels.builder import ElemType
from hbtool.kernels.conv import pad_numpy, plan_float_conv, split_weight, windows_numpy
from hbtool.simulator import onnx_bytes
from hbtool.simulator.cores import CONV_SMALL_PRODUCT_MACS, PerCoreSession
from hbtool.kernels.fixedpoint import int_range
from hbtool.kernels.linear import F32_EXACT, F64_EXACT
try:  # numba is a dependency; without it (an unsupported platform) simulate runs the numpy forms
    from hbtool.simulator import depthwise, fused
except Exception:  # pragma: no cover - numba missing or broken (ImportError, OSError from llvmlite)
    depthwise = fused = None

_NO_CLAMP = np.int64(2**62)
_ONE = np.ones(1, np.int64)


def storage_dtype(lo: int, hi: int) -> np.dtype:
    """The dtype activations in ``[lo, hi]`` are stored in: int16 for every 8/16-bit range.

    One storage type (not int8 for 8-bit ranges) keeps each fused loop at one compiled
    signature; int8 would save little on tensors this size.
    """
    for dt in (np.int16, np.int32):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return np.dtype(dt)
    return np.dtype(np.int64)


def as_stored(x: np.ndarray) -> np.ndarray:
    """A C-contiguous int16 array of an 8/16-bit activation (producers outside this module write int64)."""
    return np.ascontiguousarray(x, dtype=np.int16)


def _marked(run: Callable, requant: "RequantParams | None" = None, reads: dict | None = None) -> Callable:
    """``run`` with the facts :func:`reader_dtype` and :func:`writes_through` read: the requantizer
    writing its result, and the dtype each input is converted to first (by input position)."""
    run.requant = requant
    run.reads = {k: np.dtype(d) for k, d in (reads or {}).items()}
    return run


def reader_dtype(fast: Callable | None, index: int) -> np.dtype | None:
    """The dtype ``fast`` converts its input ``index`` to before anything else, or None (it reads any)."""
    return getattr(fast, "reads", {}).get(index)


def writes_through(fast: Callable | None) -> "RequantParams | _TableWrite | None":
    """The requantizer (or table) whose loop writes ``fast``'s result (its ``out_dtype`` may be changed), or None."""
    return getattr(fast, "requant", None)


def narrowable(rq: "RequantParams", dtype: np.dtype) -> bool:
    """Whether ``rq``'s results, stored as int16, are held exactly by ``dtype`` (float32: any int16; int8: an 8-bit clamp)."""
    if rq.dtype != np.int16:
        return False
    if dtype == np.float32:
        return True
    return dtype == np.int8 and -128 <= int(rq.lo) and int(rq.hi) <= 127


# ------------------------------------------------------------------------------ requantize
class RequantParams:
    """A :class:`~hbtool.kernels.requantize.Requantize` as flat ``[C]`` int64 arrays for :mod:`.fused`."""

    def __init__(self, rq, channels: int = 1):
        def flat(v, default):
            arr = np.asarray(default if v is None else v, np.int64).reshape(-1)
            return np.ascontiguousarray(np.broadcast_to(arr, (channels,)) if arr.size == 1 else arr)

        self.M = flat(rq.M, 0)
        self.n = flat(rq.n, 0)
        self.clamp = flat(rq.clamp_acc, _NO_CLAMP)
        self.pre = flat(rq.pre_shift, 0)
        if not (self.M.size == self.n.size == self.clamp.size == self.pre.size == channels):
            raise ValueError("requantizer channels do not match the product's")
        self.lo, self.hi = np.int64(rq.lo), np.int64(rq.hi)
        self.mode = fused.MODE_CODES[rq.rounding]
        self.dtype = storage_dtype(int(rq.lo), int(rq.hi))
        # what the result is written as: the storage dtype, unless every reader converts it to one
        # dtype first (a float32 product, an int8 GEMM) and the executor has the loop write that
        # instead (see reader_dtype): one pass over the tensor fewer
        self.out_dtype = self.dtype
        self.channels = channels
        # the vectorising loops cover floor / half_up without accumulator clamp or pre-shift
        self.simple = rq.rounding in ("floor", "half_up") and rq.clamp_acc is None and rq.pre_shift is None
        up = rq.rounding == "half_up"
        self.half = np.where((self.n > 0) & up, np.left_shift(np.int64(1), np.maximum(self.n - 1, 0)), 0).astype(np.int64)
        self._folded: tuple = (None, None)
        self._scaled: dict[int, np.ndarray | None] = {}
        # the multipliers as int32 where every one fits (the loops multiply 32 x 32 -> 64 bits), else None
        self.M32 = self.scaled(1)

    def scaled(self, factor: int) -> np.ndarray | None:
        """``factor * M`` per channel as int32 (a digit part's multiplier in the two-part loops), or None
        where one does not fit int32 (then the generic loop runs)."""
        if factor not in self._scaled:
            values = [factor * int(m) for m in self.M]
            fits = all(-(2**31) <= v < 2**31 for v in values)
            self._scaled[factor] = np.ascontiguousarray(np.array(values, np.int64).astype(np.int32)) if fits else None
        return self._scaled[factor]

    def folded(self, bias: np.ndarray) -> np.ndarray:
        """``bias * M + half`` per channel, int64 (wrapping as the loops' int64 arithmetic does): the
        one-part loops' constant term, worked out once per bias array (a runner passes the same one)."""
        held, value = self._folded
        if held is not bias:
            with np.errstate(over="ignore"):
                value = np.ascontiguousarray(np.asarray(bias, np.int64) * self.M + self.half)
            self._folded = (bias, value)
        return value

    def apply(self, parts: tuple, factors, bias: np.ndarray, per_col: bool) -> np.ndarray:
        """Requantized ``bias + sum(factors * parts)`` over 2-D parts ``(R, Q)``; channels per column or per row."""
        out = np.empty(parts[0].shape, self.out_dtype)
        if self.simple and len(parts) == 1 and int(factors[0]) == 1 and self.M32 is not None:
            loop = fused.requantize_cols_one if per_col and self.channels > 1 else fused.requantize_rows_one
            loop(parts[0], self.folded(bias), self.M32, self.n, self.lo, self.hi, out)
            return out
        if self.simple and len(parts) <= 2 and parts[0].dtype == parts[-1].dtype:
            y1, f1 = (parts[1], int(factors[1])) if len(parts) == 2 else (parts[0], 0)
            A0, A1 = self.scaled(int(factors[0])), self.scaled(f1)
            if A0 is not None and A1 is not None:
                loop = fused.requantize_cols if per_col and self.channels > 1 else fused.requantize_rows
                loop(parts[0], y1, A0, A1, self.folded(bias), self.n, self.lo, self.hi, out)
                return out
        fused.requantize_parts(tuple(parts), np.asarray(factors, np.int64), bias, self.M, self.n, self.clamp, self.pre,
                               self.lo, self.hi, self.mode, per_col, out)
        return out


def split_rows(x: np.ndarray) -> np.ndarray:
    """Balanced base-256 digits of an int16 activation ``(..., Q)`` as float32 ``(2, ..., Q)``: hi, lo."""
    x = as_stored(x)
    out = np.empty((2,) + x.shape, np.float32)
    Q = x.shape[-1] if x.ndim else 1
    fused.split_digits(x.reshape(-1, Q), out.reshape(2, -1, Q))
    return out


def offset_u8(x: np.ndarray) -> np.ndarray:
    """An int8-range activation as uint8 ``x + 128`` (the zero point of the integer products).

    The cast to uint8 keeps ``x mod 256`` and flipping the top bit adds 128 modulo 256, which is
    ``x + 128`` for every ``x`` in ``[-128, 127]``: two vectorised numpy passes, measured 20x faster
    than the element loop it replaces (a flat index loop numba kept scalar).
    """
    out = np.asarray(x).astype(np.uint8, order="C")
    np.bitwise_xor(out, np.uint8(128), out=out)
    return out


# ------------------------------------------------------------------------------ tables
def tabulate_unary(kernel, in_bits: int) -> Callable[[np.ndarray], np.ndarray]:
    """One gather through the kernel's values on every input code."""
    return tabulate_chain([kernel.apply_numpy], in_bits)


def tabulate_chain(forms: list[Callable[[np.ndarray], np.ndarray]], in_bits: int,
                   writes: "_TableWrite | None" = None) -> Callable[[np.ndarray], np.ndarray] | None:
    """``forms[-1](... forms[0](x))`` as one gather, for elementwise functions of one ``in_bits``-bit integer
    (the numpy forms of a table lookup, or of a chain of steps each reading only the one before it:
    :mod:`.table_chains`), evaluated once on every input code; None where they do not give one value a code.

    The lookup writes in ``writes.out_dtype`` (the last step's own :class:`_TableWrite` where it is a table,
    so a dtype the executor chose for its readers holds; a new one for the values otherwise).
    """
    lo = -(1 << (in_bits - 1))
    values = np.arange(lo, -lo, dtype=np.int64)
    for form in forms:
        values = np.asarray(form(values), np.int64)
    values = values.reshape(-1)
    if values.size != -2 * lo:
        return None
    if not isinstance(writes, _TableWrite):
        writes = _TableWrite(int(values.min()), int(values.max()))
    tables = {writes.dtype: values.astype(writes.dtype)}
    offset = np.int64(-lo)

    def apply(x: np.ndarray) -> np.ndarray:
        x = as_stored(x)
        table = tables.get(writes.out_dtype)
        if table is None:  # the executor chose the readers' dtype: the same values in it
            table = tables[writes.out_dtype] = values.astype(writes.out_dtype)
        out = np.empty(x.shape, table.dtype)
        fused.lookup(x.reshape(-1), table, offset, out.reshape(-1))
        return out

    return _marked(apply, writes)


class _TableWrite:
    """The output side of a table lookup, as :func:`narrowable` and the executor see a requantizer's:
    the range of its values, their storage dtype, and the dtype the lookup writes."""

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi
        self.dtype = storage_dtype(lo, hi)
        self.out_dtype = self.dtype


# ------------------------------------------------------------------------------ products
def _session(model, threads: int | None = None, macs: Callable[[dict], int] | None = None, conv: bool = False) -> PerCoreSession:
    """A one-node (or few-node) product session for ``threads`` intra-op threads, with its one-thread twin
    for passes run on several threads at once and for calls of fewer multiply-adds (``macs(feeds)``) than
    :func:`.cores.small_product_macs` (:class:`.cores.PerCoreSession`; ``conv``: a convolution's product, whose
    threshold is :data:`.cores.CONV_SMALL_PRODUCT_MACS` by default)."""
    return PerCoreSession(functools.partial(_new_session, model), threads, macs, CONV_SMALL_PRODUCT_MACS if conv else None)


def _macs_per_x(per_element: float) -> Callable[[dict], int]:
    """A call's multiply-adds as ``per_element`` times the size of its input ``x`` (a product with a
    constant weight: every input element meets the same number of weights)."""
    return lambda feeds: int(feeds["x"].size * per_element)


def _conv_macs_per_element(w_shape: tuple, group: int, strides) -> float:
    """Multiply-adds per input element of a convolution by a weight ``(M, C/group, kh, ...)``: each output
    position takes ``C/group * kh * kw`` of them, and there are about ``M / strides`` outputs per input
    position (padding and the border ignored: the figure only routes the call, it computes nothing)."""
    return w_shape[0] * math.prod(w_shape[2:]) / (group * math.prod(int(s) for s in strides))


def _matmul_macs(feeds: dict) -> int:
    """Multiply-adds of a broadcast ``a @ b`` call: the broadcast batch times ``M * K * N`` (a 1-D
    operand as one row or column, as numpy's matmul reads it)."""
    a, b = feeds["a"].shape, feeds["b"].shape
    batch = math.prod(max(p, q) for p, q in itertools.zip_longest(a[-3::-1], b[-3::-1], fillvalue=1))
    return batch * (a[-2] if len(a) > 1 else 1) * a[-1] * (b[-1] if len(b) > 1 else 1)


def _new_session(model, threads: int | None = None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = int(threads)
    opts.log_severity_level = 3
    opts.inter_op_num_threads = 1
    # many small sessions take turns with the parallel numba loops: idle ORT threads must not
    # spin on the cores (measured: spinning makes Swin-T simulate 5x slower on 2 cores)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # no per-session memory arena: each of the 50+ one-node sessions would keep its own arena, so
    # a step's outputs and scratch (the NCHWc reorders) sit at addresses no other step touched since
    # the last sample and come from L3 or memory; from the process heap they take the blocks the
    # previous steps just freed, still in L2. Measured one thread, batch 1, CPU time, interleaved:
    # MobileNetV2 0.87x, the PP-OCRv5 recogniser 0.81x (docs/simulate.md); same bits (allocation only)
    opts.enable_cpu_mem_arena = False
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _integer_session(node, inits: dict, threads: int | None, macs_per_x: float | None = None):
    """A one-node onnxruntime session: uint8 input ``x``, int32 output ``y``; ``macs_per_x``: multiply-adds
    per input element (:func:`_macs_per_x`), None for the self-tests."""
    macs = _macs_per_x(macs_per_x) if macs_per_x is not None else None
    return _session(onnx_bytes.model([node], {"x": ElemType.UINT8}, {"y": ElemType.INT32}, inits), threads, macs,
                    conv=node.op_type == "ConvInteger")


def _weight_digit_session(op: str, w: np.ndarray, split_w: bool, split_x: bool, dt: np.dtype, attrs: dict,
                          threads: int | None, macs_per_x: float):
    """One session running ``op(x, W_k)`` for the weight or its base-16 digits (outputs ``y0``, ``y1``),
    and the factor of each part the runner recombines (activation digits hi, lo per output when ``split_x``).
    ``macs_per_x``: one product's multiply-adds per input element."""
    weights = list(zip([16, 1], split_weight(w))) if split_w else [(1, w)]
    ttype = onnx_bytes.elem_type(dt)
    nodes, inits, outs = [], {}, {}
    for k, (_, wp) in enumerate(weights):
        inits[f"w{k}"] = wp.astype(dt)
        nodes.append(onnx_bytes.node(op, ["x", f"w{k}"], [f"y{k}"], **attrs))
        outs[f"y{k}"] = ttype
    session = _session(onnx_bytes.model(nodes, {"x": ttype}, outs, inits), threads, _macs_per_x(macs_per_x * len(weights)),
                       conv=op in ("Conv", "ConvTranspose"))
    factors = [f * d for f, _ in weights for d in ((256, 1) if split_x else (1,))]
    return session, factors


def _bias(kernel, channels: int) -> np.ndarray:
    """The kernel's int64 bias as a flat ``[channels]`` array (zeros without one)."""
    if kernel.bias is None:
        return np.zeros(channels, np.int64)
    return np.ascontiguousarray(np.asarray(kernel.bias, np.int64).reshape(-1))


def _float_type(bound: int) -> np.dtype | None:
    """float32 when ``bound <= 2**24``, float64 when ``< 2**53``, else None (no exact float product)."""
    if bound <= F32_EXACT:
        return np.dtype(np.float32)
    if bound < F64_EXACT:
        return np.dtype(np.float64)
    return None


def _integer_gemm_is_exact(session, w: np.ndarray) -> bool:
    """Whether onnxruntime's uint8 x int8 GEMM is exact for this weight on this CPU.

    CPUs with VNNI/AMX accumulate each product in int32; older x86 kernels first add pairs of
    uint8 x int8 products in saturating int16, which overflows when two same-signed weights are
    large. The worst input for column ``j`` is uint8 255 under all its positive weights (0
    elsewhere), and likewise for its negative weights: every same-signed pair then reaches its
    largest sum, and saturation can only shrink it. One GEMM of those ``2N`` rows, compared with
    the exact sums, decides for every input.
    """
    K, N = w.shape
    pos = np.where(w.T > 0, 255, 0).astype(np.uint8)
    neg = np.where(w.T < 0, 255, 0).astype(np.uint8)
    test = np.concatenate([pos, neg])  # (2N, K)
    got = session.run(None, {"x": test})[0].astype(np.int64)
    cols = np.concatenate([np.arange(N), np.arange(N)])
    want = ((test.astype(np.int64) - 128) * np.concatenate([w.T, w.T])).sum(axis=1)
    return bool(np.array_equal(got[np.arange(2 * N), cols], want))


@functools.lru_cache(maxsize=None)
def _cpu_integer_gemm_never_saturates() -> bool:
    """Whether this CPU's uint8 x int8 GEMM is exact for every int8 weight (no saturating pair sums).

    The largest pair sums are 255 under weights all 127 and all -128: if those come out exact the
    kernel accumulates in int32 (VNNI/AMX) and every weight is exact; if not, each weight is
    tested on its own (:func:`_integer_gemm_is_exact`). One small GEMM per process, where testing a
    large weight (a recogniser's 18,000-class head: a 36,000 x 18,000 product) took a minute.
    """
    K = 64
    w = np.stack([np.full(K, 127), np.full(K, -128), np.where(np.arange(K) % 2, 127, -128)], axis=1).astype(np.int64)
    inits = {"w": w.astype(np.int8), "xz": np.array(128, np.uint8)}
    session = _integer_session(onnx_bytes.node("MatMulInteger", ["x", "w", "xz"], ["y"]), inits, 1)
    x = np.stack([np.full(K, 255), np.zeros(K), np.where(np.arange(K) % 2, 255, 0)]).astype(np.uint8)
    got = session.run(None, {"x": x})[0].astype(np.int64)
    return bool(np.array_equal(got, (x.astype(np.int64) - 128) @ w)) and _integer_gemm_is_exact(session, w)


@functools.lru_cache(maxsize=None)
def _cpu_unsigned_gemm_is_exact() -> bool:
    """Whether this CPU's uint8 x uint8 GEMM (``MatMulInteger`` with zero points 128 on both operands,
    the form :func:`_integer_linear` and :func:`_integer_matmul` build) is exact at its largest sums.

    Where uint8 x int8 saturates pair sums in int16 (x86 without VNNI: ``vpmaddubsw``), MLAS widens
    uint8 x uint8 operands to int16 and multiplies pairs into int32 (``vpmaddwd``), exact for any
    codes: measured on an AVX2 EPYC, one thread, a 396 x 192 x 768 product took 0.65x the float32
    GEMM's time (uint8 x int8 0.49x, not exact; int8 x int8 3.1x, a generic kernel). Believed, so
    tested once per process, as :func:`_cpu_integer_gemm_never_saturates` tests its kernel: operands
    at 0 and 255 only (products of -128 and 127 after the zero points), every same-signed pair at its
    largest (``2 * 128 * 128`` overflows int16, as do the raw ``255 * 255`` pairs) and mixed pairs.
    """
    K = 64
    alternate = np.where(np.arange(K) % 2, 255, 0)
    w = np.stack([np.full(K, 255), np.zeros(K), alternate, 255 - alternate], axis=1).astype(np.uint8)
    x = np.stack([np.full(K, 255), np.zeros(K), alternate, 255 - alternate]).astype(np.uint8)
    inits = {"w": w, "xz": np.array(128, np.uint8), "wz": np.array(128, np.uint8)}
    session = _integer_session(onnx_bytes.node("MatMulInteger", ["x", "w", "xz", "wz"], ["y"]), inits, 1)
    got = session.run(None, {"x": x})[0].astype(np.int64)
    return bool(np.array_equal(got, (x.astype(np.int64) - 128) @ (w.astype(np.int64) - 128)))


def _exact_integer_gemm(k: int) -> str | None:
    """Which of this CPU's ``MatMulInteger`` kernels sums ``k`` products of uint8 activations exactly in
    int32: ``"signed"`` (uint8 x int8) where it never saturates a pair of products (VNNI/AMX) and
    ``k * 255 * 128 < 2**31``; else ``"unsigned"`` (uint8 x uint8, the int8 operand offset by 128)
    where that kernel is exact (AVX2 without VNNI) and ``k * 255 * 255 < 2**31``; else None."""
    if _cpu_integer_gemm_never_saturates():
        return "signed" if k * 255 * 128 < 2**31 else None
    if _cpu_unsigned_gemm_is_exact() and k * 255 * 255 < 2**31:
        return "unsigned"
    return None


def _integer_linear(w: np.ndarray, threads: int | None):
    """A ``MatMulInteger`` session of uint8 activations with zero point 128 (``x + 128``), or None when
    the weight is not int8, the int32 sums could overflow, or no integer kernel of this CPU is exact.

    The weight goes in as int8 where this CPU's uint8 x int8 kernel never saturates (VNNI/AMX); else
    as uint8 ``w + 128`` with zero point 128 where the uint8 x uint8 kernel is exact
    (:func:`_cpu_unsigned_gemm_is_exact`: AVX2 without VNNI); else as int8 if a worst-case test of
    this very weight passes (:func:`_integer_gemm_is_exact`). The session's input is the same in all three.
    """
    K, N = w.shape
    if w.min(initial=0) < -128 or w.max(initial=0) > 127 or K * 255 * 128 >= 2**31:
        return None
    signed = {"w": w.astype(np.int8), "xz": np.array(128, np.uint8)}
    kind = _exact_integer_gemm(K)
    if kind == "signed":
        return _integer_session(onnx_bytes.node("MatMulInteger", ["x", "w", "xz"], ["y"]), signed, threads, N)
    if kind == "unsigned":
        unsigned = {"w": (w + 128).astype(np.uint8), "xz": np.array(128, np.uint8), "wz": np.array(128, np.uint8)}
        return _integer_session(onnx_bytes.node("MatMulInteger", ["x", "w", "xz", "wz"], ["y"]), unsigned, threads, N)
    if 2 * N * N * K > 2**30:
        return None  # too big to test alone: the exact float product runs instead
    session = _integer_session(onnx_bytes.node("MatMulInteger", ["x", "w", "xz"], ["y"]), signed, threads, N)
    return session if _integer_gemm_is_exact(session, w) else None


def linear_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray] | None:
    """``requantize(x @ W + b)`` of a Linear kernel: one exact GEMM and one fused pass.

    An integer GEMM where one of this CPU's kernels is exact (:func:`_integer_linear`: uint8 x
    int8, or uint8 x uint8 where that one saturates; int16 activations as two base-256 digits in
    one call). Otherwise float32 on the whole
    operands when the worst partial sum allows, else on base-256 digits of the activation
    (both digits in one GEMM of twice the rows) and, if needed, base-16 digits of the weight
    (:func:`plan_float_conv`); float64 when no split fits.
    """
    w = np.asarray(kernel.weight, np.int64)
    K, N = w.shape
    rq = RequantParams(kernel.requant, N)
    bias = _bias(kernel, N)
    integer = _integer_linear(w, threads)
    if integer is not None:
        if kernel.in_bits <= 8:
            def run_int8(x: np.ndarray) -> np.ndarray:
                y = integer.run(None, {"x": offset_u8(x.reshape(-1, K))})[0]
                return rq.apply((y,), _ONE, bias, True).reshape(x.shape[:-1] + (N,))

            return _marked(run_int8, rq)
        # x = 256 hi + lo: the GEMM sees hi and lo - 128, so 128 * colsum(W) goes back in with the bias
        bias_lo = bias + 128 * w.sum(axis=0)
        factors16 = [256, 1]

        def run_int16(x: np.ndarray) -> np.ndarray:
            x2 = as_stored(x).reshape(-1, K)
            digits = np.empty((2,) + x2.shape, np.uint8)
            fused.digits_u8(x2, digits)
            y = integer.run(None, {"x": digits.reshape(-1, K)})[0]
            rows = x2.shape[0]
            return rq.apply((y[:rows], y[rows:]), factors16, bias_lo, True).reshape(x.shape[:-1] + (N,))

        return _marked(run_int16, rq)
    try:
        sx, sw = plan_float_conv(w.T, kernel.in_bits)
        dt = np.dtype(np.float32)
    except ValueError:
        sx, sw = False, False
        dt = _float_type((1 << (kernel.in_bits - 1)) * int(np.abs(w).sum(axis=0).max(initial=0)))
        if dt is None:
            return None
    session, factors = _weight_digit_session("MatMul", w, sw, sx, dt, {}, threads, N)

    def run(x: np.ndarray) -> np.ndarray:
        shape = x.shape
        if sx:
            feed = split_rows(x.reshape(-1, K)).reshape(-1, K)
        else:
            feed = np.ascontiguousarray(x, dtype=dt).reshape(-1, K)
        ys = session.run(None, {"x": feed})
        rows = feed.shape[0] // 2 if sx else feed.shape[0]
        parts = [p for y in ys for p in ((y[:rows], y[rows:]) if sx else (y,))]
        return rq.apply(tuple(parts), factors, bias, True).reshape(shape[:-1] + (N,))

    return _marked(run, rq, {} if sx or dt != np.float32 else {0: np.float32})


def _pointwise_integer_conv(kernel, w: np.ndarray, attrs: dict, threads: int | None):
    """onnxruntime ConvInteger (uint8 x uint8, int32 accumulators) for a pointwise convolution of int8
    weights, or for a larger kernel on int8 activations whose float32 form needs a digit split; or None.

    For 1x1 kernels MLAS runs this as a plain integer GEMM, faster than the float convolution
    with its layout reorders. Operands are offset to uint8 (``q + 128`` with zero point 128):
    the uint8 x uint8 kernels widen to 16 bits before multiplying (no saturating pair sums,
    unlike uint8 x int8 on CPUs without VNNI), and ``K * 255 * 255 < 2**31`` keeps the int32
    sums exact. int16 activations go in as two base-256 digits stacked on the batch axis (see
    :func:`conv_fast`), which needs no padding: a padded position would read a digit's offset.
    int8 ones may be padded: onnxruntime pads with the zero point, which is the code 0.

    A 3 x 3 (or larger) kernel takes this route only where the float32 convolution would need its
    weight split into base-16 digits (two products: :func:`plan_float_conv`); one thread, whole steps,
    random int8 weights: 256 -> 256 at 14 x 14 1.93 ms against 2.94 ms, 512 -> 512 at 7 x 7 2.34 against
    3.64, but 64 -> 64 at 56 x 56 2.03 against 1.57 and 128 -> 128 at 28 x 28 1.93 against 1.49 where the
    float32 form is one product (im2col in uint8 does not beat the blocked float convolution there).
    """
    K = int(np.prod(w.shape[1:]))
    if kernel.in_bits not in (8, 16) or int(kernel.group) != 1 or K * 255 * 255 >= 2**31:
        return None
    if any(k != 1 for k in w.shape[2:]) and not (kernel.in_bits <= 8 and _float_conv_splits(w, kernel.in_bits)):
        return None
    if w.min(initial=0) < -128 or w.max(initial=0) > 127 or (kernel.in_bits == 16 and any(int(p) for p in kernel.pads)):
        return None
    inits = {"w": (w + 128).astype(np.uint8), "xz": np.array(128, np.uint8), "wz": np.array(128, np.uint8)}
    return _integer_session(onnx_bytes.node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs), inits, threads,
                            _conv_macs_per_element(w.shape, int(kernel.group), kernel.strides))


def _float_conv_splits(w: np.ndarray, in_bits: int) -> bool:
    """Whether the exact float32 form of a convolution by ``w`` splits an operand into digits (or has none)."""
    try:
        return any(plan_float_conv(w, in_bits))
    except ValueError:
        return True


# The fewest input channels a plain pointwise convolution runs as ``MatMulInteger`` from (fewer: ``ConvInteger``).
# 32 until 2026-12-07; 8 since sim9 measured the narrow expansions faster on MatMulInteger (see below).
POINTWISE_MATMUL_MIN_CHANNELS = 8


def _pointwise_integer_matmul(kernel, w: np.ndarray, threads: int | None):
    """onnxruntime MatMulInteger ``W (uint8, zero point 128) @ x (int8)`` for an unstrided, unpadded
    pointwise convolution with at least :data:`POINTWISE_MATMUL_MIN_CHANNELS` input channels, or None.

    NCHW is already the GEMM's layout (``(Cin, H*W)`` per sample), and uint8 x int8 is the form
    VNNI/AMX multiply natively: measured (one thread) 1.7-6x faster than ``ConvInteger``'s
    uint8 x uint8 on MobileNetV2 / PP-OCR layers of 96-480 input channels. The narrow expansions
    (16 -> 96, 24 -> 144 channels) measured 1.5-4x slower once and kept ``ConvInteger``; on this
    project's Zen 4 VM (2026-12-07, ``benchmarks.pointwise_probe``, whole steps, one thread) they take
    0.67-0.79x its time, and 8 -> 48 / 8 -> 16 at 56 x 56 0.65-0.85x (sim9, docs/simulate.md). Expansions of
    32 input channels or more take it too (whole step, one thread, 2026-12-06: 32 -> 192 at 28 x 28
    0.72x ``ConvInteger``'s time, 64 -> 384 0.63x, 96 -> 576 0.48x, 160 -> 960 at 7 x 7 0.33x; they
    were kept on ``ConvInteger`` by an output-width limit, ``cout <= 4 * cin``, until then). Only
    where this CPU's kernel never saturates a pair of products (:func:`_cpu_integer_gemm_never_saturates`).
    """
    cout, cin = w.shape[:2]
    if (any(k != 1 for k in w.shape[2:]) or int(kernel.group) != 1 or any(int(s) != 1 for s in kernel.strides)
            or any(int(p) for p in kernel.pads) or kernel.in_bits not in (8, 16) or cin < POINTWISE_MATMUL_MIN_CHANNELS):
        return None
    if w.min(initial=0) < -128 or w.max(initial=0) > 127 or not _cpu_integer_gemm_never_saturates():
        return None
    inits = {"w": (w.reshape(cout, cin) + 128).astype(np.uint8), "wz": np.array(128, np.uint8)}
    model = onnx_bytes.model([onnx_bytes.node("MatMulInteger", ["w", "x", "wz"], ["y"])], {"x": ElemType.INT8}, {"y": ElemType.INT32},
                             inits)
    return _session(model, threads, _macs_per_x(cout), conv=True)


# Convolutions with a kernel larger than 1 x 1 (or strided / padded pointwise ones) run as columns and a uint8 x int8
# MatMulInteger (:func:`_im2col_integer_matmul`). A switch only for ``benchmarks.simulate_profile --without im2col-gemm``.
IM2COL_GEMM = True
# The fewest input channels of a convolution that takes that route (see :func:`_im2col_integer_matmul`).
IM2COL_MIN_CHANNELS = 32


def _im2col_integer_matmul(kernel, w: np.ndarray, threads: int | None, in_shape: tuple | None = None):
    """onnxruntime MatMulInteger ``W (uint8, zero point 128) @ columns (int8)`` for a 2-D convolution of int8
    activations from at least :data:`IM2COL_MIN_CHANNELS` input channels whose pointwise form does not apply (a
    kernel larger than 1 x 1, or a strided or padded 1 x 1), or None.

    The columns (:func:`columns`: ``(C * KH * KW, OH * OW)`` per sample, the padding as the code 0) make
    the convolution one GEMM in the form VNNI/AMX multiply natively. Measured alone (one thread, random int8,
    2026-12-07, load 2): ResNet50's 3 x 3 layers 64 -> 64 at 56 x 56 to 512 -> 512 at 7 x 7 took 0.57-0.78 ms
    in the GEMM against 1.93-2.05 ms as the exact float32 convolution, the columns 0.16-0.17 ms in numpy; inside
    ResNet50 (two threads, best of 8) its 3 x 3 steps took 0.53-0.71x their time and the stem (7 x 7 from 3
    channels) 0.93x, but MobileNetV2's stem (3 x 3 from 3 channels, K = 27) 1.55x: a GEMM that short does not
    pay for the columns, so convolutions from fewer than 32 channels keep their route, except a 3 x 3 one at stride 2
    on an even plane of ``in_shape`` (one sample's, when known), whose columns a loop writes
    (:func:`_strided_3x3_columns`): MobileNetV2's stem then takes 0.29-0.31 ms against 0.40-0.48 ms as the float32
    convolution (one thread, inside the model; sim11, docs/simulate.md).
    Only where this CPU's kernel never saturates a pair of products (:func:`_cpu_integer_gemm_never_saturates`)
    and ``K * 255 * 128 < 2**31`` keeps the int32 sums exact."""
    if not IM2COL_GEMM or w.ndim != 4 or int(kernel.group) != 1 or kernel.in_bits > 8:
        return None
    cout, cin, kh, kw = w.shape
    plain_pointwise = kh == kw == 1 and all(int(s) == 1 for s in kernel.strides) and not any(int(p) for p in kernel.pads)
    if plain_pointwise or (cin < IM2COL_MIN_CHANNELS and not _strided_3x3_columns(kernel.weight.shape[2:], kernel.strides,
                                                                                  kernel.pads, kernel.dilations, in_shape)):
        return None
    K = cin * kh * kw
    if w.min(initial=0) < -128 or w.max(initial=0) > 127 or K * 255 * 128 >= 2**31 or not _cpu_integer_gemm_never_saturates():
        return None
    inits = {"w": (w.reshape(cout, K) + 128).astype(np.uint8), "wz": np.array(128, np.uint8)}
    model = onnx_bytes.model([onnx_bytes.node("MatMulInteger", ["w", "x", "wz"], ["y"])], {"x": ElemType.INT8}, {"y": ElemType.INT32},
                             inits)
    return _session(model, threads, _macs_per_x(cout), conv=True)


def _strided_3x3_columns(kernel_shape, strides, pads, dilations, in_shape: tuple | None) -> bool:
    """Whether :func:`columns` of a convolution of this geometry on inputs of ``in_shape`` (one sample, NCHW; None:
    unknown) are written by ``fused.columns_3x3_s2``: 3 x 3 at stride 2, no dilation, on a plane of even height and
    width padded by one zero on every side or, as TensorFlow's "same" padding has it, only below and to the right."""
    if fused is None or in_shape is None or len(in_shape) != 4 or not all(isinstance(d, (int, np.integer)) for d in in_shape[2:]):
        return False
    pads = [int(p) for p in pads]
    return (tuple(int(k) for k in kernel_shape) == (3, 3) and [int(s) for s in strides] == [2, 2]
            and all(int(d) == 1 for d in dilations) and pads in ([0, 0, 1, 1], [1, 1, 1, 1])
            and int(in_shape[2]) % 2 == 0 and int(in_shape[3]) % 2 == 0 and int(in_shape[2]) > 0 and int(in_shape[3]) > 0)


def columns(x: np.ndarray, kernel_shape: tuple, strides: tuple, pads: tuple, dilations: tuple) -> np.ndarray:
    """The int8 columns ``(N, C * KH * KW, OH * OW)`` of a 2-D convolution's GEMM form on codes ``x (N, C, H, W)``:
    row ``(c * KH + i) * KW + j`` holds ``x[c, oh * sh - ph + i * dh, ow * sw - pw + j * dw]`` at column
    ``oh * OW + ow``, the code 0 (the padding's) outside the plane. A 3 x 3 convolution at stride 2 on an even plane
    (:func:`_strided_3x3_columns`) has its columns written by a loop (``fused.columns_3x3_s2``).

    One strided copy of the kernels' own window view (:func:`~hbtool.kernels.conv.windows_numpy`) of the
    zero-padded plane: numpy copies the contiguous runs of a row (at stride 1) as
    blocks; numba loops written per row or per element measured 5-14x slower on ResNet50's 64 x 56 x 56
    (0.9-2.4 ms against 0.17 ms, one thread), their short rows neither vectorised nor amortised."""
    kh, kw = kernel_shape
    if _strided_3x3_columns(kernel_shape, strides, pads, dilations, x.shape):
        n, c, H, W = x.shape
        out = np.empty((n, c * 9, (H // 2) * (W // 2)), np.int8)
        fused.columns_3x3_s2(np.ascontiguousarray(x, np.int8).reshape(n * c, H, W), int(pads[0]), out.reshape(n * c, 9, -1))
        return out
    windows = windows_numpy(pad_numpy(np.asarray(x, np.int8), pads), kernel_shape, strides, dilations)  # (N, C, OH, OW, KH, KW)
    n, c, oh, ow = windows.shape[:4]
    out = np.empty((n, c * kh * kw, oh * ow), np.int8)
    np.copyto(out.reshape(n, c, kh, kw, oh, ow), windows.transpose(0, 1, 4, 5, 2, 3))
    return out


def _im2col_gemm_runner(kernel, gemm, rq: "RequantParams", bias: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The runner of :func:`_im2col_integer_matmul`'s session: int8 codes to :func:`columns`, the GEMM, one
    requantizing pass."""
    cout = kernel.weight.shape[0]
    geometry = (tuple(kernel.weight.shape[2:]), tuple(int(s) for s in kernel.strides), tuple(int(p) for p in kernel.pads),
                tuple(int(d) for d in kernel.dilations))

    def run(x: np.ndarray) -> np.ndarray:
        cols = columns(np.ascontiguousarray(x, dtype=np.int8), *geometry)  # int8-range codes: the cast keeps them
        y = gemm.run(None, {"x": cols})[0]
        n = x.shape[0]
        out_plane = _out_plane(x.shape[2:], *geometry)
        return rq.apply((y.reshape(n * cout, -1),), _ONE, bias, False).reshape((n, cout) + out_plane)

    return _marked(run, rq, {0: np.int8})


def _out_plane(hw: tuple, kernel_shape: tuple, strides: tuple, pads: tuple, dilations: tuple) -> tuple[int, int]:
    """``(OH, OW)`` of a 2-D convolution on an ``(H, W)`` plane."""
    (H, W), (kh, kw), (sh, sw), (ph, pw, ph_end, pw_end), (dh, dw) = hw, kernel_shape, strides, pads, dilations
    return (H + ph + ph_end - dh * (kh - 1) - 1) // sh + 1, (W + pw + pw_end - dw * (kw - 1) - 1) // sw + 1


def conv_fast(kernel, threads: int | None = None, in_shape: tuple | None = None) -> Callable[[np.ndarray], np.ndarray] | None:
    """``requantize(conv(x, W) + b)`` of a Conv kernel: an exact product in onnxruntime, one fused pass.

    A weight per channel (a 1 x 1 depthwise convolution) is a product and the requantizing pass
    (:func:`channel_scale`); MobileNet's 3 x 3 depthwise layers one loop on any plane
    (:func:`.depthwise.takes_3x3_loop`); other depthwise convolutions on large enough planes (``in_shape``: one sample's
    input shape, when known) run as one fused loop (:func:`depthwise_in_loop`); pointwise convolutions of
    int8 weights as integer GEMMs (:func:`_pointwise_integer_matmul`, else :func:`_pointwise_integer_conv`;
    int16 activations as two base-256 digits in one call, as in :func:`linear_fast`); int8 convolutions
    from enough channels as int8 columns and one integer GEMM (:func:`_im2col_integer_matmul`), and int8
    3 x 3 ones whose float32 form would need a digit split as ``ConvInteger``; the others as float32
    convolutions of the operands or of their digit parts.
    """
    w = np.asarray(kernel.weight, np.int64)
    attrs = dict(kernel_shape=list(w.shape[2:]), strides=list(kernel.strides), pads=list(kernel.pads),
                 dilations=list(kernel.dilations), group=int(kernel.group))
    C = w.shape[0]
    rq = RequantParams(kernel.requant, C)
    bias = _bias(kernel, C)
    if channel_scale(kernel):
        return _channel_scale_runner(kernel, rq, bias)
    if depthwise.takes_3x3_loop(kernel, in_shape):
        return _marked(depthwise.run_3x3(kernel, rq, bias, DEPTHWISE_FLOAT64_REQUANT), rq,
                       {0: np.int8} if kernel.in_bits <= 8 else {})
    if depthwise_in_loop(kernel, in_shape):
        return _depthwise_runner(kernel, rq, bias)
    gemm = _pointwise_integer_matmul(kernel, w, threads)
    if gemm is not None:
        return _pointwise_gemm_runner(gemm, kernel.in_bits, w, rq, bias)
    im2col_gemm = _im2col_integer_matmul(kernel, w, threads, in_shape)
    if im2col_gemm is not None:
        return _im2col_gemm_runner(kernel, im2col_gemm, rq, bias)
    integer = _pointwise_integer_conv(kernel, w, attrs, threads)
    if integer is not None and kernel.in_bits <= 8:
        def run_integer(x: np.ndarray) -> np.ndarray:
            y = integer.run(None, {"x": offset_u8(x)})[0]
            return rq.apply((y.reshape(y.shape[0] * C, -1),), _ONE, bias, False).reshape(y.shape)

        return _marked(run_integer, rq)
    if integer is not None:
        # x = 256 hi + lo: the GEMM sees hi and lo - 128, so 128 * sum(W[c]) goes back in with the bias
        bias_lo = bias + 128 * w.reshape(C, -1).sum(axis=1)

        def run_integer16(x: np.ndarray) -> np.ndarray:
            x = as_stored(x)
            n = x.shape[0]
            digits = _base256_digits(x)
            y = integer.run(None, {"x": digits.reshape((2 * n,) + x.shape[1:])})[0]
            return _requantize_digit_halves(rq, y, n, C, bias_lo).reshape((n,) + y.shape[1:])

        return _marked(run_integer16, rq)
    try:
        sx, sw = plan_float_conv(w, kernel.in_bits)
    except ValueError:
        return None
    session, factors = _weight_digit_session("Conv", w, sw, sx, np.dtype(np.float32), attrs, threads,
                                             _conv_macs_per_element(w.shape, int(kernel.group), kernel.strides))
    return _float_conv_runner(session, factors, sx, C, rq, bias)


# The smallest output plane (OH * OW) a depthwise layer runs in the fused loop at: measured in
# MobileNetV2 at batch 1, one thread, best of 30 interleaved runs (docs/simulate.md), the loop took
# 0.49-0.92x the session route's time on planes of 28 x 28 and larger, 1.2-3.4x on 14 x 14 and 7 x 7,
# where its per-plane work is too short to vectorise and onnxruntime's channel-blocked kernel wins.
DEPTHWISE_LOOP_MIN_PLANE = 28 * 28
# The same on a CPU whose uint8 x int8 GEMM saturates (x86 without VNNI; measured on an AVX2 EPYC, where
# onnxruntime's blocked layout holds 8 channels, not 16, and after the loop's float64 requantization):
# 0.72-0.75x the session's time on MobileNetV2's 14 x 14 output planes, 1.08-1.25x on its 7 x 7 ones
# (best of 30, load 4, docs/simulate.md). The saturation self-test stands in for the vector width: the
# two machines measured differ in both.
DEPTHWISE_LOOP_MIN_PLANE_WITHOUT_VNNI = 14 * 14


def depthwise_loop_min_plane() -> int:
    """:data:`DEPTHWISE_LOOP_MIN_PLANE`, or :data:`DEPTHWISE_LOOP_MIN_PLANE_WITHOUT_VNNI` on CPUs whose
    uint8 x int8 GEMM saturates (:func:`_cpu_integer_gemm_never_saturates`)."""
    return DEPTHWISE_LOOP_MIN_PLANE if _cpu_integer_gemm_never_saturates() else DEPTHWISE_LOOP_MIN_PLANE_WITHOUT_VNNI


def depthwise_in_loop(kernel, in_shape: tuple | None = None) -> bool:
    """Whether a Conv on inputs of ``in_shape`` (one sample, NCHW) runs as :func:`fused.depthwise_rows`
    (one pass from codes to requantized codes) rather than a one-node onnxruntime session and a
    requantizing pass. Unknown shape: the session (the loop loses on small planes).

    Depthwise 2-D convolutions (one input channel per group) whose sums are exact in float64
    (``2**(in_bits-1) * sum|w| < 2**53``; float32 while ``<= 2**24``) with an output plane of at
    least :func:`depthwise_loop_min_plane`. A one-node session reorders NCHW to onnxruntime's
    blocked layout and back on every call, its float accumulators take a second pass to
    requantize, and its input is handed over as float32 (four bytes a code, the loop reads int8).
    """
    w = kernel.weight
    if not (w.ndim == 4 and w.shape[1] == 1 and int(kernel.group) > 1 and w.shape[0] % int(kernel.group) == 0
            and kernel.in_bits <= 16 and (1 << (kernel.in_bits - 1)) * int(kernel.wsum) < F64_EXACT):
        return False
    if in_shape is None or len(in_shape) != 4 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in in_shape[2:]):
        return False
    return _depthwise_plane(kernel, int(in_shape[2]), int(in_shape[3])) >= depthwise_loop_min_plane()


def _depthwise_plane(kernel, H: int, W: int) -> int:
    """The output plane's size OH * OW of a 2-D convolution on an ``H x W`` input."""
    oh, ow = _out_plane((H, W), kernel.weight.shape[2:], kernel.strides, kernel.pads, kernel.dilations)
    return max(oh, 0) * max(ow, 0)


# The depthwise loops requantize in float64 where that is exact (fused.REQUANT_FLOAT64), except on CPUs with AVX-512
# where the int64 form is faster (depthwise.requant_form). A switch only for
# ``benchmarks.simulate_profile --without depthwise-float64-requant``.
DEPTHWISE_FLOAT64_REQUANT = True


# A 1 x 1 depthwise convolution (one weight per channel) as a product per channel and the requantizing pass
# (:func:`channel_scale`). A switch only for measuring it against the depthwise loop.
CHANNEL_SCALE = True


def channel_scale(kernel) -> bool:
    """Whether a Conv is one integer weight per channel: a 1 x 1 depthwise convolution of one output channel per
    group, unstrided and unpadded, of int8 / int16 codes (the preprocessing's normalisation folded into one,
    ``HzPreprocess``, in front of every image model). Then ``x * w[c]`` is one int32 product per element
    (``|x * w| <= 2**15 * 2**7``) and the requantizing pass does the rest, where the depthwise loop copied each
    plane into a padded scratch and summed in floats: MobileNetV2's 3 x 224 x 224 int16 input 78 -> 52 us
    (one thread, hot, best of 100; the same codes)."""
    w = kernel.weight
    return (CHANNEL_SCALE and w.ndim == 4 and tuple(w.shape[1:]) == (1, 1, 1) and int(kernel.group) == w.shape[0]
            and all(int(s) == 1 for s in kernel.strides) and not any(int(p) for p in kernel.pads)
            and kernel.in_bits <= 16 and int(np.abs(np.asarray(w)).max(initial=0)) <= 128)


def _channel_scale_runner(kernel, rq: "RequantParams", bias: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The runner of :func:`channel_scale`'s route: ``x * w[c]`` in int32, then one requantizing pass."""
    C = kernel.weight.shape[0]
    w = np.asarray(kernel.weight, np.int32).reshape(C, 1)

    def run(x: np.ndarray) -> np.ndarray:
        x = as_stored(x)
        n = x.shape[0]
        y = np.multiply(x.reshape(n, C, -1), w, dtype=np.int32)
        return rq.apply((y.reshape(n * C, -1),), _ONE, bias, False).reshape(x.shape)

    return _marked(run, rq)


def _depthwise_runner(kernel, rq: "RequantParams", bias: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The runner of :func:`depthwise_in_loop`'s route: int8/int16 codes in, requantized codes out."""
    bound = (1 << (kernel.in_bits - 1)) * int(kernel.wsum)
    w = np.ascontiguousarray(np.asarray(kernel.weight)[:, 0], np.float32 if bound <= F32_EXACT else np.float64)
    cout, kh, kw = w.shape
    cin = int(kernel.group)
    sh, sw = kernel.strides
    ph, pw, ph_end, pw_end = kernel.pads
    dh, dw = kernel.dilations
    geometry = np.array([sh, sw, ph, pw, dh, dw, ph_end, pw_end], np.int64)
    form = depthwise.requant_form(rq, bias, bound, DEPTHWISE_FLOAT64_REQUANT)

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype not in (np.int8, np.int16) or not x.flags.c_contiguous:
            x = as_stored(x)
        n, _, H, W = x.shape
        oh, ow = _out_plane((H, W), (kh, kw), (sh, sw), kernel.pads, (dh, dw))
        out = np.empty((n * cout, oh, ow), rq.out_dtype)
        fused.depthwise_rows(x.reshape(n * cin, H, W), w, bias, rq.M, rq.n, rq.half, rq.clamp, rq.pre, rq.lo, rq.hi,
                             rq.mode, form, geometry, out)
        return out.reshape(n, cout, oh, ow)

    run.depthwise_loop = True
    return _marked(run, rq, {0: np.int8} if kernel.in_bits <= 8 else {})


def _base256_digits(x: np.ndarray) -> np.ndarray:
    """int16 codes as two uint8 planes stacked on a new first axis, ``(x >> 8) + 128`` and ``x & 255``
    (``fused.digits_u8``): the base-256 digits both int16 GEMM routes feed onnxruntime."""
    digits = np.empty((2,) + x.shape, np.uint8)
    fused.digits_u8(x.reshape(-1, x.shape[-1]), digits.reshape(2, -1, x.shape[-1]))
    return digits


def _requantize_digit_halves(rq: "RequantParams", y: np.ndarray, n: int, C: int, bias_lo: np.ndarray) -> np.ndarray:
    """One requantizing pass over an int16 GEMM's two digit products, stacked on the batch axis as
    :func:`_base256_digits` fed them (``y[:n]`` the high digit's, weight 256; ``y[n:]`` the low one's)."""
    rows = n * C
    return rq.apply((y[:n].reshape(rows, -1), y[n:].reshape(rows, -1)), [256, 1], bias_lo, False)


def _pointwise_gemm_runner(gemm, in_bits: int, w: np.ndarray, rq: "RequantParams", bias: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The runner of :func:`_pointwise_integer_matmul`'s session: int8 codes as they are, int16 ones as
    two base-256 digits stacked on the batch axis (the low digit read as ``lo - 128``, as in
    :func:`linear_fast`), then one requantizing pass."""
    C = w.shape[0]
    if in_bits <= 8:
        def run8(x: np.ndarray) -> np.ndarray:
            n = x.shape[0]
            codes = np.ascontiguousarray(x, dtype=np.int8).reshape(n, x.shape[1], -1)  # int8-range codes: the cast keeps them
            y = gemm.run(None, {"x": codes})[0]
            return rq.apply((y.reshape(n * C, -1),), _ONE, bias, False).reshape((n, C) + x.shape[2:])

        return _marked(run8, rq, {0: np.int8})
    bias_lo = bias + 128 * w.reshape(C, -1).sum(axis=1)

    def run16(x: np.ndarray) -> np.ndarray:
        x = as_stored(x)
        n = x.shape[0]
        digits = np.empty((2,) + x.shape, np.int8)
        fused.digits_i8(x, digits)  # hi, and lo - 128
        y = gemm.run(None, {"x": digits.reshape(2 * n, x.shape[1], -1)})[0]
        return _requantize_digit_halves(rq, y, n, C, bias_lo).reshape((n, C) + x.shape[2:])

    return _marked(run16, rq)


def conv_transpose_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray] | None:
    """``requantize(conv_transpose(x, W) + b)``: onnxruntime's float32 ConvTranspose on the digit parts
    the kernel's ONNX form uses (split chosen from the equivalent Conv weight), then one fused pass."""
    from hbtool.kernels.conv_transpose import equivalent_conv_weight

    w = np.asarray(kernel.weight, np.int64)
    C = int(kernel.out_channels)
    try:
        sx, sw = plan_float_conv(equivalent_conv_weight(w, int(kernel.group)), kernel.in_bits)
    except ValueError:
        return None
    # each input element meets C/group output channels times the kernel's positions (weight (Cin, C/group, kh, kw))
    session, factors = _weight_digit_session("ConvTranspose", w, sw, sx, np.dtype(np.float32), kernel.onnx_attrs, threads,
                                             math.prod(w.shape[1:]))
    return _float_conv_runner(session, factors, sx, C, RequantParams(kernel.requant, C), _bias(kernel, C))


def _float_conv_runner(session, factors, sx: bool, C: int, rq: "RequantParams", bias: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The runner of a float convolution session over the digit parts: products, then one requantizing pass."""

    def run(x: np.ndarray) -> np.ndarray:
        n = x.shape[0]
        if sx:
            feed = split_rows(x).reshape((2 * n,) + x.shape[1:])
        else:
            feed = np.ascontiguousarray(x, dtype=np.float32)
        ys = session.run(None, {"x": feed})
        out_shape = (n,) + ys[0].shape[1:]
        rows = n * C
        parts = []
        for y in ys:
            if sx:
                parts += [y[:n].reshape(rows, -1), y[n:].reshape(rows, -1)]
            else:
                parts.append(y.reshape(rows, -1))
        return rq.apply(tuple(parts), factors, bias, False).reshape(out_shape)

    return _marked(run, rq, {} if sx else {0: np.float32})


def _integer_matmul(kernel, threads: int | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``requantize(a @ b)`` of an int16 ``a`` and an int8-range ``b`` as two onnxruntime
    ``MatMulInteger`` products (batched), or None.

    ``a``'s base-256 digits (``fused.digits_u8``: ``hi + 128`` with zero point 128, ``lo = a & 255``
    with zero point 0) are multiplied by ``b`` in two calls and recombined ``256 * hi + lo`` in the
    requantizing pass. ``b`` goes in as int8 where this CPU's uint8 x int8 kernel never saturates a
    pair of products (:func:`_cpu_integer_gemm_never_saturates`, ``k * 255 * 128 < 2**31``), else as
    uint8 ``b + 128`` with zero point 128 where the uint8 x uint8 kernel is exact
    (:func:`_cpu_unsigned_gemm_is_exact`, ``k * 255 * 255 < 2**31``). The float route
    needs two float32 digit products for these (attention's probabilities @ V). Measured, whole
    step, one thread: DeiT-Tiny's 3 x 198 x 198 @ 198 x 64 0.33x the float route's time alone and
    0.56-0.65x inside the model, Swin-T's windows 0.68-0.99x inside the model. An int8 ``a`` (Q @ K^T)
    keeps the float32 GEMM: the integer product was 0.62x alone but 1.02-1.2x inside both models
    (docs/simulate.md).
    """
    k = int(kernel.k)
    if kernel.b_bits > 8 or kernel.a_bits != 16:
        return None
    kind = _exact_integer_gemm(k)
    if kind is None:
        return None
    unsigned_b = kind == "unsigned"

    def session(zero_point: int):
        inits = {"az": np.array(zero_point, np.uint8)}
        if unsigned_b:
            inits["bz"] = np.array(128, np.uint8)
        model = onnx_bytes.model([onnx_bytes.node("MatMulInteger", ["a", "b"] + list(inits), ["y"])],
                                 {"a": ElemType.UINT8, "b": ElemType.UINT8 if unsigned_b else ElemType.INT8},
                                 {"y": ElemType.INT32}, inits)
        return _session(model, threads, _matmul_macs)

    rq = RequantParams(kernel.requant, 1)
    zero = np.zeros(1, np.int64)
    high, low = session(128), session(0)
    factors = [256, 1]

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        nd = max(a.ndim, b.ndim)
        a = as_stored(a.reshape((1,) * (nd - a.ndim) + a.shape))
        b = b.reshape((1,) * (nd - b.ndim) + b.shape)
        b_in = offset_u8(b) if unsigned_b else np.ascontiguousarray(b, dtype=np.int8)
        digits = np.empty((2,) + a.shape, np.uint8)
        if a.size:
            fused.digits_u8(a.reshape(-1, a.shape[-1]), digits.reshape(2, -1, a.shape[-1]))
        y_hi = high.run(None, {"a": digits[0], "b": b_in})[0]
        y_lo = low.run(None, {"a": digits[1], "b": b_in})[0]
        if y_hi.size == 0:
            return np.zeros(y_hi.shape, rq.out_dtype)
        n = y_hi.shape[-1]
        return rq.apply((y_hi.reshape(-1, n), y_lo.reshape(-1, n)), factors, zero, True).reshape(y_hi.shape)

    return _marked(run, rq, {1: np.int8})


# An int8 x int8 activation MatMul (attention's Q @ K^T) runs as one ``MatMulInteger`` where an exact
# integer kernel is chosen (:func:`_int8_matmul`). A switch only for
# ``benchmarks.simulate_profile --without int8-matmul-unsigned``.
INT8_MATMUL_UNSIGNED = True


def _int8_matmul(kernel, threads: int | None) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``requantize(a @ b)`` of two int8-range activations as one ``MatMulInteger`` of ``a + 128`` (zero point
    128) and ``b`` (:func:`_exact_integer_gemm`: int8 as it is where the uint8 x int8 kernel never
    saturates, else ``b + 128`` with zero point 128 where the uint8 x uint8 kernel is exact), or None.

    Measured against the float32 GEMM it replaces, inside the models (one thread, sums of the steps'
    bests, load 8): on an AVX2 EPYC without VNNI (uint8 x uint8) DeiT-Tiny's twelve Q @ K^T 5.19 ->
    3.62 ms, Swin-T's 8.05 -> 6.01 ms, the whole models 0.94-0.98x and 0.98-0.99x CPU time; on an
    AVX-512 VNNI EPYC (Zen 4; uint8 x int8) DeiT-Tiny's 2.83 -> 1.48 ms and Swin-T's 4.69 -> 2.97 ms
    (uint8 x uint8 there: 2.16 and 3.64 ms), the whole models 0.95x and 0.97x CPU time (interleaved
    medians). An earlier measurement on an Intel VNNI CPU read the uint8 x int8 product 1.02-1.2x the
    float32 GEMM inside both models (loaded, cause not found; docs/simulate.md); not measured again.
    """
    k = int(kernel.k)
    kind = _exact_integer_gemm(k) if kernel.a_bits <= 8 and kernel.b_bits <= 8 else None
    if kind is None:
        return None
    unsigned = kind == "unsigned"
    inits = {"az": np.array(128, np.uint8)}
    if unsigned:
        inits["bz"] = np.array(128, np.uint8)
    model = onnx_bytes.model([onnx_bytes.node("MatMulInteger", ["a", "b"] + list(inits), ["y"])],
                             {"a": ElemType.UINT8, "b": ElemType.UINT8 if unsigned else ElemType.INT8}, {"y": ElemType.INT32},
                             inits)
    session = _session(model, threads, _matmul_macs)
    rq = RequantParams(kernel.requant, 1)
    zero = np.zeros(1, np.int64)

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        nd = max(a.ndim, b.ndim)
        a_in = offset_u8(a.reshape((1,) * (nd - a.ndim) + a.shape))
        b = b.reshape((1,) * (nd - b.ndim) + b.shape)
        b_in = offset_u8(b) if unsigned else np.ascontiguousarray(b, dtype=np.int8)
        y = session.run(None, {"a": a_in, "b": b_in})[0]
        if y.size == 0:
            return np.zeros(y.shape, rq.out_dtype)
        return rq.apply((y.reshape(-1, y.shape[-1]),), _ONE, zero, True).reshape(y.shape)

    return _marked(run, rq, {0: np.int8, 1: np.int8})


def matmul_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``requantize(a @ b)`` of two activations: exact batched GEMMs and one fused pass.

    ``MatMulInteger`` for an int16 ``a`` and an int8 ``b`` where this CPU's kernel is exact
    (:func:`_integer_matmul`), and for two int8 operands where an integer kernel is exact
    (:func:`_int8_matmul`); otherwise float32 when ``k * |a|max * |b|max <= 2**24``, else with the int16 operand(s) split
    into base-256 digits stacked on a new leading axis (one broadcast MatMul computes every digit
    product); float64 when even that does not fit.
    """
    integer = _integer_matmul(kernel, threads)
    if integer is not None:
        return integer
    integer8 = _int8_matmul(kernel, threads) if INT8_MATMUL_UNSIGNED else None
    if integer8 is not None:
        return integer8
    k = int(kernel.k)
    amax, bmax = 1 << (kernel.a_bits - 1), 1 << (kernel.b_bits - 1)
    plan = None
    for sa, sb in ((False, False), (True, False), (False, True), (True, True)):
        if (sa and kernel.a_bits <= 8) or (sb and kernel.b_bits <= 8):
            continue
        if k * (128 if sa else amax) * (128 if sb else bmax) <= F32_EXACT:
            plan, dt = (sa, sb), np.dtype(np.float32)
            break
    if plan is None:
        dt = _float_type(k * amax * bmax)
        if dt is None:
            return None
        plan = (False, False)
    sa, sb = plan
    ttype = onnx_bytes.elem_type(dt)
    model = onnx_bytes.model([onnx_bytes.node("MatMul", ["a", "b"], ["y"])], {"a": ttype, "b": ttype}, {"y": ttype})
    session = _session(model, threads, _matmul_macs)
    rq = RequantParams(kernel.requant, 1)
    zero = np.zeros(1, np.int64)
    fa = (256, 1) if sa else (1,)
    fb = (256, 1) if sb else (1,)
    factors = [x * y for x in fa for y in fb]

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        nd = max(a.ndim, b.ndim)
        a = a.reshape((1,) * (nd - a.ndim) + a.shape)
        b = b.reshape((1,) * (nd - b.ndim) + b.shape)
        # digit axes: a's at 0, b's at 1, so the product holds every (a digit, b digit) pair
        a_in = split_rows(a)[:, None] if sa else np.ascontiguousarray(a, dtype=dt)[None, None]
        b_in = split_rows(b)[None] if sb else np.ascontiguousarray(b, dtype=dt)[None, None]
        y = session.run(None, {"a": a_in, "b": b_in})[0]
        shape = y.shape[2:]
        if y.size == 0:
            return np.zeros(shape, rq.out_dtype)
        parts = tuple(y[i, j].reshape(-1, shape[-1]) for i in range(len(fa)) for j in range(len(fb)))
        return rq.apply(parts, factors, zero, True).reshape(shape)

    reads = {} if dt != np.float32 else {k: np.float32 for k, split in enumerate((sa, sb)) if not split}
    return _marked(run, rq, reads)


def maxpool_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """:meth:`MaxPool.apply_numpy` as onnxruntime's float32 MaxPool (a max of small integers is exact)."""
    node = onnx_bytes.node("MaxPool", ["x"], ["y"], kernel_shape=list(kernel.kernel_shape), strides=list(kernel.strides),
                           pads=list(kernel.pads), dilations=list(kernel.dilations), ceil_mode=int(kernel.ceil_mode))
    session = _session(onnx_bytes.model([node], {"x": ElemType.FLOAT}, {"y": ElemType.FLOAT}), threads)

    def run(x: np.ndarray) -> np.ndarray:
        y = session.run(None, {"x": np.ascontiguousarray(x, dtype=np.float32)})[0]
        return y.astype(np.int16)

    return _marked(run, None, {0: np.float32})


def avgpool_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray] | None:
    """:meth:`AvgPool.apply_numpy` of a 2-D pool with one requantizer for the whole tensor (no border
    counts) as the depthwise loop (:func:`fused.depthwise_rows`) with a weight of ones: the window sums
    are exact in float32 (``2**15 * area <= 2**24``), zero padding as the kernel's, and the loop's
    requantization is the kernel's. Its numpy form (windows, an int64 sum, four requantizing passes)
    was 4 % of the PP-OCRv5 recogniser's batch-1 time for its one 3 x 80 pool."""
    rq = kernel.requant
    if len(kernel.kernel_shape) != 2 or any(v is not None and np.size(v) != 1 for v in (rq.M, rq.n, rq.clamp_acc, rq.pre_shift)):
        return None  # a requantizer per output position (border counts): the numpy form
    C = int(kernel.channels)
    kh, kw = kernel.kernel_shape
    as_depthwise = SimpleNamespace(weight=np.ones((C, 1, kh, kw), np.int64), in_bits=int(kernel.in_bits), wsum=kh * kw,
                                   strides=tuple(kernel.strides), pads=tuple(kernel.pads), dilations=(1, 1), group=C)
    if (1 << (as_depthwise.in_bits - 1)) * as_depthwise.wsum > F32_EXACT:
        return None
    params = RequantParams(rq, C)
    loop = _depthwise_runner(as_depthwise, params, np.zeros(C, np.int64))

    def run(x: np.ndarray) -> np.ndarray:
        if np.ndim(x) != 4 or np.shape(x)[1] != C:
            return kernel.apply_numpy(x).astype(params.out_dtype)
        return loop(x)

    return _marked(run, params, {0: np.int8} if kernel.in_bits <= 8 else {})


def reduce_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray] | None:
    """:meth:`ReduceMean.apply_numpy` (and ReduceSum's, the same form) over the trailing axes of a tensor by one
    requantizer (a global average pool): the row sums and their requantization in one loop
    (:func:`fused.row_sums_requant`); other axes, or a requantizer per channel, keep the numpy form."""
    rq = kernel.requant
    if any(v is not None and np.size(v) != 1 for v in (rq.M, rq.n, rq.clamp_acc, rq.pre_shift)):
        return None
    params = RequantParams(rq, 1)
    axes = tuple(int(a) for a in kernel.axes)

    def run(x: np.ndarray) -> np.ndarray:
        rank = np.ndim(x)
        reduced = sorted({a % rank for a in axes}) if rank else []
        first = rank - len(reduced)
        if not reduced or reduced != list(range(first, rank)) or len(reduced) != len(axes) or np.size(x) == 0:
            return kernel.apply_numpy(x).astype(params.out_dtype)  # other axes, or the numpy form's own error
        lead = np.shape(x)[:first]
        x2 = (np.ascontiguousarray(x) if x.dtype in (np.int8, np.int16) else as_stored(x)).reshape(math.prod(lead), -1)
        out = np.empty(x2.shape[0], params.out_dtype)
        fused.row_sums_requant(x2, params.M[0], params.n[0], params.clamp[0], params.pre[0], params.lo, params.hi,
                               np.int64(params.mode), out)
        return out.reshape(lead + ((1,) * len(reduced) if kernel.keepdims else ()))

    return _marked(run, params)


def quantize_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray] | None:
    """:meth:`Quantize.apply_numpy` by one float32 scale as one fused pass writing int16 (the numpy form
    makes four whole-array passes and an int64 result); per-channel scales keep the numpy form."""
    scale = np.asarray(kernel.scale)
    if scale.size != 1 or scale.dtype != np.float32 or int(kernel.bits) > 16:  # the loop clamps in float32
        return None
    s = np.float32(scale.reshape(()))
    qmin, qmax = int_range(int(kernel.bits))
    dtype = storage_dtype(qmin, qmax)

    def run(x: np.ndarray) -> np.ndarray:
        xf = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty(xf.shape, dtype)
        fused.quantize(xf.reshape(-1), s, np.int64(qmin), np.int64(qmax), out.reshape(-1))
        return out

    return run


def dequantize_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """:meth:`Dequantize.apply_numpy` without its int64 copy: an integer converts to the same float32
    from any integer type (IEEE conversion rounds the value, not the type), and the scale multiplies
    in place where it does not broadcast the codes to a bigger shape; int8 / int16 codes by one float32
    scale in one loop (:func:`fused.dequantize`: 0.26 -> 0.15 ms on the recogniser's 735,400 outputs)."""
    scale = kernel.scale
    one = np.asarray(scale).dtype == np.float32 and np.size(scale) == 1
    s = np.float32(np.asarray(scale).reshape(())) if one else None

    def run(q: np.ndarray) -> np.ndarray:
        q = np.asarray(q)
        if one and q.dtype in (np.int16, np.int8) and np.ndim(scale) <= q.ndim:  # one pass (fused.dequantize)
            q = q if q.flags.c_contiguous else q.copy()  # (np.ascontiguousarray makes a 0-d array 1-d)
            out = np.empty(q.shape, np.float32)
            fused.dequantize(q.reshape(-1), s, out.reshape(-1))
            return out
        if q.dtype.kind not in "iu":
            return kernel.apply_numpy(q)
        y = q.astype(np.float32)
        if np.result_type(y, scale) == np.float32 and np.broadcast_shapes(y.shape, np.shape(scale)) == y.shape:
            np.multiply(y, scale, out=y)
            return y
        return y * scale

    return run


# ------------------------------------------------------------------------------ elementwise
def _rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, tuple] | None:
    """2-D views ``(R, C)`` / ``(Rb, C)`` of two broadcasting operands with ``R % Rb == 0``.

    Returns ``(big, small, swapped, out_shape)``: ``small``'s rows repeat over ``big``'s; a
    pattern the row form cannot express is broadcast to full size first (one copy).
    """
    shape = np.broadcast_shapes(a.shape, b.shape)
    if len(shape) == 0 or 0 in shape:
        return None
    C = shape[-1]

    def as_rows(x):
        core = x.shape
        while core and core[0] == 1:
            core = core[1:]
        if tuple(shape[len(shape) - len(core):]) == tuple(core) and (core or C == 1):
            return as_stored(x).reshape(-1, C)
        return None

    swapped = False
    big, small = a, b
    if tuple(a.shape) != tuple(shape):
        if tuple(b.shape) == tuple(shape):
            big, small, swapped = b, a, True
        else:
            big = np.broadcast_to(a, shape)
    big2 = as_stored(big).reshape(-1, C)
    small2 = as_rows(small)
    if small2 is None:
        small2 = as_stored(np.broadcast_to(small, shape)).reshape(-1, C)
    return big2, small2, swapped, shape


def _row_scalars(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, tuple] | None:
    """``(big (R, Q), small (Rs,), swapped, out_shape)`` when one operand is constant along the trailing
    axes of the other (a channel scale ``(N, C, 1, 1)`` over ``(N, C, H, W)``, a scalar), else None;
    ``small`` repeats over ``big``'s rows (``R % Rs == 0``) where it lacks leading axes.

    Then the small operand is one value per row: no broadcast copy, one pass. The shape analysis
    is :func:`_row_scalar_plan`, computed once per pair of shapes.
    """
    plan = _row_scalar_plan(a.shape, b.shape)
    if plan is None:
        return None
    swapped, rows, shape = plan
    big, small = (b, a) if swapped else (a, b)
    return as_stored(big).reshape(rows, -1), as_stored(small).reshape(-1), swapped, shape


@functools.lru_cache(maxsize=4096)
def _row_scalar_plan(a_shape: tuple, b_shape: tuple) -> tuple[bool, int, tuple] | None:
    """:func:`_row_scalars`' reading of two operand shapes: ``(swapped, rows, out_shape)`` or None.

    The same few shape pairs come back on every call of a program; working them out each time
    (broadcast_shapes, a product, the loops below) was measured at 10 % of the recogniser's
    batch-1 time (its learnable-affine Mul/Add by a scalar run 120 times a sample).
    """
    try:
        shape = np.broadcast_shapes(a_shape, b_shape)
    except ValueError:
        return None
    if len(shape) == 0 or 0 in shape:
        return None
    if tuple(a_shape) == tuple(shape) and tuple(b_shape) != tuple(shape):
        small_shape, swapped = b_shape, False
    elif tuple(b_shape) == tuple(shape) and tuple(a_shape) != tuple(shape):
        small_shape, swapped = a_shape, True
    else:
        return None
    padded = (1,) * (len(shape) - len(small_shape)) + tuple(small_shape)
    k = len(shape)
    while k > 0 and padded[k - 1] == 1:
        k -= 1
    j = 0
    while j < k and padded[j] == 1:
        j += 1
    if k == len(shape) or tuple(padded[j:k]) != tuple(shape[j:k]):
        return None  # varies along the last axis, or a pattern other than leading repetition
    rows = 1
    for d in shape[:k]:
        rows *= int(d)
    return swapped, rows, tuple(shape)


def _per_channel(v, C: int) -> np.ndarray:
    arr = np.asarray(v, np.int64).reshape(-1)
    return np.ascontiguousarray(np.broadcast_to(arr, (C,)) if arr.size == 1 else arr)


# An Add / Mul of two operands of one shape with per-tensor parameters and floor / half_up rounding
# runs as one flat pass (fused.add_same_simple / mul_same_simple) rather than rows of the last axis
# (7-56 elements on a CNN's planes, no vectorising) with per-channel arrays and a row plan worked out
# per call: MobileNetV2's ten residual Adds (docs/simulate.md). A switch only for
# ``benchmarks.simulate_profile --without same-shape-flat``.
SAME_SHAPE_FLAT = True


def add_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """:meth:`Add.apply_numpy` as one fused pass (operands broadcast by rows)."""
    A = np.asarray(kernel.A, np.int64)
    B = kernel.sign * np.asarray(kernel.B, np.int64)
    n = np.asarray(kernel.n, np.int64)
    lo, hi = np.int64(kernel.lo), np.int64(kernel.hi)
    dtype = storage_dtype(kernel.lo, kernel.hi)
    mode = fused.MODE_CODES[kernel.rounding]

    scalar = A.size == 1 and B.size == 1 and n.size == 1
    # two operands of one shape, per-tensor parameters, floor / half_up (a residual connection):
    # one flat pass, everything but the operands worked out here once
    same = SAME_SHAPE_FLAT and scalar and kernel.rounding in ("floor", "half_up") and int(n.reshape(())) >= 0
    if same:
        n0 = int(n.reshape(()))
        same_args = (np.int64(A.reshape(())), np.int64(B.reshape(())), np.int64(n0),
                     np.int64(1 << (n0 - 1) if kernel.rounding == "half_up" and n0 > 0 else 0), lo, hi)

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        if same and a.shape == b.shape and a.size:
            out = np.empty(a.shape, dtype)
            fused.add_same_simple(as_stored(a).reshape(-1), as_stored(b).reshape(-1), *same_args, out.reshape(-1))
            return out
        by_row = _row_scalars(a, b) if scalar else None
        if by_row is not None:
            big, small, swapped, shape = by_row
            fa, fb = (B.reshape(()), A.reshape(())) if swapped else (A.reshape(()), B.reshape(()))
            out = np.empty(big.shape, dtype)
            nn = int(n.reshape(()))
            if kernel.rounding in ("floor", "half_up") and nn >= 0:
                half = np.int64(1 << (nn - 1) if kernel.rounding == "half_up" and nn > 0 else 0)
                fused.add_rowscalar_simple(big, small, np.int64(fa), np.int64(fb), np.int64(nn), half, lo, hi, out)
            else:
                fused.add_rowscalar(big, small, np.int64(fa), np.int64(fb), np.int64(nn), lo, hi, mode, out)
            return out.reshape(shape)
        plan = _rows(a, b)
        if plan is None:
            return kernel.apply_numpy(a, b)
        big, small, swapped, shape = plan
        C = shape[-1]
        if A.size > 1 and A.size != C:
            return kernel.apply_numpy(a, b)
        fa, fb = (_per_channel(B, C), _per_channel(A, C)) if swapped else (_per_channel(A, C), _per_channel(B, C))
        out = np.empty(big.shape, dtype)
        nc = _per_channel(n, C)
        if kernel.rounding in ("floor", "half_up") and nc.min(initial=0) >= 0:
            up = kernel.rounding == "half_up"
            half = np.where((nc > 0) & up, np.left_shift(np.int64(1), np.maximum(nc - 1, 0)), 0).astype(np.int64)
            fused.add_rows_simple(big, small, fa, fb, nc, half, lo, hi, out)
        else:
            fused.add_rows(big, small, fa, fb, nc, lo, hi, mode, out)
        return out.reshape(shape)

    return run


def mul_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """:meth:`Mul.apply_numpy` as one fused pass (scalar requantizer)."""
    rq = kernel.requant
    if np.size(rq.M) != 1:
        return None
    p = RequantParams(rq, 1)
    same = SAME_SHAPE_FLAT and p.simple and p.n[0] >= 0  # operands of one shape: one flat pass (see SAME_SHAPE_FLAT)

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        if same and a.shape == b.shape and a.size:
            out = np.empty(a.shape, p.dtype)
            fused.mul_same_simple(as_stored(a).reshape(-1), as_stored(b).reshape(-1), p.M[0], p.n[0], p.half[0], p.lo, p.hi,
                                  out.reshape(-1))
            return out
        by_row = _row_scalars(a, b)
        if by_row is not None:
            big, small, _, shape = by_row
            out = np.empty(big.shape, p.dtype)
            if p.simple and p.n[0] >= 0:
                fused.mul_rowscalar_simple(big, small, p.M[0], p.n[0], p.half[0], p.lo, p.hi, out)
            else:
                fused.mul_rowscalar(big, small, p.M[0], p.n[0], p.clamp[0], p.pre[0], p.lo, p.hi, p.mode, out)
            return out.reshape(shape)
        plan = _rows(a, b)
        if plan is None:
            return kernel.apply_numpy(a, b)
        big, small, _, shape = plan
        out = np.empty(big.shape, p.dtype)
        if p.simple and p.n[0] >= 0:
            fused.mul_rows_simple(big, small, p.M[0], p.n[0], p.half[0], p.lo, p.hi, out)
        else:
            fused.mul_rows(big, small, p.M[0], p.n[0], p.clamp[0], p.pre[0], p.lo, p.hi, p.mode, out)
        return out.reshape(shape)

    return run


# A Mul by a constant scalar whose one reader is an Add of a constant scalar (the PP-OCRv5
# recogniser's learnable affine blocks: 60 pairs a line) runs as one pass (Executor, see
# :func:`scalar_affine_stage`). A switch only for ``benchmarks.simulate_profile --without affine-pairs``.
AFFINE_PAIRS = True


# A chain of elementwise steps of one input holding a table (the recogniser's affine pair -> hard-swish ->
# affine pair) runs as one lookup (:mod:`.table_chains`, :func:`tabulate_chain`). A switch only for
# ``benchmarks.simulate_profile --without table-chains`` and the tests.
TABLE_CHAINS = True


def scalar_affine_stage(kernel, const: np.ndarray, const_index: int) -> tuple | None:
    """An elementwise Mul or Add with the one-element constant ``const`` as operand ``const_index``, as one
    stage of :func:`fused.scalar_affine_pair`: ``(f, g, u, c, h, n, lo, hi)`` with
    ``y = clamp((x * (f * g) + (u * c + h)) >> n, lo, hi)``, the very int64 expressions of the
    kernel's row-scalar loop (``mul_fast`` / ``add_fast``); None for any other form (per-channel
    parameters, a rounding other than floor / half_up, a result wider than int16)."""
    c = np.int64(as_stored(np.asarray(const)).reshape(-1)[0])  # the operand as the one-step loop reads it
    kind = type(kernel).__name__
    if kind == "Mul":
        if np.size(kernel.requant.M) != 1:
            return None
        p = RequantParams(kernel.requant, 1)
        if not (p.simple and p.n[0] >= 0):
            return None
        stage = (c, p.M[0], np.int64(0), np.int64(0), p.half[0], p.n[0], p.lo, p.hi)
    elif kind == "Add":
        A = np.asarray(kernel.A, np.int64)
        B = kernel.sign * np.asarray(kernel.B, np.int64)
        n = np.asarray(kernel.n, np.int64)
        if not (A.size == 1 and B.size == 1 and n.size == 1) or kernel.rounding not in ("floor", "half_up"):
            return None
        n0 = int(n.reshape(()))
        if n0 < 0:
            return None
        fx, fc = (B.reshape(()), A.reshape(())) if const_index == 0 else (A.reshape(()), B.reshape(()))
        half = 1 << (n0 - 1) if kernel.rounding == "half_up" and n0 > 0 else 0
        stage = (np.int64(fx), np.int64(1), np.int64(fc), c, np.int64(half), np.int64(n0), np.int64(kernel.lo),
                 np.int64(kernel.hi))
    else:
        return None
    if storage_dtype(int(stage[6]), int(stage[7])).itemsize > 2:
        return None
    return stage


def scalar_affine_pair(first: tuple, second: tuple) -> Callable[[np.ndarray], np.ndarray]:
    """Two :func:`scalar_affine_stage` stages on any tensor, one pass: the second step's result, in its dtype."""
    dtype = storage_dtype(int(second[6]), int(second[7]))

    def run(x: np.ndarray) -> np.ndarray:
        x = as_stored(x)
        out = np.empty(x.shape, dtype)
        fused.scalar_affine_pair(x.reshape(-1), first, second, out.reshape(-1))
        return out

    return run


def _rows_over(axes: tuple[int, ...], run_rows: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``run_rows`` (a function of the last axis) applied over the negative, consecutive ``axes`` instead.

    The kernel reduces over ``axes`` in place; the row loops want them last and contiguous, so
    they are moved there and back (the same integers: only the loop order differs).
    """
    if tuple(axes) == (-1,):
        return run_rows
    k = len(axes)

    def run(q: np.ndarray) -> np.ndarray:
        rank = q.ndim
        src = [rank + a for a in axes]
        moved = np.moveaxis(q, src, list(range(rank - k, rank)))
        y = run_rows(np.ascontiguousarray(moved).reshape(moved.shape[: rank - k] + (-1,)))
        return np.ascontiguousarray(np.moveaxis(y.reshape(moved.shape), list(range(rank - k, rank)), src))

    return run


def layernorm_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """:meth:`LayerNorm.apply_numpy` as a row loop (normalised axes moved last when they are not)."""
    if getattr(kernel, "eps_root", 0) or getattr(kernel, "norm_dims", ()):
        return None  # eps outside the root (step 4b) or gamma over other axes: not in the row loop, the numpy form runs
    N = int(kernel.n)
    axes = tuple(getattr(kernel, "axes", (-1,)))
    alpha = np.zeros(N, np.int64) if kernel.alpha is None else np.ascontiguousarray(np.asarray(kernel.alpha, np.int64))
    G = np.ascontiguousarray(np.asarray(kernel.G, np.int64).reshape(-1))
    B = np.ascontiguousarray(np.asarray(kernel.B, np.int64).reshape(-1))
    dtype = storage_dtype(kernel.lo, kernel.hi)
    args = (np.int64(kernel.f), np.int64(kernel.E), G, B, np.int64(kernel.shift), np.int64(kernel.lo),
            np.int64(kernel.hi), np.int64(kernel.d_shift), fused.MODE_CODES[kernel.rounding])

    def rows(q: np.ndarray) -> np.ndarray:
        q2 = as_stored(q).reshape(-1, N)
        out = np.empty(q2.shape, dtype)
        fused.layernorm_rows(q2, alpha, *args, out)
        return out.reshape(q.shape)

    over_axes = _rows_over(axes, rows)

    def run(q: np.ndarray) -> np.ndarray:
        first, last = axes[0], axes[-1]
        if q.size == 0 or q.ndim < -first or tuple(q.shape[first: last + 1 if last < -1 else None]) != kernel.norm_shape:
            return kernel.apply_numpy(q)  # empty, or the numpy form's own shape error
        return over_axes(q)

    return run


def softmax_fast(kernel, threads: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """:meth:`Softmax.apply_numpy` as a row loop (the softmax axis moved last when it is not)."""
    axis = int(getattr(kernel, "axis", -1))
    p = kernel.log2_prob_bits if kernel.log2_bits else kernel.p
    thresholds = kernel.log2_thresholds if kernel.log2_bits else np.zeros(0, np.int64)
    ymax = np.int64(2**kernel.p - 1)
    dtype = storage_dtype(0, int(ymax))
    exps = np.asarray(kernel.exp_of_gap(np.arange(1 << kernel.in_bits, dtype=np.int64)), np.int64)
    if exps.max(initial=0) < 2**31 and exps.min(initial=0) >= 0:
        exps = exps.astype(np.int32)  # half the table's cache footprint (256 KB for 16-bit inputs)
    qmin = np.int64(int_range(kernel.in_bits)[0])

    def rows(q: np.ndarray) -> np.ndarray:
        q2 = as_stored(q).reshape(-1, q.shape[-1])
        out = np.empty(q2.shape, dtype)
        fused.softmax_rows(q2, exps, bool(kernel.mask_min), qmin, np.int64(p), ymax, thresholds, out)
        return out.reshape(q.shape)

    over_axis = _rows_over((axis,), rows)

    def run(q: np.ndarray) -> np.ndarray:
        N = q.shape[axis] if q.ndim >= -axis else 0
        if q.size == 0 or N == 0 or N * 2 ** (kernel.exp_bits + 2) + 2 ** (kernel.exp_bits + p) >= F64_EXACT:
            return kernel.apply_numpy(q)  # empty, or the numpy form's own range/shape error
        return over_axis(q)

    return run


# ------------------------------------------------------------------------------ dispatch
_BUILDERS = {
    "Linear": linear_fast,
    "Conv": conv_fast,
    "ConvTranspose": conv_transpose_fast,
    "MatMul": matmul_fast,
    "Add": add_fast,
    "Mul": mul_fast,
    "LayerNorm": layernorm_fast,
    "Softmax": softmax_fast,
    "MaxPool": maxpool_fast,
    "AvgPool": avgpool_fast,
    "ReduceMean": reduce_fast,
    "ReduceSum": reduce_fast,
    "Dequantize": dequantize_fast,
    "Quantize": quantize_fast,
}


def accelerate(kernel, threads: int | None = None, in_shape: tuple | None = None) -> Callable | None:
    """An equivalent faster function for ``kernel.apply_numpy``, or None to keep the kernel's own.

    ``threads``: onnxruntime intra-op threads of the product sessions (None: one per core).
    ``in_shape``: one sample's shape of the first input, where known (a Conv picks its route by it).
    """
    kind = type(kernel).__name__
    if fused is None:
        return None
    try:
        if kind == "Lut":
            fast = tabulate_unary(kernel, int(kernel.in_bits))
        else:
            build = _BUILDERS.get(kind)
            if build is conv_fast:
                fast = conv_fast(kernel, threads, in_shape)
            else:
                fast = build(kernel, threads) if build is not None else None
    except Exception:  # an unexpected kernel layout: the kernel's own form is always correct
        return None
    return fast


def numpy_until_compiled(fast: Callable, numpy_form: Callable) -> Callable:
    """``fast``, or the kernel's numpy form while a loop it needs is still compiling in the background
    (:func:`fused.compile_in_background`: a loop not compiled yet does not run, and the call's result
    is replaced by the numpy form's, the definition the loops equal bit for bit)."""

    def run(*args):
        if not fused.background():
            return fast(*args)
        fused.start_call()
        try:
            with np.errstate(all="ignore"):  # a skipped call's products ran on unset buffers
                y = fast(*args)
        finally:
            skipped = fused.end_call()
        return numpy_form(*args) if skipped else y

    return run
