"""Zero ranges (a residual branch ending in BatchNorm gamma = 0, an all-zero input branch, a dead
filter) quantize to integer kernels: no float fallback, one BPU region, simulate bit-exact with the
quantized ONNX model, and the kernels themselves build for huge and tiny requantization ratios."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.config import config_from_dict
from hbtool.kernels import Add, AvgPool, Conv, ConvTranspose, LayerNorm, Linear, Lut, MatMul, MaxPool, Mul, ReduceMean, Requantize, Softmax
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.quant.weights import weight_scales
from hbtool.simulator.executor import Executor
from tests.helpers import make_model, run_ort, tensor, vinfo

TINY = 1e-8 / 127  # the scale a zero range used to get
S = 0.05


def _bn(name, x, y, c, gamma, rng):
    inits = {f"{name}_g": np.full(c, gamma, np.float32), f"{name}_b": np.zeros(c, np.float32),
             f"{name}_m": (rng.standard_normal(c) * 0.1).astype(np.float32), f"{name}_v": rng.uniform(0.5, 1.5, c).astype(np.float32)}
    return helper.make_node("BatchNormalization", [x] + list(inits), [y], name=name), inits


def residual_block(c: int = 8, seed: int = 0, dead_channel: bool = False, zero_input: bool = False, gamma: float = 0.0):
    """x -> conv-BN-ReLU -> conv-BN(gamma) -> Add(x) -> ReLU -> y; optionally a second input z
    (all zero during calibration) through its own conv, added in, and in conv1 a dead filter and
    a vanishing one (weights 1e-30: a denormal-sized scale that used to overflow the bias)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32)
    if dead_channel:
        w1[3] = 0.0
        w1[5] *= 1e-30
    w2 = (rng.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32)
    inits = {"w1": w1, "w2": w2}
    bn1, i1 = _bn("bn1", "c1", "b1", c, 1.0, rng)
    bn2, i2 = _bn("bn2", "c2", "b2", c, gamma, rng)
    inits.update(i1, **i2)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]), bn1,
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]), bn2,
        helper.make_node("Add", ["b2", "x"], ["s"], name="add"),
    ]
    inputs = [vinfo("x", [1, c, 8, 8])]
    if zero_input:
        inits["wz"] = (rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32)
        nodes += [helper.make_node("Conv", ["z", "wz"], ["cz"], name="convz"),
                  helper.make_node("Add", ["s", "cz"], ["s2"], name="addz")]
        inputs.append(vinfo("z", [1, c, 8, 8]))
    nodes.append(helper.make_node("Relu", ["s2" if zero_input else "s"], ["y"], name="relu"))
    return make_model(nodes, inputs, [vinfo("y", [1, c, 8, 8])], [tensor(k, v) for k, v in inits.items()])


def _pipeline(tmp: Path, model: onnx.ModelProto, name: str, zero_input: bool = False):
    path = tmp / f"{name}.onnx"
    onnx.save(model, str(path))
    rng = np.random.default_rng(1)
    names = ["x", "z"] if zero_input else ["x"]
    for n in names:
        d = tmp / f"cal_{n}"
        d.mkdir()
        for k in range(4):
            arr = np.zeros((1, 8, 8, 8), np.float32) if n == "z" else rng.standard_normal((1, 8, 8, 8)).astype(np.float32)
            np.save(d / f"{k}.npy", arr)
    sep = ";"
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(path), "working_dir": str(tmp / "wd"), "output_model_file_prefix": name},
        "input_parameters": {"input_name": sep.join(names), "input_shape": sep.join(["1x8x8x8"] * len(names)),
                             "input_type_train": sep.join(["featuremap"] * len(names)),
                             "input_type_rt": sep.join(["featuremap"] * len(names)),
                             "input_layout_train": sep.join(["NCHW"] * len(names)),
                             "norm_type": sep.join(["no_preprocess"] * len(names))},
        "calibration_parameters": {"cal_data_dir": sep.join(str(tmp / f"cal_{n}") for n in names), "calibration_type": "max"},
    }, base_dir=tmp)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    compiled = compile_model(cfg)
    return result, compiled, tmp / "wd" / f"{name}_quantized_model.onnx", path


