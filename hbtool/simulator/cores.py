"""Which threads may split a step over the cores: one switch for the loops and the onnxruntime sessions.

A step of ``simulate`` uses the cores in one of two ways. At batch 1 there is one pass, so each step
splits itself: the integer loops over rows past :data:`.jit.MIN_PARALLEL_WORK` (:func:`.jit.over_rows`), the
products over onnxruntime's intra-op threads. With a batch's passes on several threads at once (:meth:`.executor.Executor.run`),
each pass already keeps a core busy; if its steps split too, two passes queue on one shared loop pool
and on each session's one worker thread, and onnxruntime's non-spinning pools pay a wake-up per call
(measured, 2 cores loaded: MobileNetV2 at batch 16 cost 20.0 ms of CPU a sample with every step split
over 2 threads, 13.1 ms with every step on one). Inside :func:`one_core` a thread's steps run on it
alone: the loops unsplit, the products in a one-thread twin of each session (:class:`PerCoreSession`).
Only where the work runs changes, never what is computed, so the bits are the same.

At batch 1 too, a product call of fewer multiply-adds than :func:`small_product_macs` runs on the one-thread
twin, since waking onnxruntime's second (non-spinning) worker can cost more than it saves on a small product: on by
default for convolutions (:data:`CONV_SMALL_PRODUCT_MACS`), opt-in for the other products.

No numba here: the executor and the sessions use it where numba is missing too.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Mapping

# A product call of fewer multiply-adds than this runs on its session's one-thread twin even where its
# thread may split (batch 1, or sequential passes); 0: off. Loaded (sim6, 2 Zen 4 cores, load 2-3.5) thresholds of
# 1e7-3e7 saved CPU on MobileNetV2 and DeiT-Tiny at batch 1; idle (the coordinator's alternated A/B, 2026-12-07) no
# threshold of 1e7 / 2e7 / 5e7 won on MobileNetV2, the PP-OCRv5 recogniser and DeiT-Tiny alike, so it is off until a
# sweep finds one (docs/simulate.md, sim6; docs/benchmarks.md, seventeenth session). Results cannot depend on it:
# every product is exact.
SMALL_PRODUCT_MACS = 0
SMALL_PRODUCT_MACS_ENV = "HBTOOL_SIM_SMALL_PRODUCT_MACS"
# The same threshold for the products of convolutions (their sessions pass it as ``default``): on by default since
# sim11 (docs/simulate.md): MobileNetV2's 34 pointwise GEMMs and its stem, all under 2e7 multiply-adds at batch 1,
# took 0.80-0.85x the CPU on one thread each with the same wall (two threads, in-process alternation, load 2-2.5),
# and the idle rerun of sim6 had MobileNetV2 and the recogniser faster with the rule (10.5 / 11.2 and 25.1 / 26.5 ms
# wall), DeiT-Tiny slower: its products are Linear and MatMul, which keep :data:`SMALL_PRODUCT_MACS`.
CONV_SMALL_PRODUCT_MACS = 2 * 10**7


def small_product_macs(default: int | None = None) -> int:
    """``default`` (None: :data:`SMALL_PRODUCT_MACS`), or the environment's ``HBTOOL_SIM_SMALL_PRODUCT_MACS`` (a
    number such as ``2e7``, for every product; ``0`` routes every call by thread only), read when a session is built."""
    value = os.environ.get(SMALL_PRODUCT_MACS_ENV, "").strip()
    if not value:
        return SMALL_PRODUCT_MACS if default is None else default
    try:
        macs = float(value)
    except ValueError:
        raise ValueError(f"{SMALL_PRODUCT_MACS_ENV}={value!r} is not a number of multiply-adds") from None
    if not macs >= 0:
        raise ValueError(f"{SMALL_PRODUCT_MACS_ENV}={value!r} must be 0 or more")
    return int(macs)


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

    ``macs(feeds)``, where given, is a call's multiply-adds from its inputs' shapes (so batch size
    counts): a call below :func:`small_product_macs` (``small_default``: its default for this session) runs on
    the twin from any thread (:meth:`on_twin`).
    """

    def __init__(self, make: Callable[[int | None], Any], threads: int | None,
                 macs: Callable[[Mapping[str, Any]], int] | None = None, small_default: int | None = None):
        self._make = make
        self.session = make(threads)
        self._single = self.session if threads == 1 else None
        self._lock = threading.Lock()
        self._macs = macs
        self._small = small_product_macs(small_default) if macs is not None else 0

    def on_twin(self, feeds: Mapping[str, Any]) -> bool:
        """Whether a call with ``feeds`` runs on the one-thread twin: inside :func:`one_core`, or a
        product smaller than :func:`small_product_macs` (never where the main session is the twin)."""
        if self._single is self.session:
            return False
        return on_one_core() or (self._small > 0 and self._macs(feeds) < self._small)

    def run(self, output_names, feeds, *args, **kwargs):
        if self.on_twin(feeds):
            return self._one_thread().run(output_names, feeds, *args, **kwargs)
        return self.session.run(output_names, feeds, *args, **kwargs)

    def _one_thread(self):
        if self._single is None:
            with self._lock:
                if self._single is None:
                    self._single = self._make(1)
        return self._single

    def __getattr__(self, name: str):
        return getattr(self.session, name)
