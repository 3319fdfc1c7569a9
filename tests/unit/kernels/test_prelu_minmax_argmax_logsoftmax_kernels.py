"""PRelu, Max/Min, ArgMax/ArgMin kernels (hbtool/kernels/select.py), the new tables, AveragePool ceil_mode:
numpy and ONNX forms bit-equal, and close to the float op; the checker rules that send forms to the CPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from hbtool.kernels.lut import Lut
from hbtool.kernels.pool import AvgPool
from hbtool.kernels.select import ArgMax, MinMax, PRelu
from tests.helpers import make_model, run_ort, tensor, vinfo
from tests.unit.kernels.test_numpy_and_onnx_forms_agree import assert_bit_exact, int_data


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("slopes", ["per_channel", "scalar", "negative"])
def test_prelu_forms_agree_and_follow_the_float_op(bits, slopes):
    rng = np.random.default_rng(1)
    q = int_data(rng, (2, 6, 5, 7), bits, "edge")
    a = {"per_channel": rng.uniform(0.05, 0.5, (6, 1, 1)), "scalar": np.array(0.2),
         "negative": rng.uniform(-0.5, 0.5, (6, 1, 1))}[slopes]
    s_in, s_out = 0.03, 0.025
    k = PRelu.build(s_in, a.reshape((1,) * (4 - a.ndim) + a.shape), s_out, bits, bits)
    y = assert_bit_exact(k, q)
    x = q * s_in
    ref = np.where(x >= 0, x, x * a) / s_out
    qmax = 2 ** (bits - 1) - 1
    ref = np.clip(ref, -qmax - 1, qmax)
    # the rounding, and the 15-bit multiplier's relative error below 2**-14 (kernels/requantize.py)
    assert np.all(np.abs(y - ref) <= 0.5 + np.abs(ref) * 2.0**-14 + 1e-9)


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("bshape", [(2, 6, 5, 7), (1, 6, 1, 1), (1,)])
def test_min_max_forms_agree_with_broadcast(mode, bshape):
    rng = np.random.default_rng(2)
    a = int_data(rng, (2, 6, 5, 7), 8, "edge")
    b = int_data(rng, bshape, 16)
    k = MinMax.build(0.04, 0.001, 0.03, 8, 16, 8, mode=mode)
    y = assert_bit_exact(k, a, b)
    f = np.maximum if mode == "max" else np.minimum
    assert np.abs(y - np.clip(f(a * 0.04, b * 0.001) / 0.03, -128, 127)).max() <= 0.5 + 1e-9


def test_min_max_takes_a_rank_0_constant():
    """Regression: a scalar constant operand (Max(x, 0.1)) reached the requantizer's in-place clamp as a numpy scalar."""
    k = MinMax.build(0.05, 0.001, 0.05, 8, 16, 8)
    y = k.apply_numpy(np.arange(-4, 4).reshape(1, 8, 1, 1), np.asarray(100))
    assert y.shape == (1, 8, 1, 1) and y.min() == 2


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("keepdims", [True, False])
def test_argmax_forms_agree_first_index_on_ties(mode, keepdims):
    rng = np.random.default_rng(3)
    q = rng.integers(-3, 3, (2, 8, 4, 5))  # many ties
    k = ArgMax.build(-3, keepdims, 8, mode)
    y = assert_bit_exact(k, q)
    ref = (np.argmax if mode == "max" else np.argmin)(q, axis=1)
    np.testing.assert_array_equal(y, np.expand_dims(ref, 1) if keepdims else ref)


@pytest.mark.parametrize("name", ["selu", "softsign", "sin", "cos"])
@pytest.mark.parametrize("in_bits", [8, 16])
def test_new_tables_agree(name, in_bits):
    rng = np.random.default_rng(4)
    k = Lut.build(name, 4.0 / 2 ** (in_bits - 1), in_bits, 1.5 / 127, 8, knot_bits=6)
    assert_bit_exact(k, int_data(rng, (3, 50), in_bits, "edge"))


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("kernel,stride,pad", [(3, 2, 0), (3, 2, 1), (2, 2, 0), (3, 3, 1)])
def test_avgpool_ceil_mode_matches_onnxruntime(count_include_pad, kernel, stride, pad):
    """ceil_mode=1: the last windows overhang; each divides by what onnxruntime divides it by (within 0.5 LSB)."""
    rng = np.random.default_rng(5)
    q = int_data(rng, (1, 4, 8, 9), 8)
    s_in, s_out = 0.05, 0.04
    pads = [pad] * 4
    k = AvgPool.build([kernel, kernel], s_in, s_out, 4, [stride, stride], pads, bool(count_include_pad),
                      spatial_shape=(8, 9), ceil_mode=True)
    y = assert_bit_exact(k, q)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=pads,
                            ceil_mode=1, count_include_pad=count_include_pad)
    model = make_model([node], [vinfo("x", [1, 4, 8, 9])], [vinfo("y", None)])
    ref = np.clip(run_ort(model, {"x": (q * s_in).astype(np.float32)})[0] / s_out, -128, 127)
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() <= 0.5 + 1e-4


