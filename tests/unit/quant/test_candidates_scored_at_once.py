"""The candidate methods are scored several at once: the same scores.

``choose_method`` scores max / percentile / KL / MSE (and mix) on one shared session; on a machine with
several cores it runs as many candidates at once as there are cores (``candidate_scoring.scoring_streams``) on
that session, instead of one after another. The candidate cosines go into ``quant_info.json`` and decide the
method, so they must be the very floats of the one-at-a-time scoring.
"""

from __future__ import annotations

import pytest

from hbtool.quant import calibrate as calib
from hbtool.quant import candidate_scoring
from hbtool.quant.candidate_scoring import ScoringModel, scoring_streams
from hbtool.quant.collect import open_session, session_model

from tests.unit.quant.test_candidate_scoring import _prepared


def test_streams_fill_the_cores():
    assert scoring_streams(4, cores=2) == 2
    assert scoring_streams(4, cores=1) == 1
    assert scoring_streams(5, cores=16) == 5
    assert scoring_streams(0, cores=4) == 1


@pytest.mark.parametrize("model, options, cores", [
    ("tiny_cnn", {}, 2),
    ("tiny_swin", {"ptf": True, "softmax_log2": True}, 3),
])
def test_scores_at_once_are_the_scores_one_after_another(tmp_path, monkeypatch, model, options, cores):
    run = _prepared(tmp_path, model, **options)
    run.cal.calibration_type = "mix"   # a fifth candidate
    # the reference: every candidate on a session with onnxruntime's default threads, one after another
    one_by_one = {}
    for method in (*calib.CANDIDATES, "mix"):
        plan = run.plan_for(run.per_tensor_methods() if method == "mix" else method)
        scoring = ScoringModel(run.qsrc, plan, dict(run.weights))
        one_by_one[method] = run._scored(open_session(session_model(scoring.graph), 0, True, False), scoring.feeds(plan))
    monkeypatch.setattr(candidate_scoring, "scoring_streams", lambda n: scoring_streams(n, cores=cores))
    monkeypatch.setattr(calib, "scoring_streams", lambda n: scoring_streams(n, cores=cores))
    opened = []
    monkeypatch.setattr(calib, "open_session", lambda model, threads=0, *a: opened.append(threads) or open_session(model, threads, *a))
    method, candidates = run.choose_method()
    # onnxruntime's default thread count, as one after another: a basic-level float convolution's bits depend on it
    assert opened and set(opened) == {0}
    assert candidates == one_by_one
    assert method == max(one_by_one, key=one_by_one.get)
