"""``gate_parameters``: measure a compiled artifact against the limits a CI job set, and say which failed.

Every key of the group is optional and a key present is a gate. Each gate gives one
:class:`GateResult` (key, limit, measured, pass); the verdict is written as ``<prefix>_gates.json``
beside the artifact (and as JUnit with ``--junit``), and a failed gate is
:class:`hbtool.errors.GateFailed`, exit code 4, one stderr line per failed gate
(``min_fps: 287.3 < 300``). Nothing here depends on time or paths, so the JSON of two runs on the
same inputs is the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hbtool.config import HbConfig
from hbtool.config.schema import GROUPS
from hbtool.errors import GateFailed, InputError
from hbtool.release.accuracy import Accuracy, load_samples, measure

GROUP = "gate_parameters"
#: gates that read held-out samples (gate_parameters.data_dir)
ACCURACY_GATES = ("min_output_cosine", "min_metric", "max_metric_drop", "bit_exact_samples")
PERF_GATES = ("min_fps", "max_latency_ms")
SCHEMA_VERSION = 1


@dataclass
class GateResult:
    key: str
    limit: float | int
    measured: float | int | None
    passed: bool
    detail: str = ""

    def line(self) -> str:
        """``key: measured < limit`` (or ``>``) and what was measured, for the one stderr line of a failure."""
        if self.key.startswith("min_"):
            op = "<" if not self.passed else ">="
        elif self.key.startswith("max_"):
            op = ">" if not self.passed else "<="
        else:  # bit_exact_samples: samples that matched, of those asked for
            op = "<" if not self.passed else "="
        text = f"{self.key}: {fmt(self.measured)} {op} {fmt(self.limit)}"
        return f"{text} ({self.detail})" if self.detail else text

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "limit": self.limit, "measured": self.measured, "pass": self.passed, "detail": self.detail}


@dataclass
class GateReport:
    model: str
    results: list[GateResult]
    accuracy: Accuracy | None = None
    perf: dict[str, Any] | None = None
    files: list[Path] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[GateResult]:
        return [r for r in self.results if not r.passed]

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "model": self.model, "passed": self.passed,
                "gates": [r.to_json() for r in self.results],
                "accuracy": self.accuracy.to_json() if self.accuracy is not None else None,
                "perf": self.perf}

    def raise_if_failed(self) -> None:
        if self.failures:
            raise GateFailed([r.line() for r in self.failures],
                             "see <prefix>_gates.json; improve the model (hbtool debug --auto) or change the limit in gate_parameters")


def fmt(x: Any) -> str:
    if isinstance(x, float):
        return str(int(x)) if x.is_integer() and abs(x) < 1e12 else f"{x:.6g}"
    return str(x)


def asked(cfg: HbConfig) -> dict[str, float | int]:
    """The gates the config asks for, in the key table's order: key -> limit."""
    return {name: getattr(cfg.gates, name) for name in GROUPS[GROUP][0]
            if name != "data_dir" and getattr(cfg.gates, name) is not None}


def perf_summary(artifact: Path) -> dict[str, Any]:
    """The perf estimate's headline numbers (what the perf gates and the manifest read)."""
    from hbtool import api

    r = api.perf(artifact, quick=False).result
    return {"march": r.march, "board": r.hw.board, "core_num": r.core_num, "latency_ms": round(r.latency_ms, 4),
            "fps": round(r.fps, 2), "fps_bound": r.fps_bound}


def cpu_nodes(header: dict[str, Any]) -> int:
    """Model nodes the artifact runs on the CPU: the nodes of its CPU subgraphs."""
    return sum(len(s.get("nodes", [])) for s in header.get("cpu_subgraphs", []))


def _metric(cfg: HbConfig, acc: Accuracy) -> tuple[float, float]:
    """debug_parameters.metric of the artifact's outputs and of the float model's own (both against float)."""
    from hbtool.debug.metrics_hook import resolve_metric

    metric = resolve_metric(cfg.debug.metric, cfg.base_dir)
    return metric.value(acc.quantized_outputs, acc.float_outputs), metric.value(acc.float_outputs, acc.float_outputs)


