"""``hbtool debug --auto`` (issue 34): the int16 bound, one wide round of groups, rankings only when needed,
and a try measured on the simulator.

On the PP-OCRv5 recogniser calibrated all-int8 the search spent 159 s ranking every node before its first
try, tried the int16 groups one after another, and could not say whether its target was reachable at all.
Now the widest int16 try (every candidate output at int16) leads one round with the groups: when even it
misses the target the report says so with its numbers and, without a task metric, the search ends after
cutting the best group within the FPS budget down to its few nodes.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import hbtool.debug.auto as auto
from hbtool.debug.auto import run_auto
from hbtool.debug.session import Measured
from hbtool.debug.trials import TrialRunner

NAMES = [f"n{i}" for i in range(40)]


class _Capped:
    """A session whose worst output cosine rises with every int16 output, ``per_node`` each, from 0.90 up to
    ``cap`` at most; FPS falls by 1 per int16 output from 1000."""

    def __init__(self, cap: float, per_node: float = 0.002):
        self.cap, self.per_node = cap, per_node
        self.cfg = SimpleNamespace(model=SimpleNamespace(node_info={}),
                                   calibration=SimpleNamespace(bias_correction=True, optimization=[]))
        self.metric = SimpleNamespace(is_hook=False)
        self.base = SimpleNamespace(options={})

    def calibrate(self, info):
        return info

    def measure(self, result, info, channels=True):
        cosine = min(0.90 + self.per_node * len(info), self.cap)
        return Measured(dict(info), {"y": {"cosine": cosine}}, cosine)


@pytest.fixture
def groups(monkeypatch):
    monkeypatch.setattr(auto, "int16_groups", lambda session, nodes: [NAMES[:k] for k in (5, 10, 20, 40)])
    monkeypatch.setattr(auto, "estimate_fps", lambda session, m: 1000.0 - len(m.node_info))


def _never():
    raise AssertionError("the ranking was computed although no phase needed it")


def test_out_of_reach_of_int16_is_said_with_the_bound_and_ends_the_search(groups):
    res = run_auto(_Capped(cap=0.95), _never, target_cosine=0.99, max_fps_loss=0.1, ideal_metric=1.0, nodes=NAMES)
    assert not res.reached
    assert {k: v for k, v in res.bound.items() if k != "after_seconds"} == {
        "nodes": 40, "cosine": 0.95, "metric": 0.95, "fps": 960.0, "within_fps_budget": True, "reaches_target": False,
        "after_tries": 1}
    line = next(n for n in res.notes if n.startswith("unreachable with int16"))
    assert "every candidate output at int16 (40 of the 40 quantized nodes) gives worst output cosine 0.9500 < 0.99" in line
    assert "FPS -4.0 %" in line and "not a proof" in line
    assert any(n.startswith("per-node pass skipped") for n in res.notes)
    # the best within the budget is kept, cut down to the fewest outputs that do what it does (25 reach the cap;
    # a few less are no step worth a node worse: the 10 %-of-the-gap rule)
    assert res.final.cosine >= 0.95 - 0.1 * (0.99 - 0.94) and 20 < len(res.changed) <= 25


def test_a_target_only_over_the_fps_budget_is_said_so(groups, monkeypatch):
    """Every candidate at int16 reaches the target, but not within 3 % FPS: the report says what the budget allows."""
    res = run_auto(_Capped(cap=1.0, per_node=0.0025), lambda: [], target_cosine=0.99, max_fps_loss=0.03, ideal_metric=1.0,
                   nodes=NAMES)
    assert res.bound["reaches_target"] and not res.bound["within_fps_budget"]
    line = next(n for n in res.notes if n.startswith("the target needs more than the FPS budget"))
    assert "the best: 20 outputs, worst output cosine 0.9500, 980 FPS (-2.0 %)" in line
    assert not any(n.startswith("unreachable") for n in res.notes)


def test_the_groups_and_the_bound_go_in_one_round_whatever_the_workers(groups, monkeypatch):
    """The bound and every group are one submission (two workers run two at a time), the steps in size order."""
    rounds = []
    original = TrialRunner.run

    def run(self, trials):
        rounds.append(len(trials))
        return original(self, trials)

    monkeypatch.setattr(TrialRunner, "run", run)
    res = run_auto(_Capped(cap=0.95), _never, target_cosine=0.99, max_fps_loss=0.1, ideal_metric=1.0, nodes=NAMES)
    assert rounds[0] == 4
    sizes = [len(s.note.split(", ")) for s in res.steps if s.remedy == "group_int16_output"]
    assert sizes == [5, 10, 20, 40]
    assert rounds[1:3] == [2, 2], rounds        # the bisection probes two cut points a round


def test_the_ranking_is_computed_when_the_per_node_pass_needs_it(groups):
    calls = []

    def ranking():
        calls.append(1)
        return []

    # every int16 group reaches 0.985 at most but the bound reaches the target over the budget: the per-node pass runs
    run_auto(_Capped(cap=1.0, per_node=0.0025), ranking, target_cosine=0.99, max_fps_loss=0.03, ideal_metric=1.0, nodes=NAMES)
    assert calls == [1]


# ---------------------------------------------------------------------------------------- on a real model
@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from tests.debug_models import all_int8_session

    return all_int8_session(tmp_path_factory.mktemp("debug_bound"))


def test_a_try_on_the_simulator_measures_its_quantized_model_bit_for_bit(session):
    from hbtool.debug.auto import INT16_OUT, compile_variant, int16_groups, with_group
    from hbtool.debug.session import run_outputs, simulate_outputs

    names = [n.name for n in session.base.graph.nodes]
    info = with_group({}, int16_groups(session, names)[0], INT16_OUT[1])
    result = session.calibrate(info)
    compiled = compile_variant(session, result, info)
    sim = simulate_outputs(compiled, session.samples, session.output_names)
    ort = run_outputs(result.quantized, session.samples, session.output_names)
    assert sim is not None and all(np.array_equal(sim[o], ort[o]) for o in session.output_names)
    assert session.measure(result, info, compiled=compiled).outputs == session.measure(result, info).outputs
