"""``simulate --workers N / --cluster ADDRESS``: sample ranges run on worker processes or a Ray cluster.

Why ranges of samples: the integer program gives the same integers for a sample whatever batch,
process or machine it runs in (the simulator is bit-exact and stateless between samples), so a
large input set splits into contiguous ranges that run anywhere and come back in order. The
caller (:func:`hbtool.simulator.simulate.simulate`) receives ``(first, stop, outputs, references)``
per range exactly as its own one-process loop yields them, and does everything that depends on
order itself: the streamed ``.npy`` files, ``--resume``'s state and the comparison's running sums.
So the output files are the same bytes with 1 worker, N workers or a cluster, and an interrupted
sharded run resumes like any other (the ranges are written in order, ``state.json`` counts the
finished prefix).

Each worker opens the artifact, the ``--compare`` model and the input files itself, once
(:class:`hbtool.utils.workers.TaskPool`'s initializer); a task carries only its range, plus the
rows of inputs given as arrays in memory (the library's ``simulate(inputs={name: array})``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from hbtool.utils.workers import TaskPool, default_workers, worker_state

#: at most this many batches per range: a range's outputs travel back whole, so memory stays bounded
MAX_BATCHES_PER_SHARD = 8
#: ranges per worker when the input set is small: enough to even out unequal speeds
SHARDS_PER_WORKER = 4


def shard_bounds(start: int, total: int, batch_size: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(first, stop)`` ranges covering samples ``start..total-1``.

    A range is a whole number of batches (so each worker runs the batches a one-process run
    would) and at most :data:`MAX_BATCHES_PER_SHARD` of them.
    """
    remaining = max(0, total - start)
    if remaining == 0:
        return []
    batches = -(-remaining // batch_size)
    per = max(1, min(MAX_BATCHES_PER_SHARD, -(-batches // (workers * SHARDS_PER_WORKER))))
    size = per * batch_size
    return [(a, min(a + size, total)) for a in range(start, total, size)]


def worker_threads(threads: int | None, workers: int, cluster: str | None) -> int | None:
    """Cores per worker: ``threads`` when given, else this machine's cores shared out (1 on a cluster,
    where a Ray task holds one CPU)."""
    if threads:
        return threads
    if cluster is not None:
        return 1
    return max(1, default_workers() // workers)


def _open_worker(artifact: str, model_name: str | None, path_inputs: dict[str, str], compare: str | None,
                 threads: int | None) -> None:
    """Per worker process, once: the executor, the compare session and the file inputs."""
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor
    from hbtool.simulator.inputs import open_inputs
    from hbtool.simulator.simulate import _compare_preprocessing, _compare_session
    from hbtool.utils.allocator import keep_freed_memory

    keep_freed_memory(one_arena=True)   # as the simulate command does: the passes' memory reused, not faulted in again
    art = read_artifact(Path(artifact), model_name)
    executor = Executor(art, threads=threads)
    descs = [d for d in art.header["inputs"] if d["name"] in path_inputs]
    sources = open_inputs(descs, {k: Path(v) for k, v in path_inputs.items()}) if descs else []
    session = feed = None
    if compare is not None:
        runtime_types = {d["name"]: d["dtype"] for d in art.header["inputs"] if d.get("runtime")}
        session = _compare_session(Path(compare), executor.input_names, executor.output_names, runtime_types, threads)
        feed = _compare_preprocessing(session, art.header["inputs"])
    state = worker_state()
    state.update(executor=executor, descs={d["name"]: d for d in art.header["inputs"]}, sources=sources,
                 session=session, compare_feed=feed)


def _run_shard(task: tuple[int, int, int, dict[str, np.ndarray]]) -> tuple[int, int, list]:
    """One range: its batches through the executor (and the compare model); the pieces, in order."""
    from hbtool.simulator.inputs import _stacked_source
    from hbtool.simulator.simulate import compare_references

    first, stop, batch_size, arrays = task
    state = worker_state()
    executor, session = state["executor"], state["session"]
    in_memory = []
    for name, rows in arrays.items():
        d = state["descs"][name]
        in_memory.append(_stacked_source(name, rows, tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]), f"input '{name}'"))
    pieces = []
    for a in range(first, stop, batch_size):
        b = min(a + batch_size, stop)
        feeds = {s.name: s.batch(a, b) for s in state["sources"]}
        feeds.update({s.name: s.batch(a - first, b - first) for s in in_memory})
        outs = executor.run(feeds)
        refs = compare_references(session, state["compare_feed"], feeds, executor.output_names, b - a) if session is not None else None
        pieces.append((a, b, outs, refs))
    return first, stop, pieces


def sharded_batches(artifact: Path, inputs: dict[str, Path | np.ndarray], compare: Path | None, model_name: str | None,
                    batch_size: int, start: int, total: int, workers: int, cluster: str | None,
                    threads: int | None) -> Iterator[tuple[int, int, dict[str, np.ndarray], list | None]]:
    """``(first, stop, outputs, references)`` per batch from sample ``start`` on, in sample order, computed
    on ``workers`` processes (or the Ray cluster at ``cluster``)."""
    path_inputs = {k: str(Path(v).resolve()) for k, v in inputs.items() if not isinstance(v, np.ndarray)}
    arrays = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
    per_worker = worker_threads(threads, workers, cluster)
    initargs = (str(Path(artifact).resolve()), model_name, path_inputs,
                str(Path(compare).resolve()) if compare is not None else None, per_worker)
    rows = {}
    if arrays:
        from hbtool.compiler.artifact import read_artifact

        rows = {d["name"]: int(d["shape"][0]) for d in read_artifact(Path(artifact), model_name).header["inputs"]}

    def tasks() -> Iterator[tuple[int, int, int, dict[str, np.ndarray]]]:
        for a, b in shard_bounds(start, total, batch_size, workers):
            yield a, b, batch_size, {k: np.ascontiguousarray(v[a * rows[k]: b * rows[k]]) for k, v in arrays.items()}

    with TaskPool(workers, cluster, _open_worker, initargs) as pool:
        for _, _, pieces in pool.map(_run_shard, tasks()):
            yield from pieces

