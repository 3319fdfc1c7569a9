"""Sessions opened on a graph hand onnxruntime its weights as arrays (``collect.SessionModel``).

The model is serialized without its large float constants, which onnxruntime receives as in-memory external
initializers: no 100 MB serialization and parse a session. Checked here: the bytes really leave the weights out
(and keep the small and integer tensors onnxruntime reads while it loads), every session computes the same bits
as one opened on the full bytes (plain, with a weight fake-quantizer to fold, at the basic and the full level),
the extra outputs keep the weights, onnxruntime holds its own copy, and calibrate's evaluation and candidate scores
are the same floats.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hbtool.ir.onnx_import import import_onnx
from hbtool.ir import onnx_import
from hbtool.quant.collect import SessionModel, float_model_bytes, open_session, session_model, with_extra_outputs
from tests.helpers import tiny_calibration_config

def _graph():
    """A conv (a 147 KB weight fake-quantized by constant nodes), a MatMul (a 64 KB weight), a small bias and a
    Reshape whose int64 shape must stay in the bytes."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    m = rng.standard_normal((64 * 4 * 4, 16)).astype(np.float32)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.tobytes(), raw=True),
             helper.make_tensor("m", TensorProto.FLOAT, m.shape, m.tobytes(), raw=True),
             helper.make_tensor("s", TensorProto.FLOAT, [], [0.02]),
             helper.make_tensor("b", TensorProto.FLOAT, [16], rng.standard_normal(16).astype(np.float32)),
             helper.make_tensor("shape", TensorProto.INT64, [2], [1, 64 * 4 * 4])]
    nodes = [helper.make_node("Div", ["w", "s"], ["wd"]), helper.make_node("Round", ["wd"], ["wr"]),
             helper.make_node("Mul", ["wr", "s"], ["wq"]),
             helper.make_node("Conv", ["x", "wq"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("MatMul", ["f", "m"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return import_onnx(model), rng.standard_normal((1, 64, 4, 4)).astype(np.float32)


def test_the_bytes_leave_the_weights_out():
    graph, _ = _graph()
    model = session_model(graph)
    full = float_model_bytes(graph)
    assert isinstance(model, SessionModel)
    assert all(a.nbytes >= onnx_import.SET_ASIDE_MIN_BYTES for a in model.weights.values()) and len(model.weights) >= 2
    assert len(model.data) < len(full) - sum(a.nbytes for a in model.weights.values()) + 4096
    proto = onnx.ModelProto.FromString(model.data)
    inline = {t.name for t in proto.graph.initializer if t.data_location != TensorProto.EXTERNAL}
    shape = [n for n in graph.nodes if n.op_type == "Reshape"][0].inputs[1]
    assert shape in inline and not set(model.weights) & inline


@pytest.mark.parametrize("basic", [True, False])
def test_sessions_compute_the_same_bits(basic):
    graph, x = _graph()
    name = graph.inputs[0]
    extra = [t for n in graph.nodes for t in n.outputs if n.op_type == "Relu"]
    full = open_session(float_model_bytes(graph, extra), basic=basic)
    handed = open_session(session_model(graph, extra), basic=basic)
    for a, b in zip(full.run(None, {name: x}), handed.run(None, {name: x})):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    appended = with_extra_outputs(session_model(graph), graph, extra)
    assert isinstance(appended, SessionModel) and appended.weights.keys() == session_model(graph).weights.keys()
    for a, b in zip(full.run(None, {name: x}), open_session(appended, basic=basic).run(None, {name: x})):
        assert np.array_equal(a, b)


def test_onnxruntime_holds_its_own_copy():
    """The arrays may change after the session opened without changing what it computes (why handing them over is
    as safe as the bytes were for callers that go on editing a graph)."""
    graph, x = _graph()
    built = session_model(graph)
    model = SessionModel(built.data, {name: array.copy() for name, array in built.weights.items()})
    sess = open_session(model)
    before = sess.run(None, {graph.inputs[0]: x})[0]
    for array in model.weights.values():
        array[...] = 0
    assert np.array_equal(before, sess.run(None, {graph.inputs[0]: x})[0])


@pytest.fixture(scope="module")
def swin_config(tmp_path_factory):
    return tiny_calibration_config(tmp_path_factory.mktemp("swin_session_model"), num_samples=8, calibration_type="default")


def test_calibration_is_the_same_with_the_weights_in_the_bytes(swin_config, monkeypatch):
    """The tiny Swin's weights are small: with the threshold at 1 KB most of them are handed over as arrays; the
    candidate scores, the chosen method and every measured error are the floats the full bytes give (threshold above
    every weight)."""
    from hbtool.config import load_config
    from hbtool.quant.calibrate import run_calibration

    results = []
    for threshold in (1 << 40, 1024):
        monkeypatch.setattr(onnx_import, "SET_ASIDE_MIN_BYTES", threshold)
        results.append(run_calibration(load_config(swin_config)))
    inline, handed = results
    assert handed.candidates == inline.candidates and handed.method == inline.method
    assert handed.output_errors == inline.output_errors and handed.node_errors == inline.node_errors
    assert handed.serialized == inline.serialized


def test_weights_put_back_give_the_file_bytes():
    """calibrate builds the quantized model's message once: without its weights for the session, then with them put
    back for the file, which must be the bytes ``to_onnx`` writes."""
    from hbtool.ir.onnx_export import put_back_in_memory_weights, to_onnx
    from hbtool.quant.collect import session_model_of, stays_in_memory

    graph, _ = _graph()
    model = to_onnx(graph, stage="quantized", in_memory=stays_in_memory)
    handed = session_model_of(model, graph)
    assert handed.weights and len(handed.data) < 4096
    put_back_in_memory_weights(model, graph)
    assert model.SerializeToString() == to_onnx(graph, stage="quantized").SerializeToString()
