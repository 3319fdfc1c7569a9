"""The rankings of ``hbtool debug`` (issue 34): the four-way sensitivity and the weight-only ranking run in chunks of
nodes on the ``--workers`` processes, on one onnxruntime thread each, and give bit for bit the serial numbers; the
report's ranking after an ``--auto`` search is bounded by the same time limit.

On the all-int8 PP-OCRv5 recogniser the report's ranking took 181 s of a 427 s command, serial, after the search.
"""

from __future__ import annotations

import dataclasses
import time

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.debug_models import all_int8_session

    return all_int8_session(tmp_path_factory.mktemp("rank_workers"))


def _numbers(ranking):
    return [dataclasses.astuple(s) for s in ranking]


def test_the_ranking_on_two_workers_is_the_serial_ranking_bit_for_bit(tiny, monkeypatch):
    import hbtool.debug.sensitivity as sensitivity
    from hbtool.debug.sensitivity import rank, rank_on, rank_weights, rank_weights_on
    from hbtool.debug.trials import TrialRunner

    session, k = tiny, 4
    single = session.switchable().single_threaded()
    sub, sub_float = sensitivity.first_samples(session, k)
    serial, reference = rank(single, sub, session.output_names, sub_float, session.metric)
    assert len(serial) == len(single.nodes) and serial[0].sensitivity > 0      # a real ranking, not a no-op
    monkeypatch.setattr(sensitivity, "RANK_CHUNK", 5)     # several chunks on the tiny model: the workers share them
    monkeypatch.setattr(sensitivity, "WEIGHT_CHUNK", 2)
    with TrialRunner(session, workers=2) as runner:
        there, there_reference, done = rank_on(runner, session, k)
        weights_there = rank_weights_on(runner, session, 8)
    assert done == len(single.nodes)
    assert _numbers(there) == _numbers(serial) and there_reference == reference              # ==, not approx
    weights = rank_weights(single, *sensitivity.first_samples(session, 8)[:1], session.output_names,
                           sensitivity.first_samples(session, 8)[1], session.metric)
    assert [dataclasses.astuple(g) for g in weights_there] == [dataclasses.astuple(g) for g in weights]
    with TrialRunner(session, workers=1) as here:                   # --workers 1: the same chunks, here
        assert _numbers(rank_on(here, session, k)[0]) == _numbers(serial)


def test_a_ranking_cut_by_the_deadline_lists_the_rest_as_not_evaluated(tiny, monkeypatch):
    import hbtool.debug.sensitivity as sensitivity
    from hbtool.debug.sensitivity import rank_on
    from hbtool.debug.trials import TrialRunner

    session = tiny
    names = [n.name for n in session.switchable().nodes]
    monkeypatch.setattr(sensitivity, "RANK_CHUNK", 4)
    with TrialRunner(session, workers=1) as runner:
        none, reference, done = rank_on(runner, session, 2, order=names[::-1], deadline=time.monotonic() - 1.0)
        assert done == 0 and reference == {} and not any(s.evaluated for s in none)
        clock = iter([0.0, 10.0, 10.0])          # the first wave takes 10 s; the deadline is at 15 s
        monkeypatch.setattr(time, "monotonic", lambda: next(clock, 100.0))
        part, reference, done = rank_on(runner, session, 2, order=names[::-1], deadline=15.0)
    assert done == 4 and reference                                           # one wave of one worker: one chunk
    assert {s.name for s in part if s.evaluated} == set(names[::-1][:4])     # the first of the order
    assert [s.evaluated for s in part] == [True] * 4 + [False] * (len(names) - 4)


def test_the_whole_command_ranks_on_its_workers(tiny, tmp_path):
    """``run_debug`` without ``--auto`` on 2 workers gives the ranking of 1 worker, bit for bit."""
    from hbtool.config import load_config
    from hbtool.debug.run import run_debug
    from tests.debug_models import tiny_transformer, write_config

    cfg = write_config(tmp_path, tiny_transformer(tmp_path / "m.onnx"), "1x16x32", {"auto_int16": False})
    one = run_debug(load_config(cfg), samples=8, workers=1)
    two = run_debug(load_config(cfg), samples=8, workers=2)
    assert _numbers(one.ranking) == _numbers(two.ranking) and one.reference == two.reference
    assert one.ranking and all(s.evaluated for s in one.ranking)
