"""Which threads may split a step over the cores: one switch for the loops and the onnxruntime sessions.

A step of ``simulate`` uses the cores in one of two ways. At batch 1 there is one pass, so each step
splits itself: the integer loops over rows (:func:`.jit.over_rows`), the products over onnxruntime's
intra-op threads. With a batch's passes on several threads at once (:meth:`.executor.Executor.run`),
each pass already keeps a core busy; if its steps split too, two passes queue on one shared loop pool
and on each session's one worker thread, and onnxruntime's non-spinning pools pay a wake-up per call
(measured, 2 cores loaded: MobileNetV2 at batch 16 cost 20.0 ms of CPU a sample with every step split
over 2 threads, 13.1 ms with every step on one). Inside :func:`one_core` a thread's steps run on it
alone: the loops unsplit, the products in a one-thread twin of each session (:class:`PerCoreSession`).
Only where the work runs changes, never what is computed, so the bits are the same.

No numba here: the executor and the sessions use it where numba is missing too.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

_LOCAL = threading.local()  # .on: this thread's steps run on it alone


class one_core:
    """A context in which the calling thread's steps do not split over other threads."""

    def __enter__(self) -> "one_core":
        self._before = getattr(_LOCAL, "on", False)
        _LOCAL.on = True
        return self

    def __exit__(self, *exc) -> bool:
        _LOCAL.on = self._before
        return False


def on_one_core() -> bool:
    """Whether the calling thread is inside :func:`one_core`."""
    return getattr(_LOCAL, "on", False)


class PerCoreSession:
    """An onnxruntime session built for ``threads`` intra-op threads, and its one-thread twin for the
    threads inside :func:`one_core`, built on their first call (so a run that never uses it pays nothing).

    ``make(threads)`` builds a session; both are the same model and options but the thread count. For
    the products of :mod:`.accel` that gives the same results: every one is exact (integer GEMMs, or
    float ones whose partial sums are all exactly representable integers), so no split or summation
    order can change it. (The CPU subgraphs' float sessions do not get a twin for that reason.) Anything
    else (``get_inputs``, ``get_session_options``...) is the main session's.
    """

    def __init__(self, make: Callable[[int | None], Any], threads: int | None):
        self._make = make
        self.session = make(threads)
        self._single = self.session if threads == 1 else None
        self._lock = threading.Lock()

    def run(self, *args, **kwargs):
        if self._single is not self.session and on_one_core():
            return self._one_thread().run(*args, **kwargs)
        return self.session.run(*args, **kwargs)

    def _one_thread(self):
        if self._single is None:
            with self._lock:
                if self._single is None:
                    self._single = self._make(1)
        return self._single

    def __getattr__(self, name: str):
        return getattr(self.session, name)