def _check_clean_and_exact(result, compiled, quantized: Path, float_model: Path, zero_input: bool = False):
    assert result.program is not None
    assert [n.name for n in result.program.nodes if n.meta.get("fallback")] == []
    assert compiled.fallbacks == [] and compiled.cpu_subgraphs == []
    bpu = [n for n in compiled.program.nodes if n.meta.get("on") == "BPU"]
    assert {n.meta.get("subgraph") for n in bpu} == {0}
    assert {n.name for n in bpu} >= {"conv1", "conv2", "add"}
    ex = Executor(from_bytes(compiled.data))
    sess = ort.InferenceSession(str(quantized), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    cos = []
    for _ in range(3):
        feeds = {"x": rng.standard_normal((1, 8, 8, 8)).astype(np.float32)}
        if zero_input:
            feeds["z"] = np.zeros((1, 8, 8, 8), np.float32)
        got = ex.run(feeds)["y"]
        ref = sess.run(None, feeds)[0]
        assert np.array_equal(got, ref)
        f = run_ort(str(float_model), feeds)[0].ravel().astype(np.float64)
        g = got.ravel().astype(np.float64)
        cos.append(float(f @ g / (np.linalg.norm(f) * np.linalg.norm(g))))
    assert min(cos) > 0.999, cos


def test_zero_gamma_residual_block_stays_integer(tmp_path):
    result, compiled, q, f = _pipeline(tmp_path, residual_block(), "zg")
    _check_clean_and_exact(result, compiled, q, f)
    # the zero branch took the identity's scale, not the threshold floor
    plan = result.plan
    assert plan.tensors["b2"].scale == plan.tensors["x"].scale
    assert plan.tensors["b2"].method.endswith("+zero_range")


def test_all_zero_input_branch_stays_integer(tmp_path):
    result, compiled, q, f = _pipeline(tmp_path, residual_block(zero_input=True), "zi", zero_input=True)
    _check_clean_and_exact(result, compiled, q, f, zero_input=True)
    assert result.plan.tensors["z"].scale > 1e-4


def test_dead_weight_channel_stays_integer(tmp_path):
    result, compiled, q, f = _pipeline(tmp_path, residual_block(dead_channel=True, gamma=1.0), "dc")
    _check_clean_and_exact(result, compiled, q, f)
    conv1 = next(n for n in compiled.program.nodes if n.name == "conv1").meta["kernel"]
    assert np.all(conv1.weight[[3, 5]] == 0) and np.all(np.abs(conv1.bias) < 2**31)


def test_dead_filter_gets_a_scale_near_the_live_ones():
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    w[1] = 0.0
    w[2] *= 1e-30
    s = weight_scales(w, 0)
    assert np.all(s > 0) and s[1] == s[2] and s[1] >= s.max() * 2.0**-16 * 0.99


# ------------------------------------------------------------------ kernels on degenerate scales
def _exact(kernel, *xs):
    y = kernel.apply_numpy(*xs)
    model = kernel.onnx_model([list(x.shape) for x in xs])
    yo = run_ort(model, {f"x{i}": x.astype(np.float64) for i, x in enumerate(xs)})[0]
    assert np.array_equal(y, yo)
    return y


_rng = np.random.default_rng(3)
_W = _rng.integers(-127, 128, (4, 3, 3, 3))
_X8 = _rng.integers(-128, 128, (1, 3, 6, 6))
_V8 = _rng.integers(-128, 128, (2, 8))
_V16 = _rng.integers(-32768, 32768, (2, 8))
KERNELS = {
    "conv_zero_out": (lambda: Conv.build(np.zeros_like(_W), np.zeros(4, np.int64), S, np.full(4, 1 / 127), TINY, pads=[1] * 4), _X8),
    "conv_tiny_in": (lambda: Conv.build(_W, np.zeros(4, np.int64), TINY, np.full(4, 0.01), S, pads=[1] * 4), _X8),
    "linear_zero_out": (lambda: Linear.build(np.zeros((8, 4), np.int64), np.zeros(4, np.int64), S, np.full(4, 1 / 127), TINY), _V8),
    "conv_transpose_zero_out": (lambda: ConvTranspose.build(np.zeros((3, 2, 2, 2), np.int64), None, S, np.full(2, 1 / 127), TINY,
                                                             strides=[2, 2]), _X8),
    "matmul_zero_out": (lambda: MatMul.build(S, S, TINY, 8), _V8, _V8.T.copy()),
    "maxpool": (lambda: MaxPool.build([2, 2], [2, 2]), _X8),
    "add_zero_out": (lambda: Add.build(S, S, TINY), _V8, _V8),
    "add_tiny_in": (lambda: Add.build(TINY, S, S), _V8, _V8),
    "mul_zero_out": (lambda: Mul.build(S, S, TINY), _V8, _V8),
    "lut_zero_out": (lambda: Lut.build("sigmoid", S, 8, TINY, 8), _V8),
    "lut_tiny_in": (lambda: Lut.build("gelu", TINY, 16, S, 8, knot_bits=6), _V16),
    "avgpool_zero_out": (lambda: AvgPool.build([2, 2], S, TINY, 3, [2, 2]), _X8),
    "reducemean_zero_out": (lambda: ReduceMean.build([2, 3], 36, S, TINY), _X8),
    "layernorm_tiny_in": (lambda: LayerNorm.build(TINY, np.ones(8), np.zeros(8), 1e-5, S, 16, 8), _V16),
    "layernorm_zero_out": (lambda: LayerNorm.build(S, np.zeros(8), np.zeros(8), 1e-5, TINY, 16, 8), _V16),
    "softmax_tiny_in": (lambda: Softmax.build(TINY, 16, 16), _V16),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernels_build_on_zero_ranges_and_agree_on_zero_and_random_inputs(name):
    build, *xs = KERNELS[name]
    k = build()
    _exact(k, *[np.zeros_like(x) for x in xs])
    _exact(k, *xs)


@pytest.mark.parametrize("ratio", [2.0**15, 2e6, 3.7e9, 2.0**40, 1e30])
def test_requantize_amplifies_large_ratios_exactly(ratio):
    """A left-shifted multiplier: small accumulators map to round(acc * r), the rest saturate."""
    rq = Requantize.build(ratio, 16, acc_bound=2**40)
    acc = np.array([-(2**40), -3, -2, -1, 0, 1, 2, 3, 2**40], np.int64)
    y = _exact(rq, acc)
    want = np.clip(np.floor(acc.astype(np.float64) * min(ratio, 2.0**40) + 0.5), -32768, 32767)
    assert np.array_equal(y, want)
    assert np.all(rq.n >= 0)
    # the implemented ratio is within 2**-14 of the real one (up to the saturation cap)
    assert abs(float(rq.effective_ratio) / min(ratio, 2.0**40) - 1) < 2.0**-14


def test_requantize_tiny_ratio_builds_and_rounds_to_zero():
    rq = Requantize.build(1e-20, 8, acc_bound=2**40)
    acc = np.array([-(2**40), -1, 0, 1, 2**40], np.int64)
    assert np.array_equal(_exact(rq, acc), np.zeros(5))


def test_plan_gives_zero_ranges_the_neighbours_threshold_and_keeps_tiny_ranges():
    """Add(a, z): z calibrated to exactly zero takes the consumer side's threshold (a's, the sum's);
    Mul(z, b) -> w, a model output (zero too, no consumer): its producer's inputs decide, the larger of
    b and the already known ones; a tensor with a small range above ZERO_RANGE (1e-8) keeps its own
    threshold, one at or below it (1e-12) is numerically zero (tests/unit/quant/test_activations_decaying_to_denormals.py)."""
    from hbtool.ir.graph import Graph
    from hbtool.quant.observers import TensorStats
    from hbtool.quant.plan import build_plan

    g = Graph("g", 17)
    for t in ("a", "z", "s", "b", "w", "tiny", "t2", "nil", "n2"):
        g.set_value(t, (1, 4), np.float32)
    g.inputs = ["a", "z", "b", "tiny", "nil"]
    for name, op, ins, out in [("add", "Add", ["a", "z"], "s"), ("mul", "Mul", ["z", "b"], "w"), ("neg", "Neg", ["tiny"], "t2"),
                               ("neg2", "Neg", ["nil"], "n2")]:
        g.add_node(op, ins, [out], {}, name=name).meta["on"] = "BPU"
    g.outputs = ["s", "w", "t2", "n2"]
    stats = {}
    for t, v in {"a": 2.0, "s": 3.0, "z": 0.0, "b": 0.5, "w": 0.0, "tiny": 1e-7, "t2": 1e-7, "nil": 1e-12, "n2": 1e-12}.items():
        st = TensorStats(t)
        st.update(np.full((1, 4), v, np.float32) * np.array([1, -1, 0.5, 0], np.float32))
        stats[t] = st
    plan = build_plan(g, stats, "max", auto_int16=False)
    assert plan.tensors["z"].threshold == pytest.approx(3.0) and plan.tensors["z"].method == "max+zero_range"
    assert plan.tensors["w"].threshold == pytest.approx(0.5)  # b; z is itself zero-range, so not yet known
    assert plan.tensors["tiny"].threshold == pytest.approx(1e-7) and plan.tensors["tiny"].method == "max"
    assert plan.tensors["nil"].method == "max+zero_range" and plan.tensors["nil"].threshold == pytest.approx(1.0)
