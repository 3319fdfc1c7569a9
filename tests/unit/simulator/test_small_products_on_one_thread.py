"""A product call smaller than ``cores.small_product_macs()`` multiply-adds runs on its session's one-thread
twin from any thread; a bigger one on the multi-thread session; the results are the same either way.

Why it matters: onnxruntime's intra-op pool does not spin, so a call that splits over two threads wakes a
worker and waits for it; on MobileNetV2's small products at batch 1 that cost more CPU and wall time than the
second core returned (docs/simulate.md, sessions sim5 and sim6). The decision is tested here by its function
(``PerCoreSession.on_twin``) and by which session ran, never by timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv, Linear, MatMul
from hbtool.simulator import accel, cores
from hbtool.simulator.cores import PerCoreSession, one_core

ENV = cores.SMALL_PRODUCT_MACS_ENV


class _Fake:
    def __init__(self, threads):
        self.threads = threads

    def run(self, names, feeds):
        return [self.threads]


def _per_x(feeds):
    return feeds["x"].size * 10


def test_the_threshold_routes_by_the_call_size(monkeypatch):
    monkeypatch.setenv(ENV, "1000")
    session = PerCoreSession(_Fake, 2, _per_x)
    small, big = {"x": np.zeros(99)}, {"x": np.zeros(100)}  # 990 and 1000 multiply-adds
    assert session.on_twin(small) and not session.on_twin(big)
    assert session.run(None, small) == [1] and session.run(None, big) == [2]
    with one_core():  # a pass on one core: every call on the twin, as before
        assert session.on_twin(big) and session.run(None, big) == [1]


def test_zero_switches_it_off_and_a_session_without_a_size_is_never_small(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    off = PerCoreSession(_Fake, 2, _per_x)
    assert not off.on_twin({"x": np.zeros(1)}) and off._single is None
    monkeypatch.setenv(ENV, "1e12")
    assert not PerCoreSession(_Fake, 2).on_twin({"x": np.zeros(1)})
    one = PerCoreSession(_Fake, 1, _per_x)  # a one-thread session is its own twin
    assert not one.on_twin({"x": np.zeros(1)}) and one.run(None, {"x": np.zeros(1)}) == [1]


def test_the_default_and_a_bad_override(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert cores.small_product_macs() == cores.SMALL_PRODUCT_MACS
    monkeypatch.setenv(ENV, "2e7")
    assert cores.small_product_macs() == 20_000_000
    for bad in ("lots", "-1", "nan"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(ValueError, match=ENV):
            cores.small_product_macs()


def test_the_call_sizes():
    a, b = np.zeros((2, 1, 3, 5, 7)), np.zeros((1, 4, 3, 7, 11))
    assert accel._matmul_macs({"a": a, "b": b}) == 2 * 4 * 3 * 5 * 7 * 11
    assert accel._matmul_macs({"a": np.zeros(7), "b": np.zeros((7, 11))}) == 7 * 11
    # a stride-1 convolution: Cout * Cin/group * kh * kw per input position
    assert accel._conv_macs_per_element((16, 4, 3, 3), 2, (1, 1)) * (8 * 10 * 10) == 16 * 4 * 9 * 10 * 10
    assert accel._conv_macs_per_element((16, 8, 1, 1), 1, (2, 2)) == 4.0
    assert accel._macs_per_x(24)({"x": np.zeros((5, 64))}) == 5 * 64 * 24


def _routed(monkeypatch, macs, build, *inputs):
    """The output of a product built with the threshold ``macs`` at 2 threads, and which sessions ran on the twin."""
    monkeypatch.setenv(ENV, str(macs))
    seen = []
    real = PerCoreSession.on_twin

    def spy(self, feeds):
        seen.append(real(self, feeds))
        return seen[-1]

    monkeypatch.setattr(PerCoreSession, "on_twin", spy)
    fast = build()
    seen.clear()  # build-time self-tests
    out = fast(*inputs)
    monkeypatch.setattr(PerCoreSession, "on_twin", real)
    return out, seen


def _products(rng):
    lin = Linear.build(rng.integers(-127, 128, (64, 24)), rng.integers(-5000, 5000, 24), 0.02,
                       rng.uniform(0.001, 0.01, 24), 0.7, in_bits=16, out_bits=8)
    conv = Conv.build(rng.integers(-127, 128, (8, 16, 3, 3)), rng.integers(-2000, 2000, 8), 0.03,
                      rng.uniform(0.0001, 0.002, 8), 0.5, pads=[1, 1, 1, 1])
    mm = MatMul.build(0.01, 0.02, 0.5, 32, 16, 8, 8)
    return [
        (lambda: accel.linear_fast(lin, 2), rng.integers(-32768, 32768, (1, 37, 64))),
        (lambda: accel.conv_fast(conv, 2, (16, 12, 12)), rng.integers(-128, 128, (2, 16, 12, 12))),
        (lambda: accel.matmul_fast(mm, 2), rng.integers(-32768, 32768, (3, 20, 32)), rng.integers(-128, 128, (3, 32, 9))),
    ]


def test_products_give_the_same_results_on_either_side(monkeypatch):
    for build, *inputs in _products(np.random.default_rng(34)):
        small, on_twin = _routed(monkeypatch, 10**12, build, *inputs)
        big, on_main = _routed(monkeypatch, 0, build, *inputs)
        assert on_twin and all(on_twin) and on_main and not any(on_main)
        np.testing.assert_array_equal(small, big)
        below, split = _routed(monkeypatch, 1, build, *inputs)  # every call is bigger than one multiply-add
        assert not any(split)
        np.testing.assert_array_equal(below, big)


def test_a_bad_override_is_an_input_error_of_the_executor_not_a_silent_fallback(monkeypatch):
    """A product session reads the threshold when it is built, and a failed build falls back to the kernel's numpy
    form (correct, much slower): the executor reads it first, so a bad value stops simulate with the fix instead."""
    from hbtool.errors import InputError
    from hbtool.simulator.executor import Executor

    monkeypatch.setenv(ENV, "lots")
    with pytest.raises(InputError, match=ENV):
        Executor(None)   # fails on the setting before it reads the artifact


def test_the_routing_is_off_by_default(monkeypatch):
    """Off until an idle sweep finds a threshold that wins on every model (docs/simulate.md, sim6)."""
    monkeypatch.delenv(ENV, raising=False)
    assert cores.small_product_macs() == 0
    assert not PerCoreSession(_Fake, 2, _per_x).on_twin({"x": np.zeros(1)})
