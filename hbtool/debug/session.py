"""The debugger's starting point: the config calibrated in-process, its samples and float references.

Calibration is re-run from the config rather than read back from ``working_dir``: the debugger
needs the statistics (to re-quantize with another ``node_info`` in seconds, bit for bit what
plain ``hbtool calibrate`` would produce with it) and the float graph with its placement, which
the files do not hold. Every variant is measured on its real quantized model (the integer
program's ONNX form), on the same samples.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hbtool.config import HbConfig
from hbtool.debug.metrics import per_output, score, worst
from hbtool.debug.metrics_hook import Metric
from hbtool.quant.calibrate import CANDIDATES, CalibrationResult, run_calibration
from hbtool.quant.collect import float_session

#: folds of the debug samples a task metric is also measured on, two samples or more each (so none under
#: 16 samples: a spread over fewer folds says too little)
METRIC_FOLDS = 8

Progress = Callable[[str, int, int], None]


@dataclass
class Measured:
    """A quantized variant measured on the debug samples."""

    node_info: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, float]]     # per model output: cosine, mse, sqnr_db, l1, chebyshev, mre
    metric: float                              # the ranked metric (the hook's value, or the built-in's score)
    result: CalibrationResult | None = None
    fps: float | None = None
    folds: list[float] | None = None          # a task metric on folds of the debug samples (Metric.fold_values)
    #: the calibration method the variant's calibration chose, and the candidates' scores (a worker's try comes back
    #: without its calibration: :meth:`DebugSession.calibrate` rebuilds it with the method pinned, the same numbers)
    method: str | None = None
    candidates: dict[str, float] | None = None
    #: wall seconds the try took where it ran, and of that its calibration (:func:`hbtool.debug.trials.evaluate`): what
    #: the time limit's accounting predicts the next try and the final re-calibration by
    seconds: float | None = None
    calibrate_seconds: float | None = None

    @property
    def cosine(self) -> float:
        return worst(self.outputs, "cosine")


@dataclass
class DebugSession:
    cfg: HbConfig
    base: CalibrationResult
    samples: list[dict[str, np.ndarray]]
    float_outputs: dict[str, np.ndarray]      # output name -> stacked over the samples
    metric: Metric
    stats_cache: dict[str, Any] = field(default_factory=dict)
    #: onnxruntime threads of the debug runs (0: onnxruntime's default, every core); a worker process of
    #: ``--workers N`` runs on one, so N tries share the cores instead of fighting over them
    threads: int = 0
    #: the switchable model of the sensitivity analyses (:class:`hbtool.debug.masked.MaskedModel`), built on first
    #: use (:meth:`switchable`): ``hbtool debug`` hands over the one it built; a worker of ``--workers N`` builds its
    #: own from ``masked_graphs`` (the calibrated and the float graph: a worker's session has no base calibration)
    masked_model: Any = None
    masked_graphs: tuple[Any, Any] | None = None

    def switchable(self):
        """The switchable model (quantizers on and off per tensor), built once per process."""
        if self.masked_model is None:
            from hbtool.debug.masked import MaskedModel

            calibrated, graph = self.masked_graphs or (self.base.calibrated, self.base.graph)
            self.masked_model = MaskedModel(calibrated, graph, threads=self.threads)
        return self.masked_model

    @property
    def output_names(self) -> list[str]:
        """The model's outputs, in the graph's order (the float references are stacked in it; a worker's
        session has no base calibration to read them from)."""
        return list(self.float_outputs)

    def config_with(self, node_info: dict[str, dict[str, Any]]) -> HbConfig:
        cfg = copy.copy(self.cfg)
        cfg.model = copy.copy(self.cfg.model)
        cfg.model.node_info = node_info
        return cfg

    def calibrate(self, node_info: dict[str, dict[str, Any]], method: str | None = None,
                  candidates: dict[str, float] | None = None) -> CalibrationResult:
        """What ``hbtool calibrate`` gives with this node_info (statistics reused: same numbers; its own
        evaluation skipped: :meth:`measure` does the debugger's).

        ``method`` (with ``candidates``, the scores that chose it): the method an earlier calibration of the
        same ``node_info`` chose; the choice among the candidate methods (two thirds of a calibration on the
        PP-OCRv5 recogniser) is then not made again: the plan of one method does not depend on how it was
        chosen, so the result is the same."""
        cfg = self.config_with(node_info)
        pinned = method is not None and cfg.calibration.calibration_type in ("default", "mix") and method in CANDIDATES
        if pinned:
            cfg.calibration = copy.copy(cfg.calibration)
            cfg.calibration.calibration_type = method
        result = run_calibration(cfg, stats_cache=self.stats_cache, evaluate=False)
        if pinned:
            result.candidates = dict(candidates or {})
        return result

    def measure(self, result: CalibrationResult, node_info: dict[str, dict[str, Any]], channels: bool = True,
                compiled: Any = None) -> Measured:
        """The variant on the debug samples; ``channels=False`` leaves out each output's worst channel (an
        ``--auto`` try judges by the whole outputs; the channel scan is a third of a recogniser's measure).

        ``compiled`` (the variant's :class:`hbtool.compiler.compile.CompiledModel`, which an ``--auto`` try
        builds anyway for its FPS): the samples run on ``hbtool simulate``'s executor, bit for bit the
        quantized model's outputs (the simulator's contract, fuzzed in
        ``tests/e2e/test_random_graphs_through_the_pipeline.py``) and 4-10x faster than the quantized
        model's ONNX form in onnxruntime (PP-OCRv5 recogniser, 32 lines, one thread: 2.0 s against 7.9-21 s)."""
        from hbtool.quant.calibrate import runtime_feeds

        # the quantized model takes the chip's buffer (nv12, ...) where the config says so: feed it
        # the samples converted as the camera would, as calibrate's own evaluation does
        convert = runtime_feeds(self.cfg, list(result.quantized.inputs))
        samples = [convert(s) for s in self.samples] if convert else self.samples
        quant = simulate_outputs(compiled, samples, self.output_names, self.threads) if compiled is not None else None
        if quant is None or any(quant[n].shape != self.float_outputs[n].shape for n in self.output_names):
            quant = run_outputs(result.quantized, samples, self.output_names, self.threads)
        outs = per_output(self.float_outputs, quant, channels=channels)
        folds = self.metric.fold_values(quant, self.float_outputs, len(samples), METRIC_FOLDS)
        # a built-in metric is a column of the errors just measured (Metric.value would measure them again)
        value = self.metric.value(quant, self.float_outputs) if self.metric.is_hook else score(outs, self.metric.name)
        return Measured(node_info, outs, value, result, folds=folds)


