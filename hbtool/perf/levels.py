"""``--compare-levels``: what each compiler optimization buys, like the J5 talk's ablation table.

The model is compiled once per step from the same calibrated model: step 0 with every program
pass off (O0), then the passes switched on one at a time in ``optimize_level`` order, so the
row that completes a level is that level (O1, O2, O3). Each row is costed like ``hbtool perf``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from hbtool.compiler.passes import PASSES
from hbtool.config import HbConfig
from hbtool.costmodel.schedule import PerfResult, estimate


def pass_order() -> list[str]:
    """Pass names in the order the ablation switches them on (by level, then pipeline order)."""
    return [p.name for p in sorted(PASSES, key=lambda p: (p.level, PASSES.index(p)))]


def compare_levels(cfg: HbConfig, calibrated: Path, core_num: int | None = None,
                   progress: Callable[[str, int, int], None] | None = None, board: str | None = None) -> tuple[list[dict[str, Any]], list[PerfResult]]:
    """Rows of the ablation table (see the module docstring) and the estimate behind each row."""
    from hbtool.compiler.compile import compile_model

    names = pass_order()
    level_of = {p.name: p.level for p in PASSES}
    rows: list[dict[str, Any]] = []
    results: list[PerfResult] = []
    for k in range(len(names) + 1):
        on = names[:k]
        if progress:
            progress("compare levels", k, len(names) + 1)
        compiled = compile_model(cfg, optimize_level="O3", disabled_passes=set(names[k:]), calibrated=calibrated, serialize=False)
        r = estimate(compiled.header, core_num, program=compiled.program, board=board)
        added = names[k - 1] if k else None
        level = "O0" if k == 0 else ""
        if added is not None and (k == len(names) or level_of[names[k]] > level_of[added]):
            level = f"O{level_of[added]}"
        r.optimize_level = level or f"O{level_of[added]}-partial"
        first = results[0] if results else r
        prev = results[-1] if results else r
        rows.append({
            "step": k, "pass": added, "level": level, "passes_on": on,
            "changes": int(compiled.passes.get(added, 0)) if added else 0,
            "latency_ms": round(r.latency_ms, 4), "fps": round(r.fps, 2), "fps_1core": round(r.fps_1core, 2),
            "ddr_bytes_per_frame": int(r.ddr_bytes_per_frame), "bound_by": r.bound_by, "fps_bound": r.fps_bound,
            "speedup_previous": round(r.fps / prev.fps, 3), "speedup_o0": round(r.fps / first.fps, 3),
        })
        results.append(r)
    if progress:
        progress("compare levels", len(names) + 1, len(names) + 1)
    return rows, results
