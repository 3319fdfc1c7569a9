"""``hbtool debug --workers N``: the serial stretch before the workers have work is as short as it can be.

Issue 34's ``--workers 2`` line (>= 1.7x the speed of ``--workers 1``) is lost in the stretches that run in one
process while the other cores idle. Before the search: the base calibration, with the workers started only after it
(their imports then ran beside the op error), and calibrate's own evaluation of the PTQ model, which the debugger
never reads (it measures the PTQ model itself). Each test checks the cause, not a clock.
"""

from __future__ import annotations

import pytest

import hbtool.debug.run as run
import hbtool.quant.calibrate as calibrate
from hbtool.debug.masked import MaskedModel
from hbtool.utils.workers import TaskPool


class _Stop(Exception):
    pass


def _tiny_all_int8_config(tmp_path):
    """The tests' tiny transformer with its all-int8 calibration config, loaded."""
    from hbtool.config import load_config
    from tests.debug_models import tiny_transformer, write_config

    return load_config(write_config(tmp_path, tiny_transformer(tmp_path / "m.onnx"), "1x16x32", {"auto_int16": False}))


def _debug_on_two_workers_until_stopped(tmp_path) -> None:
    """``hbtool debug --auto --workers 2`` on the tiny model, up to the patched step that raises :class:`_Stop`."""
    with pytest.raises(_Stop):
        run.run_debug(_tiny_all_int8_config(tmp_path), auto=True, samples=8, workers=2)


def test_the_workers_start_before_the_base_calibration(tmp_path, monkeypatch):
    order: list[str] = []
    enter = TaskPool.__enter__

    def entered(pool):
        order.append(f"pool warmup={pool.warmup.__name__ if pool.warmup else None}")
        return enter(pool)

    def opened(*args, **kwargs):
        order.append("session")
        raise _Stop

    monkeypatch.setattr(TaskPool, "__enter__", entered)
    monkeypatch.setattr(run, "open_session", opened)
    _debug_on_two_workers_until_stopped(tmp_path)
    assert order == ["pool warmup=_warm_worker", "session"]


def test_the_session_skips_calibrates_own_evaluation(tmp_path, monkeypatch):
    """The plan and models of the PTQ calibration without its evaluation (the debugger measures the PTQ model on its
    own samples: nothing reads calibrate's errors)."""
    from tests.debug_models import all_int8_session

    def evaluated(*args, **kwargs):
        raise AssertionError("calibrate's evaluation ran")

    monkeypatch.setattr(calibrate, "evaluate_outputs", evaluated)
    session = all_int8_session(tmp_path)
    assert session.base.quantized is not None and session.base.calibrated is not None
    assert session.base.output_errors == {}


def test_a_switchable_model_beside_workers_does_not_spin(tmp_path):
    """The op error's sessions run beside the worker processes: their idle onnxruntime threads sleep (the same
    numbers: spinning is a wait policy)."""
    import numpy as np

    from tests.debug_models import all_int8_session

    session = all_int8_session(tmp_path)
    spinning = MaskedModel(session.base.calibrated, session.base.graph)
    quiet = MaskedModel(session.base.calibrated, session.base.graph, spinning=False)
    options = quiet.session().get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    mask, names = quiet.mask(off=[]), session.output_names
    a, b = spinning.run(session.samples[:4], mask, names), quiet.run(session.samples[:4], mask, names)
    assert all(np.array_equal(x, y) for rx, ry in zip(a, b) for x, y in zip(rx, ry))


def test_the_final_models_calibrated_file_is_serialized_once(tmp_path):
    """The final model is compiled for its measure and written by the report, both at the end of the command on one
    core: its calibrated model is serialized once, the bytes ``hbtool calibrate`` writes."""
    from hbtool.debug.auto import calibrated_bytes
    from hbtool.ir.onnx_export import to_onnx
    from tests.debug_models import all_int8_session

    result = all_int8_session(tmp_path).calibrate({})
    first = calibrated_bytes(result)
    assert first == to_onnx(result.calibrated, stage="calibrated").SerializeToString()
    assert calibrated_bytes(result) is first


def test_the_debug_samples_float_outputs_run_on_a_worker_beside_the_calibration(tmp_path, monkeypatch):
    """With worker processes the float model's run on the debug samples starts on a worker right after the calibration's
    statistics pass (which keeps every core busy), before the plans and the method choice, mostly on one core (it waited
    for the whole calibration, one process working, the workers idle): the same samples and the same outputs, bit for
    bit, as run here after the calibration."""
    import numpy as np

    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.session import open_session
    from hbtool.debug.trials import TrialRunner

    cfg = _tiny_all_int8_config(tmp_path)
    metric = resolve_metric("cosine", None)
    here = open_session(cfg, metric, 8)
    order: list[str] = []
    stats = calibrate._cached_stats

    def statistics(*args, **kwargs):
        order.append("statistics")
        return stats(*args, **kwargs)

    choose = calibrate._Calibration.choose_method

    def method_choice(self):
        order.append("method choice")
        return choose(self)

    monkeypatch.setattr(calibrate, "_cached_stats", statistics)
    monkeypatch.setattr(calibrate._Calibration, "choose_method", method_choice)
    with TrialRunner(None, workers=2) as runner:
        start = runner.float_outputs_beside()

        def beside(graph, feeds, names):
            order.append("float outputs started")
            return start(graph, feeds, names)

        there = open_session(cfg, metric, 8, reference_beside=beside)
    assert order == ["statistics", "float outputs started", "method choice"]
    assert list(there.float_outputs) == list(here.float_outputs)
    assert all(np.array_equal(there.float_outputs[k], here.float_outputs[k]) for k in here.float_outputs)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(there.samples, here.samples) for k in a)
    with TrialRunner(None, workers=1) as runner:
        assert runner.float_outputs_beside() is None     # no worker: run here, after the calibration, as before


def test_the_workers_get_the_session_before_this_process_builds_its_switchable_model(tmp_path, monkeypatch):
    """The workers build their switchable models (:func:`hbtool.debug.trials._ready_switchable`, one task each)
    while this process builds its own for the op error, instead of after it inside their first chunk."""
    from hbtool.debug import trials

    order: list[str] = []
    submit, build = TaskPool.submit, MaskedModel.__init__

    def submitted(pool, fn, item):
        order.append(fn.__name__)
        return submit(pool, fn, item)

    def built(model, *args, **kwargs):
        order.append("switchable model here")
        build(model, *args, **kwargs)
        raise _Stop

    monkeypatch.setattr(TaskPool, "submit", submitted)
    monkeypatch.setattr(MaskedModel, "__init__", built)
    _debug_on_two_workers_until_stopped(tmp_path)
    assert order == ["_float_outputs", "_ready_switchable", "_ready_switchable", "switchable model here"]

    # what the task does on a worker: the switchable model of the worker's session and its one-thread session
    from tests.debug_models import all_int8_session

    (tmp_path / "s").mkdir()
    session = all_int8_session(tmp_path / "s")
    worker = trials.DebugSession(session.cfg, None, session.samples, session.float_outputs, session.metric,
                                 session.stats_cache, threads=1, masked_graphs=(session.base.calibrated, session.base.graph))
    monkeypatch.setattr(MaskedModel, "__init__", build)
    monkeypatch.setitem(trials.worker_state(), "session", worker)
    trials._ready_switchable()
    assert worker.masked_model is not None and worker.masked_model.threads == 1 and () in worker.masked_model._sessions
