"""``hbtool debug --auto --time-limit``: the search stops at the limit and keeps the best it found.

A recogniser's ``--auto`` with a task metric can run for an hour (every try is a calibration and a
run of the debug samples); the limit bounds it. These tests drive the clock, so the stop lands at
a known try.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from click.testing import CliRunner

from hbtool.cli import main
from hbtool.config import load_config
from hbtool.debug.run import parse_time_limit, run_debug, write_debug
from hbtool.errors import InputError
from tests.debug_models import tiny_transformer, write_config


@pytest.mark.parametrize("text, seconds", [("30m", 1800.0), ("90s", 90.0), ("1.5h", 5400.0), ("45", 45.0),
                                           ("0", None), ("none", None)])
def test_parse_time_limit(text, seconds):
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-5m", "m"])
def test_parse_time_limit_rejects(text):
    with pytest.raises(InputError):
        parse_time_limit(text)


@pytest.fixture(scope="module")
def transformer_cfg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("debug_time")
    model = tiny_transformer(tmp / "m.onnx")
    return tmp, write_config(tmp, model, "1x16x32", {"auto_int16": False})


class TickClock:
    """A monotonic clock that only moves when asked: the deadline falls between two known tries."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_stops_at_the_limit_and_keeps_the_best(transformer_cfg, monkeypatch):
    tmp, cfg_path = transformer_cfg
    clock = TickClock()
    monkeypatch.setattr(time, "monotonic", clock)
    import hbtool.debug.session as session_mod

    measure = session_mod.DebugSession.measure
    calls = {"n": 0}

    def counted(self, result, node_info, **kw):
        calls["n"] += 1
        if calls["n"] == 4:          # the PTQ measure, then 3 tries: after them the clock passes the limit
            clock.now += 61.0
        return measure(self, result, node_info, **kw)

    monkeypatch.setattr(session_mod.DebugSession, "measure", counted)
    result = run_debug(load_config(cfg_path), auto=True, target_cosine=0.99, max_fps_loss=0.10, samples=8, time_limit=60.0)
    a = result.auto
    assert a.tries == 3 and "time limit" in a.stopped
    # the third try (int16 on a group of outputs) may already reach the target: the limit then stops the bisection
    assert a.reached == (a.final.cosine >= 0.99)
    assert len(a.steps) == 1 + 3                       # PTQ and the three tries
    ptq = a.steps[0]
    assert a.final.cosine >= ptq.cosine                # the best found so far, never worse than PTQ
    assert sorted(a.node_info) == sorted(a.changed)     # what the kept steps changed (a group's nodes, or a node)
    out = tmp / "out"
    write_debug(result, out)
    data = json.loads((out / "debug.json").read_text())
    assert data["auto"]["tries"] == 3 and "time limit" in data["auto"]["stopped"]
    assert "stopped early" in (out / "debug_report.html").read_text()


def test_cli_time_limit(transformer_cfg):
    tmp, cfg_path = transformer_cfg
    res = CliRunner().invoke(main, ["debug", "-c", str(cfg_path), "--output-dir", str(tmp / "cli"), "--samples", "4",
                                    "--auto", "--time-limit", "0.001s"])
    assert res.exit_code == 0, res.output
    # a millisecond is spent before the search starts (calibrate, ranking): no try, the PTQ model is the result
    data = json.loads((tmp / "cli" / "debug.json").read_text())
    assert data["auto"]["tries"] == 0 and data["auto"]["node_info"] == {}
    assert "stopped early" in res.output
    bad = CliRunner().invoke(main, ["debug", "-c", str(cfg_path), "--auto", "--time-limit", "soon"])
    assert bad.exit_code != 0 and "--time-limit soon" in bad.output and "Traceback" not in bad.output


ARGMAX_HOOK = '''
import numpy as np

def agreement(quantized, float_):
    return float(np.mean(np.argmax(quantized["y"], axis=-1) == np.argmax(float_["y"], axis=-1)))
'''


def test_group_weight_remedies_skipped_when_the_loss_is_in_the_activations(tmp_path):
    """The transformer's loss (auto_int16 off) is its int8 activations (outlier channels, Softmax
    logits): every weight float recovers little of it, so ``--auto`` spends no time on weight
    groups (learned rounding of every layer: minutes on a real model) and says why."""
    (tmp_path / "hook_metrics.py").write_text(ARGMAX_HOOK)
    model = tiny_transformer(tmp_path / "m.onnx")
    cfg = write_config(tmp_path, model, "1x16x32", {"auto_int16": False}, debug={"metric": "hook_metrics:agreement"})
    result = run_debug(load_config(cfg), auto=True, samples=8, max_fps_loss=0.10, candidates=2)
    assert result.weight_share is not None and result.weight_share < 0.25
    assert not [s for s in result.auto.steps if s.remedy in ("group_bias_correction", "group_mse", "group_adaround")]
    assert any("group weight remedies skipped" in n for n in result.auto.notes)
    # int16 on groups of the worst-SQNR outputs is tried instead, each priced by the cost model
    int16 = [s for s in result.auto.steps if s.remedy == "group_int16_output"]
    assert int16 and all(s.fps is not None and s.fps > 0 for s in int16 if np.isfinite(s.cosine))
    sizes = [int(s.node.split()[0]) for s in int16]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)      # distinct groups, smallest first
    # a kept group raised the metric (the PTQ model, steps[0], is the bar), within the FPS budget
    # (the group itself, or the fewest of its outputs that do what it does: the bisection's step)
    kept = [s for s in result.auto.steps if s.kept and s.remedy in ("group_int16_output", "bisect_int16_output")]
    assert len(kept) == 1 and kept[0].metric > result.auto.steps[0].metric and kept[0].fps >= 0.9 * result.auto.base_fps
    assert result.auto.final.metric == kept[0].metric
