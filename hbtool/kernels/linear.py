"""Matrix products: Linear (activation x constant weight) and MatMul (activation x activation).

``Linear``: ``y = requantize(x_q @ W_q + b_q)`` with ``W_q`` an integer ``[K, N]`` matrix (the
MatMul layout; pass ``W.T`` for a Gemm with ``transB=1``), ``b_q`` an int32 ``[N]`` bias at
scale ``s_x * s_w[n]``, and a per-output-channel (last axis) or per-tensor multiplier for
the ratio ``s_x * s_w[n] / s_out`` (``s_out`` may also be per output channel: PTF).

``MatMul``: ``y = requantize(A_q @ B_q)`` with numpy-style batch broadcasting
(attention ``Q K^T`` and ``A V``), one multiplier for ``s_a * s_b / s_out``.

``Log2MatMul``: the attention ``P @ V`` where ``P`` arrives as the log2 codes of
:class:`~hbtool.kernels.softmax.Softmax` (``k < Z`` means ``2**-k``, ``Z = 2**b - 1`` means 0):
``acc = sum_j (V_j << (Z - 1 - k_j))`` over the codes ``k_j < Z`` (shifts and additions, no
multiplier), at scale ``s_v 2**-(Z-1)``, then one requantization. The numpy and ONNX forms
compute the same sum as an exact matrix product of the decoded powers of two
(``|acc| <= K 2**(Z-1) 2**(b_bits-1)``, checked at build).

Exactness: ``|acc| <= 2**(in_bits-1) * max_n sum_k |W[k, n]| + max |b|`` (Linear) and
``|acc| <= K * 2**(a_bits-1) * 2**(b_bits-1)`` (MatMul) are checked at build to be below
``2**52``; every partial sum of the products is then an integer below ``2**53``, so the
float64 matrix product (numpy, and the ONNX DOUBLE MatMul) is exact in any summation
order. numpy switches to float32 (twice as fast) when the data bound is below ``2**24``.
Int16 x int16 MatMul with ``K > 4`` can exceed the requantizer's direct range; the
requantizer then clamps/pre-shifts (see :mod:`hbtool.kernels.requantize`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hbtool.ir.macs import matmul_macs
from hbtool.kernels.base import Kernel, as_int, check, check_scales
from hbtool.kernels.builder import OnnxBuilder
from hbtool.kernels.fixedpoint import DEFAULT_ROUNDING, EXACT_LIMIT, int_range
from hbtool.kernels.requantize import Requantize
from hbtool.kernels.units import TENSOR

# every integer up to these magnitudes is exactly a float32 / float64: sums of integer products below them are exact
# in that float type, in any order
F32_EXACT = 2**24
F64_EXACT = 2**53


def check_activation(q: np.ndarray, bits: int, name: str = "input") -> np.ndarray:
    """int64 view of an activation, checked to lie in its ``bits``-bit range."""
    q = as_int(q, name)
    if q.size:
        lo, hi = int_range(bits)
        check(int(q.min()) >= lo and int(q.max()) <= hi, f"{name} outside the int{bits} range")
    return q


def check_weight_bits(w: np.ndarray, weight_bits: int) -> None:
    """Weights within their width: int8 [-128, 127] or int4 [-8, 7] (the 4-bit path, see docs/int4.md)."""
    if weight_bits not in (4, 8):
        raise ValueError(f"weight bits must be 4 or 8, not {weight_bits}")
    lo, hi = (-8, 7) if weight_bits == 4 else (-128, 127)
    check(w.size == 0 or (int(w.min()) >= lo and int(w.max()) <= hi), f"weights must be int{weight_bits}")


def check_input_range(input_range: Any, in_bits: int) -> tuple[int, int] | None:
    """A narrowed input code range (uint4 ``(0, 15)``, int4 ``(-8, 7)``) inside the in_bits range, as a tuple."""
    if input_range is None:
        return None
    lo, hi = (int(v) for v in input_range)
    qlo, qhi = int_range(in_bits)
    if not qlo <= lo <= hi <= qhi:
        raise ValueError(f"input range [{lo}, {hi}] is not inside the int{in_bits} range")
    return lo, hi


def check_codes(q: np.ndarray, input_range: tuple[int, int] | None, name: str = "input") -> None:
    """A 4-bit operand really holds 4-bit codes: the producer's clamp guarantees it, the emulator checks it."""
    if input_range is not None and q.size:
        check(int(q.min()) >= input_range[0] and int(q.max()) <= input_range[1],
              f"{name} outside its 4-bit code range [{input_range[0]}, {input_range[1]}]")


