"""Independent tasks on worker processes or a Ray cluster, results in submission order.

Why one module: ``hbtool debug --auto`` tries and ``hbtool simulate`` shards are independent pieces of
work whose *results* must not depend on where they ran. Both go through :class:`TaskPool`, which
returns results in the order the tasks were given, whatever order they finish in, so a search that
accepts remedies in that order makes the same decisions with 1 worker, N workers or a cluster.

- ``workers=1`` and no cluster: the tasks run here, one after another (no process, no pickling);
- ``workers=N``: N worker processes started with ``spawn`` (a forked copy of a process that already
  runs onnxruntime or torch thread pools can hang); each worker runs ``initializer(*initargs)`` once,
  so a task carries only what differs between tasks;
- a state that does not exist yet when the pool opens (:meth:`TaskPool.set_state`): the workers start at once
  (``warmup``: their imports), beside the caller's own work that makes the state, and get it later;
- ``cluster=ADDRESS``: Ray (``pip install 'hbtool[cluster]'``); ``ADDRESS`` is what ``ray.init``
  takes (``auto``, ``ray://host:10001``), or ``local`` for a Ray cluster started on this machine.
  ``workers`` then bounds the tasks in flight.

A task that raises re-raises here, in the caller, with the worker's exception.

Background tasks (:meth:`TaskPool.background`): work that no decision waits for (``hbtool debug --auto``'s report
ranking while the search runs) goes to a worker only while fewer than ``workers`` tasks are in flight, so it fills
the slots the foreground tasks leave idle (a search round with one try, the coordinator thinking between rounds)
and never queues ahead of a foreground task submitted while it waits. Its results are read later, in order. A
caller whose foreground tasks come one at a time (a search that runs a round's tries one by one while background work
is left, so that no try runs whose result the search would not read) keeps slots for them
(:meth:`TaskPool.keep_for_foreground`): background work then takes at most the other slots, so the next foreground
task never waits behind a background task that took the slot its predecessor freed.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import tempfile
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from hbtool.errors import InputError
from hbtool.utils.process_exit import freeze_objects_at_exit

#: the worker state an initializer sets up (per process), read back by tasks with :func:`worker_state`
_STATE: dict[str, Any] = {}


def default_workers() -> int:
    """The machine's cores (what ``--workers`` defaults to)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def worker_state() -> dict[str, Any]:
    """This process's state as the pool's initializer left it (empty in the calling process)."""
    return _STATE


