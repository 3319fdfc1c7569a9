"""Leave-one-family-out cross-validation of the cost model on the published rows.

Every published row has been seen (no hold-out is left), so the honest generalisation number is a
cross-validation by **family** (:func:`benchmarks.published.split.family`: sizes and task heads of one
architecture are one family). For each family F: refit the fitted parameters on the rows of every
other family, estimate F's rows with them, and score those estimates; every row is scored exactly once,
by parameters that never saw its family's board numbers.

What is refitted, and how. hbtool's march parameters are few and were set by hand, each with its reason
in ``hbtool/march/<march>.yaml``; re-running that by-hand fit once per family is not reproducible. What
*is* reproducible is their first-order effect: every march parameter that was fitted to rows scales the
time of one group of op classes (:data:`PARAMETER_GROUPS`):

* ``tensor``: ``units.tensor.macs_per_cycle`` (with the array shape), the int8 conv/linear/matmul time;
* ``tensor int16``: ``units.tensor.int16_rate``, the time of ops with an int16 operand;
* ``vector``: ``units.vector.lanes`` and ``cycles_per_element.*``;
* ``data movement``: ``units.data_movement.*`` (bytes per cycle, transpose buffer);
* ``cpu``: the A55 terms (``cpu.*``);
* ``runtime``: ``overheads.per_frame_us`` and ``host_per_frame_us``.

Per march (each march has its own parameter set), the fold fits one scale per group so that the sum of
scaled group times matches the other families' published single-thread latencies, least squares on
relative errors (each row weighted by 1 / published), with a ridge pull of each scale towards 1
(:data:`RIDGE`) so a group the training rows barely contain stays where it is. The held-out rows are then
estimated with those scales: latency as the scaled sum; FPS from the row's throughput limits, each
rescaled by the groups it depends on (BPU cores: the non-CPU groups and the BPU's per-frame runtime; the
A55 cluster: ``cpu``; the threads' own latency: the latency; DDR bandwidth: unchanged).

What this does not remove: the starting point (scale 1) is the hand-fitted parameter set, which was set
with every row in view, and the ridge keeps the refit near it where the other families say little, so a
family's own evidence can still sit in that start point (the numbers lean optimistic). A march with one
family (RDK Ultra: YOLO11 only) has nothing to refit from: its fold keeps the frozen parameters. And
it is linear: an op bound by DDR does not speed up with more MACs per cycle, which the rescaled class time
assumes. docs/perf_published_families.md reports them beside the frozen (no-refit) errors.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

#: the fitted-parameter group each op class of ``perf_published.residual_group`` belongs to
PARAMETER_GROUPS = ("tensor", "tensor int16", "vector", "data movement", "cpu", "runtime")

#: ridge weight pulling each group's scale towards 1 (the frozen parameters): the per-op-class residual
#: analysis's own value (``perf_published.residuals``), fixed before this cross-validation existed, so not
#: chosen by its result; ``perf_published --cv-ridge`` shows how the numbers move with it
RIDGE = 1.0


def parameter_group(op_class: str) -> str:
    """The group of fitted parameters that scales the time of ``op_class`` (a ``residual_group`` name)."""
    if op_class.startswith("tensor /"):
        return "tensor int16" if op_class.endswith("int16") else "tensor"
    if op_class.startswith("vector /"):
        return "vector"
    if op_class.startswith("data movement"):
        return "data movement"
    if op_class == "cpu":
        return "cpu"
    return "runtime"


def group_times(row: dict) -> dict[str, float]:
    """The row's estimated single-thread latency (ms) split by parameter group."""
    out = dict.fromkeys(PARAMETER_GROUPS, 0.0)
    for cls, ms in row["classes_ms"].items():
        out[parameter_group(cls)] += ms
    return out


def ridge_scales(relative_parts, ridge: float = RIDGE):
    """The scales ``s`` that make ``relative_parts @ s`` closest to 1 (row ``i``, column ``k``: part ``k`` of row
    ``i``'s estimate over its published latency, so each row counts by its relative error), each scale pulled
    towards 1 by ``ridge`` (a part needs evidence in the rows to move; with few rows an unregularised fit is
    degenerate). The one such fit of the published-row analyses (the residual classes, the cross-validation)."""
    import numpy as np

    a = np.asarray(relative_parts, dtype=float)
    n, k = a.shape
    lhs = np.vstack([a, np.sqrt(ridge) * np.eye(k)])
    rhs = np.concatenate([np.ones(n), np.sqrt(ridge) * np.ones(k)])
    return np.linalg.lstsq(lhs, rhs, rcond=None)[0]


def fit_scales(rows: Iterable[dict], ridge: float = RIDGE) -> dict[str, float]:
    """One scale per parameter group so that scaled group times match the rows' published latencies."""
    import numpy as np

    rows = [r for r in rows if r.get("pub_latency_ms")]
    if not rows:
        return dict.fromkeys(PARAMETER_GROUPS, 1.0)
    a = np.array([[group_times(r)[g] / r["pub_latency_ms"] for g in PARAMETER_GROUPS] for r in rows])
    scale = ridge_scales(a, ridge)
    return {g: float(max(scale[i], 0.05)) for i, g in enumerate(PARAMETER_GROUPS)}


