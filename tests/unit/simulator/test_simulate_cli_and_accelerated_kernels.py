"""simulate: the CLI, input checks, and the accelerated kernels against the kernels' numpy forms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hbtool.cli import main
from hbtool.kernels import Add, Conv, LayerNorm, Linear, Lut, MatMul, MaxPool, Mul, Requantize, Softmax
from hbtool.simulator import accel
from tests.helpers import edge_codes

ROOT = Path(__file__).resolve().parents[3]
HELDOUT = ROOT / "samples" / "data" / "digits_heldout.npz"


@pytest.fixture(scope="module")
def cnn_artifact(tmp_path_factory):
    from tests.unit.compiler.test_passes_layout_memory_artifact import tiny_config

    tmp = tmp_path_factory.mktemp("cnn_sim")
    cfg = tiny_config(tmp, "tiny_cnn")
    r = CliRunner().invoke(main, ["compile", "-c", str(cfg)])
    assert r.exit_code == 0, r.output
    return tmp / "wd"


def _run(*args):
    return CliRunner().invoke(main, ["simulate", *map(str, args)])


def test_simulate_equals_the_quantized_model_and_writes_outputs(cnn_artifact, tmp_path):
    wd = cnn_artifact
    x = np.load(HELDOUT)["images"][:60].astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = _run(wd / "tiny_cnn.bin", "--input", f"input={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out",
             "--compare", wd / "tiny_cnn_quantized_model.onnx")
    assert r.exit_code == 0, r.output
    assert "simulated 60 samples" in r.output and "100.000%" in r.output and "1.000000" in r.output
    logits = np.load(tmp_path / "out" / "logits.npy")
    assert logits.shape == (60, 10) and logits.dtype == np.float32
    labels = np.load(HELDOUT)["labels"][:60]
    assert (logits.argmax(1) == labels).mean() >= 0.95  # the float model: 98% on the first 200


def test_simulate_reads_a_folder_of_images(cnn_artifact):
    r = _run(cnn_artifact / "tiny_cnn.bin", "--input", f"input={ROOT / 'samples' / 'data' / 'digits_cal'}",
             "--compare", cnn_artifact / "tiny_cnn_original_float_model.onnx")
    assert r.exit_code == 0, r.output
    assert "simulated 64 samples" in r.output
    cos = float(r.output.split("│ logits")[-1].split()[1].strip("│"))
    assert cos > 0.999


def _cosine(output: str) -> float:
    return float(output.split("│ logits")[-1].split()[1].strip("│"))


def test_compare_with_the_users_own_float_model_gets_the_artifacts_normalisation(cnn_artifact):
    """tiny_cnn.onnx takes (x - 127.5) / 127.5, the artifact raw pixels: fed the raw pixels the user's own
    model gave a cosine of a different computation; it is now normalised first, as the artifact does,
    and the table is the one against hbtool's original float model (which carries the step itself)."""
    images = f"input={ROOT / 'samples' / 'data' / 'digits_cal'}"
    own = _run(cnn_artifact / "tiny_cnn.bin", "--input", images, "--compare", ROOT / "samples" / "tiny" / "tiny_cnn.onnx")
    ours = _run(cnn_artifact / "tiny_cnn.bin", "--input", images, "--compare", cnn_artifact / "tiny_cnn_original_float_model.onnx")
    assert own.exit_code == 0 and ours.exit_code == 0, own.output + ours.output
    assert "got the artifact's (x - mean) * scale first" in " ".join(own.output.split())
    assert "got the artifact's" not in " ".join(ours.output.split())
    assert _cosine(own.output) == _cosine(ours.output) > 0.999