def _run_initializer(initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    if initializer is not None:
        initializer(*initargs)


def _start_worker(initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    """A worker process's start: the initializer, then its exit set to skip the interpreter's last garbage
    collections (:func:`hbtool.utils.process_exit.freeze_objects_at_exit`, as the CLI's own process): the pool's
    close waits for that exit, 0.5-1.1 s with two workers holding only the debug imports (numba, onnxruntime) on the
    loaded 2-core machine, 0.09-0.22 s frozen. Registered after the initializer, so it runs before the exit
    handlers the initializer registered."""
    _run_initializer(initializer, initargs)
    freeze_objects_at_exit()


def _started() -> None:
    """A task that does nothing: submitted once per worker when the pool opens, so every process starts then."""


def _with_state(state_file: str, fn: Callable[[Any], Any], item: Any) -> Any:
    """``fn(item)`` once the worker holds the state of :meth:`TaskPool.set_state`: on its first such task the worker
    reads ``(initializer, initargs)`` from ``state_file`` and runs the initializer (once per process and file)."""
    if _STATE.get("__state_file__") != state_file:
        with open(state_file, "rb") as f:
            initializer, initargs = pickle.load(f)
        _STATE.clear()
        _run_initializer(initializer, initargs)
        _STATE["__state_file__"] = state_file
    return fn(item)


def check_workers(workers: int | None) -> int:
    """``--workers`` as a count: ``None`` is the machine's cores; below 1 is an error."""
    if workers is None:
        return default_workers()
    if int(workers) < 1:
        raise InputError(f"--workers {workers} is not a worker count", "give 1 or more (1 runs everything here)")
    return int(workers)


class TaskPool:
    """``with TaskPool(workers, cluster, initializer, initargs) as pool: for r in pool.map(fn, items): ...``

    ``fn``, ``initializer`` and ``warmup`` must be importable module-level functions (they travel by name).
    ``warmup``: run once per worker process as it starts, before any state (its imports: the seconds a process
    takes to be ready, spent while the caller still prepares the state for :meth:`set_state`)."""

    def __init__(self, workers: int | None = 1, cluster: str | None = None,
                 initializer: Callable[..., Any] | None = None, initargs: tuple = (),
                 warmup: Callable[[], Any] | None = None):
        self.workers = check_workers(workers)
        self.cluster = cluster
        self.initializer = initializer
        self.initargs = tuple(initargs)
        self.warmup = warmup
        self._state_file: str | None = None     # the state of :meth:`set_state`, for the worker processes
        self._state_files: list[str] = []       # every one written (a task queued earlier may still read one)
        self._executor: ProcessPoolExecutor | None = None
        self._ray = None
        self._ray_started_here = False
        # tasks in flight on the workers (foreground and background): a background task starts only below ``workers``,
        # and only while fewer than ``workers - kept`` background tasks are in flight (:meth:`keep_for_foreground`)
        self._in_flight = 0
        self._background_in_flight = 0
        self._kept = 0
        self._slots = threading.Condition()
        self._closing = False
        self._backgrounds: list[Background] = []
        self._remote = None     # the Ray task, made once

    @property
    def parallel(self) -> bool:
        return self.cluster is not None or self.workers > 1

    def __enter__(self) -> "TaskPool":
        if self.cluster is not None:
            self._start_ray()
        elif self.workers > 1:
            initializer, initargs = (self.initializer, self.initargs) if self.initializer is not None else (self.warmup, ())
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker, initargs=(initializer, initargs))
            # the executor spawns a process per task submitted while none is idle: start them all now, so that
            # their start and initializer (seconds: imports, the payload) run while the caller does its own work
            for _ in range(self.workers):
                self._executor.submit(_started)
        else:
            _run_initializer(self.initializer, self.initargs)
        return self

    def __exit__(self, *exc) -> None:
        with self._slots:
            self._closing = True
            self._slots.notify_all()
        for b in self._backgrounds:
            b.thread.join()
        self._backgrounds = []
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._ray is not None and self._ray_started_here:
            self._ray.shutdown()
        self._ray = None
        for path in self._state_files:
            os.unlink(path)
        self._state_files, self._state_file = [], None

    def set_state(self, initializer: Callable[..., Any], initargs: tuple = ()) -> None:
        """From now on every task runs where ``initializer(*initargs)`` has run once (as the constructor's
        ``initializer``), for a state made after the pool opened: the workers started with the pool and did their
        imports (``warmup``) while the caller made it.

        Worker processes read it from a file written here once (pickled once, where an initializer given to the
        constructor is pickled once per process), on their first task after this call. On Ray the tasks carry it,
        as they carry the constructor's; here (one worker) the initializer runs now."""
        self.initializer, self.initargs = initializer, tuple(initargs)
        if self._executor is None:
            if self._ray is None:
                _run_initializer(initializer, self.initargs)
            return
        fd, path = tempfile.mkstemp(prefix="hbtool-pool-", suffix=".pkl")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((initializer, self.initargs), f, protocol=pickle.HIGHEST_PROTOCOL)
        self._state_file = path
        self._state_files.append(path)

    def _start_ray(self) -> None:
        try:
            import ray
        except ImportError as exc:
            raise InputError(f"--cluster {self.cluster} needs Ray, which is not installed",
                             "pip install 'hbtool[cluster]' (or drop --cluster to use local worker processes)") from exc
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
            if self.cluster == "local":
                kwargs["num_cpus"] = self.workers
            else:
                kwargs["address"] = self.cluster
            try:
                ray.init(**kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise InputError(f"cannot reach the Ray cluster at {self.cluster!r}: {exc}",
                                 "give the head's address (ray://HOST:10001 or auto), or --cluster local") from exc
            self._ray_started_here = True
        self._ray = ray

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """``fn(item)`` for every item; results yielded in the items' order."""
        if self._ray is not None:
            yield from self._map_ray(fn, list(items))
        elif self._executor is not None:
            # at most 2 tasks per worker in flight: results stream in order without queuing every item
            items = list(items)
            window = 2 * self.workers
            futures = [self._submit(fn, it) for it in items[:window]]
            nxt = len(futures)
            for i in range(len(items)):
                result = futures[i].result()
                futures[i] = None  # type: ignore[call-overload]
                if nxt < len(items):
                    futures.append(self._submit(fn, items[nxt]))
                    nxt += 1
                yield result
        else:
            for it in items:
                yield fn(it)

    def submit(self, fn: Callable[[Any], Any], item: Any) -> Future:
        """``fn(item)`` on a worker now (a foreground task, as :meth:`map`'s), its :class:`~concurrent.futures.Future`;
        without workers it runs here first and the future is already done. For one task whose result is read later,
        while the caller does other work meanwhile (:meth:`map` submits only once it is read)."""
        if self.parallel:
            return self._submit(fn, item)
        future: Future = Future()
        try:
            future.set_result(fn(item))
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def _map_ray(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[Any]:
        window = max(1, 2 * self.workers)
        futures = [self._submit(fn, it) for it in items[:window]]
        nxt = len(futures)
        for i in range(len(items)):
            result = futures[i].result()
            futures[i] = None  # type: ignore[call-overload]
            if nxt < len(items):
                futures.append(self._submit(fn, items[nxt]))
                nxt += 1
            yield result

    def _submit(self, fn: Callable[[Any], Any], item: Any, background: bool = False) -> Future:
        """``fn(item)`` on a worker now, counted in flight until it ends (``background``: already counted, by a
        background feeder). A foreground task never waits for a slot: its caller bounds what it keeps in flight."""
        if not background:
            with self._slots:
                self._in_flight += 1
        ended = self._background_ended if background else self._ended
        try:
            if self._ray is not None:
                if self._remote is None:
                    self._remote = self._ray.remote(_ray_task).options(max_retries=0)
                future = self._remote.remote((self.initializer, self.initargs), fn, item).future()
            elif self._state_file is not None:
                future = self._executor.submit(_with_state, self._state_file, fn, item)
            else:
                future = self._executor.submit(fn, item)
        except BaseException:
            ended(None)
            raise
        future.add_done_callback(ended)
        return future

    def _ended(self, _future) -> None:
        with self._slots:
            self._in_flight -= 1
            self._slots.notify_all()

    def _background_ended(self, _future) -> None:
        with self._slots:
            self._in_flight -= 1
            self._background_in_flight -= 1
            self._slots.notify_all()

    def keep_for_foreground(self, slots: int) -> None:
        """From now on background work leaves ``slots`` of the ``workers`` slots to foreground tasks (at most
        ``workers - 1``: background work keeps one slot; 0 gives them back). For a caller that submits its foreground
        tasks one at a time while background work is left: its next task then starts at once on the slot its last
        one freed, instead of behind a background task the feeder started there meanwhile."""
        with self._slots:
            self._kept = max(0, min(int(slots), self.workers - 1))
            self._slots.notify_all()

    def background_waiting(self) -> bool:
        """Background tasks are left that have not started (and nobody reads them yet)."""
        with self._slots:
            return any(not b._reading and len(b.futures) < len(b.items) for b in self._backgrounds) and not self._closing

    def background(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> "Background":
        """Start ``fn(item)`` for every item as background work (module docstring): on a worker only while fewer than
        ``workers`` tasks are in flight, in the items' order; :meth:`Background.results` reads them in that order.
        Without workers (``workers=1``, no cluster) nothing runs until the results are read, then here."""
        b = Background(self, fn, list(items))
        if self.parallel:
            self._backgrounds.append(b)
            b.thread.start()
        return b


class Background:
    """Background tasks of a :class:`TaskPool` (:meth:`TaskPool.background`): ``results()`` yields them in order,
    waiting for the ones still running; a task not yet started when ``results()`` is read starts then."""

    def __init__(self, pool: TaskPool, fn: Callable[[Any], Any], items: list[Any]):
        self.pool, self.fn, self.items = pool, fn, items
        self.futures: list[Future | None] = []
        self._reading = False
        self.thread = threading.Thread(target=self._feed, name="hbtool-background", daemon=True)

    def _feed(self) -> None:
        pool = self.pool
        for item in self.items:
            with pool._slots:
                while not pool._closing and not self._reading and (
                        pool._in_flight >= pool.workers or pool._background_in_flight >= pool.workers - pool._kept):
                    pool._slots.wait()
                if pool._closing or self._reading:
                    return            # closing; or the reader submits the rest as foreground work
                pool._in_flight += 1  # the slot taken here, the task submitted outside the lock
                pool._background_in_flight += 1
                # counted as started now (background_waiting), the future appended once submitted
                self.futures.append(None)
            self.futures[-1] = pool._submit(self.fn, item, background=True)

    def results(self) -> Iterator[Any]:
        """Each item's result, in order (a task that raised re-raises here)."""
        pool = self.pool
        if not pool.parallel:
            yield from (self.fn(it) for it in self.items)
            return
        with pool._slots:
            self._reading = True          # from now on the rest go in as foreground tasks (nobody else waits)
            pool._slots.notify_all()
        self.thread.join()
        # a submit that raised left its placeholder (None) and ended the feeder: that item and the rest go in as
        # foreground tasks, so the caller sees the error itself
        started = list(itertools.takewhile(lambda f: f is not None, self.futures))
        rest = self.items[len(started):]
        yield from (f.result() for f in started)
        yield from pool.map(self.fn, rest)


def _ray_task(init: tuple, fn: Callable[[Any], Any], item: Any) -> Any:
    """One task on a Ray worker: the initializer runs once per worker process (keyed on its arguments)."""
    initializer, initargs = init
    key = (getattr(initializer, "__qualname__", None), repr(initargs)[:2000])
    if _STATE.get("__init_key__") != key:
        _STATE.clear()
        _run_initializer(initializer, initargs)
        _STATE["__init_key__"] = key
    return fn(item)
