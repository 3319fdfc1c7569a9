"""hbtool as a Python library: the calls every front end (the CLI, ``qat``, scripts, notebooks) makes.

    from hbtool import api

    cfg = api.load_config("cfg.yaml", overrides={"calibration_parameters.num_samples": 16})
    api.check(cfg).require_deployable()
    cal = api.calibrate(cfg, data=[{"input": x} for x in samples])   # or the config's cal_data_dir
    art = api.compile(cfg)                                            # art.path: the .bin artifact
    outputs = api.simulate(art.path, {"input": batch})                # {output name: float32 array}
    print(api.perf(art.path).fps)

Each call does what the ``hbtool`` subcommand of the same name does and writes the same files,
but prints nothing to stdout: the CLI (:mod:`hbtool.cli`) parses its arguments, calls these
functions and prints their results. A call that fails raises one of :mod:`hbtool.errors`'
exceptions (``HbError``: ``problem``, ``fix``, ``exit_code``), never a half-written output.
Progress, where a call takes long, is reported to an optional ``progress(stage, done, total)``
callback; logs go through :mod:`logging` (``hbtool.*`` loggers) and into each stage's log file.

The results are small dataclasses holding the paths and values a caller needs; ``details``
holds the stage's full in-memory result for anything more (plans, graphs, per-node errors).
See docs/api.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from hbtool.config import HbConfig
from hbtool.errors import ConfigError, InputError

__all__ = [
    "load_config", "check", "calibrate", "compile", "simulate", "simulate_report", "perf", "makertbin", "is_calibrated", "info",
    "qat", "debug", "CalibrateResult", "CompileResult", "PerfReport", "DebugReport", "InfoResult",
]

Progress = Callable[[str, int, int], None]


# ----------------------------------------------------------------------------------------- config
def _nest_overrides(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"group.key": v}`` and ``{"group": {"key": v}}`` (mixed freely) -> the nested form the loader takes."""
    nested: dict[str, dict[str, Any]] = {}
    for name, value in overrides.items():
        if not isinstance(name, str):
            raise ConfigError(f"overrides: key {name!r} is not text", "write keys as 'group.key' or nest them under the group name")
        if "." in name:
            group, key = name.split(".", 1)
            nested.setdefault(group, {})[key] = value
        elif isinstance(value, Mapping):
            nested.setdefault(name, {}).update(value)
        else:
            raise ConfigError(f"overrides: '{name}' is neither 'group.key' nor a group with a mapping of keys",
                              f"write it as 'calibration_parameters.{name}' (its group, a dot, the key)")
    return nested


def load_config(source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
                base_dir: str | Path | None = None, require_model: bool = True) -> HbConfig:
    """The validated config of a YAML file (or of a dict shaped like one), with ``overrides`` applied.

    ``overrides`` replaces keys before validation, so they are checked as if written in the YAML
    (a wrong key or value is a ConfigError naming ``group.key``), and defaults that depend on them
    follow. Give them nested (``{"model_parameters": {"march": "bayes-e"}}``) or dotted
    (``{"model_parameters.march": "bayes-e"}``). Relative paths are taken from the YAML's folder
    (a dict's: ``base_dir``, default the current folder).
    """
    from hbtool.config import config_from_dict
    from hbtool.config import load_config as load_yaml

    nested = _nest_overrides(overrides) if overrides else None
    if isinstance(source, Mapping):
        return config_from_dict(dict(source), base_dir=base_dir, require_model=require_model, overrides=nested)
    return load_yaml(source, require_model=require_model, overrides=nested)


# ---------------------------------------------------------------------------------------- checker
def checker_dir(cfg: HbConfig) -> Path:
    """Where ``check`` (and ``makertbin``'s checker stage) writes by default: ``<working_dir>/.hb_check``."""
    from hbtool.makertbin import checker_dir as makertbin_checker_dir

    return makertbin_checker_dir(cfg)


