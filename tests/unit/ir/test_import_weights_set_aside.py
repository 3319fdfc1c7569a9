"""The import sets large float weights aside while onnx's version converter and shape inference copy the model.

Both serialize the model, parse it in C++ and hand back a new one; without the weights they copy a few
kilobytes instead of every weight (ResNet50: about 0.9 CPU seconds of a calibration). The models they
return, with the weights put back, must be byte for byte what the plain calls return, and the model
given to them must come back as it was, also when the call fails.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hbtool.ir import import_onnx, onnx_import, to_onnx

NEVER = 1 << 62   # SET_ASIDE_MIN_BYTES that sets nothing aside: the plain calls


def old_opset_model(opset: int) -> onnx.ModelProto:
    """Conv (a 18 KB weight, set aside) -> Squeeze/Unsqueeze (axes attributes, inputs from 13) -> Reshape (an int64 shape
    initializer) -> Softmax (its meaning changed at 13) -> Gemm (a 16 KB float weight, a small bias kept): every adapter
    the lift to 17 runs on exports from opset 11 and 12 reads something beside the weights."""
    rng = np.random.default_rng(opset)
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "conv_b"),
        numpy_helper.from_array(np.array([1, 32, 16], np.int64), "shape"),
        numpy_helper.from_array(rng.standard_normal((16, 256)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.standard_normal(256).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMean", ["c"], ["m"], name="mean", axes=[3], keepdims=1),
        helper.make_node("Squeeze", ["m"], ["s"], name="squeeze", axes=[3]),
        helper.make_node("Unsqueeze", ["s"], ["u"], name="unsqueeze", axes=[0]),
        helper.make_node("Reshape", ["u", "shape"], ["r"], name="reshape"),
        helper.make_node("Softmax", ["r"], ["p"], name="softmax", axis=1),
        helper.make_node("Reshape", ["p", "shape"], ["p2"], name="reshape2"),
        helper.make_node("MatMul", ["p2", "fc_w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "fc_b"], ["y"], name="bias"),
    ]
    graph = helper.make_graph(nodes, "old_opset", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 256])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    onnx.checker.check_model(model, full_check=True)
    return model


def _plain_and_set_aside(monkeypatch, call, model: onnx.ModelProto) -> tuple[bytes, bytes]:
    before = model.SerializeToString()
    with_aside = call(model).SerializeToString()
    assert model.SerializeToString() == before, "the model given is not as it was"
    monkeypatch.setattr(onnx_import, "SET_ASIDE_MIN_BYTES", NEVER)
    plain = call(model).SerializeToString()
    monkeypatch.undo()
    return plain, with_aside


@pytest.mark.parametrize("opset", [11, 12])
def test_version_converter_gives_the_same_model(monkeypatch, opset):
    plain, with_aside = _plain_and_set_aside(monkeypatch, onnx_import._lift_opset, old_opset_model(opset))
    assert with_aside == plain


@pytest.mark.parametrize("opset", [11, 12])
def test_shape_inference_gives_the_same_model(monkeypatch, opset):
    lifted = onnx_import._lift_opset(old_opset_model(opset))
    plain, with_aside = _plain_and_set_aside(monkeypatch, onnx_import._infer_shapes, lifted)
    assert with_aside == plain
    assert any(v.name == "mm" for v in onnx.ModelProto.FromString(with_aside).graph.value_info)   # shapes were inferred


@pytest.mark.parametrize("opset", [11, 12])
def test_import_gives_the_same_graph(monkeypatch, tmp_path, opset):
    path = tmp_path / "m.onnx"
    onnx.save(old_opset_model(opset), path)
    with_aside = to_onnx(import_onnx(path)).SerializeToString()
    monkeypatch.setattr(onnx_import, "SET_ASIDE_MIN_BYTES", NEVER)
    assert to_onnx(import_onnx(path)).SerializeToString() == with_aside


def test_only_large_float_weights_are_set_aside_and_always_put_back():
    model = old_opset_model(11)
    before = model.SerializeToString()
    with pytest.raises(RuntimeError):
        with onnx_import._weights_set_aside(model):
            sizes = {t.name: len(t.raw_data) for t in model.graph.initializer}
            raise RuntimeError("the converter failed")
    # the two large float weights had no bytes inside the block; the small bias and the int64 shape kept theirs
    assert sizes == {"conv_w": 0, "conv_b": 128, "shape": 24, "fc_w": 0, "fc_b": 1024}
    assert model.SerializeToString() == before


def test_a_pass_that_fails_without_the_weights_gets_them(monkeypatch):
    """Should a converter or inference step read a weight's values and fail on the missing bytes, the import runs the
    plain call instead of refusing a model the plain call takes."""
    model = old_opset_model(11)
    seen = []

    def reads_weights(m: onnx.ModelProto) -> onnx.ModelProto:
        sizes = {t.name: len(t.raw_data) for t in m.graph.initializer}
        seen.append(sizes["conv_w"])
        if not sizes["conv_w"]:
            raise ValueError("conv_w has no data")
        return onnx_import._lift_opset(m)

    plain, _ = _plain_and_set_aside(monkeypatch, onnx_import._lift_opset, model)
    assert onnx_import._without_weights(reads_weights, model, "a pass").SerializeToString() == plain
    assert seen == [0, 32 * 16 * 3 * 3 * 4]
