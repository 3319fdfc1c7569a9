"""Already-quantized models: QDQ (onnxruntime's quantize_static), weight-only DequantizeLinear (tf2onnx from
TFLite), QOperator (QLinearConv / QLinearMatMul / QGemm ...).

Each goes checker -> calibrate -> compile -> simulate: no DequantizeLinear/QuantizeLinear left as a CPU island,
the weights keep the model's integers and scales, ``calibration_type: load`` takes the activation scales, and
simulate equals hbtool's quantized ONNX bit for bit (0 LSB), several samples per pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import cosine, make_model, run_ort, tensor, vinfo

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "samples" / "data" / "digits_heldout.npz"


# ------------------------------------------------------------------ model builders
def _int8(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 codes and scales as TFLite / onnxruntime write them (max-based, [-127, 127])."""
    if axis is None:
        s = np.float32(np.abs(w).max() / 127)
        return np.clip(np.round(w / s), -127, 127).astype(np.int8), np.array(s, np.float32)
    red = tuple(i for i in range(w.ndim) if i != axis)
    s = (np.abs(w).max(axis=red) / 127).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    return np.clip(np.round(w / s.reshape(shape)), -127, 127).astype(np.int8), s


def weight_only_model(matmul_reads_bpu: bool = True) -> onnx.ModelProto:
    """What tf2onnx writes for a weight-quantized TFLite model: int8 initializer -> DequantizeLinear -> Conv/MatMul/Gemm.

    The Conv's weight is per output channel (axis 0), the MatMul's per tensor, the Gemm's per row (transB).
    """
    rng = np.random.default_rng(0)
    w1, s1 = _int8(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, 0)
    w2, s2 = _int8(rng.standard_normal((128, 16)).astype(np.float32) * 0.1, None)
    w3, s3 = _int8(rng.standard_normal((10, 16)).astype(np.float32) * 0.2, 0)
    inits = [tensor("w1_q", w1), tensor("w1_s", s1), tensor("w1_zp", np.zeros(8, np.int8)),
             tensor("b1", rng.standard_normal(8).astype(np.float32) * 0.1),
             tensor("w2_q", w2), tensor("w2_s", s2), tensor("w2_zp", np.array(0, np.int8)),
             tensor("w3_q", w3), tensor("w3_s", s3), tensor("w3_zp", np.zeros(10, np.int8)),
             tensor("b3", rng.standard_normal(10).astype(np.float32) * 0.1), tensor("shape", np.array([1, 128], np.int64))]
    nodes = [
        helper.make_node("DequantizeLinear", ["w1_q", "w1_s", "w1_zp"], ["w1"], axis=0, name="dq_w1"),
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Reshape", ["r1", "shape"], ["f"], name="flatten"),
        helper.make_node("DequantizeLinear", ["w2_q", "w2_s", "w2_zp"], ["w2"], name="dq_w2"),
        helper.make_node("MatMul", ["f", "w2"], ["m"], name="matmul"),
        helper.make_node("DequantizeLinear", ["w3_q", "w3_s", "w3_zp"], ["w3"], axis=0, name="dq_w3"),
        helper.make_node("Gemm", ["m", "w3", "b3"], ["y"], transB=1, name="gemm"),
    ]
    return make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 10])], inits, opset=13)


def small_float_model() -> onnx.ModelProto:
    """Conv-ReLU-MaxPool-Conv-residual Add-GAP-Gemm and a MatMul head: what the quantizers below quantize."""
    rng = np.random.default_rng(0)

    def init(name, shape, s):
        return tensor(name, (rng.standard_normal(shape) * s).astype(np.float32))

    inits = [init("w1", (8, 3, 3, 3), 0.3), init("b1", (8,), 0.1), init("w2", (8, 8, 3, 3), 0.2), init("b2", (8,), 0.1),
             init("wf", (10, 8), 0.3), init("bf", (10,), 0.1), init("wm", (8, 6), 0.3), tensor("shp", np.array([1, 8], np.int64))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "p1"], ["a"], name="add"),
        helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
        helper.make_node("Reshape", ["g", "shp"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc"),
        helper.make_node("MatMul", ["f", "wm"], ["y2"], name="mm"),
    ]
    return make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 10]), vinfo("y2", [1, 6])], inits, opset=13)