@pytest.mark.parametrize("make, message", [
    (lambda p: np.save(p, np.zeros((2, 3, 32, 31), np.float32)), "does not fit the input's shape"),
    (lambda p: np.save(p, np.zeros((2, 3, 32, 32), np.complex64)), "not numbers"),
    (lambda p: np.save(p, np.full((1, 3, 32, 32), np.nan, np.float32)), "NaN or Inf"),
    (lambda p: np.save(p, np.zeros((0, 3, 32, 32), np.float32)), "no samples"),
    (lambda p: p.write_bytes(b"not a numpy file"), "cannot read it as .npy"),
])
def test_bad_simulate_inputs_are_one_line_errors(cnn_artifact, tmp_path, make, message):
    path = tmp_path / "x.npy"
    make(path)
    r = _run(cnn_artifact / "tiny_cnn.bin", "--input", f"input={path}", "--output-dir", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert message in r.output and "fix:" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_wrong_input_name_and_missing_input(cnn_artifact, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    r = _run(cnn_artifact / "tiny_cnn.bin", "--input", f"image={tmp_path / 'x.npy'}")
    assert r.exit_code == 2 and "no input 'image'" in r.output and "input" in r.output
    r = _run(cnn_artifact / "tiny_cnn.bin", "--input", "input")
    assert r.exit_code == 2 and "NAME=PATH" in r.output
    r = _run(cnn_artifact / "tiny_cnn.bin", "--input", f"input={tmp_path / 'missing.npy'}")
    assert r.exit_code == 2 and "no such file" in r.output


def test_compare_model_with_other_inputs_is_refused(cnn_artifact, tmp_path):
    from tests.helpers import small_conv_model
    import onnx

    other = tmp_path / "other.onnx"
    onnx.save(small_conv_model(), other)
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    r = _run(cnn_artifact / "tiny_cnn.bin", "--input", f"input={tmp_path / 'x.npy'}", "--compare", other)
    assert r.exit_code == 2 and "differ from the artifact" in r.output


# ------------------------------------------------------------------ accelerated kernels
RNG = np.random.default_rng(7)


def _edge_input(shape, bits):
    return edge_codes(RNG, shape, bits)


@pytest.mark.parametrize("in_bits, k, wmax", [(8, 64, 127), (16, 96, 127), (16, 1500, 127), (8, 3000, 127)])
def test_linear_fast_form_is_bit_exact(in_bits, k, wmax):
    w = RNG.integers(-wmax, wmax + 1, size=(k, 24))
    kern = Linear.build(w, RNG.integers(-5000, 5000, 24), 0.02, RNG.uniform(0.001, 0.01, 24), 0.7, in_bits=in_bits, out_bits=8)
    fast = accel.accelerate(kern)
    assert fast is not None
    x = _edge_input((1, 37, k), in_bits)
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


class _SaturatingInt8Gemm:
    """onnxruntime's uint8 x int8 GEMM as pre-VNNI x86 kernels compute it: products of adjacent
    pairs summed in saturating int16 (vpmaddubsw), then in int32, minus the zero point's share."""

    def __init__(self, w):
        self.w = np.asarray(w, np.int64)

    def run(self, _, feeds):
        t = feeds["x"].astype(np.int64)
        K = t.shape[1]
        prods = t[:, :, None] * self.w[None]
        if K % 2:
            prods = np.concatenate([prods, np.zeros_like(prods[:, :1])], axis=1)
        pairs = np.clip(prods[:, 0::2] + prods[:, 1::2], -32768, 32767)
        return [(pairs.sum(axis=1) - 128 * self.w.sum(axis=0)).astype(np.int32)]


def test_integer_gemm_self_test_catches_saturating_kernels_and_only_those():
    big = RNG.integers(-127, 128, size=(64, 12))
    big[10:12, 3] = 120  # one same-signed pair that saturates at 255: 255 * 240 > 32767
    assert not accel._integer_gemm_is_exact(_SaturatingInt8Gemm(big), big)
    small = RNG.integers(-64, 65, size=(64, 12))  # |w1 + w2| <= 128: no pair can saturate
    assert accel._integer_gemm_is_exact(_SaturatingInt8Gemm(small), small)
    x = RNG.integers(0, 256, size=(500, 64)).astype(np.uint8)
    x[:4] = 255
    got = _SaturatingInt8Gemm(small).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, (x.astype(np.int64) - 128) @ small)


@pytest.mark.parametrize("in_bits", [8, 16])
@pytest.mark.parametrize("integer", [True, False])
def test_linear_integer_and_float_forms_are_bit_exact(monkeypatch, in_bits, integer):
    """The uint8 x int8 GEMM path (forced on with weights no CPU's kernel can saturate, |w| <= 64)
    and the float path the self-test falls back to."""
    monkeypatch.setattr(accel, "_integer_gemm_is_exact", lambda session, w: integer)
    monkeypatch.setattr(accel, "_cpu_integer_gemm_never_saturates", lambda: integer)  # the once-per-process probes
    monkeypatch.setattr(accel, "_cpu_unsigned_gemm_is_exact", lambda: False)
    wmax = 64 if integer else 127
    w = RNG.integers(-wmax, wmax + 1, size=(300, 24))
    kern = Linear.build(w, RNG.integers(-5000, 5000, 24), 0.02, RNG.uniform(0.001, 0.01, 24), 0.7, in_bits=in_bits, out_bits=16)
    fast = accel.accelerate(kern)
    assert ("integer" in fast.__code__.co_freevars) == integer
    x = _edge_input((2, 9, 300), in_bits)
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


def test_linear_float64_form_when_no_digit_split_fits(monkeypatch):
    def no_plan(*_):
        raise ValueError("no split")

    monkeypatch.setattr(accel, "plan_float_conv", no_plan)
    monkeypatch.setattr(accel, "_integer_linear", lambda w, threads: None)
    w = RNG.integers(-127, 128, size=(700, 9))
    kern = Linear.build(w, None, 0.02, RNG.uniform(0.001, 0.01, 9), 0.7, in_bits=16, out_bits=16)
    fast = accel.accelerate(kern)
    x = _edge_input((3, 5, 700), 16)
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


@pytest.mark.parametrize("group, cin, in_bits", [(1, 3, 8), (1, 16, 16), (8, 8, 8), (2, 8, 16)])
def test_conv_fast_form_is_bit_exact(group, cin, in_bits):
    w = RNG.integers(-127, 128, size=(8, cin // group, 3, 3))
    kern = Conv.build(w, RNG.integers(-900, 900, 8), 0.03, RNG.uniform(0.001, 0.01, 8), 0.5, strides=[2, 1],
                      pads=[1, 1, 0, 1], group=group, in_bits=in_bits, out_bits=8, relu=True)
    fast = accel.accelerate(kern)
    assert fast is not None
    x = _edge_input((1, cin, 9, 11), in_bits)
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


@pytest.mark.parametrize("stride", [1, 2])
def test_pointwise_int8_conv_runs_as_exact_integer_gemm(stride):
    w = RNG.integers(-127, 128, size=(24, 40, 1, 1))
    w[0] = 127  # every pair at the largest same-sign products
    w[1] = -127
    kern = Conv.build(w, RNG.integers(-900, 900, 24), 0.03, RNG.uniform(0.001, 0.01, 24), 0.5, strides=[stride, stride],
                      in_bits=8, out_bits=8)
    assert accel._pointwise_integer_conv(kern, np.asarray(kern.weight), {"kernel_shape": [1, 1], "strides": [stride] * 2}, None)
    fast = accel.accelerate(kern)
    x = _edge_input((2, 40, 9, 11), 8)
    x[0, :, 0, 0] = 127
    x[0, :, 0, 1] = -128
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


@pytest.mark.parametrize("kernel_shape, strides, pads, dilations, ceil", [((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
                                                                         ((2, 3), (2, 1), (0, 1, 1, 0), (1, 2), True),
                                                                         ((3, 3), (3, 3), (0, 0, 0, 0), (1, 1), True)])
def test_maxpool_fast_form_is_bit_exact(kernel_shape, strides, pads, dilations, ceil):
    kern = MaxPool.build(kernel_shape, strides, pads, dilations, ceil)
    x = _edge_input((2, 3, 10, 11), 16)
    np.testing.assert_array_equal(accel.accelerate(kern)(x), kern.apply_numpy(x))


@pytest.mark.parametrize("a_bits, b_bits, k", [(8, 8, 49), (16, 8, 49), (8, 16, 300), (16, 16, 32), (16, 16, 2000)])
def test_matmul_fast_form_is_bit_exact(a_bits, b_bits, k):
    kern = MatMul.build(0.01, 0.02, 0.5, k, a_bits, b_bits, 8)
    fast = accel.accelerate(kern)
    assert fast is not None
    a, b = _edge_input((2, 3, 7, k), a_bits), _edge_input((2, 3, k, 5), b_bits)
    np.testing.assert_array_equal(fast(a, b), kern.apply_numpy(a, b))


@pytest.mark.parametrize("bits", [8, 16])
def test_lut_table_is_bit_exact_on_every_code(bits):
    kern = Lut.build("gelu", 0.001 if bits == 16 else 0.05, bits, 0.01, bits, knot_bits=6)
    fast = accel.accelerate(kern)
    codes = np.arange(-(1 << (bits - 1)), 1 << (bits - 1)).reshape(-1, 8)
    np.testing.assert_array_equal(fast(codes), kern.apply_numpy(codes))
    writes = accel.writes_through(fast)
    if accel.narrowable(writes, np.dtype(np.float32)):  # written as float32 for a float product reading it
        writes.out_dtype = np.dtype(np.float32)
        got = fast(codes)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.astype(np.int64), kern.apply_numpy(codes))


ROUNDINGS = ["half_up", "floor", "half_even", "half_away"]


def _ties(n, shape):
    """Accumulators at exact rounding ties (and one past) of every shift in ``n``."""
    n = np.asarray(n)
    half = np.where(n > 0, 1 << np.maximum(n - 1, 0), 0)
    return np.broadcast_to(half, shape) * RNG.choice([-3, -1, 1, 3], size=shape)


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("per_col", [True, False])
def test_fused_requantize_equals_numpy_form(rounding, per_col):
    ratios = np.array([1e-4, 3.7e-3, 0.5, 0.013])
    rq = Requantize.build(ratios, 8, axis=-1 if per_col else -2, acc_bound=2**31 - 1, rounding=rounding)
    params = accel.RequantParams(rq, 4)
    acc = RNG.integers(-2**31 + 1, 2**31 - 1, size=(100, 4) if per_col else (100, 6))
    acc[:4] = _ties(rq.n, acc[:4].shape)
    bias = RNG.integers(-1000, 1000, 4)
    if per_col:
        want = rq.apply_trusted(acc + bias)
    else:  # channel of row r is r % 4
        want = rq.apply_trusted((acc + np.tile(bias, 25)[:, None]).reshape(25, 4, 6)).reshape(100, 6)
    got = params.apply((acc.astype(np.float64),), np.ones(1, np.int64), bias, per_col)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64])
@pytest.mark.parametrize("rounding", ["floor", "half_up"])
@pytest.mark.parametrize("per_col", [True, False])
def test_one_part_requantize_loop_equals_numpy_form(monkeypatch, dtype, rounding, per_col):
    """The one-part loops (an int8 GEMM's int32, an unsplit float product) on ties, saturation both ways and
    negative accumulators, per column and per row, at the dtypes the product routes return."""
    ratios = np.array([1e-4, 3.7e-3, 0.5, 0.013, 2.0])
    rq = Requantize.build(ratios, 8, axis=-1 if per_col else -2, acc_bound=2**24, rounding=rounding)
    params = accel.RequantParams(rq, 5)
    acc = RNG.integers(-2**24 + 2000, 2**24 - 2000, size=(60, 5) if per_col else (60, 7))
    acc[:4] = _ties(rq.n, acc[:4].shape) if per_col else _ties(rq.n[:1], acc[:4].shape)
    acc[4:8] = RNG.integers(-300, 300, acc[4:8].shape)  # around zero: both signs, unsaturated for the large ratios
    bias = RNG.integers(-1000, 1000, 5)
    used = []
    for name in ("requantize_cols_one", "requantize_rows_one", "requantize_cols", "requantize_rows", "requantize_parts"):
        monkeypatch.setattr(accel.fused, name, lambda *a, _f=getattr(accel.fused, name), _n=name: (used.append(_n), _f(*a))[1])
    if per_col:
        want = rq.apply_trusted(acc + bias)
    else:  # channel of row r is r % 5
        want = rq.apply_trusted((acc + np.tile(bias, 12)[:, None]).reshape(12, 5, 7)).reshape(60, 7)
    got = params.apply((acc.astype(dtype),), np.ones(1, np.int64), bias, per_col)
    assert used == ["requantize_cols_one" if per_col else "requantize_rows_one"]
    assert got.dtype == np.int16 and {-128, 127} <= set(np.unique(got).tolist())
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_fused_requantize_with_accumulator_clamp_and_pre_shift(rounding):
    rq = Requantize.build(1e-9, 16, acc_bound=2**51, rounding=rounding)
    assert rq.clamp_acc is not None and rq.pre_shift is not None
    acc = RNG.integers(-2**51, 2**51, size=(64, 33))
    acc[0, :8] = [2**51, -2**51, 0, 1, -1, int(rq.clamp_acc), -int(rq.clamp_acc), 2**47 + 2**20]
    got = accel.RequantParams(rq, 1).apply((acc,), np.ones(1, np.int64), np.zeros(1, np.int64), True)
    np.testing.assert_array_equal(got, rq.apply_trusted(acc))


def test_digit_parts_recombine_with_factors():
    rq = Requantize.build(2e-6, 8, acc_bound=2**40)
    hi, lo = RNG.integers(-128, 129, (30, 7)), RNG.integers(-128, 128, (30, 7))
    got = accel.RequantParams(rq, 1).apply((hi.astype(np.float32), lo.astype(np.float32)), np.array([256, 1]),
                                           np.array([5]), True)
    np.testing.assert_array_equal(got, rq.apply_trusted(256 * hi + lo + 5))


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("in_bits, out_bits, n, ptf", [(16, 16, 96, False), (8, 8, 48, False), (16, 8, 768, False), (8, 16, 64, True)])
def test_layernorm_fast_form_is_bit_exact(rounding, in_bits, out_bits, n, ptf):
    alpha = RNG.integers(0, 4, n) if ptf else None
    kern = LayerNorm.build(0.01, RNG.normal(1, 0.3, n), RNG.normal(0, 0.3, n), 1e-5, 0.02, in_bits, out_bits,
                           ptf_alpha=alpha, rounding=rounding)
    fast = accel.accelerate(kern)
    assert fast is not None
    lo, hi = -(1 << (in_bits - 1)) >> 3, ((1 << (in_bits - 1)) - 1) >> 3
    q = RNG.integers(lo, hi + 1, size=(2, 13, n))
    q[0, 0] = 7  # a constant row
    q[0, 1] = _edge_input((n,), in_bits) >> 3
    got = fast(q.astype(np.int16))
    np.testing.assert_array_equal(got, kern.apply_numpy(q))
    # a transposed (non-contiguous) input
    qt = np.ascontiguousarray(np.swapaxes(q, 1, 2))
    np.testing.assert_array_equal(fast(np.swapaxes(qt, 1, 2)), kern.apply_numpy(q))


def test_layernorm_fast_form_with_eps_shift():
    kern = LayerNorm.build(1e-9, None, None, 1e-1, 0.01, 16, 8, n=32)
    assert kern.d_shift > 0
    q = _edge_input((9, 32), 16)
    np.testing.assert_array_equal(accel.accelerate(kern)(q), kern.apply_numpy(q))


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("in_bits, out_bits, log2", [(16, 16, 0), (16, 8, 0), (8, 8, 0), (16, 8, 4), (8, 8, 3)])
def test_softmax_fast_form_is_bit_exact(rounding, in_bits, out_bits, log2):
    kern = Softmax.build(0.004 if in_bits == 16 else 0.1, in_bits, out_bits, rounding=rounding, log2_bits=log2)
    fast = accel.accelerate(kern)
    assert fast is not None
    q = _edge_input((3, 5, 49), in_bits)
    qmin = -(1 << (in_bits - 1))
    q[0, 0, :20] = qmin  # masked logits
    q[0, 1, :] = qmin  # a fully masked row
    q[0, 2, :] = 3  # a constant row
    np.testing.assert_array_equal(fast(q), kern.apply_numpy(q))


@pytest.mark.parametrize("a_shape, b_shape", [((2, 5, 7), (2, 5, 7)), ((4, 3, 7), (3, 7)), ((3, 7), (4, 3, 7)),
                                              ((2, 3, 4, 7), (3, 1, 7)), ((2, 5, 7), (1,)), ((6, 1), (2, 6, 9))])
@pytest.mark.parametrize("sub", [False, True])
def test_add_fast_form_broadcasts_like_numpy(a_shape, b_shape, sub):
    kern = Add.build(0.02, 0.003, 0.025, 16, 8, 8, sub=sub)
    fast = accel.accelerate(kern)
    a, b = _edge_input(a_shape, 16), _edge_input(b_shape, 8)
    got = fast(a.astype(np.int16), b.astype(np.int8))
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, kern.apply_numpy(a, b))


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_add_fast_form_per_channel_scales(rounding):
    s_a, s_out = RNG.uniform(0.01, 0.05, 7), 2.0 ** RNG.integers(0, 3, 7) * 0.01
    kern = Add.build(s_a, 0.004, s_out, 16, 16, 16, relu=True, rounding=rounding)
    a, b = _edge_input((11, 7), 16), _edge_input((11, 7), 16)
    np.testing.assert_array_equal(accel.accelerate(kern)(a, b), kern.apply_numpy(a, b))


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_mul_fast_form_is_bit_exact(rounding):
    kern = Mul.build(0.02, 0.0003, 0.01, 8, 16, 8, rounding=rounding)
    fast = accel.accelerate(kern)
    assert fast is not None
    a, b = _edge_input((3, 49, 20), 8), _edge_input((49, 20), 16)
    np.testing.assert_array_equal(fast(a, b), kern.apply_numpy(a, b))


def test_every_hot_kernel_of_the_tiny_models_has_a_fast_form(cnn_artifact, tmp_path):
    """A fast form that fails to build falls back silently to numpy; this keeps the fallbacks to the known few."""
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor
    from tests.unit.compiler.test_passes_layout_memory_artifact import tiny_config

    cfg = tiny_config(tmp_path, "tiny_swin")
    assert CliRunner().invoke(main, ["compile", "-c", str(cfg)]).exit_code == 0
    slow = set()
    for art in (cnn_artifact / "tiny_cnn.bin", tmp_path / "wd" / "tiny_swin.bin"):
        for step in Executor(read_artifact(art)).steps:
            kernel = step.node.meta.get("kernel")
            if kernel is not None and accel.accelerate(kernel) is None:
                slow.add(type(kernel).__name__)
    assert slow <= {"Quantize", "Dequantize", "ReduceMean", "AvgPool", "Log2MatMul"}, slow


def test_thread_count_changes_speed_not_numbers(cnn_artifact):
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator import fused
    from hbtool.simulator.executor import Executor

    art = read_artifact(cnn_artifact / "tiny_cnn.bin")
    # 32 samples per pass: tensors big enough for the loops to split their rows over threads
    x = {"input": np.load(HELDOUT)["images"][:32].astype(np.float32)}
    try:
        one = Executor(art, threads=1).run(x)
        assert fused.threads() == 1
        three = Executor(art, threads=3).run(x)
        assert fused.threads() == 3
    finally:
        fused.set_threads(None)
    for name, y in Executor(art).run(x).items():
        np.testing.assert_array_equal(one[name], y)
        np.testing.assert_array_equal(three[name], y)
