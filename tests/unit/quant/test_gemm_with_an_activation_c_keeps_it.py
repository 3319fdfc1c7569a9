"""A Gemm whose C is an activation keeps that branch in the deployed model (issue 30, GraphSAGE).

onnxruntime's MatMulAddFusion turns ``MatMul(x, W_r) + lin_l(neighbours)`` into
``Gemm(x, W_r, C=lin_l(neighbours))``; the integer lowering read C as a constant bias, found none,
and lowered the Gemm without it: the neighbour branch vanished from the quantized model (edge_index
was no longer even an input), cosine 0.65, no warning. Now the float pass makes it Gemm + Add.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from hbtool.config import config_from_dict
from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.passes.split_gemm_activation_bias import split_gemm_activation_bias
from hbtool.quant.calibrate import run_calibration, write_outputs
from tests.helpers import make_model, tensor, vinfo


def _model(beta: float = 1.0):
    """x (16, 8), z (16, 8) -> Gemm(x, Wr, C = MatMul(z, Wl)) -> y (16, 4)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["z", "wl"], ["side"], name="lin_l"),
             helper.make_node("Gemm", ["x", "wr", "side"], ["y"], name="lin_r", beta=beta)]
    inits = [tensor("wl", rng.standard_normal((8, 4)).astype(np.float32)), tensor("wr", rng.standard_normal((8, 4)).astype(np.float32))]
    return make_model(nodes, [vinfo("x", [16, 8]), vinfo("z", [16, 8])], [vinfo("y", [16, 4])], inits)


def test_the_pass_makes_the_activation_c_an_add():
    graph = import_onnx(_model(beta=0.5))
    assert split_gemm_activation_bias(graph) == 1
    gemm = next(n for n in graph.nodes if n.op_type == "Gemm")
    assert len(gemm.inputs) == 2 and any(n.op_type == "Add" and n.outputs == ["y"] for n in graph.nodes)
    assert any(n.op_type == "Mul" for n in graph.nodes)   # beta scales C


def test_the_deployed_model_keeps_the_branch_in_c(tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    rng = np.random.default_rng(1)
    for name in ("x", "z"):
        (tmp_path / name).mkdir()
        for i in range(8):
            np.save(tmp_path / name / f"{i}.npy", rng.standard_normal((16, 8)).astype(np.float32))
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(tmp_path / "m.onnx"), "working_dir": str(tmp_path / "wd"), "march": "bayes-e",
                             "output_model_file_prefix": "m"},
        "input_parameters": {"input_name": "x;z", "input_type_train": "featuremap;featuremap", "input_type_rt": "featuremap;featuremap",
                             "norm_type": "no_preprocess;no_preprocess"},
        "calibration_parameters": {"cal_data_dir": f"{tmp_path / 'x'};{tmp_path / 'z'}"},
    }, base_dir=tmp_path)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    quantized = ort.InferenceSession(str(tmp_path / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    assert {i.name for i in quantized.get_inputs()} == {"x", "z"}     # z was dropped with the branch
    feeds = {"x": rng.standard_normal((16, 8)).astype(np.float32), "z": rng.standard_normal((16, 8)).astype(np.float32)}
    got = quantized.run(None, feeds)[0]
    ref = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cosine = float((got * ref).sum() / np.linalg.norm(got) / np.linalg.norm(ref))
    assert cosine > 0.999, cosine
