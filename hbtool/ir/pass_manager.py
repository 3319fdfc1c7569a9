"""Runs graph passes in order and records what each changed.

A pass is a function ``(graph) -> int`` returning how many rewrites it made; it is registered
with a name and a one-line purpose so logs and ``--verbose`` output explain the graph's history.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from hbtool.ir.graph import Graph

log = logging.getLogger(__name__)

PassFn = Callable[[Graph], int]


@dataclass(frozen=True)
class GraphPass:
    name: str
    run: PassFn
    purpose: str


@dataclass
class PassResult:
    name: str
    rewrites: int
    seconds: float


def run_passes(graph: Graph, passes: list[GraphPass], repeat_until_stable: bool = True, max_rounds: int = 5) -> list[PassResult]:
    """Apply ``passes`` in order (again while any of them still rewrites, up to ``max_rounds``)."""
    results: dict[str, PassResult] = {p.name: PassResult(p.name, 0, 0.0) for p in passes}
    for _ in range(max_rounds):
        changed = 0
        for p in passes:
            t0 = time.perf_counter()
            n = p.run(graph)
            results[p.name].seconds += time.perf_counter() - t0
            results[p.name].rewrites += n
            changed += n
            if n:
                log.debug("pass %s: %d rewrites", p.name, n)
        if not repeat_until_stable or not changed:
            break
    graph.remove_unused()
    return list(results.values())