def run_outputs(graph, samples: list[dict[str, np.ndarray]], names: list[str], threads: int = 0,
                spinning: bool = True) -> dict[str, np.ndarray]:
    """``{output: values stacked over the samples}`` of an IR graph run in onnxruntime (``spinning=False`` beside other
    work: the same numbers, idle pool threads asleep)."""
    sess = float_session(graph, threads=threads, basic=True, spinning=spinning)
    rows = [sess.run(names, s) for s in samples]
    return {n: np.concatenate([np.asarray(r[k]) for r in rows]) for k, n in enumerate(names)}


def simulate_outputs(compiled, samples: list[dict[str, np.ndarray]], names: list[str],
                     threads: int = 0) -> dict[str, np.ndarray] | None:
    """``{output: values stacked over the samples}`` of a compiled variant on the simulator's executor, or
    ``None`` where its inputs or outputs are not the quantized model's (the caller then runs that model)."""
    from hbtool.compiler.artifact import from_bytes
    from hbtool.simulator.executor import Executor

    if not compiled.data:
        return None
    executor = Executor(from_bytes(compiled.data), threads=threads or None)
    if set(executor.input_names) != set(samples[0]) or not set(names) <= set(executor.output_names):
        return None
    feeds = {k: np.concatenate([np.asarray(s[k]) for s in samples]) for k in executor.input_names}
    out = executor.run(feeds)
    return {n: out[n] for n in names}


def debug_samples(cfg: HbConfig, graph, count: int) -> list[dict[str, np.ndarray]]:
    """The first ``count`` samples of ``debug_parameters.data_dir``, else of the calibration data."""
    from hbtool.quant.data import held_out_data, load_calibration_data

    data_dir = getattr(cfg.debug, "data_dir", None)
    if data_dir is not None:
        data = held_out_data(cfg, data_dir, "debug_parameters.data_dir", graph, max_samples=count)
    else:
        data = load_calibration_data(cfg, graph, max_samples=count)
    return [data.sample(i) for i in range(min(count, data.num_samples))]


def open_session(cfg: HbConfig, metric: Metric, samples: int, progress: Progress | None = None,
                 reference_beside: Callable[..., Callable[[], dict[str, np.ndarray]]] | None = None) -> DebugSession:
    """Calibrate the config (keeping the statistics) and run the float model on the debug samples.

    Without calibrate's own evaluation (``evaluate=False``: the same plan, models and method): the debugger measures
    the PTQ model itself on the debug samples, and nothing reads the evaluation's errors; on the all-int8 PP-OCRv5
    recogniser it was a third of this calibration, run before any worker had work.

    ``reference_beside(graph, feeds, names)``: starts the float model's run on the debug samples elsewhere and returns
    a function that waits for its outputs (``hbtool debug --workers N``: on a worker process, which would otherwise
    wait for this calibration). Called right after the calibration's statistics pass (``on_float_graph``), so the run
    goes beside the rest of the calibration instead of after it; the same graph and samples as here, so the same
    numbers."""
    cache: dict[str, Any] = {}
    started: dict[str, Any] = {}

    def start_reference(graph) -> None:
        feeds = debug_samples(cfg, graph, samples)
        started.update(graph=graph, feeds=feeds, outputs=reference_beside(graph, feeds, list(graph.outputs)))

    base = run_calibration(cfg, progress=progress, stats_cache=cache, evaluate=False,
                           on_float_graph=start_reference if reference_beside is not None else None)
    if started.get("graph") is base.graph:
        feeds, float_out = started["feeds"], started["outputs"]()
    else:
        feeds = debug_samples(cfg, base.graph, samples)
        float_out = run_outputs(base.graph, feeds, list(base.graph.outputs))
    return DebugSession(cfg, base, feeds, float_out, metric, cache)
