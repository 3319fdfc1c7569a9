"""NaN and inf at the CPU -> BPU boundary, the cause of hf_cvt_13's calibrate crash
(``Gather ... idx=-9223372036854775808`` inside an integer Softmax).

There, an unfused LayerNorm's ``Div`` (a run-time divisor: a float fallback) divided by the
dequantized output of the Sqrt table, which was exactly 0 for a token whose variance was below
half a step of the variance's int16 scale (eps too); 0 / 0 gave NaN, the boundary Quantize let
it through (Round and Clip keep NaN), the integer kernels carried it in their DOUBLE codes, and
the Softmax cast it to an index: int64 min. The model below has the same chain, and a feed that
drives one column's numerator and divisor to 0 and another's divisor to 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from hbtool.compiler.artifact import from_bytes
from hbtool.kernels import Add, AvgPool, Conv, ConvTranspose, Dequantize, LayerNorm, Linear, Lut, MatMul, Mul, Quantize, ReduceMean, Requantize, Softmax
from hbtool.quant.plan import QuantPlan, TensorQuant, check_plan_scales
from hbtool.simulator.executor import Executor
from tests.helpers import make_model, run_ort, run_pipeline, tensor, vinfo


def rms_divide_softmax_model():
    """x (1, 8, 6) -> (0.5 x) / sqrt(mean over channels of x*x) -> Softmax over the last axis -> y."""
    nodes = [
        helper.make_node("Mul", ["x", "half"], ["num"], name="numerator"),
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq"], ["ms"], name="mean_square", axes=[1], keepdims=1),
        helper.make_node("Sqrt", ["ms"], ["rms"], name="rms"),
        helper.make_node("Div", ["num", "rms"], ["normed"], name="divide"),
        helper.make_node("Softmax", ["normed"], ["y"], name="softmax", axis=-1),
    ]
    return make_model(nodes, [vinfo("x", [1, 8, 6])], [vinfo("y", [1, 8, 6])], [tensor("half", np.array(0.5, np.float32))])


def test_nan_and_inf_from_a_cpu_divide_saturate_at_the_boundary_and_stay_bit_exact(tmp_path: Path):
    model = rms_divide_softmax_model()
    # the Div runs on the CPU (as a float fallback did in hf_cvt_13; Div by a feature map now has an
    # integer kernel, so the user's node_info puts it there); the Softmax after it is integer, on the BPU
    calibration, compiled, feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 8, 6),
                                                                              node_info={"divide": {"ON": "CPU"}})
    assert {n.name: n.meta.get("on") for n in compiled.program.nodes if n.name == "divide"} == {}  # inside a CPU subgraph
    assert {n.name: n.meta.get("on") for n in compiled.program.nodes}["softmax"] == "BPU"
    for sim, q in zip(simulated, quantized):
        assert np.array_equal(sim[0], q[0])
    hostile = np.random.default_rng(5).standard_normal((1, 8, 6)).astype(np.float32)
    hostile[..., 0] = 1e-6  # numerator and divisor both quantize to 0: 0 / 0 = NaN
    hostile[..., 1] = 0.05  # the divisor quantizes to 0, the numerator does not: inf
    assert np.all(np.isfinite(run_ort(model, {"x": hostile})[0]))  # the float model is fine
    got = Executor(from_bytes(compiled.data)).run({"x": hostile})["y"]
    ref = run_ort(str(tmp_path / "wd" / "m_quantized_model.onnx"), {"x": hostile})[0]
    assert np.array_equal(got, ref)
    assert np.all(np.isfinite(got)) and got.min() >= 0 and got.max() <= 1
    # the inf column saturated to the largest code: it has the row's largest probability
    assert np.array_equal(got[..., 1], got.max(axis=-1))


def test_quantize_saturates_infinities_and_zeroes_nan_in_both_forms():
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.26, -0.26, 0.0], np.float32)
    for bits, (lo, hi) in ((8, (-128, 127)), (16, (-32768, 32767))):
        k = Quantize.build(0.1, bits)
        want = np.array([0, hi, lo, hi, lo, 3, -3, 0])
        assert np.array_equal(k.apply_numpy(x), want)
        got = run_ort(k.onnx_model([[8]]), {"x0": x})[0]
        assert np.array_equal(got, want.astype(np.float64))


@pytest.mark.parametrize("bad", [0.0, np.nan, np.inf, -1.0])
def test_plan_refuses_a_non_finite_or_zero_scale_naming_the_tensor(bad):
    plan = QuantPlan(method="max")
    plan.tensors["good"] = TensorQuant("good", 8, 0.1, 12.7, "max", 0)
    plan.tensors["scores"] = TensorQuant("scores", 8, bad, bad * 127, "max", 1)
    with pytest.raises(ValueError, match="'scores' got scale"):
        check_plan_scales(plan)


def _builders(bad: float):
    """Every scale-taking kernel, built with one scale replaced by ``bad``."""
    w2, w4 = np.ones((4, 4), np.int64), np.ones((4, 4, 1, 1), np.int64)
    b = np.zeros(4, np.int64)
    return {
        "Quantize": lambda: Quantize.build(bad),
        "Dequantize": lambda: Dequantize.build(bad),
        "Requantize": lambda: Requantize.build(bad),
        "Linear": lambda: Linear.build(w2, b, bad, 0.1, 0.1),
        "MatMul": lambda: MatMul.build(0.1, bad, 0.1, 4),
        "Conv": lambda: Conv.build(w4, b, 0.1, 0.1, bad),
        "ConvTranspose": lambda: ConvTranspose.build(w4, b, bad, 0.1, 0.1),
        "Add": lambda: Add.build(0.1, 0.1, bad),
        "Mul": lambda: Mul.build(bad, 0.1, 0.1),
        "Lut": lambda: Lut.build("sigmoid", bad, 8, 0.01, 8),
        "Softmax": lambda: Softmax.build(bad),
        "LayerNorm": lambda: LayerNorm.build(bad, gamma=np.ones(4)),
        "AvgPool": lambda: AvgPool.build([2, 2], 0.1, bad, 4),
        "ReduceMean": lambda: ReduceMean.build([-1], 4, bad, 0.1),
    }


@pytest.mark.parametrize("bad", [np.nan, np.inf, 0.0])
@pytest.mark.parametrize("kernel", sorted(_builders(1.0)))
def test_every_kernel_build_refuses_a_non_finite_or_zero_scale(kernel, bad):
    if kernel == "Requantize" and bad == 0.0:
        pytest.skip("a zero ratio is a valid requantizer (every output 0)")
    _builders(0.1)[kernel]()  # the same call with a sound scale builds
    with pytest.raises(ValueError, match="must be finite and"):
        _builders(bad)[kernel]()
