"""A Mul by a constant scalar whose one reader is an Add of a constant scalar (a learnable affine block) runs
as one pass (``fused.scalar_affine_pair``): bit for bit the two kernels' numpy forms one after the other,
and, inside a compiled program, the same outputs as the steps run one by one, at any batch, with ``keep``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hbtool.kernels.eltwise import Add, Mul
from hbtool.simulator import accel, fused
from tests.helpers import compile_like_tiny_cnn, save_conv_then_scalars_model

ROUNDINGS = ["floor", "half_up", "floor", "half_up", "half_away", "half_even"]  # mostly the two that pair


def _stage_pair(rng, i1: int, i2: int):
    """A Mul of ``x`` and a constant (operand ``i1``), then an Add of its result and a constant (operand ``i2``)."""
    x_bits, c_bits, mid_bits, c2_bits, out_bits = (int(v) for v in rng.choice([8, 16], 5))
    mul_bits = (c_bits, x_bits) if i1 == 0 else (x_bits, c_bits)
    add_bits = (c2_bits, mid_bits) if i2 == 0 else (mid_bits, c2_bits)
    mul = Mul.build(*rng.uniform(0.001, 0.05, 2), float(rng.uniform(0.001, 0.05)), *mul_bits, mid_bits,
                    relu=bool(rng.random() < 0.3), rounding=str(rng.choice(ROUNDINGS)))
    add = Add.build(*rng.uniform(0.001, 0.05, 3), *add_bits, out_bits, sub=bool(rng.random() < 0.3),
                    relu=bool(rng.random() < 0.3), rounding=str(rng.choice(ROUNDINGS)))
    return x_bits, c_bits, c2_bits, mul, add


@pytest.mark.parametrize("seed", range(60))
def test_the_pair_equals_the_two_numpy_forms(seed):
    rng = np.random.default_rng(3400 + seed)
    i1, i2 = int(rng.integers(0, 2)), int(rng.integers(0, 2))  # the constant as either operand
    x_bits, c_bits, c2_bits, mul, add = _stage_pair(rng, i1, i2)
    lo, hi = -(1 << (x_bits - 1)), (1 << (x_bits - 1)) - 1
    shape = [(7,), (1, 3, 5, 9), (2, 240, 12, 80)][seed % 3]  # the last one past the threads' split size
    x = rng.integers(lo, hi + 1, size=shape)
    x.reshape(-1)[:4] = [lo, hi, 0, -1]
    c_lo, c_hi = -(1 << (c_bits - 1)), (1 << (c_bits - 1)) - 1
    c1 = np.array([int(rng.choice([c_lo, c_hi, rng.integers(c_lo, c_hi + 1)]))])
    c2 = np.array([int(rng.integers(-(1 << (c2_bits - 1)), 1 << (c2_bits - 1)))])
    first = accel.scalar_affine_stage(mul, c1, i1)
    second = accel.scalar_affine_stage(add, c2, i2)
    if first is None or second is None:  # only floor / half_up without pre-shift pair up
        assert mul.requant.rounding not in ("floor", "half_up") or add.rounding not in ("floor", "half_up") \
            or mul.requant.clamp_acc is not None or mul.requant.pre_shift is not None or np.min(add.n) < 0 \
            or np.min(mul.requant.n) < 0
        return
    y = mul.apply_numpy(*((c1, x) if i1 == 0 else (x, c1)))
    want = add.apply_numpy(*((c2, y) if i2 == 0 else (y, c2)))
    before = fused.threads()
    try:
        for threads in (1, 2):
            fused.set_threads(threads)
            got = accel.scalar_affine_pair(first, second)(x.astype(np.int16))
            assert got.shape == want.shape
            np.testing.assert_array_equal(got.astype(np.int64), want)
    finally:
        fused.set_threads(before)


def _affine_model(path: Path) -> Path:
    """Conv -> (x * s1 + b1) -> (x * s2 + b2, whose Mul result has a second reader) -> (b3 + s3 * x): three Mul/Add pairs,
    two of them pairable (the last with its constants as the first operands)."""
    from onnx import helper

    nodes = [helper.make_node("Mul", ["c", "s1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Mul", ["r1", "s2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["a2"]),
             helper.make_node("Add", ["a2", "m2"], ["a3"]),
             helper.make_node("Mul", ["s3", "a3"], ["m3"]), helper.make_node("Add", ["b3", "m3"], ["output"])]
    return save_conv_then_scalars_model(path, nodes, [(0.7, 0.2), (-1.3, 0.5), (0.4, -0.1)], seed=7, name="affine")


@pytest.fixture(scope="module")
def affine_artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("affine")
    return compile_like_tiny_cnn(tmp, _affine_model(tmp / "affine.onnx"), "affine")


def test_a_program_with_pairs_gives_the_unpaired_outputs(affine_artifact, monkeypatch):
    from hbtool.simulator.executor import Executor

    paired = Executor(affine_artifact, threads=1)
    monkeypatch.setattr(accel, "AFFINE_PAIRS", False)
    unpaired = Executor(affine_artifact, threads=1)
    kinds = [type(s.node.meta.get("kernel")).__name__ for s in unpaired.steps]
    assert kinds.count("Mul") == 3 and kinds.count("Add") >= 3, kinds
    assert len(paired.paired_away) == 2 and len(paired.steps) == len(unpaired.steps) - 2  # m2 has two readers
    x = np.random.default_rng(1).integers(0, 256, (5, 3, 32, 32)).astype(np.float32)
    want = unpaired.run({"input": x})
    for batch in (paired.run({"input": x}), np.concatenate([paired.run({"input": x[i:i + 1]})["output"] for i in range(5)])):
        got = batch["output"] if isinstance(batch, dict) else batch
        np.testing.assert_array_equal(got, want["output"])
    kept = paired.run({"input": x}, keep=set(paired.paired_away))  # asks for a Mul result a pair does not write
    for name in paired.paired_away:
        np.testing.assert_array_equal(kept[name], unpaired.run({"input": x}, keep={name})[name])
    np.testing.assert_array_equal(kept["output"], want["output"])
