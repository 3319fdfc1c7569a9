"""The 4-bit path (issue 14, docs/int4.md): packing, the uint4/int4 x int4 kernels, the node choice,
the trained tiny CNN end to end (accuracy, weight bytes, simulate == quantized ONNX bit for bit),
damaged artifacts, the cost model and QAT."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from hbtool.errors import ConfigError, InputError
from hbtool.kernels import Conv, Linear, RangeError
from hbtool.kernels.packing import PackedBlobError, pack_int4, unpack_int4
from tests.helpers import featuremap_config, make_model, tensor, vinfo

ROOT = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------- packing
def test_nibble_order_round_trip_and_damaged_blobs():
    q = np.array([1, -1, 7, -8, 3], np.int64)
    data = pack_int4(q)
    assert data == bytes([0xF1, 0x87, 0x03])  # element 2i low nibble, 2i+1 high nibble, last high nibble 0
    assert np.array_equal(unpack_int4(data, [5]), q)
    rng = np.random.default_rng(0)
    w = rng.integers(-8, 8, (7, 3, 3, 3))
    assert np.array_equal(unpack_int4(pack_int4(w), w.shape), w)
    with pytest.raises(PackedBlobError, match="holds 2 bytes, but shape \\[5\\] needs 3"):
        unpack_int4(data[:2], [5])
    with pytest.raises(PackedBlobError, match="unused last nibble"):
        unpack_int4(bytes([0xF1, 0x87, 0x53]), [5])
    with pytest.raises(ValueError, match="must lie in"):
        pack_int4(np.array([8]))


# --------------------------------------------------------------------------- kernels
def _onnx_run(kernel, x: np.ndarray) -> np.ndarray:
    model = kernel.onnx_model([list(x.shape)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x0": x.astype(np.float64)})[0]


@pytest.mark.parametrize("input_range", [(0, 15), (-8, 7)])
def test_4bit_conv_and_linear_are_exact_in_both_forms(input_range):
    rng = np.random.default_rng(1)
    w = rng.integers(-7, 8, (6, 4, 3, 3))
    b = rng.integers(-300, 300, 6)
    x = rng.integers(input_range[0], input_range[1] + 1, (2, 4, 7, 7))
    conv = Conv.build(w, b, 0.05, np.full(6, 0.01), 0.02, pads=[1, 1, 1, 1], weight_bits=4, input_range=input_range, lo=0, hi=15)
    acc = conv.accumulate_numpy(x)
    # the integer convolution done directly: every uint4/int4 x int4 product and the int32 bias
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros_like(acc)
    for i in range(7):
        for j in range(7):
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + 3, j:j + 3], w)
    assert np.array_equal(acc, ref + b[None, :, None, None])
    y = conv.apply_numpy(x)
    assert y.min() >= 0 and y.max() <= 15 and len(np.unique(y)) > 4
    assert np.array_equal(_onnx_run(conv, x), y)
    lin = Linear.build(rng.integers(-7, 8, (12, 5)), rng.integers(-50, 50, 5), 0.1, np.full(5, 0.02), 0.03, weight_bits=4,
                       input_range=input_range)
    xl = rng.integers(input_range[0], input_range[1] + 1, (3, 12))
    assert np.array_equal(_onnx_run(lin, xl), lin.apply_numpy(xl))


def test_4bit_kernels_refuse_wide_weights_and_inputs():
    w = np.full((2, 1, 1, 1), 9)
    with pytest.raises(RangeError, match="int4"):
        Conv.build(w, None, 1.0, 1.0, 1.0, weight_bits=4)
    conv = Conv.build(np.ones((2, 1, 1, 1), np.int64), None, 1.0, 1.0, 1.0, weight_bits=4, input_range=(0, 15))
    with pytest.raises(RangeError, match="4-bit code range"):
        conv.apply_numpy(np.full((1, 1, 2, 2), 16))


# --------------------------------------------------------------------------- the trained sample
def _tiny_cfg(tmp: Path, precision: str, **cal):
    from hbtool.config import load_config

    return load_config(ROOT / "configs" / "tiny_cnn.yaml", overrides={
        "model_parameters": {"working_dir": str(tmp / precision), **cal.pop("model", {})},
        "calibration_parameters": {"default_precision": precision, "auto_int16": False, **cal}})


def _compile(cfg):
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.quant.calibrate import run_calibration, write_outputs

    calibration = run_calibration(cfg)
    write_outputs(cfg, calibration, "")
    compiled = compile_model(cfg)
    return calibration, compiled, from_bytes(compiled.data)


def _kernels(art) -> dict:
    return {n["name"]: n["meta"]["kernel"] for n in art.header["program"]["nodes"] if "kernel" in (n.get("meta") or {})}


def _weight_bytes(art) -> int:
    return sum((k.weight.size + 1) // 2 if k.weight_bits == 4 else k.weight.size for k in _kernels(art).values() if hasattr(k, "weight_bits"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("int4_tiny")
    return {p: (_tiny_cfg(tmp, p), *_compile(_tiny_cfg(tmp, p))) for p in ("int8", "int4")}


def test_tiny_cnn_int4_accuracy_bytes_and_bit_exact_simulation(tiny):
    from hbtool.simulator.executor import Executor

    held = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")
    images, labels = held["images"].astype(np.float32), held["labels"]
    cfg4, cal4, _, art4 = tiny["int4"]
    kernels = _kernels(art4)
    four = {n for n, k in kernels.items() if getattr(k, "weight_bits", 8) == 4}
    assert four == {"/features/features.3/Conv", "/features/features.7/Conv", "/features/features.10/Conv", "/features/features.14/Conv"}
    assert all(kernels[n].input_range == (0, 15) for n in four)  # post-ReLU inputs: uint4
    assert kernels["/features/features.0/Conv"].weight_bits == 8 and kernels["/features/features.0/Conv"].requant.hi == 15  # writes uint4
    kept = cal4.options["int4"]["kept_int8"]
    assert kept["/features/features.0/Conv"].startswith("first layer") and kept["/head/Gemm"].startswith("output layer")
    assert sum(e["kind"] == "int4" for e in art4.blob_index) == 4
    ratio = _weight_bytes(art4) / _weight_bytes(tiny["int8"][3])
    assert ratio <= 0.55, ratio
    top1 = {}
    for p, (cfg, *_rest) in tiny.items():
        sess = ort.InferenceSession(str(Path(cfg.model.working_dir) / "tiny_cnn_quantized_model.onnx"), providers=["CPUExecutionProvider"])
        pred = np.array([int(sess.run(None, {"input": images[i:i + 1]})[0].argmax()) for i in range(len(images))])
        top1[p] = float(np.mean(pred == labels))
    assert top1["int4"] >= top1["int8"] - 0.01, top1
    ex = Executor(art4)
    sess = ort.InferenceSession(str(Path(cfg4.model.working_dir) / "tiny_cnn_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    for i in range(0, 40, 2):
        got = ex.run({"input": images[i:i + 1]})[ex.output_names[0]]
        assert np.array_equal(got, sess.run(None, {"input": images[i:i + 1]})[0])


def test_calibrated_model_keeps_the_4bit_plan(tiny):
    from hbtool.ir.onnx_import import import_onnx
    from hbtool.quant.calibrated_model import extract_plan

    cfg, cal, *_ = tiny["int4"]
    _, plan, weights = extract_plan(import_onnx(Path(cfg.model.working_dir) / "tiny_cnn_calibrated_model.onnx"))
    assert sorted(plan.weight_bits.values()) == [4, 4, 4, 4]
    codes = {t: q.code_range for t, q in plan.tensors.items() if q.code_range}
    assert set(codes.values()) == {(0, 15)} and len(codes) >= 4
    for w in plan.weight_bits:  # int4 MSE scales travel with the weights
        assert np.allclose(weights[w][0], cal.weight_scales[w][0])


def test_perf_shows_where_4_bits_pay(tiny):
    from hbtool.perf.run import estimate

    ops8 = {o.name: o for o in estimate(tiny["int8"][3].header, None).ops}
    ops4 = {o.name: o for o in estimate(tiny["int4"][3].header, None).ops}
    conv = "/features/features.14/Conv"
    assert ops4[conv].components["tensor"] < 0.6 * ops8[conv].components["tensor"]
    assert ops4[conv].weight_bytes < ops8[conv].weight_bytes
    assert "uint4 x int4" in ops4[conv].note and "faster than int8" in ops4[conv].note
    assert "uint4" not in ops4["/head/Gemm"].note


def test_a_tensor_bound_layer_gains_and_an_overhead_bound_one_does_not(tmp_path):
    """A 64->64 3x3 conv at 56x56 is tensor-bound: 4 bits pay; the 2x2 one beside it is overhead-bound."""
    from hbtool.perf.run import estimate

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for k, (cin, cout) in enumerate([(3, 64), (64, 64), (64, 8), (8, 8)]):
        inits += [tensor(f"w{k}", (rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(np.float32))]
        nodes += [helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], name=f"conv{k}", pads=[1, 1, 1, 1], strides=[1, 1] if k < 3 else [28, 28]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}")]
        x = f"r{k}"
    nodes.append(helper.make_node("Flatten", [x], ["y"], name="flat"))
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 56, 56])], [vinfo("y", [1, 8 * 2 * 2])], inits), tmp_path / "m.onnx")
    art = {}
    for p in ("int8", "int4"):
        cfg = _featuremap_cfg(tmp_path, p, [1, 3, 56, 56])
        art[p] = _compile(cfg)[2]
    ops8 = {o.name: o for o in estimate(art["int8"].header, None).ops}
    ops4 = {o.name: o for o in estimate(art["int4"].header, None).ops}
    assert _kernels(art["int4"])["conv1"].weight_bits == 4 and _kernels(art["int4"])["conv2"].weight_bits == 4
    assert ops8["conv1"].bound_by == "tensor" and ops4["conv1"].cycles < 0.7 * ops8["conv1"].cycles
    assert "faster than int8" in ops4["conv1"].note


def _featuremap_cfg(tmp: Path, precision: str, shape, node_info=None, march: str = "bayes"):
    """``tmp/m.onnx`` as a featuremap config (through api.load_config), calibrated on random data, into ``tmp/<precision>``."""
    overrides = {"model_parameters.march": march, "input_parameters.input_shape": "x".join(map(str, shape)),
                 "calibration_parameters": {"calibration_type": "skip", "num_samples": 4, "default_precision": precision}}
    if node_info:
        overrides["model_parameters.node_info"] = node_info
    return featuremap_config(tmp, tmp / "m.onnx", working_dir=precision, **overrides)


# --------------------------------------------------------------------------- config and rules
def _signed_model(tmp: Path) -> None:
    """conv0 -> conv1 (signed input: no ReLU between) -> relu -> conv2 -> y."""
    rng = np.random.default_rng(3)
    inits = [tensor(f"w{k}", (rng.standard_normal((8, 8 if k else 3, 3, 3)) * 0.2).astype(np.float32)) for k in range(3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 8, 8, 8])], inits), tmp / "m.onnx")


def test_signed_inputs_take_int4_and_forcing_works(tmp_path):
    _signed_model(tmp_path)
    from hbtool.simulator.executor import Executor

    cfg = _featuremap_cfg(tmp_path, "int8", [1, 3, 8, 8], node_info={"conv1": {"InputType": "int4", "WeightType": "int4"},
                                                                       "conv2": {"InputType": "uint4"},
                                                                       "conv0": {"WeightType": "int4"}})
    cal, _, art = _compile(cfg)
    k = _kernels(art)
    assert k["conv1"].input_range == (-8, 7) and k["conv1"].weight_bits == 4
    assert k["conv2"].input_range == (0, 15) and k["conv2"].weight_bits == 4  # the output layer, forced
    assert k["conv0"].input_range is None and k["conv0"].weight_bits == 4     # int8 x int4: the first layer, forced
    assert k["conv0"].requant.lo == -8 and k["conv0"].requant.hi == 7         # it writes conv1's int4 codes
    ex = Executor(art)
    sess = ort.InferenceSession(str(tmp_path / "int8" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        assert np.array_equal(ex.run({"x": x})["y"], sess.run(None, {"x": x})[0])


def test_bad_4bit_requests_are_one_line_errors(tmp_path):
    from hbtool.quant.calibrate import run_calibration

    _signed_model(tmp_path)
    with pytest.raises(InputError, match="march 'bernoulli2' has no 4-bit tensor-unit path"):
        run_calibration(_featuremap_cfg(tmp_path, "int4", [1, 3, 8, 8], march="bernoulli2"))
    with pytest.raises(InputError, match="march 'bayes-e' has no 4-bit"):
        run_calibration(_featuremap_cfg(tmp_path, "int8", [1, 3, 8, 8], march="bayes-e", node_info={"conv1": {"InputType": "int4"}}))
    with pytest.raises(InputError, match="uint4, but its input 'c0' takes negative values"):
        run_calibration(_featuremap_cfg(tmp_path, "int8", [1, 3, 8, 8], node_info={"conv1": {"InputType": "uint4"}}))
    with pytest.raises(InputError, match="conv0.*cannot take 4 bits: its input is written by an op that cannot clamp"):
        run_calibration(_featuremap_cfg(tmp_path, "int8", [1, 3, 8, 8], node_info={"conv0": {"InputType": "uint4"}}))
    with pytest.raises(ConfigError, match="InputType"):
        _featuremap_cfg(tmp_path, "int8", [1, 3, 8, 8], node_info={"conv1": {"InputType": "uint8"}})
    with pytest.raises(ConfigError, match="WeightType"):
        _featuremap_cfg(tmp_path, "int8", [1, 3, 8, 8], node_info={"conv1": {"WeightType": "int2"}})
    with pytest.raises(ConfigError, match="default_precision"):
        _featuremap_cfg(tmp_path, "int2", [1, 3, 8, 8])


def test_a_damaged_packed_weight_blob_is_a_clear_error():
    from hbtool.compiler.artifact import _ALIGN, _DIGEST, _FIXED, MAGIC, ArtifactError, from_bytes, to_bytes

    conv = Conv.build(np.array([[[[1]]], [[[-3]]], [[[7]]]]), None, 1.0, 1.0, 1.0, weight_bits=4)
    data = to_bytes({"k": conv})
    assert np.array_equal(from_bytes(data).header["k"].weight, conv.weight)
    _, version, flags, hlen, blen = _FIXED.unpack_from(data, 0)
    assert version == 2 and _FIXED.unpack_from(to_bytes({"k": Conv.build(conv.weight, None, 1.0, 1.0, 1.0)}), 0)[1] == 1
    body = json.loads(data[_FIXED.size:_FIXED.size + hlen])
    entry = next(e for e in body["blobs"] if e["kind"] == "int4")
    assert entry["nbytes"] == 2
    entry["nbytes"] = 1  # a short blob whose checksum is right: only the unpacking can tell
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    blobs = data[_FIXED.size + hlen + (-(_FIXED.size + hlen)) % _ALIGN:-_DIGEST]
    head = _FIXED.pack(MAGIC, version, flags, len(text), len(blobs))
    payload = head + text + b"\0" * ((-(len(head) + len(text))) % _ALIGN) + blobs
    with pytest.raises(ArtifactError, match="packed int4 weight blob .* holds 1 bytes, but shape \\[3, 1, 1, 1\\] needs 2"):
        from_bytes(payload + hashlib.sha256(payload).digest())


# --------------------------------------------------------------------------- QAT
def test_qat_trains_int4_nodes_with_the_same_kernels(tiny, tmp_path):
    import torch

    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import calibrated_path, compile_model
    from hbtool.qat.train import build_model, run_qat
    from hbtool.simulator.executor import Executor

    cfg, cal, _, art = tiny["int4"]
    held = np.load(ROOT / "samples" / "data" / "digits_heldout.npz")
    x = held["images"][:4].astype(np.float32)
    module = build_model(cfg, cal)
    with torch.no_grad():
        got = module(torch.from_numpy(x))[0].numpy()
    ex = Executor(art)
    sim = np.concatenate([ex.run({"input": x[i:i + 1]})[ex.output_names[0]] for i in range(4)])
    assert np.allclose(got, sim, atol=1e-6)  # the QAT module runs the int4 kernels' exact values
    from hbtool.config import load_config

    qcfg = load_config(ROOT / "configs" / "tiny_cnn.yaml", overrides={
        "model_parameters": {"working_dir": str(tmp_path / "qat")},
        "calibration_parameters": {"default_precision": "int4", "auto_int16": False},
        "qat_parameters": {"steps": 2, "batch_size": 8, "lr": 1e-3, "optimizer": "adam", "train_scales": True}})
    result = run_qat(qcfg, calibration=cal)
    Path(calibrated_path(qcfg)).parent.mkdir(parents=True, exist_ok=True)
    import shutil

    shutil.copy(result.path, calibrated_path(qcfg))
    qart = from_bytes(compile_model(qcfg).data)
    assert sum(getattr(k, "weight_bits", 8) == 4 for k in _kernels(qart).values()) == 4
    qex = Executor(qart)
    with torch.no_grad():
        trained = result.model(torch.from_numpy(x[:1]))[0].numpy()
    assert np.allclose(qex.run({"input": x[:1]})[qex.output_names[0]], trained, atol=1e-6)


def test_node_info_int8_wins_over_default_precision_int4(tmp_path):
    from hbtool.quant.calibrate import run_calibration

    _signed_model(tmp_path)
    cal = run_calibration(_featuremap_cfg(tmp_path, "int4", [1, 3, 8, 8], node_info={"conv1": {"InputType": "int8"}}))
    assert cal.options["int4"]["applied"] == {}
    assert cal.options["int4"]["kept_int8"]["conv1"].startswith("node_info")
    assert cal.options["int4"]["kept_int8"]["conv0"].startswith("first layer")
    assert cal.options["int4"]["kept_int8"]["conv2"].startswith("output layer")


def test_an_activation_table_writes_4bit_codes(tmp_path):
    """conv0 -> HardSwish -> conv1: the table is built clipped to int4, so conv1 takes an int4 input, bit-exact."""
    from hbtool.simulator.executor import Executor

    rng = np.random.default_rng(5)
    inits = [tensor(f"w{k}", (rng.standard_normal((8, 8 if k else 3, 3, 3)) * 0.3).astype(np.float32)) for k in range(3)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c0"], ["h0"], name="hswish0"),
             helper.make_node("Conv", ["h0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 8, 8, 8])], inits), tmp_path / "m.onnx")
    # forced: random calibration data puts this layer under the sensitivity floor, and the table is what is tested
    cal, _, art = _compile(_featuremap_cfg(tmp_path, "int4", [1, 3, 8, 8], node_info={"conv1": {"InputType": "int4", "WeightType": "int4"}}))
    k = _kernels(art)
    assert k["conv1"].input_range == (-8, 7) and k["conv1"].weight_bits == 4, cal.options["int4"]
    (table,) = [kk.table for kk in k.values() if type(kk).__name__ == "Lut"]
    assert -8 <= int(np.min(table)) and int(np.max(table)) <= 7 and len(np.unique(table)) > 4
    ex = Executor(art)
    sess = ort.InferenceSession(str(tmp_path / "int4" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    for _ in range(3):
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        assert np.array_equal(ex.run({"x": x})["y"], sess.run(None, {"x": x})[0])


def _outlier_chain(tmp: Path) -> None:
    """conv0 -> relu -> conv1 (each channel's weights: one value 40x the rest) -> relu -> conv2 -> relu -> conv3 -> y."""
    rng = np.random.default_rng(11)
    ws = [(rng.standard_normal((16, 16 if k else 3, 3, 3)) * 0.1).astype(np.float32) for k in range(4)]
    ws[1][:, 0, 1, 1] = 4.0 * np.sign(rng.standard_normal(16)).astype(np.float32)
    inits = [tensor(f"w{k}", w) for k, w in enumerate(ws)]
    nodes = []
    t = "x"
    for k in range(4):
        nodes.append(helper.make_node("Conv", [t, f"w{k}"], [f"c{k}"], name=f"conv{k}", pads=[1, 1, 1, 1]))
        t = f"c{k}"
        if k < 3:
            nodes.append(helper.make_node("Relu", [t], [f"r{k}"], name=f"relu{k}"))
            t = f"r{k}"
    nodes[-1].output[0] = "y"
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 16, 8, 8])], inits), tmp / "m.onnx")