def exact_matmul(a: np.ndarray, b: np.ndarray, bound: int) -> np.ndarray:
    """Integer ``a @ b`` through a float BLAS product, exact because ``|every partial sum| <= bound``."""
    check(bound < 2**53, "matrix product bound reaches 2**53")
    dt = np.float32 if bound <= F32_EXACT else np.float64
    return np.matmul(a.astype(dt), b.astype(dt)).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Linear(Kernel):
    """``requantize(x @ W + b)`` with a constant integer weight ``[K, N]``."""

    unit = TENSOR
    merges_samples = True

    def macs(self, in_shape, out_shape) -> int:
        return matmul_macs(out_shape, self.weight.shape[0])

    weight: np.ndarray  # int64 [K, N]
    bias: np.ndarray | None  # int64 [N]
    in_bits: int
    requant: Requantize
    acc_bound: int
    wsum: int  # max over output channels of sum |W[:, n]|
    weight_bits: int = 8  # 4: int4 weights, packed two per byte in the artifact
    input_range: tuple[int, int] | None = None  # the input's 4-bit code range, if it is 4-bit

    @classmethod
    def build(
        cls,
        weight_q: Any,
        bias_q: Any,
        scale_in: float,
        scale_w: Any,
        scale_out: float,
        in_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
        weight_bits: int = 8,
        input_range: tuple[int, int] | None = None,
    ) -> "Linear":
        check_scales("Linear", scale_in=scale_in, scale_w=scale_w, scale_out=scale_out)
        w = as_int(weight_q, "weight")
        if w.ndim != 2:
            raise ValueError("Linear weight must be [K, N]")
        check_weight_bits(w, weight_bits)
        input_range = check_input_range(input_range, in_bits)
        b = None if bias_q is None else as_int(bias_q, "bias").reshape(-1)
        if b is not None and b.size != w.shape[1]:
            raise ValueError("bias length must equal the weight's N")
        int_range(in_bits)
        wsum = int(np.abs(w).sum(axis=0).max(initial=0))
        bound = 2 ** (in_bits - 1) * wsum + (int(np.abs(b).max(initial=0)) if b is not None else 0)
        if bound >= EXACT_LIMIT:
            raise ValueError("Linear accumulator bound reaches 2**52")
        ratio = float(scale_in) * np.asarray(scale_w, np.float64) / np.asarray(scale_out, np.float64)
        rq = Requantize.build(ratio, out_bits, axis=-1 if ratio.ndim else None, acc_bound=bound,
                              relu=relu, lo=lo, hi=hi, rounding=rounding)
        return cls(weight=w, bias=b, in_bits=in_bits, requant=rq, acc_bound=bound, wsum=wsum,
                   weight_bits=int(weight_bits), input_range=input_range)

    def accumulate_numpy(self, x: np.ndarray) -> np.ndarray:
        """The int64 accumulator ``x @ W + b`` (before requantization)."""
        x = check_activation(x, self.in_bits)
        check_codes(x, self.input_range)
        xmax = int(np.abs(x).max(initial=0))
        acc = exact_matmul(x, self.weight, xmax * self.wsum)
        return acc + self.bias if self.bias is not None else acc

    def apply_numpy(self, x: np.ndarray) -> np.ndarray:
        return self.requant.apply_trusted(self.accumulate_numpy(x))

    def emit(self, b: OnnxBuilder, x: str) -> str:
        acc = b.op("MatMul", x, b.int_const(self.weight, np.float64, "weight"))
        if self.bias is not None:
            acc = b.add(acc, b.int_const(self.bias, np.float64, "bias"))
        return self.requant.emit(b, acc)


