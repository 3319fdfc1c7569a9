"""``hbtool debug --auto``: groups, bisection inside a group, and the tries of a round on workers or Ray.

Issue 34: on a real recogniser's all-int8 calibration the old search tried 169 single nodes in 24
minutes and did not reach the target. Now int16 goes on groups of the worst-SQNR outputs (with or
without a task metric), a group that reaches the target is cut down to the few nodes that matter, and
the independent tries of a round run on ``--workers`` processes or a ``--cluster``, with the very result
of ``--workers 1``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import hbtool.debug.auto as auto
from hbtool.debug.auto import run_auto
from hbtool.debug.session import Measured


class _OneNodeMatters:
    """A session whose variants measure worst cosine 0.995 when ``culprit`` is int16, else 0.95 (a bit
    better per int16 node, so larger groups are no worse): the int16 group phase must find the culprit."""

    def __init__(self, culprit: str):
        self.culprit = culprit
        self.cfg = SimpleNamespace(model=SimpleNamespace(node_info={}),
                                   calibration=SimpleNamespace(bias_correction=True, optimization=[]))
        self.metric = SimpleNamespace(is_hook=False)
        self.base = SimpleNamespace(options={})
        self.calibrations = 0

    def calibrate(self, info):
        self.calibrations += 1
        return info

    def measure(self, result, info, channels=True):
        cosine = (0.995 if self.culprit in info else 0.95) + 1e-4 * len(info)
        return Measured(dict(info), {"y": {"cosine": cosine}}, cosine)


def test_bisection_finds_the_one_sensitive_node_of_a_group(monkeypatch):
    names = [f"n{i}" for i in range(40)]
    monkeypatch.setattr(auto, "int16_groups", lambda session, ranking: [names[:k] for k in (5, 10, 20, 40)])
    monkeypatch.setattr(auto, "estimate_fps", lambda session, m: 1000.0 - len(m.node_info))
    session = _OneNodeMatters("n13")
    res = run_auto(session, [], target_cosine=0.99, max_fps_loss=0.1, ideal_metric=1.0)
    assert res.reached and sorted(res.node_info) == ["n13"] and res.changed == ["n13"]
    assert res.node_info["n13"] == {"OutputType": "int16"}
    # the groups of 5 and 10 fall short, 20 reaches: a few more tries find the one node (not 40 single tries)
    assert res.tries <= 15, res.tries
    kept = [s for s in res.steps if s.kept]
    assert [s.remedy for s in kept] == ["ptq", "bisect_int16_output"] and kept[-1].note == "n13"


def test_a_group_where_every_node_is_needed_is_kept_whole(monkeypatch):
    """No smaller part does what the group does: the group stays, and the bisection's tries are in the steps."""
    names = [f"n{i}" for i in range(5)]
    monkeypatch.setattr(auto, "int16_groups", lambda session, ranking: [names])
    monkeypatch.setattr(auto, "estimate_fps", lambda session, m: 1000.0 - len(m.node_info))

    class AllNeeded(_OneNodeMatters):
        def measure(self, result, info, channels=True):
            cosine = 0.995 if len(info) == 5 else 0.95
            return Measured(dict(info), {"y": {"cosine": cosine}}, cosine)

    res = run_auto(AllNeeded(""), [], target_cosine=0.99, max_fps_loss=0.1, ideal_metric=1.0)
    assert res.reached and sorted(res.node_info) == names
    assert any(s.remedy == "bisect_int16_output" and not s.kept for s in res.steps)


# ---------------------------------------------------------------------------------------- workers and Ray
@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The tiny transformer (auto_int16 off) with ``--workers 1``: the result every other runner must give."""
    from hbtool.config import load_config
    from hbtool.debug.run import run_debug
    from tests.debug_models import tiny_transformer, write_config

    tmp = tmp_path_factory.mktemp("debug_parallel")
    cfg = write_config(tmp, tiny_transformer(tmp / "m.onnx"), "1x16x32", {"auto_int16": False})
    return tmp, cfg, run_debug(load_config(cfg), auto=True, samples=8, workers=1)


def _decisions(a):
    """What the search did and found: every step's numbers and verdict, the node_info, the final measurement."""
    steps = [(s.remedy, s.node, s.cosine, s.outputs, s.metric, s.fps, s.kept, s.note) for s in a.steps]
    return steps, a.node_info, a.changed, a.tries, a.reached, a.final.outputs, a.final.metric, a.final.fps


def _again(result, **where):
    """``--auto`` once more on the same session and ranking, its tries run elsewhere."""
    return run_auto(result.session, result.ranking, 0.99, 0.10, result.session.metric.value(
        result.session.float_outputs, result.session.float_outputs), int16_gains=result.int16_gains, **where)


def test_two_workers_give_the_identical_result(serial):
    _, _, result = serial
    assert result.auto.tries > 1 and result.auto.changed        # a search with rounds to run, not a no-op
    assert _decisions(_again(result, workers=2)) == _decisions(result.auto)


