"""The quantized model computes exact integers, so onnxruntime's optimization level changes its speed, not its numbers.

calibrate's final evaluation opens the quantized model with onnxruntime's full optimizations (blocked-layout
convolutions, extended fusions) instead of the basic level when ``computes_exactly`` says every node is an integer
kernel or moves values without arithmetic: each kernel's body is integer codes in float64 with its convolutions and
matrix products split so that every float32 partial sum is an exact integer, and exact arithmetic has one result in
any order or layout. Checked here on a CNN and a Swin (LayerNorm, Softmax, GELU tables, window moves): every
quantized tensor is the same bytes at both levels, and the evaluation reports the same errors either way; a program
with a float node is not taken for exact.
"""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest
import yaml

from hbtool.config import load_config
from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import to_onnx
from hbtool.quant.calibrate import evaluate_outputs, run_calibration
from hbtool.quant.collect import with_extra_outputs
from hbtool.quant.quantized_model import computes_exactly

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", params=["tiny_cnn", "tiny_swin"])
def calibrated(request, tmp_path_factory):
    name = request.param
    tmp = tmp_path_factory.mktemp(name)
    data = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    data["model_parameters"]["onnx_model"] = str(ROOT / "samples" / "tiny" / f"{name}.onnx")
    data["model_parameters"]["working_dir"] = str(tmp / "wd")
    data["calibration_parameters"]["cal_data_dir"] = str(ROOT / "samples" / "data" / "digits_cal")
    data["calibration_parameters"]["num_samples"] = 8
    data["calibration_parameters"]["calibration_type"] = "max"
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return run_calibration(load_config(path))


def _session(model: bytes, level: ort.GraphOptimizationLevel) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def test_every_quantized_tensor_is_the_same_at_every_level(calibrated):
    result = calibrated
    program, qgraph = result.program, result.quantized
    assert computes_exactly(program)
    present = {o for n in program.nodes for o in n.outputs}
    names = list(qgraph.outputs) + [t for t in result.plan.tensors if t in present and t not in qgraph.outputs]
    assert len(names) > 10
    model = with_extra_outputs(to_onnx(qgraph, stage="quantized").SerializeToString(), qgraph, names)
    basic = _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    full = _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    for k in range(4):
        feeds = result.data.sample(k)
        for name, a, b in zip(names, basic.run(names, feeds), full.run(names, feeds)):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


def test_the_evaluation_reports_the_same_errors(calibrated):
    result = calibrated
    graph, qgraph = result.graph, result.quantized
    present = {o for n in result.program.nodes for o in n.outputs}
    tensors = [t for t in result.plan.tensors if t in present and t not in graph.outputs and not result.plan.tensors[t].is_log2]
    scales = {t: result.plan.tensors[t].channel_scales() for t in tensors}
    batches = [result.data.sample(k) for k in range(4)]
    assert (evaluate_outputs(graph, qgraph, batches, None, tensors, scales, exact_test=True)
            == evaluate_outputs(graph, qgraph, batches, None, tensors, scales, exact_test=False))


def test_a_float_node_is_not_exact(calibrated):
    program = calibrated.program
    g = Graph(program.name, program.opset)
    g.values, g.inputs, g.outputs = program.values, program.inputs, program.outputs
    g.nodes = list(program.nodes)
    kernel = next(k for k, n in enumerate(g.nodes) if "kernel" in n.meta and n.op_type != "HzQuantize")
    node = g.nodes[kernel]
    # a BPU node left without an integer lowering: a float op between a dequantize and a quantize
    fallback = type(node)(node.name, "Conv", node.inputs, node.outputs, dict(node.attrs), "", None, {"on": "CPU", "fallback": "no lowering"})
    g.nodes[kernel] = fallback
    assert not computes_exactly(g)
    fallback.op_type, fallback.meta = "Reshape", {"on": "BPU"}          # moving codes is exact
    assert computes_exactly(g)
    fallback.op_type = "Resize"                                         # a linear Resize interpolates
    assert not computes_exactly(g)