@dataclass(frozen=True, eq=False)
class MatMul(Kernel):
    """``requantize(A @ B)`` of two activations (batched, broadcasting), scalar multiplier."""

    unit = TENSOR
    merges_samples = True
    matrix_operands = True

    def macs(self, in_shape, out_shape) -> int:
        return matmul_macs(out_shape, self.k)

    k: int
    a_bits: int
    b_bits: int
    requant: Requantize
    acc_bound: int
    n_inputs = 2

    @classmethod
    def build(
        cls,
        scale_a: float,
        scale_b: float,
        scale_out: float,
        k: int,
        a_bits: int = 8,
        b_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
    ) -> "MatMul":
        """``k`` is the contracted length (last dim of A), needed for the exactness bound."""
        check_scales("MatMul", scale_a=scale_a, scale_b=scale_b, scale_out=scale_out)
        int_range(a_bits)
        int_range(b_bits)
        bound = int(k) * 2 ** (a_bits - 1) * 2 ** (b_bits - 1)
        if bound >= EXACT_LIMIT:
            raise ValueError(f"MatMul with K={k} at int{a_bits} x int{b_bits} can reach 2**52")
        rq = Requantize.build(float(scale_a) * float(scale_b) / float(scale_out), out_bits, acc_bound=bound,
                              relu=relu, lo=lo, hi=hi, rounding=rounding)
        return cls(k=int(k), a_bits=a_bits, b_bits=b_bits, requant=rq, acc_bound=bound)

    def accumulate_numpy(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = check_activation(a, self.a_bits, "A")
        b = check_activation(b, self.b_bits, "B")
        check(a.shape[-1] == self.k, f"A's last dimension is {a.shape[-1]}, built for K={self.k}")
        amax = int(np.abs(a).max(initial=0))
        bmax = int(np.abs(b).max(initial=0))
        return exact_matmul(a, b, self.k * amax * bmax)

    def apply_numpy(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.requant.apply_trusted(self.accumulate_numpy(a, b))

    def emit(self, bld: OnnxBuilder, a: str, b: str) -> str:
        return self.requant.emit(bld, bld.op("MatMul", a, b))


@dataclass(frozen=True, eq=False)
class Log2MatMul(Kernel):
    """``requantize(sum_j V_j << (Z-1-k_j))``: probabilities as log2 codes ``k`` times an activation V."""

    unit = TENSOR
    merges_samples = True
    matrix_operands = True

    def macs(self, in_shape, out_shape) -> int:
        return matmul_macs(out_shape, self.k)

    k: int
    code_bits: int
    b_bits: int
    requant: Requantize
    acc_bound: int
    n_inputs = 2

    @classmethod
    def build(
        cls,
        scale_b: float,
        scale_out: float,
        k: int,
        code_bits: int = 4,
        b_bits: int = 8,
        out_bits: int = 8,
        relu: bool = False,
        lo: int | None = None,
        hi: int | None = None,
        rounding: str = DEFAULT_ROUNDING,
    ) -> "Log2MatMul":
        """``k``: the contracted length; ``code_bits``: bits of the log2 codes (Softmax's ``log2_bits``)."""
        check_scales("Log2MatMul", scale_b=scale_b, scale_out=scale_out)
        if not 2 <= code_bits <= 4:
            raise ValueError("code_bits must be within 2..4")
        int_range(b_bits)
        top = 2**code_bits - 2
        bound = int(k) * 2**top * 2 ** (b_bits - 1)
        if bound >= EXACT_LIMIT:
            raise ValueError(f"Log2MatMul with K={k} at int{b_bits} can reach 2**52")
        rq = Requantize.build(float(scale_b) * 2.0**-top / float(scale_out), out_bits, acc_bound=bound,
                              relu=relu, lo=lo, hi=hi, rounding=rounding)
        return cls(k=int(k), code_bits=int(code_bits), b_bits=b_bits, requant=rq, acc_bound=bound)

    @property
    def zero_code(self) -> int:
        return 2**self.code_bits - 1

    @property
    def decode_table(self) -> np.ndarray:
        """``2**(Z-1-k)`` for the codes ``k < Z``, 0 for ``Z`` (int64 ``[Z+1]``)."""
        z = self.zero_code
        return np.array([1 << (z - 1 - c) for c in range(z)] + [0], np.int64)

    def accumulate_numpy(self, codes: np.ndarray, b: np.ndarray) -> np.ndarray:
        codes = as_int(codes, "codes")
        if codes.size:
            check(int(codes.min()) >= 0 and int(codes.max()) <= self.zero_code, f"codes outside 0..{self.zero_code}")
        b = check_activation(b, self.b_bits, "B")
        check(codes.shape[-1] == self.k, f"codes' last dimension is {codes.shape[-1]}, built for K={self.k}")
        p = self.decode_table[codes]
        bmax = int(np.abs(b).max(initial=0))
        return exact_matmul(p, b, self.k * int(p.max(initial=0)) * bmax)

    def apply_numpy(self, codes: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.requant.apply_trusted(self.accumulate_numpy(codes, b))

    def emit(self, bld: OnnxBuilder, codes: str, b: str) -> str:
        p = bld.op("Gather", bld.const(self.decode_table.astype(np.float64), hint="pow2"), bld.cast(codes, np.int64))
        return self.requant.emit(bld, bld.op("MatMul", p, b))
