"""calibrate serializes the optimized float and the quantized model once, for the file and the evaluation.

The evaluation runs both models with their compared tensors as extra outputs; those outputs are
appended to the file's bytes (``with_extra_outputs``) instead of building and serializing each model
again. Checked here: the appended bytes parse to the model ``float_model_bytes`` builds (apart from
the file's metadata), the evaluation measures the very same errors either way, and the files written
are the bytes of the models calibrate returns.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from hbtool.config import load_config
from hbtool.ir.onnx_export import to_onnx
from hbtool.quant.calibrate import evaluate_outputs, evaluation_float_session, run_calibration, write_outputs
from hbtool.quant.collect import float_model_bytes, with_extra_outputs
from tests.helpers import tiny_calibration_config


@pytest.fixture(scope="module")
def swin(tmp_path_factory):
    path = tiny_calibration_config(tmp_path_factory.mktemp("swin"), num_samples=8, calibration_type="default")
    cfg = load_config(path)
    return cfg, run_calibration(cfg)


def _without_metadata(model: bytes) -> onnx.ModelProto:
    proto = onnx.ModelProto.FromString(model)
    proto.ClearField("metadata_props")
    return proto


def test_appended_outputs_parse_to_the_rebuilt_model(swin):
    _, result = swin
    for graph, stage in ((result.graph, "optimized_float"), (result.quantized, "quantized")):
        extra = [t for t in result.plan.tensors if t not in graph.outputs][:40] + [graph.inputs[0], graph.outputs[0]]
        assert extra
        appended = with_extra_outputs(to_onnx(graph, stage=stage).SerializeToString(), graph, extra)
        assert _without_metadata(appended) == _without_metadata(float_model_bytes(graph, extra))
        assert with_extra_outputs(b"model", graph, list(graph.outputs)) == b"model"   # nothing to add: the bytes as they were


def test_evaluation_measures_the_same_from_the_file_bytes(swin):
    _, result = swin
    graph, qgraph = result.graph, result.quantized
    present = {o for n in result.program.nodes for o in n.outputs}
    tensors = [t for t in result.plan.tensors if t in present and t not in graph.outputs]
    scales = {t: result.plan.tensors[t].channel_scales() for t in tensors if not result.plan.tensors[t].is_log2}
    tensors = [t for t in tensors if t in scales]
    batches = [result.data.sample(k) for k in range(4)]
    rebuilt = evaluate_outputs(graph, qgraph, batches, None, tensors, scales)
    from_files = evaluate_outputs(graph, qgraph, batches, None, tensors, scales,
                                  serialized=(result.serialized["optimized_float_model"], result.serialized["quantized_model"]))
    assert rebuilt == from_files
    # calibrate opens the float side's session while it builds the quantized model, and hands it over: the same errors
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        opened = pool.submit(evaluation_float_session, graph, tensors, result.serialized["optimized_float_model"])
        handed = evaluate_outputs(graph, qgraph, batches, None, tensors, scales, float_session=opened,
                                  serialized=(result.serialized["optimized_float_model"], result.serialized["quantized_model"]))
    assert handed == rebuilt


def test_written_files_are_the_returned_models(swin):
    cfg, result = swin
    files = write_outputs(cfg, result, "")
    assert files["optimized_float_model"].read_bytes() == to_onnx(result.graph, stage="optimized_float").SerializeToString()
    assert files["quantized_model"].read_bytes() == to_onnx(result.quantized, stage="quantized").SerializeToString()
    # the calibrated and original float models were serialized while the evaluation ran: still the returned graphs' bytes
    assert set(result.serialized) == {"optimized_float_model", "quantized_model", "calibrated_model", "original_float_model"}
    assert files["calibrated_model"].read_bytes() == to_onnx(result.calibrated, stage="calibrated").SerializeToString()
    assert files["original_float_model"].read_bytes() == to_onnx(result.original, stage="original_float").SerializeToString()


def test_models_staged_during_the_evaluation_are_the_files_written(swin, tmp_path):
    """hbtool calibrate hands run_calibration an AtomicFileSet: the four models are staged while the evaluation runs
    (nothing at the targets yet), and write_outputs commits the very bytes an unstaged write gives."""
    from hbtool.utils.atomic import AtomicFileSet

    import copy

    cfg, result = swin
    staged_cfg = copy.deepcopy(cfg)
    staged_cfg.model.working_dir = tmp_path / "staged"
    wd = Path(staged_cfg.model.working_dir)
    with AtomicFileSet() as staging:
        staged = run_calibration(staged_cfg, staging=staging)
        models = ("original_float_model", "optimized_float_model", "calibrated_model", "quantized_model")
        assert sorted(p.name.split(".onnx")[0].lstrip(".") for p in wd.iterdir()) == sorted(f"{cfg.model.output_model_file_prefix}_{m}" for m in models)
        assert all(p.name.endswith(".tmp") for p in wd.iterdir())   # staged, not yet at the targets
        files = write_outputs(staged_cfg, staged, "", staging)
    plain = write_outputs(cfg, result, "")
    for key in models + ("quant_info",):
        assert files[key].read_bytes() == plain[key].read_bytes(), key
    assert not [p for p in wd.iterdir() if p.name.endswith(".tmp")]


def test_float_side_run_ahead_measures_the_same(swin):
    """calibrate runs the evaluation's float side ahead (evaluation_float_outputs, while it builds the quantized
    model) and hands its outputs over: the same errors as the float runs beside the test runs, with every batch
    ahead, some (the byte budget) or none."""
    from hbtool.quant.calibrate import _batch_bytes, evaluation_float_outputs

    _, result = swin
    graph, qgraph = result.graph, result.quantized
    present = {o for n in result.program.nodes for o in n.outputs}
    tensors = [t for t in result.plan.tensors if t in present and t not in graph.outputs and not result.plan.tensors[t].is_log2]
    scales = {t: result.plan.tensors[t].channel_scales() for t in tensors}
    batches = [result.data.sample(k) for k in range(4)]
    serialized = (result.serialized["optimized_float_model"], result.serialized["quantized_model"])
    beside = evaluate_outputs(graph, qgraph, batches, None, tensors, scales, serialized=serialized)
    per_batch = _batch_bytes(graph, list(graph.outputs) + tensors)
    assert per_batch and per_batch == sum(a.nbytes for a in evaluation_float_outputs(graph, tensors, batches[:1], serialized[0])[1][0])
    for fit in (4, 2, 0):
        session, ahead = evaluation_float_outputs(graph, tensors, batches, serialized[0], budget=fit * per_batch + per_batch // 2)
        assert len(ahead) == fit
        handed = evaluate_outputs(graph, qgraph, batches, None, tensors, scales, serialized=serialized, float_outputs=(session, ahead))
        assert handed == beside and handed[1]
        assert all(a is None for a in ahead), "each batch's float tensors released once its errors are added"
