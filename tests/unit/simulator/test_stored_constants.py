"""A constant operand of an accelerated Add / Mul that is not int16 (Swin's folded attention bias and mask come
as float64) is converted to int16 once when the executor is built (``executor._stored_constants``), not on
every call: the step gives the same codes from it, and values the conversion would change stay as they are."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.ir.graph import Graph
from hbtool.kernels.eltwise import Add, Mul
from hbtool.simulator import executor as ex_mod
from hbtool.simulator.accel import accelerate


def _step(kernel, const: np.ndarray, const_index: int):
    graph = Graph("g", 17)
    graph.set_value("x", (4, 3, 5), np.int16)
    graph.add_const(const, name="c")
    inputs = ["x", "c"] if const_index else ["c", "x"]
    node = graph.add_node(type(kernel).__name__, inputs, ["y"], {}, name="n")
    node.meta["kernel"] = kernel
    fast = accelerate(kernel)
    step = ex_mod._Step(node, lambda xs: [fast(*xs)], list(inputs), ["y"], [], fast=fast)
    return graph, step, fast


KERNELS = [Add.build(0.01, 0.02, 0.03, 16, 16, 16, rounding="half_up"), Add.build(0.02, 0.01, 0.02, 8, 16, 8, sub=True),
           Mul.build(0.01, 0.02, 0.001, 16, 16, 16)]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("const_index", [0, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_an_integer_valued_constant_is_stored_once_with_the_same_codes(kernel, const_index, dtype):
    rng = np.random.default_rng(3)
    bits = kernel.b_bits if const_index else kernel.a_bits
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    const = rng.integers(lo, hi + 1, (1, 3, 5)).astype(dtype)
    const.reshape(-1)[:2] = [lo, hi]
    graph, step, fast = _step(kernel, const, const_index)
    consts = {"c": const}
    ex_mod._stored_constants([step], graph, consts)
    name = step.inputs[const_index]
    assert name != "c" and consts[name].dtype == np.int16 and np.array_equal(consts[name], const)
    xbits = kernel.a_bits if const_index else kernel.b_bits
    x = rng.integers(-(1 << (xbits - 1)), 1 << (xbits - 1), (4, 3, 5)).astype(np.int16)
    args = [x, consts[name]] if const_index else [consts[name], x]
    want_args = [x, const] if const_index else [const, x]
    np.testing.assert_array_equal(fast(*args), kernel.apply_numpy(*[np.asarray(a, np.int64) for a in want_args]))


@pytest.mark.parametrize("bad", ["fraction", "range", "int16", "one"])
def test_values_the_conversion_would_change_stay_as_they_are(bad):
    kernel = KERNELS[1]  # b is 16-bit
    const = np.arange(15, dtype=np.float64).reshape(1, 3, 5)
    if bad == "fraction":
        const[0, 0, 0] = 0.5
    elif bad == "range":
        const[0, 0, 0] = 40000.0
    elif bad == "int16":
        const = const.astype(np.int16)
    else:
        const = np.array(7.0)
    graph, step, _ = _step(kernel, const, 1)
    consts = {"c": const}
    ex_mod._stored_constants([step], graph, consts)
    assert step.inputs == ["x", "c"] and list(consts) == ["c"]
