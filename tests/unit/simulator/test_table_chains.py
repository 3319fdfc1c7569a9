"""A chain of elementwise steps of one input holding a table (``x * s + b -> hard-swish -> x * s + b``, the
PP-OCRv5 recogniser's blocks) runs as one lookup (``table_chains.merge_table_chains``): bit for bit the kernels'
numpy forms one after the other, and, inside a compiled program, the same outputs as the steps one by one, at
any batch, with ``keep``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hbtool.kernels.eltwise import Add, Mul
from hbtool.simulator import accel, table_chains
from tests.helpers import compile_like_tiny_cnn, save_conv_then_scalars_model


@pytest.mark.parametrize("seed", range(12))
def test_a_chain_is_one_lookup_of_the_numpy_forms(seed):
    rng = np.random.default_rng(5100 + seed)
    x_bits = int(rng.choice([8, 16]))
    mul = Mul.build(*rng.uniform(0.001, 0.05, 3), x_bits, 8, 16, rounding=str(rng.choice(["floor", "half_up", "half_even"])))
    add = Add.build(*rng.uniform(0.001, 0.05, 3), 8, 16, 8, relu=bool(rng.random() < 0.5))
    c1, c2 = np.array([int(rng.integers(-128, 128))]), np.array([int(rng.integers(-128, 128))])
    forms = [lambda v: mul.apply_numpy(v, c1), lambda v: add.apply_numpy(c2, v), lambda v: np.abs(v) - 3 * v]
    lookup = accel.tabulate_chain(forms, x_bits)
    lo = -(1 << (x_bits - 1))
    x = rng.integers(lo, -lo, size=(2, 7, 33))
    x.reshape(-1)[:3] = [lo, -lo - 1, 0]
    want = x
    for form in forms:
        want = form(want)
    got = lookup(x.astype(np.int16))
    assert got.shape == x.shape
    np.testing.assert_array_equal(got.astype(np.int64), want)


def _chain_model(path: Path) -> Path:
    """Conv -> x * s1 + b1 -> HardSwish -> x * s2 + b2 -> output (one chain of five steps), and beside it
    Conv -> HardSwish read twice (no chain past a tensor with two readers)."""
    from onnx import helper

    nodes = [helper.make_node("Mul", ["c", "s1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("HardSwish", ["a1"], ["h1"]),
             helper.make_node("Mul", ["h1", "s2"], ["m2"]), helper.make_node("Add", ["b2", "m2"], ["a2"]),
             helper.make_node("HardSwish", ["c"], ["h2"]), helper.make_node("Add", ["h2", "h2"], ["d"]),
             helper.make_node("Add", ["a2", "d"], ["output"])]
    return save_conv_then_scalars_model(path, nodes, [(0.7, 0.2), (-1.3, 0.5)], seed=11, name="chain")


@pytest.fixture(scope="module")
def chain_artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chain")
    return compile_like_tiny_cnn(tmp, _chain_model(tmp / "chain.onnx"), "chain")


def test_a_program_with_a_table_chain_gives_the_step_by_step_outputs(chain_artifact, monkeypatch):
    from hbtool.simulator import executor as executor_module
    from hbtool.simulator.executor import Executor

    monkeypatch.setattr(accel, "AFFINE_PAIRS", False)  # every step on its own: the chains merged here, below
    monkeypatch.setattr(accel, "TABLE_CHAINS", False)
    plain, chained = Executor(chain_artifact, threads=1), Executor(chain_artifact, threads=1)
    kinds = [type(s.node.meta.get("kernel")).__name__ for s in plain.steps]
    assert kinds.count("Lut") == 2, kinds
    monkeypatch.setattr(accel, "TABLE_CHAINS", True)
    chained.steps, chained.paired_away = table_chains.merge_table_chains(chained.steps, chained.program,
                                                                         executor_module._scalar_operand)
    assert len(chained.steps) == len(plain.steps) - 4  # the five steps of the first branch are one
    assert len(chained.paired_away) == 4
    x = np.random.default_rng(1).integers(0, 256, (5, 3, 32, 32)).astype(np.float32)
    want = plain.run({"input": x})["output"]
    np.testing.assert_array_equal(chained.run({"input": x})["output"], want)
    np.testing.assert_array_equal(np.concatenate([chained.run({"input": x[i:i + 1]})["output"] for i in range(5)]), want)
    kept = chained.run({"input": x}, keep=set(chained.paired_away))  # asks for tensors inside the chain
    for name in chained.paired_away:
        np.testing.assert_array_equal(kept[name], plain.run({"input": x}, keep={name})[name])


def test_a_per_channel_add_or_mul_is_no_function_of_the_code():
    """An Add by a scalar constant with per-channel parameters maps one code to different values in different
    channels: it must not join a chain (nor must a Mul with a per-channel requantizer)."""
    from types import SimpleNamespace

    def step(kernel):
        return SimpleNamespace(node=SimpleNamespace(meta={"kernel": kernel}), inputs=["x", "c"], outputs=["y"], sampleless=False)

    operand = lambda step, program: ("x", 1, np.array([3]))  # noqa: E731  the executor's scalar-operand test, stubbed
    scales = np.array([0.01, 0.02, 0.05])  # per channel of the last axis
    per_channel = Add.build(scales, 0.02, 0.03, 16, 8, 16)
    per_tensor = Add.build(0.01, 0.02, 0.03, 16, 8, 16)
    assert table_chains._unary(step(per_channel), None, operand) is None
    form, bits, name = table_chains._unary(step(per_tensor), None, operand)
    assert (bits, name) == (16, "x")
    np.testing.assert_array_equal(form(np.arange(-5, 5)), per_tensor.apply_numpy(np.arange(-5, 5), np.array([3])))
    mul = Mul.build(0.01, 0.02, 0.03, 16, 8, 16)
    assert table_chains._unary(step(mul), None, operand) is not None
    channels = dataclasses.replace(mul.requant, M=np.full(3, int(np.reshape(mul.requant.M, -1)[0])), n=np.full(3, 20))
    assert table_chains._unary(step(dataclasses.replace(mul, requant=channels)), None, operand) is None