def check(cfg: HbConfig | str | Path, *, march: str | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
          output_dir: str | Path | None = None):
    """Which nodes run on the BPU and which fall back to the CPU, and why (``hbtool checker``).

    ``cfg``: a config (its model, march, input shapes, node_info, output nodes) or the path of an
    ONNX model alone. ``march`` and ``input_shapes`` override the config's. Writes
    ``checker.json`` and the optimized float model into ``output_dir`` (default
    ``<working_dir>/.hb_check``, or ``.hb_check`` for a bare model). Returns the
    :class:`~hbtool.checker.run.CheckerResult`; ``result.require_deployable()`` raises
    NotDeployableError (exit 1) when no node can run on the BPU.
    """
    from hbtool.checker.run import run_checker

    shapes: dict[str, tuple[int, ...]] = {}
    node_info, output_nodes = None, []
    if isinstance(cfg, HbConfig):
        model = cfg.require_model()
        march = march or cfg.model.march
        node_info, output_nodes = cfg.model.node_info, cfg.model.output_nodes
        shapes = {inp.name: inp.shape for inp in cfg.inputs if inp.name and inp.shape}
        default_dir = checker_dir(cfg)
    else:
        model = Path(cfg)
        if model.suffix.lower() in (".yaml", ".yml"):
            raise InputError(f"check({model}): a YAML file, not a model", "load it first: api.check(api.load_config(path))")
        default_dir = Path(".hb_check")
    shapes.update({name: tuple(int(d) for d in shape) for name, shape in (input_shapes or {}).items()})
    return run_checker(model, march or "bayes", shapes, Path(output_dir) if output_dir is not None else default_dir, node_info,
                       output_nodes=output_nodes)


# ------------------------------------------------------------------------------------ calibration
@dataclass
class CalibrateResult:
    """What ``calibrate`` wrote and chose. ``details``: the full :class:`~hbtool.quant.calibrate.CalibrationResult`."""

    files: dict[str, Path]          # original/optimized float, calibrated and quantized models, quant_info, log
    method: str                     # the calibration method chosen (max, kl, ..., load)
    candidates: dict[str, float]    # method -> mean output cosine against the float model
    output_errors: dict[str, dict[str, float]]  # per model output: cosine, l1, l2, chebyshev, ...
    num_samples: int
    details: Any = field(repr=False, default=None)

    @property
    def quantized_model(self) -> Path:
        return self.files["quantized_model"]

    @property
    def calibrated_model(self) -> Path:
        return self.files["calibrated_model"]


def calibrate(cfg: HbConfig, data: Iterable[Mapping[str, np.ndarray]] | None = None,
              progress: Progress | None = None) -> CalibrateResult:
    """Quantize the model (PTQ) and write what ``hbtool calibrate`` writes into ``working_dir``.

    ``data``: calibration samples, each ``{input name: array}`` shaped ``input_shape`` (or without
    its batch axis of one), as the model with its preprocessing takes them (image inputs: raw
    0-255 pixels in the training colour order and layout); used instead of ``cal_data_dir`` and
    giving the same model as the same arrays saved as ``.npy`` files there. At most
    ``calibration_parameters.num_samples`` of them are used.
    """
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.quant.report import render_report
    from hbtool.utils.atomic import AtomicFileSet
    from hbtool.utils.stage_log import stage_log

    # the model files are written while the final evaluation runs, renamed into place with the rest at the end
    with stage_log(cfg.model.log_level) as stage, AtomicFileSet() as staging:  # log_level: what hb_calibrate.log records
        result = run_calibration(cfg, progress=progress, samples=data, staging=staging)
        files = write_outputs(cfg, result, render_report(result).export_text() + stage.text(), staging)
    return CalibrateResult(files, result.method, result.candidates, result.output_errors, result.num_samples, result)


def is_calibrated(cfg: HbConfig) -> bool:
    """Whether the config's calibrated model (what ``compile`` reads) exists."""
    from hbtool.compiler.compile import calibrated_path

    return calibrated_path(cfg).exists()


# ------------------------------------------------------------------------------------------ compile
@dataclass
class CompileResult:
    """The artifact and what came with it. ``details``: the :class:`~hbtool.compiler.compile.CompiledModel`."""

    path: Path                      # the artifact (<working_dir>/<prefix>.bin unless given)
    files: list[Path]               # the artifact, hb_compile.log, and layer details when compiler debug is on
    seconds: float
    calibration: CalibrateResult | None = None  # set when compile had to calibrate first
    details: Any = field(repr=False, default=None)