def evaluate(cfg: HbConfig, artifact: Path, workers: int = 1, cluster: str | None = None) -> GateReport:
    """Measure every gate the config asks for on ``artifact`` (which ``cfg`` built); ``workers`` / ``cluster``
    shard the held-out samples as ``hbtool simulate --workers/--cluster`` does (the same numbers)."""
    from hbtool.compiler.artifact import read_artifact

    gates = asked(cfg)
    art = read_artifact(artifact)
    report = GateReport(cfg.model.output_model_file_prefix, [])
    acc = None
    if any(k in gates for k in ACCURACY_GATES):
        data_dir = cfg.gates.data_dir
        samples = load_samples(cfg, data_dir, f"{GROUP}.data_dir")
        acc = measure(cfg, artifact, samples, f"{GROUP}.data_dir", against_quantized_onnx=gates.get("bit_exact_samples") or 0,
                      workers=workers, cluster=cluster)
        report.accuracy = acc
    if any(k in gates for k in PERF_GATES):
        report.perf = perf_summary(artifact)
    metric = _metric(cfg, acc) if acc is not None and ("min_metric" in gates or "max_metric_drop" in gates) else None
    for key, limit in gates.items():
        report.results.append(_judge(cfg, key, limit, art, acc, report.perf, metric))
    return report


def _judge(cfg: HbConfig, key: str, limit: float | int, art, acc: Accuracy | None, perf: dict[str, Any] | None,
           metric: tuple[float, float] | None) -> GateResult:
    if key == "min_output_cosine":
        assert acc is not None
        name, worst = acc.worst()
        k = worst.worst_channel
        where = f"output '{name}'" + (f" channel {k} cosine {worst.channel_cosines[k]:.6g}" if k is not None else "")
        detail = f"worst: {where}, whole output {worst.cosine:.6g}, on {acc.samples} samples"
        return GateResult(key, limit, round(worst.worst, 6), worst.worst >= limit, detail)
    if key == "min_metric":
        assert metric is not None
        return GateResult(key, limit, round(metric[0], 6), metric[0] >= limit, f"{cfg.debug.metric} on {acc.samples} samples")
    if key == "max_metric_drop":
        assert metric is not None
        drop = metric[1] - metric[0]
        return GateResult(key, limit, round(drop, 6), drop <= limit,
                          f"{cfg.debug.metric}: float {metric[1]:.6g}, artifact {metric[0]:.6g}")
    if key == "min_fps":
        assert perf is not None
        return GateResult(key, limit, perf["fps"], perf["fps"] >= limit, f"estimated on {perf['march']}, bound by {perf['fps_bound']}")
    if key == "max_latency_ms":
        assert perf is not None
        return GateResult(key, limit, perf["latency_ms"], perf["latency_ms"] <= limit, f"estimated on {perf['march']}")
    if key == "max_cpu_nodes":
        n = cpu_nodes(art.header)
        return GateResult(key, limit, n, n <= limit, "nodes of the artifact's CPU subgraphs")
    if key == "max_artifact_mb":
        mb = round(art.nbytes / 1e6, 6)
        return GateResult(key, limit, mb, mb <= limit, f"{art.nbytes} bytes")
    if key == "bit_exact_samples":
        assert acc is not None
        n = acc.bit_exact_checked
        lsb = max((o.max_lsb or 0.0) for o in acc.outputs.values())
        ok = acc.bit_exact_samples == limit
        detail = f"{acc.bit_exact_samples} of {n} samples equal the quantized ONNX, largest difference {lsb:g} LSB"
        if n < limit:
            detail += f"; data_dir holds only {n} samples"
        return GateResult(key, limit, acc.bit_exact_samples, ok, detail)
    raise InputError(f"{GROUP}.{key}: no such gate", "see docs/ci.md")  # pragma: no cover - the key table has no other key


def write(report: GateReport, path: Path, junit: Path | None = None) -> list[Path]:
    """``<prefix>_gates.json`` and, when asked, the JUnit XML (atomically)."""
    from hbtool.release.junit import render_junit
    from hbtool.utils.atomic import atomic_write_files

    payload = {Path(path): (json.dumps(report.to_json(), indent=1, sort_keys=True) + "\n").encode()}
    if junit is not None:
        payload[Path(junit)] = render_junit(report)
    atomic_write_files(payload)
    report.files = list(payload)
    return report.files


def gates_path(cfg: HbConfig) -> Path:
    return Path(cfg.model.working_dir) / f"{cfg.model.output_model_file_prefix}_gates.json"


def check(cfg: HbConfig, artifact: Path, junit: Path | None = None, workers: int = 1, cluster: str | None = None) -> GateReport:
    """Evaluate and write the verdict (not raising): the caller decides when to :meth:`GateReport.raise_if_failed`."""
    report = evaluate(cfg, artifact, workers, cluster)
    write(report, gates_path(cfg), junit)
    return report
