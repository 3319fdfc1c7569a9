"""The torch forms of the float ops (QAT's CPU nodes, data movement and surrogates) against onnx's reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from hbtool.ir.graph import Graph, Node
from hbtool.qat.torch_ops import OPS, OpContext

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 7, 9)).astype(np.float32)

CASES = [
    ("Slice", {}, {"s": [-1], "e": [-100], "a": [3], "p": [-2]}),
    ("Slice", {}, {"s": [1, 0], "e": [6, 100], "a": [2, 3], "p": [2, 3]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1], "strides": [2, 2]}, {}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}, {}),
    ("MaxPool", {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0], "strides": [2, 2]}, {}),
    # symmetric pads above half the window (a folded -inf border): torch's own padding refuses them
    ("MaxPool", {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "strides": [2, 2]}, {}),
    ("Conv", {"pads": [1, 0, 2, 1], "strides": [1, 2], "group": 2}, {"w": RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)}),
    ("Gather", {"axis": 2}, {"i": np.array(3, np.int64)}),
    ("Pad", {}, {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)}),
    ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, {}),
    ("Softmax", {"axis": 1}, {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {}),
    ("LayerNormalization", {"axis": -1}, {"g": RNG.standard_normal(9).astype(np.float32), "b": RNG.standard_normal(9).astype(np.float32)}),
    ("Transpose", {"perm": [0, 3, 1, 2]}, {}),
    ("ReduceMean", {"keepdims": 0}, {"axes": np.array([1, 3], np.int64)}),
]


@pytest.mark.parametrize("op,attrs,consts", CASES, ids=[f"{c[0]}{k}" for k, c in enumerate(CASES)])
def test_torch_form_matches_onnx_reference(op, attrs, consts):
    arrays = {k: np.asarray(v, np.int64) if isinstance(v, list) else v for k, v in consts.items()}
    inputs = ["x"] + list(arrays)
    node = helper.make_node(op, inputs, ["y"], **attrs)
    opset = 18
    model = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
                                                [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                                                [numpy_helper.from_array(v, k) for k, v in arrays.items()]),
                              opset_imports=[helper.make_opsetid("", opset)])
    ref = ReferenceEvaluator(model).run(None, {"x": X})[0]
    graph = Graph("g", opset)
    ir = Node("n", op, inputs, ["y"], dict(attrs), "", None, {})
    got = OPS[op](OpContext(graph), ir, [torch.from_numpy(X)] + [torch.from_numpy(v) for v in arrays.values()])[0].numpy()
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_static_batch_one_reshapes_take_the_runtime_batch():
    """A batch-1 graph's Reshape targets fold a training batch into their leading dimension."""
    graph = Graph("g", 17)
    graph.set_value("x", (1, 65, 64), np.float32)
    ir = Node("r", "Reshape", ["x", "s"], ["y"], {}, "", None, {})
    x = torch.zeros(8, 65, 64)
    assert OPS["Reshape"](OpContext(graph), ir, [x, torch.tensor([65, 64])])[0].shape == (8 * 65, 64)
    assert OPS["Reshape"](OpContext(graph), ir, [x, torch.tensor([1, 65, 4, 16])])[0].shape == (8, 65, 4, 16)
    assert OPS["Reshape"](OpContext(graph), ir, [x, torch.tensor([1, -1, 64])])[0].shape == (8, 65, 64)
