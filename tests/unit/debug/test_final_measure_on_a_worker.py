"""``hbtool debug --auto --workers N``: the end of the command, where every worker idles.

A worker's try comes back without its calibration (it pickles to 112 MB on the PP-OCRv5 recogniser), so the model
kept is calibrated again here for the files; the measure with the outputs' worst channels (the report's numbers) then
ran after it, one process working. Now a worker measures it (calibrated again there with the same method) while this
process calibrates it: the same numbers, the two side by side.
"""

from __future__ import annotations


def test_the_kept_try_is_measured_on_a_worker_beside_its_calibration_here(tmp_path, monkeypatch):
    from hbtool.debug.auto import INT16_OUT, calibrated_bytes, with_group
    from hbtool.debug.trials import Trial, TrialRunner, evaluate
    from hbtool.utils.workers import TaskPool
    from tests.debug_models import all_int8_session

    session = all_int8_session(tmp_path)
    names = [n.name for n in session.switchable().nodes][:3]
    trial = Trial(with_group({}, names, INT16_OUT[1]), priced=True)
    with TrialRunner(session, workers=1) as one:         # --workers 1: the try keeps its calibration
        expected = one.final_measure(evaluate(session, trial))
    assert "worst_channel_cosine" in next(iter(expected.outputs.values()))    # measured with its channels

    submitted: list[str] = []
    submit = TaskPool.submit

    def recorded(pool, fn, item):
        submitted.append(fn.__name__)
        return submit(pool, fn, item)

    monkeypatch.setattr(TaskPool, "submit", recorded)
    with TrialRunner(session, workers=2) as runner:
        tried = next(runner.run([trial]))
        assert tried.result is None and tried.method is not None      # came back without its calibration
        got = runner.final_measure(tried)
    assert submitted == ["_final_measure"]
    assert got.outputs == expected.outputs and got.metric == expected.metric and got.folds == expected.folds
    assert got.fps == tried.fps == expected.fps and got.node_info == expected.node_info
    # the calibration here, for the files: the bytes hbtool calibrate writes, serialized while the worker measured
    assert got.result is not None and "calibrated_model" in got.result.serialized
    assert calibrated_bytes(got.result) == calibrated_bytes(expected.result)
