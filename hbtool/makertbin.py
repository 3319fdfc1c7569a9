"""``hbtool makertbin -c cfg.yaml``: checker -> calibrate -> compile in one run, as ``hb_mapper makertbin``.

Each stage is the library call its own subcommand makes, so ``makertbin`` writes exactly what
``checker`` (into ``<working_dir>/.hb_check``), ``calibrate`` and ``compile`` write, and stops at
the first stage that fails with that stage's one-line error. This module is the implementation
behind :func:`hbtool.api.makertbin`, which the CLI calls; it prints nothing. A model with no BPU node stops
after the checker (exit 1), before any calibration work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hbtool.config import HbConfig


@dataclass
class MakertbinResult:
    checker: object
    calibration: object
    compiled: object
    files: list[Path] = field(default_factory=list)

    @property
    def path(self) -> Path:
        """The artifact."""
        return self.compiled.path


def checker_dir(cfg: HbConfig) -> Path:
    return Path(cfg.model.working_dir) / ".hb_check"


def run_makertbin(cfg: HbConfig, progress: Callable[[str, int, int], None] | None = None,
                  report: Callable[[str, object], None] | None = None,
                  log_text: Callable[[], str] | None = None) -> MakertbinResult:
    """Run the three stages on ``cfg`` and write every stage's files (the implementation of :func:`hbtool.api.makertbin`).

    ``report(stage, result)`` is called after each stage: ``checker``, ``calibrate``, ``compile``
    (the CLI prints the stage's table);
    ``log_text()`` is the log (at ``log_level``) collected so far, appended to each stage's log file.
    """
    log_text = log_text or (lambda: "")
    from hbtool.checker.run import run_checker
    from hbtool.compiler.compile import artifact_path, compile_model, write_compile_outputs
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.quant.report import render_report

    model = cfg.require_model()
    shapes = {inp.name: inp.shape for inp in cfg.inputs if inp.name and inp.shape}
    checked = run_checker(model, cfg.model.march, shapes, checker_dir(cfg), cfg.model.node_info,
                          output_nodes=cfg.model.output_nodes)
    if report:
        report("checker", checked)
    checked.require_deployable()
    files: list[Path] = list(checked.files.values())

    calibration = run_calibration(cfg, progress=progress)
    files += list(write_outputs(cfg, calibration, render_report(calibration).export_text() + log_text()).values())
    if report:
        report("calibrate", calibration)

    compiled = compile_model(cfg, progress=progress)
    files += write_compile_outputs(cfg, compiled, artifact_path(cfg), log_text=log_text())
    if report:
        report("compile", compiled)
    return MakertbinResult(checked, calibration, compiled, files)
