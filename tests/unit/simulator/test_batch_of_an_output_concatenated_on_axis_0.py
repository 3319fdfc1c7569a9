"""simulate batches a model whose output is a Concat on axis 0 with one scale per piece (issue 30).

silero-vad returns its recurrent state as ``Concat(h, c)`` on axis 0 (2 x 1 x 128); the two pieces
differ in range, so the output's dequantize keeps one scale per piece along axis 0 (a ``(2, 1, 1)``
scale). ``simulate`` folds a batch of samples into axis 0 of the kernels that allow it, and the
folded dequantize met a ``(S * 2, 1, 128)`` array with the ``(2, 1, 1)`` scale: exit 3
(``operands could not be broadcast``) on any batch of more than one sample. A kernel whose
per-channel constants vary along axis 0 now runs sample by sample.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.config import config_from_dict
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.simulator.executor import Executor
from tests.helpers import make_model, tensor, vinfo


def test_a_batch_of_a_state_concatenated_on_axis_0_equals_one_sample_at_a_time(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"], name="cell"),
             helper.make_node("Tanh", ["h0"], ["h"], name="h_tanh"),                  # h in [-1, 1]
             helper.make_node("Mul", ["h0", "big"], ["c"], name="c_scale"),           # c ~ 30x wider
             helper.make_node("Concat", ["h", "c"], ["state"], name="state_concat", axis=0)]
    model = make_model(nodes, [vinfo("x", [1, 1, 8])], [vinfo("state", [2, 1, 8])],
                       [tensor("w", w), tensor("big", np.array(30.0, np.float32))])
    onnx.save(model, tmp_path / "m.onnx")
    (tmp_path / "cal").mkdir()
    for i in range(8):
        np.save(tmp_path / "cal" / f"{i}.npy", rng.standard_normal((1, 1, 8)).astype(np.float32))
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(tmp_path / "m.onnx"), "working_dir": str(tmp_path / "wd"), "march": "bayes-e",
                             "output_model_file_prefix": "m"},
        "input_parameters": {"input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"cal_data_dir": str(tmp_path / "cal")},
    }, base_dir=tmp_path)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    compiled = compile_model(cfg)
    assert compiled.header["outputs"][0]["dequantize"].get("axis") is not None   # one scale per piece, on axis 0
    ex = Executor(from_bytes(compiled.data))
    x = rng.standard_normal((5, 1, 8)).astype(np.float32)
    batched = ex.run({"x": x})["state"]
    singles = np.concatenate([ex.run({"x": x[i:i + 1]})["state"] for i in range(5)])
    assert batched.shape == singles.shape == (10, 1, 8)
    assert np.array_equal(batched, singles)
    sess = ort.InferenceSession(str(tmp_path / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    assert np.array_equal(singles, np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(5)]))
