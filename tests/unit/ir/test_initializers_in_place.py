"""``to_onnx`` writes every weight straight into the model's graph (``put_tensor``) instead of building a
``TensorProto`` apart with ``numpy_helper.from_array`` and copying it in twice (``make_graph``'s extend,
``make_model``'s CopyFrom): the same fields are set, so the same bytes come out, for every element type.
The import measures a model by serializing it once instead of ``ByteSize()`` and then serializing it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import put_tensor, to_onnx
from hbtool.ir.onnx_import import _serialized_below, _tensor_bytes

ARRAYS = [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5,
    np.array([-0.0, np.inf, -np.inf, np.nan, 1e-45], np.float32),
    np.linspace(-3, 3, 10).astype(np.float64),
    np.linspace(-3, 3, 10).astype(np.float16),
    np.array(3.0, np.float32),                               # rank 0
    np.zeros((0, 4), np.float32),                            # empty
    np.arange(12, dtype=np.float32).reshape(3, 4).T,         # not contiguous
    np.array([-128, 0, 127], np.int8), np.array([0, 255], np.uint8),
    np.array([-3, 30000], np.int16), np.array([65535], np.uint16),
    np.array([-(2**31), 2**31 - 1], np.int32), np.array([2**32 - 1], np.uint32),
    np.array([-(2**62), 5], np.int64), np.array([2**63], np.uint64),
    np.array([True, False, True]),
    np.array([1.5, -2.25], dtype=ml_dtypes.bfloat16),       # through from_array
    np.array(["a", "bc"], dtype=object),                     # strings: through from_array
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype}-{a.shape}")
@pytest.mark.parametrize("name", ["w", ""])
def test_put_tensor_is_from_array(array, name):
    tensor = onnx.TensorProto()
    put_tensor(tensor, array, name)
    assert tensor.SerializeToString() == numpy_helper.from_array(array, name).SerializeToString()


def _reference(model: onnx.ModelProto, graph: Graph) -> bytes:
    """The model as ``to_onnx`` built it before: initializers made apart, in the graph's order."""
    ref = onnx.ModelProto()
    ref.CopyFrom(model)
    del ref.graph.initializer[:]
    ref.graph.initializer.extend([numpy_helper.from_array(np.asarray(graph.values[t.name].data), t.name) for t in model.graph.initializer])
    return ref.SerializeToString()


def test_to_onnx_bytes_are_the_from_array_bytes():
    g = Graph("g", 17)
    g.inputs, g.outputs = ["x"], ["y"]
    x = g.value("x")
    x.shape, x.dtype = (1, 3), np.dtype(np.float32)
    g.add_const(np.arange(9, dtype=np.float32).reshape(3, 3), "w")
    g.add_const(np.array([1, 2, 3], np.float64), "b")
    g.add_const(np.ones(3, np.float32), "unused")          # never read: not written
    g.add_node("MatMul", ["x", "w"], ["m"], name="mm")
    g.add_node("Cast", ["m"], ["c"], {"to": onnx.TensorProto.DOUBLE}, name="cast")
    g.add_node("Add", ["c", "b"], ["y"], name="add")
    model = to_onnx(g, stage="test")
    assert [t.name for t in model.graph.initializer] == ["w", "b"]
    assert model.SerializeToString() == _reference(model, g)


def test_import_serializes_once_with_the_old_size_rule():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    const = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones(8, np.float64)))
    model = helper.make_model(helper.make_graph([const, helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w]))
    assert _tensor_bytes(model) == 16 + 64
    size = model.ByteSize()
    assert _serialized_below(model, size) == model.SerializeToString()       # at the limit: still in memory
    assert _serialized_below(model, size - 1) is None                          # over it: the external-data route
    assert _serialized_below(model, 100) is None                               # tensors past half the limit: ByteSize decides
    assert _serialized_below(model, 10 * size) == model.SerializeToString()


def test_the_checker_reads_the_file_bytes_with_the_same_verdict(tmp_path):
    """A model read from a file is checked on the file's bytes (no serialization of the parsed model): the same
    message for a bad model as the ModelProto gets; text and external-data files are checked as parsed."""
    from hbtool.errors import ModelError
    from hbtool.ir.onnx_import import _load_onnx_with_bytes, import_onnx

    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    opset = [helper.make_opsetid("", 17)]
    bad = helper.make_model(helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], "g", [x], [y]), opset_imports=opset)
    path = tmp_path / "bad.onnx"
    onnx.save(bad, str(path))
    with pytest.raises(ModelError) as from_file:
        import_onnx(path)
    with pytest.raises(ModelError) as from_proto:
        import_onnx(bad)
    assert str(from_file.value) == str(from_proto.value) and "ONNX checker rejects" in str(from_file.value)

    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    good = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="a")], "g", [x], [y], [w]),
                             opset_imports=opset)
    onnx.save(good, str(tmp_path / "good.onnx"))
    model, data = _load_onnx_with_bytes(tmp_path / "good.onnx")
    assert data == (tmp_path / "good.onnx").read_bytes() and onnx.ModelProto.FromString(data) == model == good
    onnx.save(good, str(tmp_path / "good.textproto"))
    model, data = _load_onnx_with_bytes(tmp_path / "good.textproto")
    assert data is None and model == good
    onnx.save(good, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.data", size_threshold=0)
    model, data = _load_onnx_with_bytes(tmp_path / "ext.onnx")
    assert data is None and numpy_helper.to_array(model.graph.initializer[0]).tolist() == [[1, 1, 1, 1]]
