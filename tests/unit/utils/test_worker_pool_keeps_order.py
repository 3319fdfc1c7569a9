"""The worker pool returns results in the order the tasks were given, on every backend."""

from __future__ import annotations

import os

import pytest

from hbtool.errors import InputError
from hbtool.utils.workers import TaskPool, check_workers, worker_state


def _setup(offset: int) -> None:
    worker_state()["offset"] = offset


def _slow_first(i: int) -> tuple[int, int]:
    """Earlier tasks take longer, so finishing order is the reverse of submission order."""
    import time

    time.sleep(0.05 * (5 - i) if i < 5 else 0)
    return i + worker_state()["offset"], os.getpid()


def _fails_on_three(i: int) -> int:
    if i == 3:
        raise ValueError("task three failed")
    return i


def test_serial_runs_in_this_process():
    with TaskPool(1, initializer=_setup, initargs=(10,)) as pool:
        results = list(pool.map(_slow_first, range(4)))
    assert [r for r, _ in results] == [10, 11, 12, 13]
    assert {pid for _, pid in results} == {os.getpid()}


def test_processes_keep_submission_order():
    with TaskPool(2, initializer=_setup, initargs=(100,)) as pool:
        results = list(pool.map(_slow_first, range(8)))
    assert [r for r, _ in results] == list(range(100, 108))
    assert os.getpid() not in {pid for _, pid in results}


def test_a_failed_task_raises_in_the_caller():
    with TaskPool(2) as pool, pytest.raises(ValueError, match="task three"):
        list(pool.map(_fails_on_three, range(6)))


def test_worker_count_below_one_is_a_usage_error():
    with pytest.raises(InputError, match="--workers 0"):
        check_workers(0)
    assert check_workers(None) >= 1


def test_local_ray_cluster_keeps_order():
    pytest.importorskip("ray")
    with TaskPool(2, cluster="local", initializer=_setup, initargs=(7,)) as pool:
        results = list(pool.map(_slow_first, range(6)))
    assert [r for r, _ in results] == list(range(7, 13))
