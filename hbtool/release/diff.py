"""``hbtool diff OLD NEW``: what changed between two releases, and whether it is a regression.

Both sides are manifests (a release folder or its ``manifest.json``). The deltas: each output's
cosine against the float model (the least of the whole output's and its worst channel's, as the
``min_output_cosine`` gate judges), the task metric, FPS, latency, artifact size, the inputs that
changed (model, config, calibration hashes) and every node whose precision or placement changed.
With limits (``--max-cosine-drop`` absolute, ``--max-metric-drop`` absolute, ``--max-fps-drop``
percent) a drop beyond one is a :class:`hbtool.errors.GateFailed` (exit 4): the check a CI job
runs on every model change against the last release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hbtool.errors import GateFailed
from hbtool.release.manifest import read_manifest


@dataclass
class Diff:
    lines: list[str] = field(default_factory=list)         # what a person reads
    regressions: list[str] = field(default_factory=list)   # beyond a limit: one stderr line each
    deltas: dict[str, Any] = field(default_factory=dict)   # the numbers (JSON)


def worst_cosine(entry: dict[str, Any]) -> float:
    values = [entry.get("cosine"), entry.get("worst_channel_cosine")]
    return float(min(v for v in values if v is not None))


def _pct(old: float, new: float) -> float:
    return 100.0 * (new - old) / old if old else 0.0


def diff(old_path: Path, new_path: Path, max_cosine_drop: float | None = None, max_metric_drop: float | None = None,
         max_fps_drop: float | None = None) -> Diff:
    old, _ = read_manifest(old_path)
    new, _ = read_manifest(new_path)
    d = Diff()
    d.lines.append(f"{old.get('model')} ({old.get('march')}) -> {new.get('model')} ({new.get('march')})")
    for key in ("model_sha256", "config_sha256", "calibration_sha256", "artifact_sha256", "hbtool_version"):
        if old.get(key) != new.get(key):
            d.lines.append(f"changed: {key} {str(old.get(key))[:16]} -> {str(new.get(key))[:16]}")
    oa, na = old.get("accuracy") or {}, new.get("accuracy") or {}
    if oa.get("data") != na.get("data") or oa.get("samples") != na.get("samples"):
        d.lines.append(f"note: accuracy measured on different data ({oa.get('data')}, {oa.get('samples')} samples -> "
                       f"{na.get('data')}, {na.get('samples')} samples)")
    d.deltas["outputs"] = {}
    for name, n_entry in sorted((na.get("outputs") or {}).items()):
        o_entry = (oa.get("outputs") or {}).get(name)
        if o_entry is None:
            d.lines.append(f"output '{name}': new")
            continue
        before, after = worst_cosine(o_entry), worst_cosine(n_entry)
        drop = before - after
        d.deltas["outputs"][name] = {"old": before, "new": after, "drop": round(drop, 8)}
        d.lines.append(f"output '{name}' cosine (worst of output and channels): {before:.6f} -> {after:.6f} ({-drop:+.6f})")
        if max_cosine_drop is not None and drop > max_cosine_drop:
            d.regressions.append(f"output '{name}' cosine {before:.6f} -> {after:.6f}: drop {drop:.6f} > --max-cosine-drop {max_cosine_drop:g}")
    om, nm = oa.get("metric") or {}, na.get("metric") or {}
    if om and nm:
        drop = om["value"] - nm["value"]
        d.deltas["metric"] = {"name": nm.get("name"), "old": om["value"], "new": nm["value"], "drop": round(drop, 8)}
        d.lines.append(f"metric {nm.get('name')}: {om['value']:.6g} -> {nm['value']:.6g} ({-drop:+.6g})")
        if om.get("name") != nm.get("name"):
            d.lines.append(f"note: the metric changed ({om.get('name')} -> {nm.get('name')})")
        if max_metric_drop is not None and drop > max_metric_drop:
            d.regressions.append(f"metric {nm.get('name')} {om['value']:.6g} -> {nm['value']:.6g}: drop {drop:.6g} > --max-metric-drop {max_metric_drop:g}")
    op, np_ = old.get("perf") or {}, new.get("perf") or {}
    if op and np_:
        fps_change = _pct(op["fps"], np_["fps"])
        d.deltas["fps"] = {"old": op["fps"], "new": np_["fps"], "change_pct": round(fps_change, 4)}
        d.deltas["latency_ms"] = {"old": op["latency_ms"], "new": np_["latency_ms"]}
        d.lines.append(f"fps: {op['fps']:g} -> {np_['fps']:g} ({fps_change:+.2f}%)")
        d.lines.append(f"latency: {op['latency_ms']:g} ms -> {np_['latency_ms']:g} ms ({_pct(op['latency_ms'], np_['latency_ms']):+.2f}%)")
        if max_fps_drop is not None and -fps_change > max_fps_drop:
            d.regressions.append(f"fps {op['fps']:g} -> {np_['fps']:g}: drop {-fps_change:.2f}% > --max-fps-drop {max_fps_drop:g}%")
    ob, nb = (old.get("artifact") or {}).get("bytes"), (new.get("artifact") or {}).get("bytes")
    if ob and nb:
        d.deltas["artifact_bytes"] = {"old": ob, "new": nb}
        d.lines.append(f"artifact: {ob:,} -> {nb:,} bytes ({_pct(ob, nb):+.2f}%)")
    if old.get("cpu_nodes") != new.get("cpu_nodes"):
        d.lines.append(f"cpu nodes: {old.get('cpu_nodes')} -> {new.get('cpu_nodes')}")
    oprec, nprec = old.get("precision") or {}, new.get("precision") or {}
    changed = {n: (oprec.get(n), nprec.get(n)) for n in sorted(set(oprec) | set(nprec)) if oprec.get(n) != nprec.get(n)}
    d.deltas["precision"] = {n: {"old": a, "new": b} for n, (a, b) in changed.items()}
    d.lines.append(f"precision: {len(changed)} node(s) changed")
    for n, (a, b) in changed.items():
        d.lines.append(f"  {n}: {a or '-'} -> {b or '-'}")
    og, ng = old.get("gates"), new.get("gates")
    if og is not None and ng is not None and og.get("passed") != ng.get("passed"):
        d.lines.append(f"gates: {'pass' if og['passed'] else 'FAIL'} -> {'pass' if ng['passed'] else 'FAIL'}")
    d.deltas["regressions"] = d.regressions
    return d


def raise_on_regression(d: Diff) -> None:
    if d.regressions:
        raise GateFailed([f"diff: {r}" for r in d.regressions],
                         "fix the model change (hbtool debug --auto), or raise the limit if the change is intended")