def rescaled(row: dict, scales: dict[str, float]) -> tuple[float, float]:
    """(latency ms, FPS) of ``row`` with each parameter group's time scaled (see the module docstring)."""
    t = group_times(row)
    latency = sum(scales[g] * t[g] for g in PARAMETER_GROUPS)
    bpu_rt = float(row.get("bpu_runtime_ms", 0.0))
    bpu_old = sum(t[g] for g in PARAMETER_GROUPS if g not in ("cpu", "runtime")) + bpu_rt
    bpu_new = sum(scales[g] * t[g] for g in PARAMETER_GROUPS if g not in ("cpu", "runtime")) + scales["runtime"] * bpu_rt
    limits = {}
    for name, fps in (row.get("limits") or {}).items():
        if name == "bpu cores":
            limits[name] = fps * bpu_old / max(bpu_new, 1e-9)
        elif name == "cpu":
            limits[name] = fps / scales["cpu"]
        elif name.endswith("threads x latency"):
            limits[name] = fps * row["latency_ms"] / max(latency, 1e-9)
        else:   # DDR bandwidth: bytes per frame do not depend on the fitted rates
            limits[name] = fps
    return latency, (min(limits.values()) if limits else row["fps"])


def leave_one_family_out(results: list[dict], ridge: float = RIDGE) -> list[dict]:
    """Every row estimated by scales fitted, per march, on the other families' rows.

    Returns one dict per row: variant, march, family, the frozen errors (``latency_err``, ``fps_err``)
    and the cross-validated ones (``cv_latency_err``, ``cv_fps_err``), and the fold's ``scales``."""
    out = []
    families = sorted({r["family"] for r in results})
    for fam in families:
        held = [r for r in results if r["family"] == fam]
        for march in sorted({r["march"] for r in held}):
            train = [r for r in results if r["family"] != fam and r["march"] == march]
            scales = fit_scales(train, ridge)
            for r in held:
                if r["march"] != march:
                    continue
                lat, fps = rescaled(r, scales)
                out.append({"variant": r["variant"], "march": march, "family": fam, "split": r["split"],
                            "latency_err": r["latency_err"], "fps_err": r["fps_err"],
                            "cv_latency_err": lat / r["pub_latency_ms"] - 1 if r.get("pub_latency_ms") else None,
                            "cv_fps_err": fps / r["pub_fps"] - 1 if r.get("pub_fps") else None,
                            "scales": scales, "train_rows": len(train)})
    return out


def _stats(errors: list) -> tuple[int, float | None, float | None]:
    a = [abs(e) for e in errors if e is not None]
    if not a:
        return 0, None, None
    return len(a), statistics.median(a), sum(x <= 0.25 for x in a) / len(a)


def cv_summary(cv: list[dict]) -> list[list]:
    """Per march and metric: rows, families, median |error| and share within 25 %, frozen vs cross-validated."""
    cells = []
    for march in sorted({c["march"] for c in cv}):
        sel = [c for c in cv if c["march"] == march]
        fams = len({c["family"] for c in sel})
        for metric in ("latency", "fps"):
            n, med, w25 = _stats([c[f"{metric}_err"] for c in sel])
            _, cmed, cw25 = _stats([c[f"cv_{metric}_err"] for c in sel])
            if n:
                cells.append([march, metric, n, fams, f"{100 * med:.1f} %", f"{100 * w25:.0f} %",
                              f"{100 * cmed:.1f} %", f"{100 * cw25:.0f} %"])
    return cells


CV_HEADER = ("march", "metric", "rows", "families", "frozen: median abs error", "frozen: within 25 %",
             "leave-family-out: median abs error", "leave-family-out: within 25 %")


def family_table(cv: list[dict]) -> list[list]:
    """Per family and march: rows, median |latency error| frozen and cross-validated, the fold's scales."""
    cells = []
    for fam, march in sorted({(c["family"], c["march"]) for c in cv}):
        sel = [c for c in cv if c["family"] == fam and c["march"] == march]
        _, med, _ = _stats([c["latency_err"] for c in sel])
        _, cmed, _ = _stats([c["cv_latency_err"] for c in sel])
        s = sel[0]["scales"]
        cells.append([fam, march, len(sel), "-" if med is None else f"{100 * med:.0f} %", "-" if cmed is None else f"{100 * cmed:.0f} %",
                      " ".join(f"{g.replace(' ', '_')}={s[g]:.2f}" for g in PARAMETER_GROUPS)])
    return cells


FAMILY_HEADER = ("family", "march", "rows", "frozen median abs latency error", "leave-family-out", "the fold's scales (fitted without the family)")
