"""The simulator's hand-written ONNX model bytes parse to the same messages ``onnx.helper`` builds,
and importing the simulator does not import ``onnx`` (its cost was most of a small run's start)."""

import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hbtool.simulator import onnx_bytes


def _helper_model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "accel", [helper.make_tensor_value_info(k, t, None) for k, t in inputs.items()],
                              [helper.make_tensor_value_info(k, t, None) for k, t in outputs.items()],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_conv_model_with_attributes_and_initializers_parses_equal():
    w = np.arange(-24, 24, dtype=np.float32).reshape(4, 3, 2, 2)
    attrs = dict(kernel_shape=[2, 2], strides=[1, 2], pads=[0, 1, 0, 1], dilations=[1, 1], group=1)
    ours = onnx_bytes.model([onnx_bytes.node("Conv", ["x", "w0"], ["y0"], **attrs)], {"x": TensorProto.FLOAT},
                            {"y0": TensorProto.FLOAT}, {"w0": w})
    want = _helper_model([helper.make_node("Conv", ["x", "w0"], ["y0"], **attrs)], {"x": TensorProto.FLOAT},
                         {"y0": TensorProto.FLOAT}, {"w0": w})
    assert onnx.load_from_string(ours) == want


def test_integer_types_negative_ints_scalars_and_float_attributes():
    inits = {"w": np.array([[-128, 127], [5, -7]], np.int8), "xz": np.array(128, np.uint8),
             "b": np.array([-(2**40), 3], np.int64), "h": np.array([1, -2], np.int16), "f": np.array([0.5, -1.0])}
    nodes_ours = [onnx_bytes.node("MatMulInteger", ["x", "w", "xz"], ["y"]),
                  onnx_bytes.node("LeakyRelu", ["z"], ["r"], alpha=0.25),
                  onnx_bytes.node("Transpose", ["z"], ["t"], perm=[-1, 0]),
                  onnx_bytes.node("Cast", ["y"], ["c"], to=TensorProto.DOUBLE)]
    nodes_want = [helper.make_node("MatMulInteger", ["x", "w", "xz"], ["y"]), helper.make_node("LeakyRelu", ["z"], ["r"], alpha=0.25),
                  helper.make_node("Transpose", ["z"], ["t"], perm=[-1, 0]), helper.make_node("Cast", ["y"], ["c"], to=TensorProto.DOUBLE)]
    ins, outs = {"x": TensorProto.UINT8, "z": TensorProto.FLOAT}, {"y": TensorProto.INT32, "c": TensorProto.DOUBLE}
    assert onnx.load_from_string(onnx_bytes.model(nodes_ours, ins, outs, inits)) == _helper_model(nodes_want, ins, outs, inits)


def test_simulate_imports_no_onnx():
    code = ("import sys; from hbtool.simulator import simulate, inputs, executor; import hbtool.api; "
            "print('onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
