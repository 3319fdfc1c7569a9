"""The ``--auto`` tries of one round, here or on worker processes / a Ray cluster, results in order.

A try is a real calibration with one ``node_info`` (the session's statistics reused), its quantized
model run on the debug samples, and for a remedy that changes the integer program the cost model's
FPS. Tries of one round are independent, so ``hbtool debug --workers N`` runs them on N worker
processes and ``--cluster ADDRESS`` on Ray, both through :class:`hbtool.utils.workers.TaskPool`.

Why the result cannot depend on where a try ran: a round's tries are submitted in a fixed order
(which never depends on the worker count), their results come back in that order, and the search
reads them in that order with the same acceptance rule it applies with one worker. A round is
submitted ``workers`` tries at a time, so a search that stops reading early (a try reached the
target) wastes at most one slice; the tries it did not read are neither counted nor reported.

A worker gets the session once (its initializer): the config, the statistics, the debug samples and
the float outputs. It does not re-run the base calibration, and a task carries only its ``node_info``.
``hbtool debug`` starts the worker processes before the session exists (:meth:`TrialRunner.attach`): their start
and imports (about 3 CPU seconds each) run beside the base calibration, whose graph passes and plans run on one
core, instead of beside the op error after it.
The calibrated models stay in the worker: the search needs only the measurements, and the model it
keeps is re-calibrated once at the end (:meth:`TrialRunner.materialize`; the same numbers).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from hbtool.debug.session import DebugSession, Measured
from hbtool.errors import InputError
from hbtool.utils.workers import TaskPool, check_workers, worker_state


#: seconds ``--cluster HOST:PORT`` has to accept a connection before the search starts
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Trial:
    """One try: the whole ``node_info`` to calibrate with; ``priced``: estimate its FPS (the program changes)."""

    node_info: dict[str, dict[str, Any]]
    priced: bool = False


@dataclass
class Failed:
    """A try whose remedy could not be built (said in the report, skipped)."""

    error: str


def evaluate(session: DebugSession, trial: Trial, keep_result: bool = True) -> Measured | Failed:
    """Calibrate with the trial's ``node_info``, compile it once (the cost model prices that program, the
    simulator runs it on the debug samples) and measure it (without the per-channel scan)."""
    t0 = time.monotonic()
    try:
        result = session.calibrate(trial.node_info)
        calibrated = time.monotonic()
        m = measure_variant(session, result, trial.node_info, trial.priced, channels=False)
    except Exception as exc:  # a remedy that cannot be built is skipped, and said so
        return Failed(f"{type(exc).__name__}: {str(exc)[:120]}")
    m.seconds, m.calibrate_seconds = time.monotonic() - t0, calibrated - t0
    m.method = getattr(m.result, "method", None)
    m.candidates = dict(getattr(m.result, "candidates", None) or {})
    if not keep_result:
        m.result = None
    return m


def measure_variant(session: DebugSession, result, node_info: dict[str, dict[str, Any]], priced: bool,
                    channels: bool = False) -> Measured:
    """A calibrated variant measured on the debug samples, and with ``priced`` its FPS. It is compiled once:
    the cost model prices that program and the simulator runs it (bit for bit its quantized model, and
    faster); where it does not compile, its quantized model runs (and a priced try says why, below)."""
    from hbtool.debug import auto

    try:
        compiled = auto.compile_variant(session, result, node_info)
    except Exception:
        compiled = None
    if compiled is None:
        m = session.measure(result, node_info, channels=channels)
        if priced:
            m.fps = auto.estimate_fps(session, m)
        return m
    m = session.measure(result, node_info, channels=channels, compiled=compiled)
    if priced:
        m.fps = auto.fps_of(session, compiled, node_info)
    return m


def _warm_worker() -> None:
    """Per worker process as it starts, before the session exists: the imports of a try and of the jobs."""
    import onnxruntime  # noqa: F401

    from hbtool.debug import auto, masked, price, sensitivity  # noqa: F401
    from hbtool.simulator import executor  # noqa: F401


def _init_worker(payload: dict[str, Any]) -> None:
    """Per worker process: the session without its base calibration (a try needs only the statistics)."""
    from hbtool.debug.metrics_hook import resolve_metric

    metric = resolve_metric(payload["cfg"].debug.metric, payload["base_dir"])
    worker_state()["session"] = DebugSession(payload["cfg"], None, payload["samples"], payload["float_outputs"], metric,
                                             payload["stats_cache"], threads=1, masked_graphs=payload.get("masked_graphs"))


def _ready_switchable(_: Any = None) -> None:
    """A worker's switchable model and its one-thread session, built as the worker gets the session
    (:meth:`TrialRunner.attach`) rather than inside its first ranking or gains chunk: the worker builds it while the
    calling process builds its own, instead of after."""
    worker_state()["session"].switchable().single_threaded().session()


def _float_outputs(args: tuple) -> dict[str, Any]:
    """The float model's outputs on the debug samples, on a worker before the session exists
    (:meth:`TrialRunner.float_outputs_beside`); its idle onnxruntime threads asleep: the caller calibrates beside it."""
    from hbtool.debug.session import run_outputs

    graph, feeds, names = args
    return run_outputs(graph, feeds, names, spinning=False)


def _run_trial(trial: Trial) -> Measured | Failed:
    return evaluate(worker_state()["session"], trial, keep_result=False)


def _run_job(job) -> Any:
    """A task with a ``run(session)`` method (the gains pass's chunks, the pricing programs) on the worker's session."""
    return job.run(worker_state()["session"])


def _run_job_timed(job) -> tuple[Any, float]:
    """:func:`_run_job` and the wall seconds it took on the worker (the time limit's cost measure)."""
    t0 = time.monotonic()
    return _run_job(job), time.monotonic() - t0


def _timed_here(session: DebugSession, job) -> tuple[Any, float]:
    t0 = time.monotonic()
    return job.run(session), time.monotonic() - t0


class _HereLater:
    """Background jobs without workers: run here, in order, when read."""

    def __init__(self, session: DebugSession, jobs: list):
        self.session, self.jobs = session, jobs

    def results(self) -> Iterator[Any]:
        yield from (job.run(self.session) for job in self.jobs)


def probe_cluster(cluster: str | None) -> None:
    """A one-line usage error now, not after minutes of analysis, for a ``--cluster`` that cannot be used: Ray
    missing, or a ``HOST:PORT`` that does not answer within :data:`CONNECT_TIMEOUT_S` (``ray.init`` itself
    waits minutes on an address where nothing listens). ``local`` starts its own cluster later."""
    if cluster is None:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        with TaskPool(1, cluster):   # the pool's own one-line error: how to install it
            pass
    if cluster in ("local", "auto"):
        return
    hostport = cluster.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--cluster {cluster}: not a Ray address", "give HOST:PORT, ray://HOST:10001, auto, or local")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError(f"cannot reach the Ray cluster at {cluster!r}: {exc}",
                         "give the head's address (ray://HOST:10001 or auto), or --cluster local") from None


class TrialRunner:
    """``with TrialRunner(session, workers, cluster) as runner: for m in runner.run(trials): ...``

    ``session`` may be ``None`` when the runner opens (its workers start then) and be given later with
    :meth:`attach`, before the first task."""

    def __init__(self, session: DebugSession | None, workers: int | None = 1, cluster: str | None = None,
                 deadline: float | None = None):
        self.session = session
        self.workers = check_workers(workers)
        self.cluster = cluster
        self.deadline = deadline
        self._pool: TaskPool | None = None
        self.tries_run = 0     # tries started (a slice of ``workers`` at a time), read by the search or not
        #: the seconds to keep free before the deadline for the command's ending (the final calibration and measure,
        #: the report), from measured costs: set by the search (:meth:`hbtool.debug.auto._AutoSearch.ending_seconds`)
        self.ending: Callable[[], float] | None = None
        #: the longest try measured (where it ran), and the longest calibration of one: the next slice's expected cost
        self.try_seconds = 0.0
        self.calibrate_seconds = 0.0
        #: the PTQ model's measure, set by the search: the least a try costs (a try is a calibration and such a measure)
        self.measure_seconds = 0.0
        #: each job run through :meth:`jobs` with the seconds it took where it ran, in order
        self.job_seconds: list[tuple[Any, float]] = []

    @property
    def parallel(self) -> bool:
        return self.cluster is not None or self.workers > 1

    def __enter__(self) -> "TrialRunner":
        if self.parallel:
            self._pool = TaskPool(self.workers, self.cluster, warmup=_warm_worker).__enter__()
        if self.session is not None:
            self.attach(self.session)
        return self

    def attach(self, session: DebugSession, switchable: bool = False) -> None:
        """The session the tasks run on, handed to the workers (:meth:`hbtool.utils.workers.TaskPool.set_state`);
        ``switchable``: the workers build their switchable models now (:func:`_ready_switchable`), for a caller whose
        workers run the rankings or the gains pass (``hbtool debug``)."""
        self.session = session
        if self._pool is None:
            return
        base_dir = session.cfg.source.parent if session.cfg.source is not None else session.cfg.base_dir
        payload = {"cfg": session.cfg, "base_dir": Path(base_dir), "samples": session.samples,
                   "float_outputs": session.float_outputs, "stats_cache": session.stats_cache,
                   # the gains pass's switchable model, built in a worker on its first gains task
                   "masked_graphs": session.masked_graphs or ((session.base.calibrated, session.base.graph)
                                                              if session.base is not None else None)}
        self._pool.set_state(_init_worker, (payload,))
        if switchable and payload["masked_graphs"] is not None:
            for _ in range(self.workers):    # one each, where the pool hands them out that way
                self._pool.submit(_ready_switchable, None)

    def float_outputs_beside(self) -> Callable[[Any, list, list[str]], Callable[[], dict[str, Any]]] | None:
        """For :func:`hbtool.debug.session.open_session`'s ``reference_beside``: a function that starts the float model's
        run on the debug samples on a worker process (which waits for the session meanwhile) and returns the wait for
        its outputs; ``None`` (run them here) without worker processes, and on Ray: onnxruntime's default thread
        count, which the float sums depend on in their last bits, is this machine's on a local worker, as here, and
        may not be on a cluster's."""
        if self._pool is None or self.cluster is not None:
            return None
        pool = self._pool

        def start(graph, feeds: list, names: list[str]) -> Callable[[], dict[str, Any]]:
            return pool.submit(_float_outputs, (graph, feeds, names)).result

        return start

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.__exit__(*exc)
            self._pool = None

    def out_of_time(self, cost: float = 0.0) -> bool:
        """Work of ``cost`` seconds started now would end past the deadline less the :attr:`ending`'s seconds."""
        if self.deadline is None:
            return False
        return time.monotonic() + cost + (self.ending() if self.ending is not None else 0.0) >= self.deadline

    def slice_seconds(self) -> float:
        """What the next slice of tries is expected to take: the longest try measured so far (a slice's tries run side
        by side, one per worker), before any try the longest job measured (the pricing programs: a calibration, a
        compile and a costing, as a try), else the PTQ model's measure (:attr:`measure_seconds`; without it the first
        try of a search without groups started unpriced), else 0 (nothing measured yet: the deadline alone decides)."""
        if self.try_seconds:
            return self.try_seconds
        priced = [s for job, s in self.job_seconds if getattr(job, "like_a_try", False)]
        return max(priced) if priced else self.measure_seconds

    def slice_size(self) -> int:
        """How many tries the next slice starts side by side: ``workers``, or one while background work waits to start
        (the report's ranking beside an unlimited search, :meth:`background`).

        Why one: a slice is read in order, and the try after the one that ends a round runs for nothing (3 of 22 tries
        on the all-int8 PP-OCRv5 recogniser, about 8 CPU seconds each). While background work is left, the other
        workers run it instead, useful work that the command needs anyway, and a slot is kept free for the next try
        (:meth:`hbtool.utils.workers.TaskPool.keep_for_foreground`) until the search ends (:meth:`search_ended`). Once
        every background task has started, slices of ``workers`` tries again: no work is left that a speculative try
        would take a core from. The tries, their order and the reading rule are the same either way, so is the result."""
        if self._pool is None:
            return 1
        if self._pool.background_waiting():
            self._pool.keep_for_foreground(1)
            return 1
        return self.workers

    def search_ended(self) -> None:
        """The search's tries are over: background work may take every slot again."""
        if self._pool is not None:
            self._pool.keep_for_foreground(0)

    def run(self, trials: list[Trial]) -> Iterator[Measured | Failed]:
        """Each trial's measurement, in the trials' order; a slice at a time (:meth:`slice_size`: ``workers``, or one
        while background work waits), none started whose measured cost (:meth:`slice_seconds`) would end past the
        deadline less the :attr:`ending`'s seconds (the generator then ends early: the caller sees fewer results than
        trials)."""
        k = 0
        while k < len(trials):
            if self.out_of_time(self.slice_seconds()):
                return
            step = self.slice_size()
            chunk = trials[k:k + step]
            k += len(chunk)
            self.tries_run += len(chunk)
            results = (evaluate(self.session, t) for t in chunk) if self._pool is None else self._pool.map(_run_trial, chunk)
            for m in results:
                if isinstance(m, Measured) and m.seconds is not None:
                    self.try_seconds = max(self.try_seconds, m.seconds)
                    self.calibrate_seconds = max(self.calibrate_seconds, m.calibrate_seconds or 0.0)
                yield m

    def jobs(self, jobs: list) -> Iterator[Any]:
        """``job.run(session)`` for each job (an object with that method, picklable), results in the jobs' order:
        all submitted at once to the workers (the pool keeps two per worker in flight), or run here one by one.
        What runs before the search's first round (the gains pass, the prices) goes through here, so every
        worker works from the start; a job's result does not depend on where it ran."""
        timed = (_timed_here(self.session, job) for job in jobs) if self._pool is None else self._pool.map(_run_job_timed, jobs)
        for job, (result, seconds) in zip(jobs, timed):
            self.job_seconds.append((job, seconds))
            yield result

    def background(self, jobs: list):
        """``job.run(session)`` for each job as background work: on a worker only while it would otherwise idle
        (:meth:`hbtool.utils.workers.TaskPool.background`: the search's tries and jobs go first); ``.results()`` reads
        them in the jobs' order. Without workers they run here when read. For work no decision of the search waits
        for (the report's ranking while an unlimited search runs): the same numbers, sooner."""
        if self._pool is None:
            return _HereLater(self.session, jobs)
        return self._pool.background(_run_job, jobs)

    def materialize(self, m: Measured) -> Measured:
        """``m`` with its calibration (a worker's try comes back without it): calibrated again here with the method
        the worker's calibration chose (:meth:`DebugSession.calibrate`), the same numbers."""
        if m.result is not None:
            return m
        if m.method is None:
            return replace(m, result=self.session.calibrate(m.node_info))
        return replace(m, result=self.session.calibrate(m.node_info, m.method, m.candidates))