def compile(cfg: HbConfig, *, optimize_level: str | None = None, disabled_passes: Iterable[str] = (),  # noqa: A001 - hbtool compile
            output: str | Path | None = None, progress: Progress | None = None) -> CompileResult:
    """Compile the calibrated model into a BPU artifact, calibrating first when it is missing (``hbtool compile``).

    ``optimize_level`` (O0-O3) overrides ``compiler_parameters.optimize_level``; ``disabled_passes``
    turns compiler passes off by name (docs/compile.md); ``output`` is the artifact path.
    """
    from hbtool.compiler.compile import artifact_path, compile_model, write_compile_outputs
    from hbtool.compiler.passes import PASSES
    from hbtool.utils.stage_log import stage_log

    disabled = set(disabled_passes)
    known = {p.name for p in PASSES}
    for name in sorted(disabled):
        if name not in known:
            raise InputError(f"--disable-pass {name}: no such pass", f"use one of: {', '.join(sorted(known))}")
    calibration = None if is_calibrated(cfg) else calibrate(cfg, progress=progress)
    with stage_log(cfg.model.log_level) as stage:  # log_level: what hb_compile.log records
        result = compile_model(cfg, optimize_level=optimize_level, disabled_passes=disabled, progress=progress)
        written = write_compile_outputs(cfg, result, Path(output) if output is not None else artifact_path(cfg), log_text=stage.text())
    return CompileResult(result.path, written, result.seconds, calibration, result)


# ----------------------------------------------------------------------------------------- makertbin
def makertbin(cfg: HbConfig, progress: Progress | None = None, report: Callable[[str, Any], None] | None = None):
    """Checker, calibrate and compile in one run, writing what each stage writes (``hbtool makertbin``).

    Stops at the first stage that fails with that stage's error (a model with no BPU node: after
    the checker, NotDeployableError). ``report(stage, result)`` is called after each stage
    (``checker``, ``calibrate``, ``compile``; the CLI prints the stage's table). Returns a
    :class:`~hbtool.makertbin.MakertbinResult` (``.path``: the artifact, ``.files``: every file written).
    """
    from hbtool import makertbin as implementation  # looked up at call time: tests wrap run_makertbin
    from hbtool.utils.stage_log import stage_log

    with stage_log(cfg.model.log_level) as stage:
        return implementation.run_makertbin(cfg, progress=progress, report=report, log_text=stage.text)


# ---------------------------------------------------------------------------------------- simulate
def simulate(artifact: str | Path, inputs: Mapping[str, np.ndarray | str | Path], *, batch_size: int = 16,
             threads: int | None = None, progress: Progress | None = None, model_name: str | None = None,
             workers: int = 1, cluster: str | None = None) -> dict[str, np.ndarray]:
    """Run the artifact's integer program on ``inputs``, bit-exactly; ``{output name: float32 array}``.

    ``inputs``: per model input, samples stacked on the first axis (``(N * input_shape[0], ...)``)
    as an array, or the path of a ``.npy`` or of a folder of samples (as ``hbtool simulate -i``).
    An input the artifact takes in a run-time format (nv12, ...) takes the chip's buffer. The
    outputs are dequantized, one row block per sample, exactly what ``hbtool simulate -o DIR``
    writes as ``DIR/<output>.npy``. The results do not depend on ``batch_size``, ``threads``, ``workers``
    (sample ranges on that many worker processes) or ``cluster`` (a Ray address, or ``local``).
    """
    result = simulate_report(artifact, inputs, batch_size=batch_size, threads=threads, progress=progress, model_name=model_name,
                             workers=workers, cluster=cluster)
    return dict(result.outputs)