def _uint8_int8_gemm_saturates(symmetric: bool) -> bool:
    """Whether onnxruntime's own uint8 x int8 kernels are inexact on this CPU (AVX2 without VNNI adds
    pairs of products in saturating int16), so a uint8 model needs 7-bit weights (onnxruntime's
    ``reduce_range``, its advice for such CPUs) for onnxruntime's QOperator run to be a reference."""
    from hbtool.simulator import accel

    return not symmetric and not accel._cpu_integer_gemm_never_saturates()


def ort_quantized(tmp: Path, fmt: str, per_channel: bool, symmetric: bool, source: onnx.ModelProto | None = None,
                  samples: list[np.ndarray] | None = None) -> Path:
    """``source`` quantized by onnxruntime's quantize_static (``fmt``: "QDQ" or "QOperator")."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    source = source or small_float_model()
    name = source.graph.input[0].name
    shape = [d.dim_value for d in source.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(1)
    samples = samples if samples is not None else [rng.standard_normal(shape).astype(np.float32) for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{name: s} for s in samples])

        def get_next(self):
            return next(self.it, None)

    src, dst = tmp / "float.onnx", tmp / f"{fmt}_{'pc' if per_channel else 'pt'}_{'sym' if symmetric else 'asym'}.onnx"
    onnx.save(source, str(src))
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ if fmt == "QDQ" else QuantFormat.QOperator,
                    per_channel=per_channel, weight_type=QuantType.QInt8, reduce_range=_uint8_int8_gemm_saturates(symmetric),
                    activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                    extra_options={"ActivationSymmetric": True} if symmetric else {})
    return dst


# ------------------------------------------------------------------ pipeline
def pipeline(model_path: Path, tmp: Path, calibration_type: str, march: str = "bayes-e", samples: int = 3):
    """checker -> calibrate -> compile -> simulate (``samples`` per pass) on random data.

    Returns (checker result, calibration result, quant_info, feeds, simulated, quantized-ONNX outputs).
    """
    from hbtool.checker.run import run_checker
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.simulator.executor import Executor

    model = onnx.load(str(model_path))
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(7)
    cal = tmp / "cal" / name
    cal.mkdir(parents=True)
    for k in range(4):
        np.save(cal / f"{k}.npy", rng.standard_normal(shape).astype(np.float32))
    checked = run_checker(model_path, march, write_files=False)
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(model_path), "march": march, "working_dir": str(tmp / "wd"),
                             "output_model_file_prefix": "m"},
        "input_parameters": {"input_name": name, "input_shape": "x".join(map(str, shape)), "input_type_train": "featuremap",
                             "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"calibration_type": calibration_type, "cal_data_dir": str(cal)},
    }, base_dir=tmp)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    executor = Executor(from_bytes(compile_model(cfg).data))
    feeds = rng.standard_normal((samples * shape[0], *shape[1:])).astype(np.float32)
    simulated = executor.run({name: feeds})
    quantized = [run_ort(tmp / "wd" / "m_quantized_model.onnx", {name: feeds[k:k + 1]}) for k in range(samples)]
    info = json.loads((tmp / "wd" / "m_quant_info.json").read_text())
    return checked, result, info, feeds, simulated, executor.output_names, quantized


def assert_bit_exact(simulated, output_names, quantized) -> None:
    for k, o in enumerate(output_names):
        ref = np.concatenate([q[k] for q in quantized])
        assert np.array_equal(simulated[o], ref.astype(np.float32)), (o, float(np.abs(simulated[o] - ref).max()))


def assert_no_quantize_nodes_on_the_cpu(checked) -> None:
    ops = {n.op_type for n in checked.graph.nodes}
    assert not ops & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm"}, ops
    cpu = [(n.name, n.meta.get("reason")) for n in checked.graph.nodes if n.meta.get("on") != "BPU"]
    assert not cpu, cpu


# ------------------------------------------------------------------ exit 3 (issue 30)
def test_weight_only_dequantize_model_goes_end_to_end_bit_exact(tmp_path):
    """tf2onnx's weight-quantized TFLite structure: simulate died with IndexError at batching.py (a CPU subgraph of
    DequantizeLinear nodes on constants had no sample axis); now the weights are folded and keep their integers."""
    path = tmp_path / "wq.onnx"
    onnx.save(weight_only_model(), str(path))
    checked, result, info, _, simulated, names, quantized = pipeline(path, tmp_path, "max", samples=3)
    assert_no_quantize_nodes_on_the_cpu(checked)
    assert_bit_exact(simulated, names, quantized)
    pre = info["options"]["prequantized"]
    assert pre["form"] == "weight-only DequantizeLinear"
    assert sorted(pre["weights_kept"]) == ["w1", "w2", "w3"] and not pre["weights_requantized"]
    model = onnx.load(str(path))
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert np.allclose(info["weights"]["w1"]["scales"], init["w1_s"], rtol=0, atol=0)             # per channel, as given
    assert np.allclose(info["weights"]["w2"]["scales"], np.full(16, init["w2_s"]), rtol=0, atol=0)  # per tensor -> each column
    assert np.allclose(info["weights"]["w3"]["scales"], init["w3_s"], rtol=0, atol=0)
    # the integers the compiled program multiplies with are the model's own
    conv = next(n for n in result.program.nodes if n.meta.get("kernel") is not None and type(n.meta["kernel"]).__name__ == "Conv")
    codes = [np.asarray(v) for v in vars(conv.meta["kernel"]).values() if isinstance(v, np.ndarray) and v.shape == init["w1_q"].shape]
    assert codes and np.array_equal(codes[0], init["w1_q"])


def test_a_cpu_step_computed_from_constants_only_serves_every_sample(tmp_path, monkeypatch):
    """The cause of the IndexError: a CPU subgraph with no run-time input ran once (one sample) and the next step
    indexed it for sample 1. Kept as a CPU subgraph here (the import's folding switched off), it now serves all."""
    import hbtool.ir.onnx_import as onnx_import

    monkeypatch.setattr(onnx_import, "dequantize_graph", lambda graph: None)
    path = tmp_path / "wq.onnx"
    onnx.save(weight_only_model(), str(path))
    checked, _, _, _, simulated, names, quantized = pipeline(path, tmp_path, "max", samples=3)
    assert any(n.op_type == "DequantizeLinear" and n.meta.get("on") == "CPU" for n in checked.graph.nodes)
    assert_bit_exact(simulated, names, quantized)


# ------------------------------------------------------------------ onnxruntime's quantizer
ORT_FORMS = [("QDQ", False, False), ("QDQ", True, True), ("QOperator", True, False), ("QOperator", False, True)]


@pytest.mark.parametrize("fmt,per_channel,symmetric", ORT_FORMS, ids=["qdq-pt-u8", "qdq-pc-s8", "qop-pc-u8", "qop-pt-s8"])
def test_onnxruntime_quantized_models_go_end_to_end_with_their_scales(tmp_path, fmt, per_channel, symmetric):
    path = ort_quantized(tmp_path, fmt, per_channel, symmetric)
    checked, result, info, feeds, simulated, names, quantized = pipeline(path, tmp_path, "load")
    assert_no_quantize_nodes_on_the_cpu(checked)
    assert_bit_exact(simulated, names, quantized)
    pre = info["options"]["prequantized"]
    assert pre["form"] == fmt and len(pre["weights_kept"]) == 4 and not pre["weights_requantized"]
    assert not pre["calibrated_from_data"], pre["calibrated_from_data"]  # every BPU tensor has the model's scale
    # float32 scales, as the calibrated model stores them: compile lowers from that model, calibrate from these
    assert all(float(np.float32(q.scale)) == q.scale for q in result.plan.tensors.values())
    graph = checked.graph
    if symmetric:  # int8, zero point 0: every scale taken as it is
        assert not pre["activation_scales_changed"]
        for t in pre["activation_scales_taken"]:
            want = float(np.max(graph.prequantized.activations[t][0].scale))
            assert result.plan.tensors[t].scale == pytest.approx(want, rel=1e-6) or pre["activation_scales_shared"]
    else:  # uint8 with zero points: the range kept symmetric, said once per kind; onnxruntime's folded ReLU put back
        assert {c["kind"] for c in pre["activation_scales_changed"]} == {"asymmetric"}
        assert len(pre["relus_restored"]) == 1
    # the deployed model computes what the quantized model means (onnxruntime runs it with its own integer arithmetic)
    reference = [run_ort(path, {"x": feeds[k:k + 1]}) for k in range(len(feeds))]
    for j, o in enumerate(names):
        assert cosine(simulated[o], np.concatenate([r[j] for r in reference])) > 0.99, o


def test_calibration_other_than_load_keeps_weights_and_calibrates_activations(tmp_path):
    from hbtool.quant.calibrate import option_lines

    path = ort_quantized(tmp_path, "QDQ", True, True)
    _, result, info, _, simulated, names, quantized = pipeline(path, tmp_path, "max")
    assert_bit_exact(simulated, names, quantized)
    pre = info["options"]["prequantized"]
    assert len(pre["weights_kept"]) == 4 and not pre["activation_scales_taken"] and pre["activation_scales_in_model"] == 10
    line = option_lines(result)[0]
    assert line.startswith("already-quantized model (QDQ): 4 weight(s) keep the model's int8 values and scales")
    assert "not used" in line and "calibration_type: load takes them" in line


def test_qoperator_float_graph_computes_what_the_quantized_model_means(tmp_path):
    """QLinearConv's int32 bias scaled by s_x * s_w, QGemm, QLinearAdd, the uint8 output with zero point 0 (a ReLU)."""
    from hbtool.ir.onnx_export import to_onnx
    from hbtool.ir.onnx_import import import_onnx

    path = ort_quantized(tmp_path, "QOperator", True, False)
    graph = import_onnx(path)
    assert graph.prequantized.form == "QOperator"
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    for got, want, fl in zip(run_ort(to_onnx(graph), {"x": x}), run_ort(path, {"x": x}), run_ort(small_float_model(), {"x": x})):
        assert cosine(got, want) > 0.999 and cosine(got, fl) > 0.999


def test_weights_the_bpu_cannot_hold_as_given_are_requantized_with_the_reason(tmp_path):
    """An asymmetric uint8 weight (zero point 128 +- 5) cannot keep its integers: hbtool quantizes it and says why."""
    from hbtool.quant.calibrate import option_lines

    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (8, 3, 3, 3)).astype(np.uint8)
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w"], name="dq"),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    inits = [tensor("w_q", codes), tensor("w_s", np.array(0.01, np.float32)), tensor("w_zp", np.array(123, np.uint8))]
    path = tmp_path / "asym_w.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 8, 8, 8])], inits, opset=13), str(path))
    _, result, info, _, simulated, names, quantized = pipeline(path, tmp_path, "max")
    assert_bit_exact(simulated, names, quantized)
    assert "zero point is not 0" in info["options"]["prequantized"]["weights_requantized"]["w"]
    assert any(line.startswith("warning: 1 weight(s) of the model cannot keep their integers") for line in option_lines(result))


