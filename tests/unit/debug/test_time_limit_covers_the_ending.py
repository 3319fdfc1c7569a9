"""``hbtool debug --auto --time-limit T`` ends within T: the search starts no try whose measured cost would end past
the limit less the measured cost of the ending (the kept model's final calibration and measure, the report).

Issue 34: with ``--time-limit 5m`` the command took 317-346 s on the PP-OCRv5 recogniser (a try in flight at the
limit, the final calibration and measure of the kept set, the report's ranking). These tests drive a fake clock
that moves only by what each calibration and each measure "costs", so the stop lands at a known point and the end
of the command can be checked against the limit to the second.
"""

from __future__ import annotations

import re
import time

import pytest

import hbtool.debug.run as run_mod
from hbtool.config import load_config
from hbtool.debug.run import run_debug
from tests.debug_models import tiny_transformer, write_config

CALIBRATE_S = 20.0     # every calibration (the session's, each try's, the pricing programs')
MEASURE_S = 10.0       # every measure of a variant on the debug samples
REPORT_S = 7.0         # the report's share of the ending


@pytest.fixture(scope="module")
def transformer_cfg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("debug_ending")
    model = tiny_transformer(tmp / "m.onnx")
    return write_config(tmp, model, "1x16x32", {"auto_int16": False})


class CostClock:
    """A monotonic clock that moves only where the test says work costs time."""

    def __init__(self):
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock(monkeypatch):
    import hbtool.debug.session as session_mod

    c = CostClock()
    monkeypatch.setattr(time, "monotonic", c)
    monkeypatch.setattr(run_mod, "REPORT_SECONDS", REPORT_S)
    calibrate, measure = session_mod.DebugSession.calibrate, session_mod.DebugSession.measure

    def slow_calibrate(self, *a, **kw):
        c.now += CALIBRATE_S
        return calibrate(self, *a, **kw)

    def slow_measure(self, *a, **kw):
        c.now += MEASURE_S
        return measure(self, *a, **kw)

    monkeypatch.setattr(session_mod.DebugSession, "calibrate", slow_calibrate)
    monkeypatch.setattr(session_mod.DebugSession, "measure", slow_measure)
    return c


@pytest.mark.parametrize("limit", [150.0, 200.0, 260.0])
def test_the_command_ends_within_the_limit_less_the_report(transformer_cfg, clock, limit):
    start = clock.now
    result = run_debug(load_config(transformer_cfg), auto=True, target_cosine=0.9999, max_fps_loss=0.10, samples=8,
                       time_limit=limit, workers=1)
    a = result.auto
    spent = clock.now - start
    # everything run_debug does (the search, the final measure, the report's ranking) leaves the report its seconds
    assert spent <= limit - REPORT_S, (spent, a.stopped)
    assert "time limit" in a.stopped and a.tries >= 1
    # the stop says what the time was kept for, with the measured costs: a try (a calibration and a measure) and the
    # ending (the PTQ measure as the final measure's cost, no re-calibration with one worker, and the report)
    assert f"a try takes {CALIBRATE_S + MEASURE_S:.0f} s" in a.stopped
    assert f"the ending {MEASURE_S + REPORT_S:.0f} s" in a.stopped
    # and no room was left unused: one more try would have ended past the limit less the ending
    left = float(re.search(r"(\d+) s were left", a.stopped).group(1))
    assert 0 <= left < CALIBRATE_S + MEASURE_S + MEASURE_S + REPORT_S


def test_the_old_rule_would_have_overrun(transformer_cfg, clock, monkeypatch):
    """The same run with the ending's accounting taken out (a try may start until the limit itself): it overruns the
    limit, so the test above measures the rule, not a lucky schedule."""
    from hbtool.debug.auto import _AutoSearch
    from hbtool.debug.trials import TrialRunner

    monkeypatch.setattr(_AutoSearch, "ending_seconds", lambda self: 0.0)
    monkeypatch.setattr(TrialRunner, "slice_seconds", lambda self: 0.0)
    start = clock.now
    limit = 200.0
    run_debug(load_config(transformer_cfg), auto=True, target_cosine=0.9999, max_fps_loss=0.10, samples=8,
              time_limit=limit, workers=1)
    assert clock.now - start > limit - REPORT_S


def test_the_ending_counts_a_workers_calibration_and_a_try_is_priced_before_it_runs():
    """With workers the kept model is calibrated again here at the end (a worker's try comes back without its
    calibration): the ending counts the longest calibration a try measured; with one worker the try kept its own. Before
    any try, a slice is priced by the longest pricing program (a calibration, a compile and a costing, as a try), not by
    the gains pass's chunks."""
    from types import SimpleNamespace

    from hbtool.debug.auto import _AutoSearch
    from hbtool.debug.price import PricingProgram
    from hbtool.debug.sensitivity import ActivationLossJob
    from hbtool.debug.trials import TrialRunner

    def search(parallel: bool):
        runner = SimpleNamespace(parallel=parallel, calibrate_seconds=12.0)
        return SimpleNamespace(runner=runner, res=SimpleNamespace(seconds={"base_measure": 3.0}), report_seconds=5.0)

    assert _AutoSearch.ending_seconds(search(True)) == 12.0 + 3.0 + 5.0
    assert _AutoSearch.ending_seconds(search(False)) == 3.0 + 5.0
    runner = TrialRunner.__new__(TrialRunner)
    runner.try_seconds, runner.job_seconds = 0.0, [(ActivationLossJob(("a",), 2), 40.0), (PricingProgram({}), 9.0)]
    assert runner.slice_seconds() == 9.0
    runner.try_seconds = 11.0
    assert runner.slice_seconds() == 11.0


def test_the_ranking_the_per_node_pass_asks_for_is_bounded_too(transformer_cfg, clock, monkeypatch):
    """The per-node pass of ``--auto`` asks for the four-way ranking when the groups did not reach the target; under a
    time limit that ranking stops at the limit less the ending like the report's (on the recogniser an unbounded one
    ran 86 s past a 5-minute limit). Each ranking chunk costs the fake clock 30 s here, the groups are left out so the
    per-node pass comes first, and the limit leaves room for a few chunks only (a chunk is priced before it starts, as the
    gains pass's seconds price it on a real run)."""
    from hbtool.debug.auto import _AutoSearch
    from hbtool.debug.sensitivity import SensitivityJob

    chunk_s = 30.0
    run_chunk = SensitivityJob.run

    def slow_chunk(self, session):
        clock.now += chunk_s
        return run_chunk(self, session)

    monkeypatch.setattr(SensitivityJob, "run", slow_chunk)
    monkeypatch.setattr(_AutoSearch, "int16_groups_phase", lambda self, names: None)
    # without the groups no gains pass runs to price a chunk by; the chunk's cost stands in for that estimate
    monkeypatch.setattr(run_mod, "_chunk_estimate", lambda runner, nodes: (lambda job: chunk_s))
    start = clock.now
    limit = 120.0
    result = run_debug(load_config(transformer_cfg), auto=True, target_cosine=0.9999, max_fps_loss=0.10, samples=8,
                       time_limit=limit, workers=1)
    assert clock.now - start <= limit - REPORT_S, (clock.now - start, result.auto.stopped)
    assert "per-node pass asked for it" in result.ranking_note
    evaluated = [s for s in result.ranking if s.evaluated]
    assert 0 < len(evaluated) < len(result.ranking)