def _place(nodes, inits, march="bayes", out_type=onnx.TensorProto.FLOAT):
    from hbtool.checker.placement import place_graph
    from hbtool.ir.onnx_import import import_onnx
    from hbtool.march.description import load_march

    model = make_model(nodes, [vinfo("x", [1, 8, 8, 8])], [helper.make_tensor_value_info("y", out_type, None)], inits)
    model = onnx.shape_inference.infer_shapes(model)
    graph = import_onnx(model)
    place_graph(graph, load_march(march))
    return {n.op_type: n.meta for n in graph.nodes}


def _conv(out="a"):
    return helper.make_node("Conv", ["x", "w"], [out], name="conv"), tensor("w", np.ones((8, 8, 1, 1), np.float32))


@pytest.mark.parametrize("bits,out_bits,axis", [(8, 8, -1), (16, 16, -3), (16, 8, -1), (8, 16, -3)])
def test_log_softmax_forms_agree_and_follow_the_float_op(bits, out_bits, axis):
    from hbtool.kernels.softmax import LogSoftmax

    rng = np.random.default_rng(6)
    q = int_data(rng, (2, 8, 5, 6), bits, "edge")
    s_in = 6.0 / 2 ** (bits - 1)
    x = q * s_in
    ref = x - x.max(axis=axis, keepdims=True)
    ref = ref - np.log(np.exp(ref).sum(axis=axis, keepdims=True))
    s_out = float(-ref.min()) / 2 ** (out_bits - 1)
    y = assert_bit_exact(LogSoftmax.build(s_in, s_out, bits, out_bits, axis=axis), q)
    # the output rounding, the log table (1.8e-4 nats) and the exponentials' roundings
    assert np.abs(y - np.clip(ref / s_out, -(2 ** (out_bits - 1)), 0)).max() <= (1.0 if out_bits == 16 else 0.6)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_bernoulli2_has_no_min_max(op):
    conv, w = _conv()
    nodes = [conv, helper.make_node(op, ["a", "c"], ["y"])]
    meta = _place(nodes, [w, tensor("c", np.float32(0.5))], "bernoulli2")[op]
    assert meta["on"] == "CPU" and "computes elementwise Add and Mul only" in meta["reason"]
    assert _place(nodes, [w, tensor("c", np.float32(0.5))], "bayes")[op]["on"] == "BPU"


def test_prelu_with_run_time_slopes_runs_on_the_cpu():
    conv, w = _conv()
    nodes = [conv, helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("PRelu", ["a", "s"], ["y"])]
    meta = _place(nodes, [w])["PRelu"]
    assert meta["on"] == "CPU" and "constant slopes" in meta["reason"]


def test_three_operand_max_runs_on_the_cpu():
    conv, w = _conv()
    meta = _place([conv, helper.make_node("Max", ["a", "a", "a"], ["y"])], [w])["Max"]
    assert meta["on"] == "CPU" and "3 operands" in meta["reason"]


def test_argmax_select_last_index_runs_on_the_cpu():
    conv, w = _conv()
    meta = _place([conv, helper.make_node("ArgMax", ["a"], ["y"], axis=1, select_last_index=1)], [w],
                  out_type=onnx.TensorProto.INT64)["ArgMax"]
    assert meta["on"] == "CPU" and "select_last_index=1" in meta["reason"]


def test_argmax_output_leaves_the_bpu_as_int64(tmp_path):
    """Regression: the ArgMax indices, computed on the BPU, come out of the quantized model and the simulator as int64."""
    from hbtool.optable.probes import PROBES
    from hbtool.optable.run import run_probe

    probe = next(p for p in PROBES if p.op == "ArgMax")
    r = run_probe(probe, "bayes")
    assert r.ok and r.kernels == ["ArgMax"]
    from hbtool.optable.probes import build_model

    out = build_model(probe).graph.output[0]
    assert out.type.tensor_type.elem_type == onnx.TensorProto.INT64