def test_fake_quantized_float_weights_of_a_qat_export_keep_their_grid(tmp_path):
    """PyTorch's QAT export writes float weight -> QuantizeLinear -> DequantizeLinear: the integers it rounds to are kept."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    s = (np.abs(w).reshape(4, -1).max(1) / 127).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["w", "w_s", "w_zp"], ["wq"], axis=0, name="qw"),
             helper.make_node("DequantizeLinear", ["wq", "w_s", "w_zp"], ["wd"], axis=0, name="dqw"),
             helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "x_zp"], ["xd"], name="dqx"),
             helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv")]
    inits = [tensor("w", w), tensor("w_s", s), tensor("w_zp", np.zeros(4, np.int8)),
             tensor("x_s", np.array(0.03, np.float32)), tensor("x_zp", np.array(0, np.int8))]
    path = tmp_path / "qat.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 4, 4])], [vinfo("y", [1, 4, 4, 4])], inits, opset=13), str(path))
    _, result, info, _, simulated, names, quantized = pipeline(path, tmp_path, "load")
    assert_bit_exact(simulated, names, quantized)
    assert info["options"]["prequantized"]["weights_kept"] == ["wd"]
    assert np.allclose(info["weights"]["wd"]["scales"], s, rtol=0, atol=0)
    assert result.plan.tensors["x"].scale == pytest.approx(0.03)


# ------------------------------------------------------------------ a trained model quantized by onnxruntime
def test_tiny_cnn_quantized_by_onnxruntime_deploys_with_its_scales(tmp_path):
    """The bundled digits CNN, quantize_static QDQ (int8 symmetric, per channel), deployed with calibration_type load:
    simulate = quantized ONNX bit for bit, and the deployed top-1 matches onnxruntime's own int8 model."""
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.config import load_config
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.simulator.executor import Executor

    d = np.load(HELDOUT)
    images, labels = d["images"].astype(np.float32), d["labels"]
    normalised = [((images[k:k + 1] - 127.5) / 127.5).astype(np.float32) for k in range(32)]
    float_model = onnx.load(str(ROOT / "samples" / "tiny" / "tiny_cnn.onnx"))
    path = ort_quantized(tmp_path, "QDQ", True, True, source=float_model, samples=normalised)
    cfg = yaml.safe_load((ROOT / "configs" / "tiny_cnn.yaml").read_text())
    cfg["model_parameters"].update(onnx_model=str(path), working_dir=str(tmp_path / "wd"))
    cfg["calibration_parameters"].update(calibration_type="load", cal_data_dir=str(ROOT / "samples" / "data" / "digits_cal"))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(tmp_path / "c.yaml")
    result = run_calibration(config)
    write_outputs(config, result, "")
    pre = result.options["prequantized"]
    assert pre["form"] == "QDQ" and pre["weights_kept"] and not pre["weights_requantized"] and not pre["activation_scales_changed"]
    executor = Executor(from_bytes(compile_model(config).data))
    held = slice(32, 32 + 96)
    simulated = executor.run({"input": images[held]})[executor.output_names[0]]
    quantized = np.concatenate([run_ort(tmp_path / "wd" / "tiny_cnn_quantized_model.onnx", {"input": images[k:k + 1]})[0]
                                for k in range(held.start, held.stop)])
    assert np.array_equal(simulated, quantized.astype(np.float32))
    ort_int8 = np.concatenate([run_ort(path, {"input": (images[k:k + 1] - 127.5) / 127.5})[0] for k in range(held.start, held.stop)])
    top1_hbtool = float(np.mean(simulated.argmax(1) == labels[held]))
    top1_ort = float(np.mean(ort_int8.argmax(1) == labels[held]))
    assert top1_hbtool >= top1_ort - 0.03 and top1_hbtool > 0.9, (top1_hbtool, top1_ort)


