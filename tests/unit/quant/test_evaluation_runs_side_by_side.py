"""The final evaluation runs its float and test runs side by side: the same errors.

``evaluate_outputs`` (calibrate's per-tensor report and output errors, written into ``quant_info.json``) sends
every batch's float run and test run to as many threads as there are cores (``evaluation_streams``; the sessions
keep onnxruntime's default thread count, on which a basic-level float convolution's bits depend), and adds the
errors batch by batch in order. Checked here on a CNN and a Swin: the errors are the very floats of the plain loop
(every run on a session with onnxruntime's default threads, one after another), whatever the number of streams.
"""

from __future__ import annotations

import pytest

from hbtool.config import load_config
from hbtool.io.metrics import RunningErrors
from hbtool.quant import calibrate as calib
from hbtool.quant.calibrate import evaluate_outputs, evaluation_streams, run_calibration
from hbtool.quant.collect import open_session, session_model
from tests.helpers import tiny_calibration_config


def test_streams_are_the_cores():
    assert evaluation_streams(4, cores=2) == 2
    assert evaluation_streams(4, cores=1) == 1
    assert evaluation_streams(4, cores=16) == 8
    assert evaluation_streams(0, cores=4) == 1


@pytest.fixture(scope="module", params=["tiny_cnn", "tiny_swin"])
def calibrated(request, tmp_path_factory):
    path = tiny_calibration_config(tmp_path_factory.mktemp(request.param), model=request.param, num_samples=8,
                                   calibration_type="max")
    result = run_calibration(load_config(path), evaluate=False)
    graph, qgraph = result.graph, result.quantized
    present = {o for n in result.program.nodes for o in n.outputs}
    tensors = [t for t in result.plan.tensors if t in present and t not in graph.outputs and not result.plan.tensors[t].is_log2]
    scales = {t: result.plan.tensors[t].channel_scales() for t in tensors}
    batches = [result.data.sample(k) for k in range(5)]
    return graph, qgraph, batches, tensors, scales


def _plain(graph, qgraph, batches, tensors, scales):
    """The errors one after another on default-thread sessions, summed in batch order."""
    names = list(graph.outputs) + tensors
    f_sess = open_session(session_model(graph, tensors), basic=True)
    t_sess = open_session(session_model(qgraph, tensors), basic=True)
    acc = {t: RunningErrors() for t in names}
    for feeds in batches:
        for name, a, b in zip(names, f_sess.run(names, feeds), t_sess.run(names, feeds)):
            acc[name].update(a, b if name in graph.outputs else b * scales[name])
    return {o: acc[o].result() for o in graph.outputs}, {t: acc[t].result() for t in tensors}


@pytest.mark.parametrize("cores", [1, 2, 3, 16])
def test_errors_side_by_side_are_the_plain_loops(calibrated, monkeypatch, cores):
    graph, qgraph, batches, tensors, scales = calibrated
    monkeypatch.setattr(calib, "evaluation_streams", lambda n, cores=cores: evaluation_streams(n, cores))
    got = evaluate_outputs(graph, qgraph, batches, None, tensors, scales)
    assert got == _plain(graph, qgraph, batches, tensors, scales)
    assert got[1], "per-tensor errors compared"
