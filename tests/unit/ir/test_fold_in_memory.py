"""The import's onnxruntime folds get the large weights as arrays, not in the serialized model.

onnxruntime optimizes in-memory external initializers as it does those in the bytes; the folded model is saved
with every weight inline as before. Checked here on a model with what the folds change (a Conv+BatchNormalization
fusion, a Conv+Add bias, a shape subgraph, an opset lift and the second fold): the imported graph is the same
bytes with the weights handed over as with the weights serialized, and the model onnxruntime parses is small.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hbtool.ir import onnx_import
from hbtool.ir.onnx_export import to_onnx
from hbtool.ir.onnx_import import IN_MEMORY_LOCATION, import_onnx


def _model(opset: int) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    c = 64

    def tensor(name, array):
        return helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape, array.tobytes(), raw=True)

    inits = [tensor("w", rng.standard_normal((c, c, 3, 3)).astype(np.float32)),
             tensor("w2", rng.standard_normal((c, c, 3, 3)).astype(np.float32)),
             tensor("bias2", rng.standard_normal((1, c, 1, 1)).astype(np.float32)),
             tensor("gamma", rng.random(c).astype(np.float32) + 0.5), tensor("beta", rng.standard_normal(c).astype(np.float32)),
             tensor("mean", rng.standard_normal(c).astype(np.float32)), tensor("var", rng.random(c).astype(np.float32) + 0.5),
             tensor("m", rng.standard_normal((c, 32)).astype(np.float32)),
             tensor("zero", np.array(0, np.int64)), tensor("minus1", np.array([-1], np.int64)),
             tensor("axis0", np.array([0], np.int64))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "bias2"], ["a2"], name="add_bias"),
             helper.make_node("GlobalAveragePool", ["a2"], ["p"], name="pool"),
             helper.make_node("Shape", ["p"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0, name="gather"),
             (helper.make_node("Unsqueeze", ["batch"], ["batch1"], axes=[0], name="unsqueeze") if opset < 13 else
              helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"], name="unsqueeze")),
             helper.make_node("Concat", ["batch1", "minus1"], ["flat_shape"], axis=0, name="concat"),
             helper.make_node("Reshape", ["p", "flat_shape"], ["f"], name="reshape"),
             helper.make_node("MatMul", ["f", "m"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


@pytest.mark.parametrize("opset", [11, 17])   # 11: fold, lift to 17, fold again; 17: one fold
def test_imported_graph_is_the_same_with_the_weights_handed_over(opset, monkeypatch):
    imported = []
    for threshold in (1 << 40, 1024):
        monkeypatch.setattr(onnx_import, "SET_ASIDE_MIN_BYTES", threshold)
        imported.append(to_onnx(import_onnx(_model(opset))).SerializeToString())
    inline, handed = imported
    assert handed == inline
    ops = [n.op_type for n in onnx.ModelProto.FromString(inline).graph.node]
    assert "BatchNormalization" not in ops and "Shape" not in ops   # the folds did fuse and fold


def test_the_model_onnxruntime_parses_leaves_the_weights_out():
    model = _model(17)
    light, weights = onnx_import._large_weights_apart(model)
    assert set(weights) == {"w", "w2", "m"}   # 147, 147 and 8 KB; the small ones and the int64 shapes stay in the bytes
    for name, array in weights.items():
        original = [t for t in model.graph.initializer if t.name == name][0]
        assert array.tobytes() == original.raw_data and array.shape == tuple(original.dims)
    refs = {t.name: t for t in light.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert set(refs) == set(weights) and all(t.external_data[0].value == IN_MEMORY_LOCATION and not t.raw_data for t in refs.values())
    assert light.ByteSize() < model.ByteSize() - sum(a.nbytes for a in weights.values()) + 1024
    # everything else as it was
    assert [n.SerializeToString() for n in light.graph.node] == [n.SerializeToString() for n in model.graph.node]
    assert light.opset_import == model.opset_import and light.graph.input == model.graph.input