def test_quantize_nodes_at_the_model_boundary_stay_on_the_cpu_and_are_said(tmp_path):
    """An int8 model input read through DequantizeLinear, and a model output written as integers by QuantizeLinear:
    those nodes are the model's interface, not its quantization, so they stay (on the CPU) and the import says so."""
    from hbtool.checker.run import run_checker

    w, s = _int8(np.random.default_rng(0).standard_normal((4, 3, 1, 1)).astype(np.float32), 0)
    nodes = [helper.make_node("DequantizeLinear", ["x", "x_s", "x_zp"], ["xd"], name="dq_in"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], axis=0, name="dq_w"),
             helper.make_node("Conv", ["xd", "w"], ["c"], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "y_s", "y_zp"], ["y"], name="q_out")]
    inits = [tensor("x_s", np.array(0.05, np.float32)), tensor("x_zp", np.array(0, np.int8)), tensor("w_q", w), tensor("w_s", s),
             tensor("y_s", np.array(0.1, np.float32)), tensor("y_zp", np.array(0, np.int8))]
    path = tmp_path / "io.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 4, 4], TensorProto.INT8)], [vinfo("y", [1, 4, 4, 4], TensorProto.INT8)],
                         inits, opset=13), str(path))
    result = run_checker(path, "bayes", write_files=False)
    placed = {n.name: n.meta.get("on") for n in result.graph.nodes}
    assert placed == {"dq_in": "CPU", "conv": "BPU", "q_out": "CPU"}, placed
    kept = result.graph.prequantized.kept_nodes
    assert any(k.startswith("dq_in:") for k in kept) and any(k.startswith("q_out:") for k in kept)
    assert result.to_json()["prequantized"]["weights"] == ["w"]


