"""simulate: the CLI, input checks, and the accelerated kernels against the kernels' numpy forms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hbtool.cli import main
from hbtool.kernels import Conv, Linear, Lut, MatMul, Requantize
from hbtool.simulator import accel

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "samples" / "data" / "digits_heldout.npz"


@pytest.fixture(scope="module")
def cnn_artifact(tmp_path_factory):
    from tests.test_compile import tiny_config

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
    r = _run(wd / "tiny_cnn.hbm", "--input", f"input={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out",
             "--compare", wd / "tiny_cnn_quantized_model.onnx")
    assert r.exit_code == 0, r.output
    assert "simulated 60 samples" in r.output and "100.000%" in r.output and "1.000000" in r.output
    logits = np.load(tmp_path / "out" / "logits.npy")
    assert logits.shape == (60, 10) and logits.dtype == np.float32
    labels = np.load(HELDOUT)["labels"][:60]
    assert (logits.argmax(1) == labels).mean() >= 0.95  # the float model: 98% on the first 200


def test_simulate_reads_a_folder_of_images(cnn_artifact):
    r = _run(cnn_artifact / "tiny_cnn.hbm", "--input", f"input={ROOT / 'samples' / 'data' / 'digits_cal'}",
             "--compare", cnn_artifact / "tiny_cnn_original_float_model.onnx")
    assert r.exit_code == 0, r.output
    assert "simulated 64 samples" in r.output
    cos = float(r.output.split("logits")[-1].split()[1].strip("│"))
    assert cos > 0.999


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
    r = _run(cnn_artifact / "tiny_cnn.hbm", "--input", f"input={path}", "--output-dir", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert message in r.output and "fix:" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_wrong_input_name_and_missing_input(cnn_artifact, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    r = _run(cnn_artifact / "tiny_cnn.hbm", "--input", f"image={tmp_path / 'x.npy'}")
    assert r.exit_code == 2 and "no input 'image'" in r.output and "input" in r.output
    r = _run(cnn_artifact / "tiny_cnn.hbm", "--input", "input")
    assert r.exit_code == 2 and "NAME=PATH" in r.output
    r = _run(cnn_artifact / "tiny_cnn.hbm", "--input", f"input={tmp_path / 'missing.npy'}")
    assert r.exit_code == 2 and "no such file" in r.output


def test_compare_model_with_other_inputs_is_refused(cnn_artifact, tmp_path):
    from tests.helpers import small_conv_model
    import onnx

    other = tmp_path / "other.onnx"
    onnx.save(small_conv_model(), other)
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    r = _run(cnn_artifact / "tiny_cnn.hbm", "--input", f"input={tmp_path / 'x.npy'}", "--compare", other)
    assert r.exit_code == 2 and "differ from the artifact" in r.output


# ------------------------------------------------------------------ accelerated kernels
RNG = np.random.default_rng(7)


def _edge_input(shape, bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = RNG.integers(lo, hi + 1, size=shape)
    flat = x.reshape(-1)
    flat[:4] = [lo, hi, 0, -1]
    return x


@pytest.mark.parametrize("in_bits, k, wmax", [(8, 64, 127), (16, 96, 127), (16, 1500, 127), (8, 3000, 127)])
def test_linear_fast_form_is_bit_exact(in_bits, k, wmax):
    w = RNG.integers(-wmax, wmax + 1, size=(k, 24))
    kern = Linear.build(w, RNG.integers(-5000, 5000, 24), 0.02, RNG.uniform(0.001, 0.01, 24), 0.7, in_bits=in_bits, out_bits=8)
    fast = accel.accelerate(kern)
    assert fast is not None
    x = _edge_input((1, 37, k), in_bits)
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


@pytest.mark.parametrize("group, cin, in_bits", [(1, 3, 8), (1, 16, 16), (8, 8, 8), (2, 8, 16)])
def test_conv_fast_form_is_bit_exact(group, cin, in_bits):
    w = RNG.integers(-127, 128, size=(8, cin // group, 3, 3))
    kern = Conv.build(w, RNG.integers(-900, 900, 8), 0.03, RNG.uniform(0.001, 0.01, 8), 0.5, strides=[2, 1],
                      pads=[1, 1, 0, 1], group=group, in_bits=in_bits, out_bits=8, relu=True)
    fast = accel.accelerate(kern)
    x = _edge_input((1, cin, 9, 11), in_bits)
    np.testing.assert_array_equal(fast(x), kern.apply_numpy(x))


@pytest.mark.parametrize("a_bits, b_bits, k", [(8, 8, 49), (16, 8, 49), (16, 16, 32)])
def test_matmul_fast_form_is_bit_exact(a_bits, b_bits, k):
    kern = MatMul.build(0.01, 0.02, 0.5, k, a_bits, b_bits, 8)
    fast = accel.accelerate(kern)
    a, b = _edge_input((2, 3, 7, k), a_bits), _edge_input((2, 3, k, 5), b_bits)
    np.testing.assert_array_equal(fast(a, b), kern.apply_numpy(a, b))


@pytest.mark.parametrize("bits", [8, 16])
def test_lut_table_is_bit_exact_on_every_code(bits):
    kern = Lut.build("gelu", 0.001 if bits == 16 else 0.05, bits, 0.01, bits, knot_bits=6)
    fast = accel.accelerate(kern)
    codes = np.arange(-(1 << (bits - 1)), 1 << (bits - 1)).reshape(-1, 8)
    np.testing.assert_array_equal(fast(codes), kern.apply_numpy(codes))


@pytest.mark.parametrize("rounding", ["half_up", "floor"])
def test_common_shift_requantize_equals_per_channel(rounding):
    ratios = np.array([1e-4, 3.7e-3, 0.5, 0.013])
    rq = Requantize.build(ratios, 8, axis=-1, acc_bound=2**31 - 1, rounding=rounding)
    fast = accel.fast_requantize(rq)
    assert fast is not rq.apply_trusted
    acc = RNG.integers(-2**31 + 1, 2**31 - 1, size=(500, 4))
    # exact ties of every channel
    acc[:4] = (np.asarray(rq.n) > 0) * (1 << np.maximum(np.asarray(rq.n) - 1, 0))
    np.testing.assert_array_equal(fast(acc.copy()), rq.apply_trusted(acc.copy()))
