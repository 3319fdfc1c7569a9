"""The activation-by-activation MatMul as onnxruntime ``MatMulInteger`` against the kernel's numpy form, at 0 LSB.

Random batched products (attention's probabilities @ V): int16 ``a`` (as two base-256 digit
products), int8 ``b``, batch axes that broadcast either way,
transposed (non-contiguous) operands as the executor hands them over, every rounding mode,
8/16-bit outputs, codes at both ends of their ranges; and which kernels take the route.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import MatMul
from hbtool.simulator import accel

ROUNDINGS = ["floor", "half_up", "half_away", "half_even"]
pytestmark = pytest.mark.skipif(not (accel._cpu_integer_gemm_never_saturates() or accel._cpu_unsigned_gemm_is_exact()),
                                reason="no integer GEMM of this CPU is exact: the float route runs")


def _codes(rng, shape, bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = rng.integers(lo, hi + 1, size=shape)
    x.reshape(-1)[: min(4, x.size)] = [lo, hi, lo, hi][: min(4, x.size)]
    if rng.random() < 0.2:
        x[:] = rng.choice([lo, hi])  # every product at its largest, one sign
    return x.astype(np.int16)


@pytest.mark.parametrize("seed", range(24))
def test_the_integer_matmul_equals_the_numpy_form(seed):
    rng = np.random.default_rng(500 + seed)
    a_bits = 16
    m, k, n = (int(v) for v in rng.integers(1, 40, 3))
    batch = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]
    a_batch = [d if rng.random() < 0.7 else 1 for d in batch]
    b_batch = [d if rng.random() < 0.7 else 1 for d in batch]
    kern = MatMul.build(0.01, 0.02, float(rng.uniform(0.05, 5.0)), k, a_bits, 8, int(rng.choice([8, 16])),
                        relu=bool(rng.random() < 0.3), rounding=str(rng.choice(ROUNDINGS)))
    fast = accel.matmul_fast(kern)
    assert fast is not None and accel.reader_dtype(fast, 1) == np.int8
    a = _codes(rng, tuple(a_batch) + (m, k), a_bits)
    b = _codes(rng, tuple(b_batch) + (k, n), 8)
    if rng.random() < 0.5:  # handed over transposed, as after an in_perms
        a = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
        b = np.swapaxes(np.ascontiguousarray(np.swapaxes(b, -1, -2)), -1, -2)
    want = kern.apply_numpy(a.astype(np.int64), b.astype(np.int64))
    got = fast(a, b.astype(np.int8) if rng.random() < 0.5 else b)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.int64), want)


def test_which_matmuls_take_the_integer_route():
    assert accel._integer_matmul(MatMul.build(0.01, 0.02, 0.5, 64, 8, 8), None) is None  # int8 a: the float32 GEMM (faster in models)
    assert accel._integer_matmul(MatMul.build(0.01, 0.02, 0.5, 198, 16, 8), None) is not None
    assert accel._integer_matmul(MatMul.build(0.01, 0.02, 0.5, 64, 8, 16), None) is None  # b int16: float digits
    assert accel._integer_matmul(MatMul.build(0.01, 0.02, 0.5, 70000, 8, 8), None) is None  # int32 sums could overflow