def test_a_local_ray_cluster_gives_the_identical_result(serial):
    """The tries of one round (the search's first int16 groups) on a local Ray cluster measure exactly as here
    (the whole search on Ray is the same code path as on worker processes above, only slower to start)."""
    pytest.importorskip("ray")
    from hbtool.debug.auto import INT16_OUT, int16_groups, with_group
    from hbtool.debug.trials import Trial, TrialRunner, evaluate

    _, _, result = serial
    trials = [Trial(with_group({}, names, INT16_OUT[1]), priced=True) for names in int16_groups(result.session, result.ranking)[:2]]
    here = [evaluate(result.session, t) for t in trials]
    with TrialRunner(result.session, workers=2, cluster="local") as runner:
        there = list(runner.run(trials))
    assert [(m.node_info, m.outputs, m.metric, m.fps) for m in there] == [(m.node_info, m.outputs, m.metric, m.fps) for m in here]
    assert all(m.result is None for m in there)        # the calibrations stay on the cluster


def _ranking_numbers(ranking):
    import dataclasses

    return [dataclasses.astuple(s) for s in ranking]


@pytest.mark.parametrize("cluster", [None, pytest.param("local", marks=pytest.mark.slow)], ids=["processes", "ray-local"])
def test_the_whole_command_with_its_ranking_in_the_background_gives_the_serial_result(serial, monkeypatch, cluster):
    """``hbtool debug --auto --workers 2`` without a time limit: the report's ranking runs as background work on the
    workers' idle slots beside the search (it decides nothing in it); the search's decisions, the model kept and the
    ranking are those of ``--workers 1``, bit for bit, on worker processes and on a local Ray cluster."""
    if cluster:
        pytest.importorskip("ray")
    import hbtool.debug.trials as trials
    from hbtool.config import load_config
    from hbtool.debug.run import run_debug

    _, cfg, one = serial
    started = []
    original = trials.TrialRunner.background

    def counted(self, jobs):
        started.append(len(jobs))
        return original(self, jobs)

    monkeypatch.setattr(trials.TrialRunner, "background", counted)
    two = run_debug(load_config(cfg), auto=True, samples=8, workers=2, cluster=cluster)
    assert started and started[0] >= 1                   # the ranking went in as background work
    assert one.ranking and all(s.evaluated for s in one.ranking)
    assert _decisions(two.auto) == _decisions(one.auto)
    assert _ranking_numbers(two.ranking) == _ranking_numbers(one.ranking) and two.reference == one.reference
    # one worker runs exactly the tries it reads; two run whole slices (a try after the one that ended a round runs
    # for nothing, never read): counted, so the price of the speculation is visible
    assert one.auto.tries_run == one.auto.tries <= two.auto.tries_run


class _Pause:
    """A background job that only takes time (stands in for a chunk of the report's ranking)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def run(self, session) -> float:
        import time

        time.sleep(self.seconds)
        return self.seconds


def test_no_try_runs_for_nothing_while_background_work_waits(serial):
    """While background work waits to start, a round's tries start one at a time (the other worker runs the
    background work): a round the search stops reading after its first try started no second try, whose result the
    serial search would never read. Once all background work has started, slices of ``workers`` tries again. The
    measurements are those of the tries run here."""
    from hbtool.debug.auto import INT16_OUT, int16_groups, with_group
    from hbtool.debug.trials import Trial, TrialRunner, evaluate

    _, _, result = serial
    trials = [Trial(with_group({}, names, INT16_OUT[1]), priced=True) for names in int16_groups(result.session, result.ranking)[:3]]
    with TrialRunner(result.session, workers=2) as runner:
        back = runner.background([_Pause(1.0) for _ in range(4)])
        assert runner.slice_size() == 1
        results = runner.run(trials)
        first = next(results)
        results.close()                       # the round ended at its first try
        assert runner.tries_run == 1
        assert list(back.results()) == [1.0] * 4
        runner.search_ended()
        assert runner.slice_size() == 2
        results = runner.run(trials)
        second = next(results)
        results.close()
        assert runner.tries_run == 1 + 2      # a whole slice, the second try speculative
    here = evaluate(result.session, trials[0])
    for m in (first, second):
        assert (m.node_info, m.outputs, m.metric, m.fps) == (here.node_info, here.outputs, here.metric, here.fps)


@pytest.mark.parametrize("flags, says", [(["--workers", "0"], "--workers 0"),
                                         (["--cluster", "127.0.0.1:1"], "cannot reach the Ray cluster"),
                                         (["--cluster", "no-port"], "not a Ray address")])
def test_bad_workers_or_cluster_is_a_one_line_usage_error(serial, flags, says):
    from hbtool.cli import main

    tmp, cfg, _ = serial
    res = CliRunner().invoke(main, ["debug", "-c", str(cfg), "--auto", "--output-dir", str(tmp / "bad"), *flags])
    assert res.exit_code == 2, res.output
    assert says in res.output and "Traceback" not in res.output
    assert len([ln for ln in res.output.splitlines() if ln.startswith("hbtool: error")]) == 1
    assert not (tmp / "bad").exists()
