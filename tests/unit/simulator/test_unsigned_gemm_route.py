"""The uint8 x uint8 ``MatMulInteger`` route of Linear and of the activation MatMuls (int16 or int8 x int8), at 0 LSB.

On CPUs whose uint8 x int8 GEMM saturates pair sums (x86 without VNNI), the integer products run
with both operands offset to uint8 (zero points 128), chosen by a once-per-process self-test of
that kernel (``accel._cpu_unsigned_gemm_is_exact``). These tests force that route wherever the
self-test passes (and skip where it does not), whatever this CPU's uint8 x int8 kernel does, and
check it against the kernels' numpy forms: full-range int8 weights (every same-signed pair at its
largest, where uint8 x int8 would saturate), int8 / int16 activations at both ends of their range.
The self-test itself is checked against a kernel that sums pairs in saturating int16.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Linear, MatMul
from hbtool.simulator import accel

RNG = np.random.default_rng(34)
unsigned_exact = pytest.mark.skipif(not accel._cpu_unsigned_gemm_is_exact(),
                                    reason="this CPU's uint8 x uint8 GEMM is not exact: the route is not taken")


@pytest.fixture
def unsigned_route(monkeypatch):
    """The routes as on a CPU whose uint8 x int8 kernel saturates (the unsigned kernel chosen)."""
    monkeypatch.setattr(accel, "_cpu_integer_gemm_never_saturates", lambda: False)

    def no_weight_test(session, w):
        raise AssertionError("the per-weight test must not run where the unsigned kernel is exact")

    monkeypatch.setattr(accel, "_integer_gemm_is_exact", no_weight_test)


def _codes(shape, bits, extremes=True):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = RNG.integers(lo, hi + 1, size=shape)
    if extremes:
        x.reshape(-1)[: min(4, x.size)] = [lo, hi, lo, hi][: min(4, x.size)]
        x[..., : x.shape[-1] // 3] = hi  # long runs of the largest code: every pair of products at its largest
    return x


def _saturating_weights(k, n):
    """int8 weights with long runs at -128 and 127 (a uint8 x int8 kernel's pairs saturate on them)."""
    w = RNG.integers(-128, 128, size=(k, n))
    w[: k // 2, 0] = 127
    w[: k // 2, 1] = -128
    return w


@unsigned_exact
@pytest.mark.parametrize("in_bits, k", [(8, 64), (8, 1280), (16, 192), (16, 768), (8, 33025)])
def test_linear_takes_the_unsigned_gemm_and_is_bit_exact(unsigned_route, in_bits, k):
    n = 5 if k > 10000 else 24
    w = _saturating_weights(k, n)
    kern = Linear.build(w, RNG.integers(-5000, 5000, n), 0.02, RNG.uniform(0.0001, 0.01, n), 0.7, in_bits=in_bits,
                        out_bits=16)
    assert accel._integer_linear(np.asarray(w, np.int64), None) is not None
    fast = accel.accelerate(kern)
    assert "integer" in fast.__code__.co_freevars
    x = _codes((2, 7, k), in_bits)
    np.testing.assert_array_equal(fast(x).astype(np.int64), kern.apply_numpy(x))


@unsigned_exact
def test_linear_past_the_unsigned_int32_bound_takes_the_float_route(unsigned_route, monkeypatch):
    monkeypatch.setattr(accel, "_integer_gemm_is_exact", lambda session, w: False)  # the last resort: this weight fails it
    w = _saturating_weights(33026, 2)  # 33026 * 255 * 255 >= 2**31: the raw uint8 sums could overflow
    assert accel._integer_linear(np.asarray(w, np.int64), None) is None


@unsigned_exact
@pytest.mark.parametrize("seed", range(12))
def test_the_int16_by_int8_matmul_takes_the_unsigned_gemm_and_is_bit_exact(unsigned_route, seed):
    rng = np.random.default_rng(900 + seed)
    m, k, n = (int(v) for v in rng.integers(1, 60, 3))
    batch = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]
    kern = MatMul.build(0.01, 0.02, float(rng.uniform(0.05, 5.0)), k, 16, 8, int(rng.choice([8, 16])),
                        relu=bool(rng.random() < 0.3), rounding=str(rng.choice(["floor", "half_up", "half_even"])))
    fast = accel._integer_matmul(kern, None)
    assert fast is not None and accel.reader_dtype(fast, 1) == np.int8
    a = _codes(tuple(batch) + (m, k), 16)
    b = _codes(tuple(batch) + (k, n), 8)
    b[..., : k // 2, 0] = 127
    want = kern.apply_numpy(a, b)
    if rng.random() < 0.5:  # handed over transposed, as after an in_perms
        b = np.swapaxes(np.ascontiguousarray(np.swapaxes(b, -1, -2)), -1, -2)
    got = fast(a.astype(np.int16), b.astype(np.int8))
    np.testing.assert_array_equal(got.astype(np.int64), want)


def test_the_unsigned_self_test_fails_on_a_kernel_that_saturates_pair_sums(monkeypatch):
    """The self-test's operands make every kind of pair sum overflow int16: a kernel that saturated
    them (or the zero-point-shifted ones) would read wrong, and the route would not be taken."""
    accel._cpu_unsigned_gemm_is_exact.cache_clear()

    class Saturating:
        def __init__(self, w, shift):
            self.w, self.shift = w.astype(np.int64), shift

        def run(self, _, feeds):
            x = feeds["x"].astype(np.int64) - self.shift
            prods = x[:, :, None] * (self.w[None] - self.shift)
            pairs = np.clip(prods[:, 0::2] + prods[:, 1::2], -32768, 32767)
            y = pairs.sum(axis=1)
            if self.shift == 0:  # raw products first, the zero points' share after
                y = y - 128 * self.w.sum(axis=0)[None] - 128 * x.sum(axis=1)[:, None] + x.shape[1] * 128 * 128
            return [y.astype(np.int32)]

    for shift in (0, 128):
        def fake_session(node, inits, threads, _shift=shift):
            return Saturating(inits["w"], _shift)

        monkeypatch.setattr(accel, "_integer_session", fake_session)
        try:
            assert not accel._cpu_unsigned_gemm_is_exact.__wrapped__()
        finally:
            monkeypatch.undo()
    accel._cpu_unsigned_gemm_is_exact.cache_clear()


@unsigned_exact
@pytest.mark.parametrize("seed", range(12))
def test_the_int8_by_int8_matmul_takes_the_unsigned_gemm_and_is_bit_exact(unsigned_route, seed):
    _int8_by_int8_matmul_is_bit_exact(np.random.default_rng(1300 + seed))


def _int8_by_int8_matmul_is_bit_exact(rng) -> None:
    """A random int8 x int8 MatMul (batched, broadcast, transposed operands, every rounding) on the route this
    process takes (the caller fixes which), against the kernel's numpy form."""
    m, k, n = (int(v) for v in rng.integers(1, 70, 3))
    batch = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]
    a_batch = [d if rng.random() < 0.7 else 1 for d in batch]
    kern = MatMul.build(0.01, 0.02, float(rng.uniform(0.05, 5.0)), k, 8, 8, int(rng.choice([8, 16])),
                        relu=bool(rng.random() < 0.3), rounding=str(rng.choice(["floor", "half_up", "half_away", "half_even"])))
    assert accel._int8_matmul(kern, None) is not None     # an integer route, not the float32 GEMM
    fast = accel.matmul_fast(kern)
    assert accel.reader_dtype(fast, 0) == np.int8 and accel.reader_dtype(fast, 1) == np.int8
    a = _codes(tuple(a_batch) + (m, k), 8)
    b = _codes(tuple(batch) + (k, n), 8)
    b[..., : k // 2, :] = -128  # with a's runs at 127 and its -128s: pairs of products at their largest, both signs
    want = kern.apply_numpy(a, b)
    if rng.random() < 0.5:  # handed over transposed, as after an in_perms (Q @ K^T)
        b = np.swapaxes(np.ascontiguousarray(np.swapaxes(b, -1, -2)), -1, -2)
    got = fast(a.astype(np.int8), b.astype(np.int8) if rng.random() < 0.5 else b.astype(np.int16))
    np.testing.assert_array_equal(got.astype(np.int64), want)


def test_the_int8_matmul_takes_the_exact_integer_kernel_of_this_cpu(monkeypatch):
    """Q @ K^T runs as uint8 x int8 where that kernel never saturates (VNNI), as uint8 x uint8 where only that one is
    exact, and as a float32 GEMM where neither is (or the int32 sums could overflow)."""
    def kind_of(kern):
        fast = accel._int8_matmul(kern, None)
        if fast is None:
            return None
        session = next(c.cell_contents for c in fast.__closure__ if hasattr(c.cell_contents, "get_inputs"))
        return session.get_inputs()[1].type

    monkeypatch.setattr(accel, "_cpu_integer_gemm_never_saturates", lambda: True)
    assert kind_of(MatMul.build(0.01, 0.02, 0.5, 64, 8, 8)) == "tensor(int8)"
    monkeypatch.setattr(accel, "_cpu_integer_gemm_never_saturates", lambda: False)
    monkeypatch.setattr(accel, "_cpu_unsigned_gemm_is_exact", lambda: False)
    assert kind_of(MatMul.build(0.01, 0.02, 0.5, 64, 8, 8)) is None
    monkeypatch.setattr(accel, "_cpu_unsigned_gemm_is_exact", lambda: True)
    assert kind_of(MatMul.build(0.01, 0.02, 0.5, 64, 8, 8)) == "tensor(uint8)"
    assert accel._int8_matmul(MatMul.build(0.01, 0.02, 0.5, 64, 16, 8), None) is None  # int16 a: _integer_matmul
    assert accel._int8_matmul(MatMul.build(0.01, 0.02, 0.5, 33026, 8, 8), None) is None  # int32 sums could overflow


@pytest.mark.skipif(not accel._cpu_integer_gemm_never_saturates(),
                    reason="this CPU's uint8 x int8 GEMM saturates: the signed route is not taken")
@pytest.mark.parametrize("seed", range(8))
def test_the_int8_by_int8_matmul_on_the_signed_gemm_is_bit_exact(seed):
    _int8_by_int8_matmul_is_bit_exact(np.random.default_rng(1400 + seed))
