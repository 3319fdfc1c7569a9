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


def _stamped(i: int) -> tuple[int, float, float]:
    """Sleeps a little; says when it started and ended (wall clock, comparable across processes)."""
    import time

    start = time.time()
    time.sleep(0.3)
    return i, start, time.time()


def _record_handing(pool: TaskPool) -> dict[int, tuple[float, float]]:
    """``{item: (clock before the pool's submit, clock after it)}``, filled as ``pool`` hands each task to its
    workers (the first handing of an item), for tests that judge order by handing, not by when they asked."""
    import time

    handed: dict[int, tuple[float, float]] = {}
    submit = pool._submit

    def recording_submit(fn, item, background=False):
        before = time.time()
        future = submit(fn, item, background)
        handed.setdefault(item, (before, time.time()))
        return future

    pool._submit = recording_submit
    return handed


def test_background_tasks_fill_idle_workers_and_yield_to_foreground_tasks():
    """Background work (``hbtool debug --auto``'s report ranking during the search) runs on the workers before its
    results are read, in order; a foreground batch submitted meanwhile goes ahead of the background tasks not yet
    started, so it waits at most for the ones running.

    Judged by when each task was handed to the workers (recorded around the pool's submit), not by a clock read
    before asking: on a loaded machine a background task handed over just before the foreground batch can start
    in its worker after that clock read, which is no queue jump (CI saw exactly that)."""
    import time

    with TaskPool(2) as pool:
        handed = _record_handing(pool)
        back = pool.background(_stamped, range(8))
        # workers start, then take background tasks while idle (waited for: a loaded machine starts them in seconds)
        started_by = time.time() + 60
        while not (back.futures and back.futures[0] is not None and back.futures[0].done()) and time.time() < started_by:
            time.sleep(0.05)
        asked = time.time()
        front = list(pool.map(_stamped, [100, 101]))
        got = list(back.results())
    assert [r[0] for r in got] == list(range(8)) and [r[0] for r in front] == [100, 101]
    assert min(r[1] for r in got) < asked           # some ran before anybody asked for them
    front_handed = max(handed[100][1], handed[101][1])
    # background tasks surely handed to the workers after the foreground batch: their submit began after the
    # foreground's had returned
    later = [r for r in got if handed[r[0]][0] > front_handed]
    assert later and max(r[1] for r in front) <= min(r[1] for r in later) + 0.05     # the foreground went first
    # it waited at most for the tasks on the workers: background tasks handed over before it and not ended when it
    # was are no more than the workers (none waited in a queue ahead of it)
    ahead = [r for r in got if handed[r[0]][1] < min(handed[100][0], handed[101][0]) and r[2] > front_handed]
    assert len(ahead) <= 2, ahead


def test_background_without_workers_runs_here_when_read():
    calls = []
    with TaskPool(1, initializer=_setup, initargs=(0,)) as pool:
        back = pool.background(calls.append, [1, 2])
        assert calls == []
        assert list(back.results()) == [None, None] and calls == [1, 2]


def test_background_on_a_local_ray_cluster_keeps_order():
    pytest.importorskip("ray")
    with TaskPool(2, cluster="local", initializer=_setup, initargs=(3,)) as pool:
        back = pool.background(_slow_first, range(5))
        front = list(pool.map(_slow_first, range(3)))
        assert [r for r, _ in back.results()] == list(range(3, 8)) and [r for r, _ in front] == [3, 4, 5]


