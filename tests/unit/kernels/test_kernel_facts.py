"""Kernel facts live on the kernel classes: the unit, the MAC count, the parameter bytes.

The compiler (units, ``meta["macs"]``, the memory plan's weights), the cost model and the
checker read them from one place; these tests pin that the places agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.compiler.units import unit_of
from hbtool.ir.graph import Graph, Node, Value
from hbtool.ir.macs import node_macs
from hbtool.kernels import Conv, ConvTranspose, Linear, MatMul
from hbtool.kernels.base import Kernel, param_bytes
from hbtool.kernels.units import CPU, TENSOR, UNITS, VECTOR


def _kernel_classes() -> list[type]:
    out, stack = [], list(Kernel.__subclasses__())
    while stack:
        cls = stack.pop()
        out.append(cls)
        stack.extend(cls.__subclasses__())
    return out


def test_every_kernel_class_names_its_unit():
    missing = sorted(c.__name__ for c in _kernel_classes() if c.unit not in UNITS)
    assert not missing, f"kernel classes without a unit: {missing}"


def test_the_unit_of_a_node_is_its_kernels():
    conv = Conv.build(np.ones((4, 3, 3, 3), np.int64), None, 1.0, 1.0, 1.0)
    assert unit_of(Node("c", "HzConv", ["x"], ["y"], meta={"kernel": conv, "on": "BPU"})) == TENSOR
    assert unit_of(Node("m", "Transpose", ["x"], ["y"], meta={"on": "BPU"})) == "data_movement"
    assert unit_of(Node("f", "Erf", ["x"], ["y"], meta={"on": "CPU"})) == CPU
    assert Conv.unit == TENSOR and MatMul.matrix_operands and not Conv.matrix_operands
    from hbtool.kernels import Lut, ReduceSum

    assert ReduceSum.unit == VECTOR and ReduceSum.reduction == "sum"
    assert Lut.build(np.tanh, 0.05, 8, 1 / 127, 8).vector_class == "lut"
    assert Lut.build(np.tanh, 0.0005, 16, 1 / 32767, 16).vector_class == "lut_int16"


def _float_graph(op: str, shapes: dict[str, tuple[int, ...]], inputs: list[str], attrs=None) -> Graph:
    g = Graph("g", 17)
    for name, shape in shapes.items():
        g.values[name] = Value(name, shape, np.dtype(np.float32))
    g.nodes.append(Node("n", op, inputs, ["y"], attrs or {}))
    return g


@pytest.mark.parametrize("group", [1, 2])
def test_conv_macs_agree_between_the_float_node_and_the_kernel(group):
    w = np.ones((8, 4 // group, 3, 3), np.int64)
    g = _float_graph("Conv", {"x": (1, 4, 10, 10), "w": w.shape, "y": (1, 8, 8, 8)}, ["x", "w"], {"group": group})
    kernel = Conv.build(w, None, 1.0, 1.0, 1.0, group=group)
    assert kernel.macs((1, 4, 10, 10), (1, 8, 8, 8)) == node_macs(g.nodes[0], g) == 8 * 8 * 8 * (4 // group) * 9


def test_conv_transpose_and_matmul_macs_agree():
    w = np.ones((4, 6, 2, 2), np.int64)
    g = _float_graph("ConvTranspose", {"x": (1, 4, 5, 5), "w": w.shape, "y": (1, 6, 10, 10)}, ["x", "w"], {"strides": [2, 2]})
    kernel = ConvTranspose.build(w, None, 1.0, 1.0, 1.0, strides=[2, 2])
    assert kernel.macs((1, 4, 5, 5), (1, 6, 10, 10)) == node_macs(g.nodes[0], g) == 4 * 25 * 6 * 4
    g = _float_graph("MatMul", {"a": (2, 5, 7), "b": (2, 7, 3), "y": (2, 5, 3)}, ["a", "b"])
    assert MatMul.build(1.0, 1.0, 1.0, 7).macs((2, 5, 7), (2, 5, 3)) == node_macs(g.nodes[0], g) == 2 * 5 * 3 * 7
    lin = Linear.build(np.ones((7, 3), np.int64), None, 1.0, 1.0, 1.0)
    assert lin.macs((2, 5, 7), (2, 5, 3)) == 2 * 5 * 3 * 7


def test_parameter_bytes_count_narrowest_storage_and_packed_int4():
    conv = Conv.build(np.full((4, 3, 1, 1), 3, np.int64), np.full(4, 1000, np.int64), 1.0, 1.0, 1.0)
    assert conv.param_bytes() == param_bytes(conv)
    # weights fit int8 (12 bytes), the bias int16 (8 bytes), plus the requantize's per-channel arrays if any
    assert conv.param_bytes() >= 12 + 8
    four = Conv.build(np.full((4, 3, 1, 1), 3, np.int64), None, 1.0, 1.0, 1.0, weight_bits=4)
    eight = Conv.build(np.full((4, 3, 1, 1), 3, np.int64), None, 1.0, 1.0, 1.0)
    assert eight.param_bytes() - four.param_bytes() == 12 - 6