def test_a_layer_too_noisy_at_4_bits_stays_int8_unless_forced(tmp_path):
    """default_precision int4 keeps a layer whose estimated 4-bit SQNR is under the floor at int8, with the reason;
    a well-behaved neighbour goes to 4 bits; node_info forces the noisy one."""
    from hbtool.quant.calibrate import run_calibration
    from hbtool.quant.int4 import INT4_MIN_SQNR_DB

    _outlier_chain(tmp_path)
    o = run_calibration(_featuremap_cfg(tmp_path, "int4", [1, 3, 8, 8])).options["int4"]
    assert o["sqnr_db"]["conv1"] < INT4_MIN_SQNR_DB <= o["sqnr_db"]["conv2"], o
    assert o["kept_int8"]["conv1"].startswith("sensitive at 4 bits") and "conv1" not in o["applied"], o
    assert o["applied"]["conv2"] == "uint4 x int4", o
    forced = run_calibration(_featuremap_cfg(tmp_path, "int4", [1, 3, 8, 8], node_info={"conv1": {"InputType": "uint4", "WeightType": "int4"}}))
    assert forced.options["int4"]["applied"]["conv1"] == "uint4 x int4", forced.options["int4"]


def test_debug_auto_moves_a_4bit_node_back_to_int8_first(tmp_path):
    """On an int4 model, --auto's cheapest remedy for a 4-bit node is int8 (before int16 or CPU): tried on
    a node of the 4-bit path, it raises the worst output cosine and is priced in FPS."""
    from hbtool.debug.run import run_debug

    cfg = _tiny_cfg(tmp_path, "int4")
    result = run_debug(cfg, auto=True, target_cosine=0.999, max_fps_loss=0.10, samples=8)
    a = result.auto
    four_bit = set(result.session.base.options["int4"]["applied"])
    tries = [s for s in a.steps if s.remedy == "int8"]
    assert tries and four_bit, [(s.remedy, s.node) for s in a.steps]
    assert all(s.node in four_bit for s in tries)
    ptq = a.steps[0].cosine
    assert max(s.cosine for s in tries) > ptq and all(s.fps and s.fps > 0 for s in tries)
    kept = [s for s in tries if s.kept]
    assert kept and a.node_info[kept[0].node]["InputType"] == "int8" and a.node_info[kept[0].node]["WeightType"] == "int8"