def test_slots_kept_for_foreground_tasks_one_at_a_time():
    """A caller that submits its foreground tasks one at a time while background work is left (``hbtool debug
    --auto``'s tries beside the report's ranking) keeps a slot for them: background work runs on the other slots
    only, so each foreground task starts at once instead of behind a background task that took its freed slot.

    Judged by what ran when each foreground task was handed to the workers (recorded around the pool's submit):
    a free worker waited for it. Not by a wait bound: on a loaded CI machine a worker's pickup alone can take
    longer than any bound that would tell the two cases apart."""
    with TaskPool(2) as pool:
        list(pool.map(_stamped, [-1, -2]))           # both workers started
        handed = _record_handing(pool)
        pool.keep_for_foreground(1)
        back = pool.background(_stamped, range(6))
        assert pool.background_waiting()
        front = [next(iter(pool.map(_stamped, [i]))) for i in (100, 101, 102)]
        pool.keep_for_foreground(0)
        got = list(back.results())
    assert [r[0] for r in got] == list(range(6)) and [r[0] for r in front] == [100, 101, 102]
    for r in front:
        # background tasks surely running on a worker while this foreground task was handed over: handed before,
        # ended after; with one of the two slots kept, at most one, so a worker was free for it
        running = [b for b in got if handed[b[0]][1] < handed[r[0]][0] and b[2] > handed[r[0]][1]]
        assert len(running) <= 1, (r, running)
    # at most one background task at a time while the slot was kept: none of the first ones overlap
    starts = sorted((r[1], r[2]) for r in got if r[1] < front[-1][2])
    assert all(b[0] >= a[1] - 0.05 for a, b in zip(starts, starts[1:])), starts
    assert not pool.background_waiting()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the feeder thread ends on it
def test_a_background_submit_that_fails_raises_its_own_error_when_read(monkeypatch):
    """A background task the pool could not submit (a broken pool) leaves no half-started entry: reading the results
    submits it again as foreground work, so the caller sees the pool's own error, not an internal one."""
    with TaskPool(2, initializer=_setup, initargs=(0,)) as pool:
        real_submit = pool._submit

        def submit(fn, item, background=False):
            if background and item == 1:
                raise RuntimeError("pool broken")
            return real_submit(fn, item, background)

        monkeypatch.setattr(pool, "_submit", submit)
        later = pool.background(_slow_first, range(3))
        later.thread.join()
        monkeypatch.setattr(pool, "map", lambda fn, items: (_ for _ in ()).throw(RuntimeError("pool broken")))
        with pytest.raises(RuntimeError, match="pool broken"):
            list(later.results())


_WARMED: list[int] = []


def _warm() -> None:
    _WARMED.append(os.getpid())


def _offset_and_warmed(i: int) -> tuple[int, bool]:
    return i + worker_state()["offset"], os.getpid() in _WARMED


def test_workers_start_before_their_state_and_get_it_once_set():
    """``hbtool debug`` opens the pool before the session exists (the workers' imports beside its calibration):
    the workers ran ``warmup`` as they started, and every task after ``set_state`` sees the state, read from one
    file that is gone once the pool closes."""
    with TaskPool(2, warmup=_warm) as pool:
        pool.set_state(_setup, (40,))
        files = list(pool._state_files)
        results = list(pool.map(_offset_and_warmed, range(6)))
        assert all(os.path.exists(f) for f in files) and len(files) == 1
    assert results == [(40 + i, True) for i in range(6)]
    assert not any(os.path.exists(f) for f in files)


def test_a_state_set_after_opening_runs_here_with_one_worker():
    with TaskPool(1) as pool:
        pool.set_state(_setup, (5,))
        assert [r for r, _ in pool.map(_slow_first, range(3))] == [5, 6, 7]


def test_one_task_submitted_now_and_read_later():
    """``TaskPool.submit``: the task starts on a worker when submitted (not when read, as ``map``'s), so the caller works
    meanwhile; without workers it has run here by the time the future is returned, its error in the future."""
    with TaskPool(2, initializer=_setup, initargs=(100,)) as pool:
        future = pool.submit(_slow_first, 1)
        value, pid = future.result()
    assert value == 101 and pid != os.getpid()
    with TaskPool(1, initializer=_setup, initargs=(10,)) as pool:
        done = pool.submit(_slow_first, 1)
        assert done.done() and done.result() == (11, os.getpid())
        failed = pool.submit(_fails_on_three, 3)
        assert failed.done()
        with pytest.raises(ValueError, match="task three"):
            failed.result()