@pytest.mark.parametrize("march,bits", [("bayes", 16), ("bernoulli2", 8)])
def test_int16_scales_are_taken_where_the_march_has_int16(tmp_path, march, bits):
    """An int16 Q/DQ pair: taken as it is on bayes; on X3 (no int16) its range in int8, with the reason."""
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration

    w, s = _int8(np.random.default_rng(0).standard_normal((4, 3, 1, 1)).astype(np.float32), 0)
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_zp"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "x_zp"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], axis=0, name="dq_w"),
             helper.make_node("Conv", ["xd", "w"], ["c"], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "y_s", "y_zp"], ["cq"], name="q_out"),
             helper.make_node("DequantizeLinear", ["cq", "y_s", "y_zp"], ["y"], name="dq_out")]
    inits = [tensor("x_s", np.array(1e-4, np.float32)), tensor("x_zp", np.array(0, np.int16)), tensor("w_q", w), tensor("w_s", s),
             tensor("y_s", np.array(0.02, np.float32)), tensor("y_zp", np.array(0, np.int8))]
    path = tmp_path / "i16.onnx"
    model = make_model(nodes, [vinfo("x", [1, 3, 4, 4])], [vinfo("y", [1, 4, 4, 4])], inits, opset=21)  # int16 Q/DQ: opset 21
    model.ir_version = 10
    onnx.save(model, str(path))
    cfg = config_from_dict({"model_parameters": {"onnx_model": str(path), "march": march, "working_dir": str(tmp_path / "wd")},
                            "input_parameters": {"input_name": "x", "input_shape": "1x3x4x4"},
                            "calibration_parameters": {"calibration_type": "load"}})
    result = run_calibration(cfg)
    x = result.plan.tensors["x"]
    assert x.bits == bits
    changed = result.options["prequantized"]["activation_scales_changed"]
    if bits == 16:
        assert x.scale == pytest.approx(1e-4) and not changed
    else:
        assert x.scale == pytest.approx(1e-4 * 32768 / 127) and [c["kind"] for c in changed] == ["int16"]


