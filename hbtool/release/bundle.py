"""``hbtool release -c cfg.yaml -o DIR``: makertbin, the gates, and a reproducible folder a release job keeps.

The folder::

    DIR/<prefix>.bin            the artifact
    DIR/manifest.json           hashes of what it was built from, I/O, gates, perf, accuracy, precision
    DIR/reports/                <prefix>_gates.json and .xml (JUnit), perf.json/.html/.png, <prefix>_quant_info.json
    DIR/check/inputs/*.npy      a few inputs, as the artifact takes them
    DIR/check/outputs/*.npy     what the artifact gives for them (``hbtool verify`` re-simulates and compares)

Every file is written from values that depend only on the inputs, so two releases of the same
model, config and samples are the same bytes (artifact and manifest; the reports too). The bundle is
written even when a gate fails (a CI job keeps it and publishes the JUnit report), then the
failure is raised (exit 4).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hbtool.config import HbConfig
from hbtool.release import manifest as M
from hbtool.release.accuracy import Accuracy, load_samples, measure
from hbtool.release.gates import GateReport, asked, evaluate, perf_summary

#: samples kept in DIR/check
CHECK_SAMPLES = 4
#: samples the manifest's accuracy is measured on when the config has no gate_parameters.data_dir
ACCURACY_SAMPLES = 16


@dataclass
class ReleaseResult:
    out_dir: Path
    manifest: dict[str, Any]
    gates: GateReport | None
    files: list[Path] = field(default_factory=list)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def safe_name(name: str) -> str:
    from hbtool.io.files import safe_file_name

    return safe_file_name(name)


def check_outputs(artifact: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the artifact gives for the stacked ``feeds`` (the simulator; what verify repeats)."""
    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor

    executor = Executor(read_artifact(artifact))
    outs = executor.run(feeds)
    return {o: np.asarray(outs[o]) for o in executor.output_names}


def _accuracy(cfg: HbConfig, artifact: Path, gates: GateReport | None) -> Accuracy | None:
    """The manifest's accuracy: on gate_parameters.data_dir, else on the first calibration samples (random ones
    for calibration_type skip); None when the config has neither (calibration_type load without data)."""
    if gates is not None and gates.accuracy is not None:
        return gates.accuracy
    if cfg.gates.data_dir is not None:
        samples = load_samples(cfg, cfg.gates.data_dir, "gate_parameters.data_dir")
        return measure(cfg, artifact, samples, "gate_parameters.data_dir")
    if cfg.calibration.calibration_type == "load" and not cfg.calibration.cal_data_dir:
        return None
    samples = load_samples(cfg, None, "calibration_parameters.cal_data_dir", ACCURACY_SAMPLES)
    what = "random samples (calibration_type skip)" if cfg.calibration.calibration_type == "skip" else "calibration samples"
    return measure(cfg, artifact, samples, f"the first {len(samples)} {what} (no gate_parameters.data_dir)")


def _metric_json(cfg: HbConfig, acc: Accuracy) -> dict[str, Any]:
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.release.accuracy import _round

    metric = resolve_metric(cfg.debug.metric, cfg.base_dir)
    return {"name": cfg.debug.metric, "value": _round(metric.value(acc.quantized_outputs, acc.float_outputs)),
            "float_value": _round(metric.value(acc.float_outputs, acc.float_outputs))}


def write_release(cfg: HbConfig, artifact: Path, calibration_data, out_dir: Path, workers: int = 1,
                  cluster: str | None = None) -> ReleaseResult:
    """Measure ``artifact`` (built from ``cfg`` by makertbin) and write the bundle into ``out_dir``.

    ``calibration_data`` is the CalibrationSet calibrate read (hashed into the manifest in order);
    ``workers`` / ``cluster`` shard the gates' held-out samples (hbtool.simulator.shards; same numbers)."""
    from hbtool import api
    from hbtool.compiler.artifact import read_artifact
    from hbtool.perf.html import write_html
    from hbtool.release.gates import gates_path, write
    from hbtool.release.junit import render_junit
    from hbtool.utils.atomic import atomic_write_files

    out_dir = Path(out_dir)
    prefix = cfg.model.output_model_file_prefix
    data = artifact.read_bytes()
    art = read_artifact(artifact)
    gates = evaluate(cfg, artifact, workers, cluster) if asked(cfg) else None
    acc = _accuracy(cfg, artifact, gates)

    files: dict[Path, bytes] = {out_dir / f"{prefix}.bin": data}
    check: dict[str, Any] = {"samples": 0, "inputs": {}, "outputs": {}}
    feeds = acc.feeds[:CHECK_SAMPLES] if acc is not None else []
    if feeds:
        stacked = {n: np.concatenate([f[n] for f in feeds]) for n in feeds[0]}
        outs = check_outputs(artifact, stacked)
        check["samples"] = len(feeds)
        for kind, arrays in (("inputs", stacked), ("outputs", outs)):
            for name, a in sorted(arrays.items()):
                rel = f"check/{kind}/{safe_name(name)}.npy"
                files[out_dir / rel] = _npy(a)
                check[kind][name] = {"file": rel, "sha256": hashlib.sha256(files[out_dir / rel]).hexdigest()}

    reports = out_dir / "reports"
    if gates is not None:
        files[reports / f"{prefix}_gates.json"] = (json.dumps(gates.to_json(), indent=1, sort_keys=True) + "\n").encode()
        files[reports / f"{prefix}_gates.xml"] = render_junit(gates)
    quant_info = Path(cfg.model.working_dir) / f"{prefix}_quant_info.json"
    if quant_info.exists():
        files[reports / quant_info.name] = quant_info.read_bytes()

    cal_sha, cal_n = M.samples_sha256(calibration_data) if calibration_data is not None else (None, 0)
    manifest = M.base_manifest(cfg, art.header, hashlib.sha256(data).hexdigest(), len(data))
    manifest.update({
        "calibration_sha256": cal_sha, "calibration_samples": cal_n,
        "gates": None if gates is None else {"passed": gates.passed, "results": [r.to_json() for r in gates.results]},
        "perf": perf_summary(artifact),
        "accuracy": None if acc is None else {**acc.to_json(), "metric": _metric_json(cfg, acc)},
        "cpu_nodes": sum(len(s.get("nodes", [])) for s in art.header.get("cpu_subgraphs", [])),
        "check": check,
    })
    files[out_dir / M.MANIFEST] = M.dumps(manifest)
    atomic_write_files(files)
    written = list(files)
    written += write_html(api.perf(artifact, quick=False).result, reports)
    if gates is not None:  # the working_dir copy, as makertbin and hbtool gate write it
        write(gates, gates_path(cfg))
    return ReleaseResult(out_dir, manifest, gates, sorted(written))
