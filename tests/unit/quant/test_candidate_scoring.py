"""The shared scoring session gives every candidate the very outputs of its own calibrated model.

``calibration_type: default`` scores max / percentile / KL / MSE on one onnxruntime session per plan
layout, each plan's activation scale, qmin and qmax fed as inputs (hbtool.quant.candidate_scoring),
instead of building, serializing and opening each candidate's calibrated model. That is only a
speed-up if the scores are the same floats, as the choice and ``quant_info.json``'s candidate cosines
depend on them: checked here bit for bit, output array by output array, on three tiny models (a CNN
with ``auto_int16`` promotions, a ViT, a Swin with PTF and log2 Softmax outputs, whose layouts
differ), with plans of one layout sharing one session.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from hbtool.config import load_config
from hbtool.quant import calibrate as calib
from hbtool.quant.calibrated_model import build_calibrated_graph
from hbtool.quant.candidate_scoring import ScoringModel, plan_layout
from hbtool.ir import onnx_import
from hbtool.quant.collect import float_model_bytes, open_session, session_model

ROOT = Path(__file__).resolve().parents[3]


def _prepared(tmp_path: Path, model: str, **cal) -> calib._Calibration:
    data = yaml.safe_load((ROOT / "configs" / f"{model}.yaml").read_text())
    data["model_parameters"]["onnx_model"] = str(ROOT / "samples" / "tiny" / f"{model}.onnx")
    data["model_parameters"]["working_dir"] = str(tmp_path / "wd")
    data["calibration_parameters"].update(cal_data_dir=str(ROOT / "samples" / "data" / "digits_cal"), num_samples=8,
                                          calibration_type="default", **cal)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    run = calib._Calibration(load_config(path), None, None, None)
    with calib.ThreadPoolExecutor(1) as run.background:
        run.prepare_graph()
        run.load_data()
        run.collect_statistics()
        run.reference_outputs()
    run.plan_weights()
    run.correct_biases()
    run.quantization_source()
    return run


@pytest.mark.parametrize("model, options", [
    ("tiny_cnn", {}),
    ("tiny_vit", {}),
    ("tiny_swin", {"ptf": True, "softmax_log2": True}),
])
def test_shared_session_outputs_are_each_candidates_own(tmp_path, monkeypatch, model, options):
    """Each candidate's own model from its full bytes; the shared scoring model as calibrate opens it, its weights
    handed over as arrays (collect.SessionModel; the tiny models' weights count with the threshold at 1 KB)."""
    monkeypatch.setattr(onnx_import, "SET_ASIDE_MIN_BYTES", 1024)
    run = _prepared(tmp_path, model, **options)
    outputs = list(run.graph.outputs)
    shared: dict = {}
    plans = {}
    for method in (*calib.CANDIDATES, "mix"):
        plan = run.plan_for(run.per_tensor_methods() if method == "mix" else method)
        plans[method] = plan
        own = open_session(float_model_bytes(build_calibrated_graph(run.qsrc, plan, run.weights)[0]), basic=True, spinning=False)
        layout = plan_layout(run.graph, plan, run.weights)
        if layout not in shared:
            scoring = ScoringModel(run.qsrc, plan, dict(run.weights))
            handed = session_model(scoring.graph)
            assert handed.weights, "some weights are handed over as arrays"
            shared[layout] = (scoring, open_session(handed, basic=True, spinning=False))
        scoring, sess = shared[layout]
        feeds = scoring.feeds(plan)
        assert feeds, "the scoring model feeds its activation numbers"
        for batch in run.eval_batches:
            for want, got in zip(own.run(outputs, batch), sess.run(outputs, {**batch, **feeds})):
                assert want.dtype == got.dtype and want.tobytes() == got.tobytes(), (model, method)
        assert run._scored(sess, feeds) == run._output_cosine_of(float_model_bytes(build_calibrated_graph(run.qsrc, plan, run.weights)[0]))
    # the point of it: plans with different numbers share one session
    assert len(shared) < len(plans)
    assert len({tuple(sorted((t, q.scale) for t, q in p.tensors.items())) for p in plans.values()}) > len(shared)


def test_a_different_layout_gets_its_own_model(tmp_path):
    run = _prepared(tmp_path, "tiny_swin", ptf=True)
    plan = run.plan_for("max")
    ptf = [t for t, q in plan.tensors.items() if q.ptf_alpha is not None]
    assert ptf, "tiny_swin has PTF LayerNorm inputs"
    before = plan_layout(run.graph, plan, run.weights)
    plan.tensors[ptf[0]].ptf_alpha = None   # the same tensor with one scale: another shape of scale input
    assert plan_layout(run.graph, plan, run.weights) != before


def test_feeds_carry_the_plan_numbers(tmp_path):
    run = _prepared(tmp_path, "tiny_cnn")
    plan = run.plan_for("max")
    scoring = ScoringModel(run.qsrc, plan, dict(run.weights))
    feeds = scoring.feeds(plan)
    for name, (s, qmin, qmax) in scoring.inputs.items():
        tq = plan.tensors[name]
        assert float(feeds[s]) == np.float32(tq.scale)
        assert float(feeds[qmax]) == {8: 127, 16: 32767}[tq.bits] or tq.code_range is not None
        assert float(feeds[qmin]) == -float(feeds[qmax]) - 1 or tq.code_range is not None


@pytest.mark.parametrize("model, options", [("tiny_cnn", {}), ("tiny_swin", {"ptf": True, "softmax_log2": True})])
def test_the_scored_plan_is_the_plan_built_again(tmp_path, model, options):
    """final_result takes the chosen candidate's plan (and what its options reported) from the scoring instead of
    building it again: the same plan, the same quant_info and calibrated model as a plan built afresh."""
    from hbtool.ir.onnx_export import to_onnx

    def result(reuse: bool):
        (tmp_path / str(reuse)).mkdir()
        run = _prepared(tmp_path / str(reuse), model, **options)
        method, candidates = run.choose_method()
        if not reuse:
            run.built_plans.clear()
        return method, run.final_result(method, candidates, evaluate=False)

    (m1, reused), (m2, rebuilt) = result(True), result(False)
    assert m1 == m2
    assert calib.quant_info(reused) == calib.quant_info(rebuilt)
    assert to_onnx(reused.calibrated).SerializeToString() == to_onnx(rebuilt.calibrated).SerializeToString()