def test_a_dead_channel_scale_is_floored_as_hbtool_floors_its_own(tmp_path):
    """TFLite writes a per-channel scale of ~1e-12 for a dead filter; kept, its bias codes and requantization ratio
    would be huge (EfficientNet-Lite0 int8: biases near 2**30). Floored, the other channels keep their integers."""
    from hbtool.quant.calibrate import option_lines

    rng = np.random.default_rng(0)
    w, s = _int8(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), 0)
    s[2] = 1e-12
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w"], axis=0, name="dq"),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv")]
    inits = [tensor("w_q", w), tensor("w_s", s), tensor("w_zp", np.zeros(4, np.int8)), tensor("b", np.array([0.1, -0.2, 0.3, 0.0], np.float32))]
    path = tmp_path / "dead.onnx"
    onnx.save(make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 4, 8, 8])], inits, opset=13), str(path))
    _, result, info, _, simulated, names, quantized = pipeline(path, tmp_path, "max")
    assert_bit_exact(simulated, names, quantized)
    assert "channel scales (1, first 2)" in info["options"]["prequantized"]["weights_requantized"]["w"]
    scales = np.asarray(info["weights"]["w"]["scales"])
    assert np.array_equal(scales[[0, 1, 3]], s[[0, 1, 3]]) and scales[2] == pytest.approx(s.max() * 2.0**-16, rel=1e-6)
    assert any(line.startswith("note: 1 weight(s) have dead channels") for line in option_lines(result))
