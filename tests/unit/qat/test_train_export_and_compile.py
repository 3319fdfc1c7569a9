"""QAT end to end: train a few steps, export ``*_qat_model.onnx``, compile it (directly, and through
``calibration_type: load``), simulate, and compare with the QAT module: within 1 LSB (it is exact)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from onnx import helper

from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import calibrated_path, compile_model
from hbtool.config import config_from_dict
from hbtool.qat.train import run_qat
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.simulator.executor import Executor
from tests.helpers import make_model, run_ort, tensor, vinfo


def cnn_model() -> "onnx.ModelProto":  # noqa: F821
    """Conv-Relu-Conv + skip Add, Sigmoid gate (a table), global pool, Gemm, Softmax."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.15
    wf = rng.standard_normal((5, 8)).astype(np.float32) * 0.5
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
        helper.make_node("Sigmoid", ["a"], ["g"], name="gate"),
        helper.make_node("Mul", ["a", "g"], ["m"], name="mul"),
        helper.make_node("GlobalAveragePool", ["m"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    inits = [tensor("w1", w1), tensor("b1", rng.standard_normal(8).astype(np.float32) * 0.1),
             tensor("w2", w2), tensor("b2", rng.standard_normal(8).astype(np.float32) * 0.1),
             tensor("wf", wf), tensor("bf", rng.standard_normal(5).astype(np.float32) * 0.1)]
    return make_model(nodes, [vinfo("x", [1, 3, 12, 12])], [vinfo("y", [1, 5])], inits)


def token_model() -> "onnx.ModelProto":  # noqa: F821
    """Tokens: Linear (MatMul + Add) -> LayerNorm -> GELU -> MatMul -> output (int16 LayerNorm/GELU with auto_int16)."""
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((16, 24)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((24, 8)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("LayerNormalization", ["hb", "gamma", "beta"], ["n"], name="ln", axis=-1),
        helper.make_node("Gelu", ["n"], ["g"], name="gelu", domain=""),
        helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2"),
    ]
    inits = [tensor("w1", w1), tensor("b1", rng.standard_normal(24).astype(np.float32) * 0.1),
             tensor("gamma", (1 + 0.1 * rng.standard_normal(24)).astype(np.float32)),
             tensor("beta", (0.1 * rng.standard_normal(24)).astype(np.float32)), tensor("w2", w2)]
    return make_model(nodes, [vinfo("x", [1, 6, 16])], [vinfo("y", [1, 6, 8])], inits, opset=20)


def _config(tmp: Path, model, shape, extra_cal: dict | None = None, qat: dict | None = None, name: str = "m"):
    import onnx

    onnx.save(model, tmp / f"{name}.onnx")
    cal = tmp / "cal"
    cal.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(24):
        np.save(cal / f"{k:03d}.npy", rng.standard_normal(shape).astype(np.float32))
    raw = {
        "model_parameters": {"onnx_model": str(tmp / f"{name}.onnx"), "working_dir": str(tmp / "wd"), "output_model_file_prefix": name},
        "input_parameters": {"input_name": "x", "input_shape": "x".join(map(str, shape)), "input_type_train": "featuremap",
                             "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max", **(extra_cal or {})},
        "qat_parameters": {"steps": 3, "batch_size": 4, "lr": 3e-3, "optimizer": "adam", "val_samples": 4, **(qat or {})},
    }
    return config_from_dict(raw, base_dir=tmp), raw


def _simulate(cfg, feeds):
    compiled = compile_model(cfg)
    ex = Executor(from_bytes(compiled.data))
    return np.concatenate([ex.run({"x": f})[ex.output_names[0]] for f in feeds])


@pytest.mark.parametrize("build,shape,extra", [
    (cnn_model, (1, 3, 12, 12), {}),
    (token_model, (1, 6, 16), {}),
    (cnn_model, (1, 3, 12, 12), {"train_scales": True}),
])
def test_qat_export_compiles_to_the_module(tmp_path, build, shape, extra):
    cfg, raw = _config(tmp_path, build(), shape, qat=extra)
    calibration = run_calibration(cfg)
    ptq_weights = {k: v.detach().clone() for k, v in
                   __import__("hbtool.qat.train", fromlist=["build_model"]).build_model(cfg, calibration).named_weights().items()}
    result = run_qat(cfg, calibration=calibration)
    model = result.model
    assert result.path is not None and result.path.exists()
    moved = max(float((model.named_weights()[k].detach() - w).abs().max()) for k, w in ptq_weights.items())
    assert moved > 1e-4  # training changed the weights, so the comparison below is not the PTQ model's
    rng = np.random.default_rng(7)
    feeds = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    with torch.no_grad():
        ours = model(torch.from_numpy(np.concatenate(feeds)))[0].numpy()
    out_name = calibration.graph.outputs[0]
    lsb = model.plan.tensors[out_name].scale

    # compile the export directly (as the calibrated model)
    shutil.copy(result.path, calibrated_path(cfg))
    direct = _simulate(cfg, feeds)
    assert np.abs(direct - ours).max() <= lsb * 1.0001
    assert np.abs(direct - ours).max() == 0.0  # in fact exact: same lowering, same integers

    # calibration_type: load of the export, then compile
    raw2 = dict(raw)
    raw2["model_parameters"] = dict(raw["model_parameters"], onnx_model=str(result.path), working_dir=str(tmp_path / "wd2"))
    raw2["calibration_parameters"] = {"calibration_type": "load", "cal_data_dir": raw["calibration_parameters"]["cal_data_dir"]}
    cfg2 = config_from_dict(raw2, base_dir=tmp_path)
    loaded = run_calibration(cfg2)
    write_outputs(cfg2, loaded, "")
    via_load = _simulate(cfg2, feeds)
    assert np.abs(via_load - ours).max() <= lsb * 1.0001
    # and the quantized ONNX the load run writes agrees with the simulator
    qonnx = np.concatenate([run_ort(str(loaded.files["quantized_model"]), {"x": f})[0] for f in feeds])
    assert np.abs(qonnx - via_load).max() == 0.0


def test_module_starts_as_the_ptq_quantized_model(tmp_path):
    """Before any step the module computes the PTQ quantized model's outputs bit for bit."""
    from hbtool.ir.onnx_export import to_onnx
    from hbtool.qat.train import build_model

    cfg, _ = _config(tmp_path, cnn_model(), (1, 3, 12, 12))
    calibration = run_calibration(cfg)
    model = build_model(cfg, calibration)
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(3)]
    with torch.no_grad():
        ours = model(torch.from_numpy(np.concatenate(feeds)))[0].numpy()
    q = to_onnx(calibration.quantized)
    ref = np.concatenate([run_ort(q, {"x": f})[0] for f in feeds])
    assert np.array_equal(ours, ref)
    assert not model.report.fallbacks
