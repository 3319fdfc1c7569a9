"""``--auto`` with a task metric keeps the best model it measured within the FPS budget (issue 34).

On the all-int8 PP-OCRv5 recogniser the search measured a 100-output budget set at transcription agreement
0.969 within the budget, and its bisection kept a 70-output prefix at 0.875 (cosine 0.974 both): the 3 lines
fewer of 32 were within the fold noise, so the "as good as" of the bisection called it a tie. Here the same
numbers on a fake session whose variant with k int16 outputs measures as a table says.
"""

from __future__ import annotations

from types import SimpleNamespace

import hbtool.debug.auto as auto
from hbtool.debug.auto import paired_noise, run_auto
from hbtool.debug.session import Measured

PTQ = (0.031, 0.860, [0.0] * 7 + [0.25])
#: the whole set: agreement 0.969 on 32 lines (8 folds of 4)
WHOLE = (0.96875, 0.974, [1.0] * 7 + [0.75])
#: a large prefix: 3 lines fewer, the same cosine, the difference within the fold noise
PREFIX = (0.875, 0.974, [0.5, 1.0, 0.75, 1.0, 1.0, 0.75, 1.0, 1.0])
SMALL = (0.5, 0.95, [0.5] * 8)


def _m(metric, cosine, folds=None, n=0):
    return Measured({f"n{i}": {"OutputType": "int16"} for i in range(n)}, {"y": {"cosine": cosine}}, metric, folds=folds)


def _table(k: int):
    return PTQ if k == 0 else WHOLE if k >= 100 else PREFIX if k >= 70 else SMALL


class _CountSession:
    """Just enough of a DebugSession: a variant with k int16 outputs measures as ``_table(k)``."""

    def __init__(self):
        self.cfg = SimpleNamespace(model=SimpleNamespace(node_info={}),
                                   calibration=SimpleNamespace(bias_correction=True, optimization=[]))
        self.metric = SimpleNamespace(is_hook=True)
        self.base = SimpleNamespace(options={})

    def calibrate(self, info):
        return info

    def measure(self, result, info, channels=True):
        return _m(*_table(len(info)), len(info))


def test_the_prefix_is_a_noise_tie_by_the_old_rule():
    """The premise: by :meth:`better` alone the whole set is no step better than the prefix (the noise tie)."""
    whole, prefix = _m(*WHOLE), _m(*PREFIX)
    assert paired_noise(whole, prefix) > whole.metric - prefix.metric > 0.09


def test_the_bisection_keeps_the_metric_of_the_set_it_cuts(monkeypatch):
    names = [f"n{i}" for i in range(100)]
    monkeypatch.setattr(auto, "int16_groups", lambda session, ranking: [names[:40], names])
    monkeypatch.setattr(auto, "estimate_fps", lambda session, m: 1000.0 - len(m.node_info))   # 100 outputs: the floor
    res = run_auto(_CountSession(), [], target_cosine=0.99, max_fps_loss=0.1, ideal_metric=1.0)
    tried = [s for s in res.steps if s.remedy == "bisect_int16_output"]
    assert any(s.metric == PREFIX[0] for s in tried)            # the bisection measured prefixes of 0.875 ...
    assert res.final.metric == WHOLE[0] and len(res.node_info) == 100   # ... and kept the set at 0.969
    assert res.final.fps >= 1000.0 * 0.9


def test_the_model_kept_is_never_beaten_by_a_try_measured_within_the_budget(monkeypatch):
    """Whatever a phase left as the model kept (here: set by hand to the prefix, as a time-limited bisection on the
    old rule did), the result is the best in-budget try measured, and the notes say the switch."""
    names = [f"n{i}" for i in range(100)]
    monkeypatch.setattr(auto, "int16_groups", lambda session, ranking: [names[:40], names])
    monkeypatch.setattr(auto, "estimate_fps", lambda session, m: 1000.0 - len(m.node_info))
    kept_by_the_phase = {}

    def bisect_as_before(self, best, seen):
        prefix = self.session.measure(None, {n: {"OutputType": "int16"} for n in best.names[:70]})
        prefix.fps = 930.0
        self._keep("bisect_int16_output", "70 of the 100", prefix, best.names[:70])
        kept_by_the_phase["metric"] = self.cur.metric
        return best.names[:70], prefix, "70 of the 100"

    monkeypatch.setattr(auto._AutoSearch, "_bisect_and_keep", bisect_as_before)
    res = run_auto(_CountSession(), [], target_cosine=0.99, max_fps_loss=0.1, ideal_metric=1.0)
    assert kept_by_the_phase["metric"] == PREFIX[0]
    assert res.final.metric == WHOLE[0] and len(res.node_info) == 100 and len(res.changed) == 100
    assert any("kept the best try measured within the FPS budget" in n for n in res.notes)
    kept = [s for s in res.steps if s.kept and s.remedy != "ptq"]
    assert kept[-1].metric == WHOLE[0]


def test_a_noisy_tie_won_by_cosine_still_stands(monkeypatch):
    """The guard uses the search's own rule: the seal detector's larger group (lower F1 within the noise, far better
    cosine) stays kept, no switch back to the group of the higher F1."""
    search = auto._AutoSearch.__new__(auto._AutoSearch)
    search.hook, search.target_cosine, search.ideal_metric = True, 0.99, 1.0
    forty = _m(0.946, 0.972, [0.95, 0.80, 1.00, 0.85, 0.90, 1.00, 0.80, 0.95])
    eighty = _m(0.923, 0.983, [0.80, 1.00, 0.85, 0.95, 1.00, 0.80, 0.95, 0.90])
    assert not search.beats(forty, eighty) and search.beats(_m(*WHOLE), _m(*PREFIX))
    assert not search.beats(_m(0.9, 0.97), _m(0.9 - auto.MIN_GAIN / 2, 0.97))   # a difference under MIN_GAIN


def test_without_a_task_metric_the_bisection_may_trade_a_little_cosine_for_nodes():
    """The cosine rule is unchanged: 15 outputs at 0.948 stand in for 40 at 0.952 (under 10 % of the gap to 0.99)."""
    search = auto._AutoSearch.__new__(auto._AutoSearch)
    search.hook, search.target_cosine, search.ideal_metric = False, 0.99, 1.0
    assert not search.beats(_m(0.952, 0.952), _m(0.948, 0.948))