def simulate_report(artifact: str | Path, inputs: Mapping[str, np.ndarray | str | Path], *, output_dir: str | Path | None = None,
                    compare: str | Path | None = None, batch_size: int = 16, threads: int | None = None, resume: bool = False,
                    keep_outputs: bool = True, progress: Progress | None = None, model_name: str | None = None,
                    workers: int = 1, cluster: str | None = None):
    """:func:`simulate` with everything ``hbtool simulate`` does: ``output_dir`` streams each output to
    ``<output>.npy`` there (any number of samples in the memory of one batch; ``resume`` continues an
    interrupted run), ``compare`` scores the outputs against an ONNX model (float or quantized).
    Returns the :class:`~hbtool.simulator.simulate.SimulationResult` (``outputs`` unless
    ``keep_outputs=False``, ``files``, ``comparisons``). ``model_name`` picks one model of a packed
    artifact (``hbtool pack``). ``workers`` / ``cluster``: sample ranges on worker processes or a Ray
    cluster (:mod:`hbtool.simulator.shards`), the same outputs and files bit for bit.
    """
    from hbtool.simulator.simulate import simulate as run_simulation

    feeds: dict[str, np.ndarray | Path] = {}
    for name, value in inputs.items():
        feeds[name] = value if isinstance(value, np.ndarray) else Path(value) if isinstance(value, (str, Path)) else np.asarray(value)
    return run_simulation(Path(artifact), feeds, Path(output_dir) if output_dir is not None else None,
                          Path(compare) if compare is not None else None, progress=progress, threads=threads,
                          batch_size=batch_size, resume=resume, keep_outputs=keep_outputs, model_name=model_name,
                          workers=workers, cluster=cluster)


# -------------------------------------------------------------------------------------------- info
@dataclass
class InfoResult:
    """What an artifact holds (``hbtool info``). ``summary``: the document ``hbtool info --json`` prints."""

    summary: dict[str, Any]         # one model: file, tool, march, inputs/outputs, program, memory...; packed: its models
    packed: bool                    # a packed artifact (``hbtool pack``) described as the list of its models
    artifact: Any = field(repr=False, default=None)   # the :class:`~hbtool.compiler.artifact.Artifact` (None when packed)

    def to_json(self) -> dict[str, Any]:
        """The document ``hbtool info --json`` writes."""
        return self.summary


def info(artifact: str | Path, model_name: str | None = None) -> InfoResult:
    """Describe an artifact: version, options, inputs/outputs, program, memory (``hbtool info``); reads, writes nothing.

    A packed artifact without ``model_name`` is described as the list of its models; ``model_name``
    picks one of them (for a single-model artifact it must be the model's name).
    """
    from hbtool.compiler.artifact import read_artifact
    from hbtool.compiler.info import packed_summary, summary

    packed = packed_summary(Path(artifact)) if model_name is None else None
    if packed is not None:
        return InfoResult(packed, True)
    art = read_artifact(Path(artifact), model_name)
    return InfoResult(summary(art), False, art)


