"""L2 normalisation and division by a feature map run as integer kernels: ReduceL2 (integer
square root of the sum of squares) and Div by a run-time tensor (one exact integer division),
in SwinV2's cosine attention (``q / max(||q||, eps)``) and ConvNeXt-V2's GRN
(``Gx / (mean_c(Gx) + eps)``). Before, ReduceL2 went to the CPU and the Div ran in float."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from hbtool.kernels.normalize import Div, ReduceL2
from tests.helpers import cosine, make_model, run_pipeline, tensor, vinfo

ROUNDINGS = ("half_up", "half_even", "half_away", "floor")


def _conv(rng, c: int = 8):
    w = (rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(c) * 0.1).astype(np.float32)
    return helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]), [tensor("w", w), tensor("b", b)]


def cosine_normalise_model(seed: int = 0):
    """conv -> c / max(||c||_2 over channels, 1e-6) (Clip then Div), opset 17 ReduceL2 attribute axes."""
    rng = np.random.default_rng(seed)
    conv, inits = _conv(rng)
    nodes = [
        conv,
        helper.make_node("ReduceL2", ["c"], ["n"], name="l2", axes=[1], keepdims=1),
        helper.make_node("Clip", ["n", "eps"], ["nc"], name="clip"),
        helper.make_node("Div", ["c", "nc"], ["y"], name="div"),
    ]
    inits.append(tensor("eps", np.array(1e-6, np.float32)))
    return make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 8, 16, 16])], inits)


def grn_model(seed: int = 0):
    """ConvNeXt-V2 GRN on NCHW: Gx = ReduceL2(c, H W); Nx = Gx / (ReduceMean_C(Gx) + eps); y = c * Nx + c."""
    rng = np.random.default_rng(seed)
    conv, inits = _conv(rng)
    nodes = [
        conv,
        helper.make_node("ReduceL2", ["c"], ["g"], name="l2", axes=[2, 3], keepdims=1),
        helper.make_node("ReduceMean", ["g"], ["gm"], name="mean", axes=[1], keepdims=1),
        helper.make_node("Add", ["gm", "eps"], ["ge"], name="add_eps"),
        helper.make_node("Div", ["g", "ge"], ["nx"], name="div"),
        helper.make_node("Mul", ["c", "nx"], ["cn"], name="mul"),
        helper.make_node("Add", ["cn", "c"], ["y"], name="residual"),
    ]
    inits.append(tensor("eps", np.array(1e-6, np.float32)))
    return make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 8, 16, 16])], inits)


def reciprocal_model(seed: int = 0):
    """conv -> 2 / (Relu(c) + 0.5): a constant dividend over a feature map."""
    rng = np.random.default_rng(seed)
    conv, inits = _conv(rng)
    nodes = [
        conv,
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "half"], ["d"], name="offset"),
        helper.make_node("Div", ["two", "d"], ["y"], name="div"),
    ]
    inits += [tensor("half", np.array(0.5, np.float32)), tensor("two", np.array(2.0, np.float32))]
    return make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 8, 16, 16])], inits)


def test_constant_over_a_feature_map_is_integer_and_exact(tmp_path):
    calibration, compiled, _, simulated, quantized, floats = run_pipeline(reciprocal_model(), tmp_path, (1, 3, 16, 16))
    assert compiled.fallbacks == [] and compiled.cpu_subgraphs == []
    div = next(n for n in compiled.program.nodes if n.name == "div")
    assert type(div.meta["kernel"]).__name__ == "Div"
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.999


@pytest.mark.parametrize("make", [cosine_normalise_model, grn_model], ids=["cosine", "grn"])
def test_l2_normalisation_is_integer_and_exact(tmp_path, make):
    model = make()
    calibration, compiled, _, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 3, 16, 16))
    assert [n.name for n in calibration.program.nodes if n.meta.get("fallback")] == []
    assert compiled.fallbacks == [] and compiled.cpu_subgraphs == []
    kinds = {n.name: type(n.meta.get("kernel")).__name__ for n in compiled.program.nodes if n.meta.get("on") == "BPU"}
    assert kinds["l2"] == "ReduceL2" and kinds["div"] == "Div"
    units = {n.name: n.meta.get("unit") for n in compiled.program.nodes}
    assert units["l2"] == "vector" and units["div"] == "vector"
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.995


def _ort(kernel, *xs):
    model = kernel.onnx_model([x.shape for x in xs])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {f"x{i}": x.astype(np.float64) for i, x in enumerate(xs)})[0]


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("scales", [(0.02, 0.01, 1 / 127, 8, 8, 8), (1e-3, 0.3, 1e-7, 16, 8, 16), (1.0, 1e-3, 0.1, 8, 16, 16),
                                    (1e-3, 1.0, 1.0, 16, 16, 8)])
def test_div_kernel_numpy_equals_onnx_and_rounds_the_quotient(rounding, scales):
    sa, sd, so, ab, db, ob = scales
    k = Div.build(sa, sd, so, ab, db, ob, rounding=rounding)
    rng = np.random.default_rng(3)
    a = rng.integers(-(2 ** (ab - 1)), 2 ** (ab - 1), (4, 6, 9))
    d = rng.integers(-(2 ** (db - 1)), 2 ** (db - 1), (4, 6, 1))
    d[0, 0, 0], d[1, 1, 0], a[0, 0, 0], a[1, 1, :3] = 0, 0, 0, [5, -5, 0]
    y = k.apply_numpy(a, d)
    assert np.array_equal(y, _ort(k, a, d))
    qmin, qmax = -(2 ** (ob - 1)), 2 ** (ob - 1) - 1
    real = np.clip(a * sa / (np.where(d == 0, 1, d) * sd) / so, qmin, qmax)
    live = np.broadcast_to(d != 0, a.shape)
    tol = 1.0 if rounding == "floor" else 0.5
    # the 15-bit multiplier's relative error, then the quotient's rounding
    assert np.all((np.abs(real - y) <= tol + np.abs(real) * 2.0**-14 + 1e-9)[live])
    # a zero divisor saturates to the sign of the dividend, 0 / 0 = 0
    assert y[1, 1, 0] == qmax and y[1, 1, 1] == qmin and y[1, 1, 2] == 0


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("axes,keepdims", [((-1,), True), ((1, 2), False), ((1, 2, 3), True)])
def test_reduce_l2_kernel_numpy_equals_onnx_within_half_an_lsb(bits, axes, keepdims):
    rng = np.random.default_rng(5)
    x = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), (2, 6, 5, 9))
    count = int(np.prod([x.shape[a] for a in axes]))
    s_in, s_out = 0.01, 0.01 * np.sqrt(count) / 1.5
    k = ReduceL2.build(axes, count, s_in, s_out, keepdims, bits, bits)
    y = k.apply_numpy(x)
    assert np.array_equal(y, _ort(k, x))
    real = np.sqrt((x.astype(np.float64) ** 2).sum(axis=axes, keepdims=keepdims)) * s_in / s_out
    # rounding, the 15-bit multiplier's relative error, the root's truncation (2**-k input LSB)
    tol = 0.5 + np.abs(real) * 2.0**-14 + s_in / s_out * 2.0**-k.k
    assert np.all(np.abs(np.clip(real, None, 2 ** (bits - 1) - 1) - y) <= tol)


def test_reduce_l2_of_a_long_int16_row_pre_shifts_the_sum():
    """2**22 int16 squares reach 2**52: the sum is rounded down by 4 before the root (k = -1), both forms agree."""
    count = 2**22
    k = ReduceL2.build((-1,), count, 1.0, 2.0**12, True, 16, 16)
    assert k.k == -1
    x = np.full((1, count), -(2**15), np.int64)
    y = k.apply_numpy(x)
    assert y[0, 0] == 2**26 // 2**12 and np.array_equal(y, _ort(k, x))
    x = np.random.default_rng(0).integers(-(2**15), 2**15, (1, count))
    y = k.apply_numpy(x)
    real = np.sqrt((x.astype(np.float64) ** 2).sum()) / 2**12
    assert np.array_equal(y, _ort(k, x)) and abs(y[0, 0] - real) <= 0.5 + real * 2.0**-14