# -------------------------------------------------------------------------------------------- perf
@dataclass
class PerfReport:
    """A performance estimate. ``result``: the :class:`~hbtool.costmodel.schedule.PerfResult` (per-op costs, timeline)."""

    latency_ms: float
    fps: float
    result: Any = field(repr=False, default=None)
    levels: list[dict[str, Any]] | None = field(repr=False, default=None)   # compare_levels: what each O-level buys
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The document ``hbtool perf --json`` writes (stable keys: CI jobs read them)."""
        from hbtool.perf.report import to_json

        return to_json(self.result, self.levels)


def perf(target: HbConfig | str | Path, *, optimize_level: str | None = None, core_num: int | None = None,
         compare_levels: bool = False, input_type_rt: str | None = None, board: str | None = None,
         input_shapes: Mapping[str, Sequence[int]] | None = None, march: str = "bayes", quick: bool | None = None,
         progress: Progress | None = None, model_name: str | None = None) -> PerfReport:
    """Estimate latency, FPS, DDR traffic and what binds them (``hbtool perf``); writes nothing.

    ``target``: an artifact (``.bin``), a config (its calibrated model, compiled in memory), or an
    ONNX model (the quick path, calibrated on random data; ``input_shapes`` and ``march`` apply to
    it only). A path is taken as an ONNX model when ``quick`` is true, or, by default, when it ends
    in ``.onnx``. ``core_num``, ``input_type_rt`` and ``board`` as the CLI's options; ``model_name``
    picks one model of a packed artifact.
    """
    from hbtool.perf.run import perf_artifact, perf_config, perf_fast

    if quick is None:
        quick = not isinstance(target, HbConfig) and Path(target).suffix.lower() == ".onnx"
    if model_name is not None and (quick or isinstance(target, HbConfig)):
        raise InputError("--model-name picks a model of a packed artifact", "give the packed .bin as ARTIFACT")
    if input_shapes and not quick:
        raise InputError("--input-shape belongs to the quick path", "use it with --model M.onnx")
    if isinstance(target, HbConfig):
        run = perf_config(target, optimize_level, core_num, compare_levels, progress, input_type_rt, board)
    elif quick:
        shapes = {name: tuple(int(d) for d in shape) for name, shape in (input_shapes or {}).items()}
        run = perf_fast(Path(target), shapes, march, optimize_level, core_num, compare_levels, progress, input_type_rt, board)
    else:
        if optimize_level or compare_levels:
            raise InputError("an artifact is already compiled: --optimize-level and --compare-levels need the calibrated model",
                             "use hbtool perf -c cfg.yaml or --model M.onnx --fast with them")
        run = perf_artifact(Path(target), core_num, input_type_rt, board, model_name)
    return PerfReport(run.result.latency_ms, run.result.fps, run.result, run.levels, list(run.notes))


# ------------------------------------------------------------------------------------- qat, debug
def qat(cfg: HbConfig, *, resume: bool = False, metric: Callable[[Any, Any], float] | None = None,
        progress: Callable[[int, int, float], None] | None = None):
    """Quantization-aware training from the PTQ result (``hbtool qat``; docs/qat.md); writes ``<prefix>_qat_model.onnx``.

    ``resume`` continues from ``<prefix>_qat_checkpoint.pt``; ``metric(outputs, float_outputs)`` is
    a score of one's own, measured before and after; ``progress(step, total, loss)``. Returns the
    :class:`~hbtool.qat.train.QatResult` (``.path``, ``.cosine_before``, ``.cosine_after``, ``.losses``).
    """
    from hbtool.qat.train import run_qat

    return run_qat(cfg, progress=progress, resume=resume, metric=metric)


@dataclass
class DebugReport:
    """What ``debug`` wrote (``debug.json``, the HTML report, and after ``auto`` the fixed node_info and models)."""

    files: list[Path]
    details: Any = field(repr=False, default=None)   # the DebugResult; ``details.data`` is debug.json's document


def debug(cfg: HbConfig, *, auto: bool = False, target_cosine: float = 0.99, max_fps_loss: float | str = 0.10,
          samples: int | None = None, time_limit: float | str | None = "30m", output_dir: str | Path | None = None,
          progress: Progress | None = None, workers: int | None = None, cluster: str | None = None) -> DebugReport:
    """Find the nodes that lose accuracy and, with ``auto``, fix them at a measured FPS cost (``hbtool debug``).

    ``max_fps_loss``: a fraction or a text like ``"10%"``; ``time_limit``: seconds or ``"30m"``/``"90s"``
    (None or 0: no limit); ``output_dir`` defaults to ``debug_parameters.report_dir``; ``workers`` (None:
    the machine's cores) and ``cluster`` (a Ray address, or ``"local"``): where ``auto`` runs its tries,
    the same result on any of them.
    """
    from hbtool.debug.run import parse_fps_loss, parse_time_limit, run_debug, write_debug

    if samples is not None and samples < 1:
        raise InputError(f"--samples {samples}: must be at least 1", "pass --samples 8, say")
    result = run_debug(cfg, auto, target_cosine, parse_fps_loss(max_fps_loss), samples, progress=progress,
                       time_limit=parse_time_limit(time_limit), workers=workers, cluster=cluster)
    files = write_debug(result, Path(output_dir) if output_dir is not None else cfg.debug.report_dir)
    return DebugReport(files, result)
