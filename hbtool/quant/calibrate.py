"""``hbtool calibrate``: post-training quantization driven by the YAML config.

Order of work: import with the config's input shapes and fold the preprocessing (norm_type)
into the model; float optimizations; placement; mask clamping; statistics over the
calibration data; a plan per candidate method; pick the plan whose model output is closest
to float; per-node error table. Every output file is written at the very end, all of them
atomically together, so a failure leaves the working directory as it was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from hbtool.checker.placement import place_graph
from hbtool.config import HbConfig
from hbtool.config.optimization import Switches
from hbtool.errors import InputError, NotDeployableError
from hbtool.io.files import safe_file_name
from hbtool.io.metrics import RunningChannelErrors, RunningErrors
from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import put_back_in_memory_weights, serialized_onnx, to_onnx
from hbtool.ir.onnx_import import import_onnx
from hbtool.kernels.movement import PERMUTATIONS
from hbtool.march.description import check_int16_supported, load_march
from hbtool.quant.calibrated_model import build_calibrated_graph, loaded_bias_delta
from hbtool.quant.candidate_scoring import ScoringModel, plan_layout, scoring_streams
from hbtool.quant.collect import (SessionModel, collect_stats, open_session, session_model, session_model_of, stays_in_memory,
                                  with_extra_outputs)
from hbtool.quant.data import CalibrationSet, load_calibration_data
from hbtool.quant.fqvit import apply_ptf, apply_softmax_log2, log2_decode, ptf_tensors
from hbtool.quant.masks import clamp_masks
from hbtool.quant.node_weights import adaround_subset, bias_correction_everywhere, clip_node_weights, mean_inputs, nodes_asking
from hbtool.quant.output_channels import channel_axis_of, judge_outputs, judgement_lines, output_channel_axes
from hbtool.quant.observers import TensorStats
from hbtool.quant.plan import INT8_MIN_SQNR_DB, QuantPlan, bpu_activation_tensors, build_plan
from hbtool.quant.load import apply_loaded_scales, strip_quantization
from hbtool.quant.prequantized import honour_model_weights, prequantized_lines, prequantized_summary, without_kept_weights
from hbtool.quant.lower import lower_to_integer
from hbtool.quant.preprocess import find_preprocess, insert_preprocess
from hbtool.quant.thresholds import sqnr_db, threshold
from hbtool.quant.quantized_model import build_quantized_graph, computes_exactly
from hbtool.quant.smooth_quant import apply_smooth_quant, smooth_sites
from hbtool.quant.weights import bias_corrections, fold_bias_delta, plan_weights
from hbtool.utils.atomic import AtomicFileSet

log = logging.getLogger(__name__)

CANDIDATES = ("max", "percentile", "kl", "mse")
EVAL_SAMPLES = 8

def stat_representatives(graph: Graph, tensors: list[str]) -> dict[str, str]:
    """``{tensor: tensor whose statistics it shares}``: observing one of each permutation chain is enough."""
    rep: dict[str, str] = {}
    producers = graph.producer_map()
    wanted = set(tensors)
    for t in tensors:
        root = t
        for _ in range(64):
            p = producers.get(root)
            if p is None or p.op_type not in PERMUTATIONS or p.meta.get("on") != "BPU" or not p.inputs or graph.is_const(p.inputs[0]):
                break
            if p.inputs[0] not in wanted:
                break
            root = p.inputs[0]
        rep[t] = root
    return rep


@dataclass
class CalibrationResult:
    graph: Graph                    # optimized float graph with placement
    plan: QuantPlan
    weight_scales: dict[str, tuple[np.ndarray, int]]
    method: str
    candidates: dict[str, float]    # method -> output cosine
    node_errors: dict[str, dict[str, float]]
    output_errors: dict[str, dict[str, float]]
    files: dict[str, Path] = field(default_factory=dict)
    seconds: float = 0.0
    num_samples: int = 0
    original: Graph | None = None   # float graph with preprocessing, before optimizations
    calibrated: Graph | None = None  # float graph with HzCalibration nodes
    # the float graph that was quantized: learned-rounding weights and folded bias corrections (QAT starts from it)
    quantized_source: Graph | None = None
    program: Graph | None = None     # the integer program (kernels in node.meta)
    quantized: Graph | None = None   # the program with ONNX bodies
    # what the ptf / softmax_log2 / smooth_quant options did: {option: {"applied": [...], "skipped": {...}}}
    options: dict[str, Any] = field(default_factory=dict)
    data: CalibrationSet | None = None  # the samples calibrated on (debug_mode dump_calibration_data)
    # models already serialized as write_outputs writes them ({payload key: bytes}): the evaluation ran two, the other two
    # were serialized while it ran (a caller that changes result.original or result.calibrated after that clears this)
    serialized: dict[str, bytes] = field(default_factory=dict, repr=False)


def _tensor_names_for_eval(graph: Graph, plan: QuantPlan) -> list[str]:
    return [t for t in plan.tensors]


def prepare_float_graph(cfg: HbConfig, loaded: dict | None = None,
                        node_info_out: dict | None = None, cache: dict[str, Any] | None = None) -> tuple[Graph, Graph]:
    """(original float graph with preprocessing, optimized and placed float graph).

    With ``loaded`` (a dict), quantization nodes already in the model are removed and their
    scales collected into it (``calibration_type: load``). ``node_info_out`` (a dict) receives
    ``node_info`` keyed by the optimized graph's node names (:mod:`hbtool.checker.node_names`).
    ``cache`` (:func:`run_calibration`'s ``stats_cache``): the imported and optimized graphs, which do not depend on
    ``node_info``, are kept in it and copied on a later call with the same model, inputs and output nodes. Why:
    ``hbtool debug`` calibrates once per try with another ``node_info``, and the float graph passes were a quarter
    of a try's CPU on the PP-OCRv5 recogniser; the placement, which reads ``node_info``, runs every time.
    """
    from hbtool.checker.node_names import resolve_node_info

    key = ("prepared_float_graph", str(cfg.model.onnx_model), repr(cfg.inputs), repr(cfg.model.output_nodes))
    usable = cache is not None and loaded is None   # a load calibration strips quantization nodes into ``loaded``
    kept = cache.get("prepared_float_graph") if usable else None
    if kept is not None and kept[0] == key:
        original, graph = kept[1].copy(), kept[2].copy()
    else:
        original, graph = _optimized_float_graph(cfg, loaded)
        if usable:
            cache["prepared_float_graph"] = (key, original.copy(), graph.copy())
    node_info = resolve_node_info(cfg.model.node_info, graph, [original], cfg.model.onnx_model)
    place_graph(graph, load_march(cfg.model.march), node_info)
    if node_info_out is not None:
        node_info_out.update(node_info)
    return original, graph


def _optimized_float_graph(cfg: HbConfig, loaded: dict | None) -> tuple[Graph, Graph]:
    """:func:`prepare_float_graph` before the placement: the imported graph with preprocessing, and its optimized copy."""
    from hbtool.checker.node_names import apply_output_nodes
    from hbtool.ir.passes import optimize_float

    cfg.require_model()
    shapes = {inp.name: inp.shape for inp in cfg.inputs if inp.name and inp.shape}
    graph = import_onnx(cfg.model.onnx_model, shapes)
    apply_output_nodes(graph, cfg.model.output_nodes, cfg.model.onnx_model)
    if loaded is not None:
        loaded.update(strip_quantization(graph, load_march(cfg.model.march).has_int16))
    had_preprocess = {name for name in graph.inputs if find_preprocess(graph, name) is not None}
    insert_preprocess(graph, cfg.inputs)
    if loaded:
        # a scale loaded for a model input belongs to the normalised tensor once preprocessing is folded in
        for name in graph.inputs:
            node = find_preprocess(graph, name)
            if node is not None and name not in had_preprocess and name in loaded:
                loaded[node.outputs[0]] = loaded.pop(name)
    original = graph.copy()
    optimize_float(graph)
    return original, graph


def evaluate_outputs(
    float_graph: Graph,
    test_graph: Graph,
    batches: list[dict[str, np.ndarray]],
    tensor_map: dict[str, str] | None = None,
    node_tensors: list[str] | None = None,
    scales: dict[str, Any] | None = None,
    test_feeds: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    channel_out: dict[str, RunningChannelErrors] | None = None,
    serialized: tuple[bytes | SessionModel, bytes | SessionModel] | None = None,
    exact_test: bool = False,
    float_session: Any = None,
    float_outputs: Any = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Errors of ``test_graph`` against ``float_graph`` on the given feeds.

    Returns (per model output, per tensor in ``node_tensors``) metrics; ``tensor_map`` maps a
    float tensor name to its name in ``test_graph``; ``scales`` multiplies the test graph's
    value of a tensor (integer tensors of the quantized model) before comparing (a scale, a
    per-channel array for the last axis, or a function that decodes the integers);
    ``test_feeds`` turns the float graph's feeds into the test graph's (run-time input formats);
    ``channel_out`` (a dict) receives every output's per-channel errors (hbtool.quant.output_channels).
    ``serialized``: (float model, test model) already serialized (bytes as ``to_onnx`` wrote them, or
    :class:`~hbtool.quant.collect.SessionModel`): the compared tensors are appended to them instead of serializing
    either model again. Without it both are built as ``SessionModel`` (their weights handed over as arrays).
    ``exact_test``: ``test_graph`` computes integers exactly (the quantized model: integer codes carried in float64,
    every convolution split so that its float32 partial sums stay exact); its session then takes onnxruntime's full
    optimizations (blocked-layout convolutions, about a quarter less time a run on ResNet50), which only reorder
    exact arithmetic, so it computes the same numbers (``tests/unit/quant/test_quantized_model_any_level.py``).
    The float model keeps the basic level: its floats are what the report has always compared against.
    ``float_session``: that float model's session (or a future of it) as :func:`evaluation_float_session` opens it
    for ``node_tensors``, opened by the caller beforehand.
    ``float_outputs``: instead, (that session, its outputs on the first batches) or a future of it, as
    :func:`evaluation_float_outputs` runs them ahead (calibrate: while it builds the quantized model); each batch's
    entry of that list is set to None when it is taken, so its tensors go once its errors are added; the session
    runs the batches after them.
    """
    tensor_map = tensor_map or {}
    node_tensors = node_tensors or []
    scales = scales or {}
    outs = list(float_graph.outputs)
    f_names = outs + [t for t in node_tensors if t not in outs]
    t_names = [tensor_map.get(t, t) for t in f_names]
    acc = {t: RunningErrors() for t in f_names}
    channels = {o: RunningChannelErrors(channel_axis_of(float_graph, o)) for o in outs}
    # the two models are independent: onnxruntime opens and runs them side by side (two threads); the errors of
    # batch k are added on a third thread while both models run batch k + 1, batch by batch in order, as one
    # thread would add them (the same sums in the same order: the same floats)
    t_extra = [tensor_map.get(t, t) for t in node_tensors]

    def add_errors(f_vals: list[np.ndarray], t_vals: list[np.ndarray]) -> None:
        for name, a, b in zip(f_names, f_vals, t_vals):
            if name in scales and name not in outs:
                b = scales[name](b) if callable(scales[name]) else b * scales[name]
            acc[name].update(a, b)
            if name in channels:
                channels[name].update(a, b)

    with ThreadPoolExecutor(2) as pool, ThreadPoolExecutor(1) as adder:
        if serialized is None:
            t_model = session_model(test_graph, t_extra)
        else:
            t_model = with_extra_outputs(serialized[1], test_graph, t_extra)
        t_open = pool.submit(open_session, t_model, 0, not exact_test, False)
        del t_model
        ahead: list = []   # float_outputs' runs, taken when the first test run is under way
        if float_outputs is None:
            if float_session is None:
                float_session = evaluation_float_session(float_graph, node_tensors, None if serialized is None else serialized[0])
            f_sess = float_session.result() if hasattr(float_session, "result") else float_session
        t_sess = t_open.result()
        added = None
        for k, feeds in enumerate(batches):
            t_run = pool.submit(t_sess.run, t_names, test_feeds(feeds) if test_feeds else feeds)
            if float_outputs is not None and k == 0:
                # the list itself (a future holds it too): each batch's entry is dropped once taken
                f_sess, ahead = float_outputs.result() if hasattr(float_outputs, "result") else float_outputs
            if k < len(ahead):
                f_vals, ahead[k] = ahead[k], None
            else:
                f_vals = f_sess.run(f_names, feeds)
            t_vals = t_run.result()
            if added is not None:
                added.result()   # one batch's errors at a time, in order (and at most two batches' test tensors held)
            added = adder.submit(add_errors, f_vals, t_vals)
            del f_vals, t_vals
        if added is not None:
            added.result()
    if channel_out is not None:
        channel_out.update(channels)
    out_err = {o: acc[o].result() for o in outs}
    node_err = {t: acc[t].result() for t in node_tensors}
    return out_err, node_err


#: the float tensors the final evaluation may hold ahead of the quantized model's runs (evaluation_float_outputs)
EVAL_AHEAD_BYTES = 256 << 20


def evaluation_float_outputs(float_graph: Graph, node_tensors: list[str], batches: list[dict[str, np.ndarray]],
                             serialized: bytes | SessionModel | None = None,
                             budget: int = EVAL_AHEAD_BYTES) -> tuple[Any, list[list[np.ndarray]]]:
    """The float side of :func:`evaluate_outputs` run ahead: (the session :func:`evaluation_float_session` opens,
    its outputs and ``node_tensors`` on the first batches whose tensors fit in ``budget`` bytes). The same session
    and feeds: the same arrays; the session runs the other batches beside the quantized model's runs, as before.

    Why ahead: the float side needs only the compared tensors' names, which the lowered program gives, so calibrate
    runs it on a thread of its own while the main thread builds and serializes the quantized model (Python, one core
    busy) instead of beside the quantized model's runs, which keep both cores busy (ResNet50: about 0.5 of 2.5 CPU s
    of the evaluation). Why a budget: the batches' float tensors are held until their errors are added (all 8
    samples of the PP-OCRv5 recogniser took its peak from 1.5 to 2.3 GB), and a shape not known statically runs
    nothing ahead."""
    session = evaluation_float_session(float_graph, node_tensors, serialized)
    outs = list(float_graph.outputs)
    names = outs + [t for t in node_tensors if t not in outs]
    per_batch = _batch_bytes(float_graph, names)
    fit = 0 if per_batch is None else min(len(batches), budget // max(per_batch, 1))
    return session, [session.run(names, feeds) for feeds in batches[:fit]]


def _batch_bytes(graph: Graph, names: list[str]) -> int | None:
    """Bytes of ``names`` in one run of ``graph`` from its static shapes and types (None when one is unknown)."""
    from hbtool.quant.pieces import static_sizes

    sizes = static_sizes(graph, names)
    if sizes is None or any(graph.values[n].dtype is None for n in names):
        return None
    return sum(count * np.dtype(graph.values[n].dtype).itemsize for n, count in sizes.items())


def evaluation_float_session(float_graph: Graph, node_tensors: list[str], serialized: bytes | SessionModel | None = None) -> Any:
    """The float side of :func:`evaluate_outputs`: the float model at onnxruntime's basic level with ``node_tensors``
    as extra outputs; ``serialized``: ``to_onnx(float_graph)`` already serialized, or its ``SessionModel`` (the outputs
    are appended to it)."""
    model = session_model(float_graph, node_tensors) if serialized is None else with_extra_outputs(serialized, float_graph, node_tensors)
    return open_session(model, basic=True, spinning=False)


def runtime_feeds(cfg: HbConfig, input_names: list[str]) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None:
    """Training-type feeds -> the quantized model's, for inputs with a run-time format (converted as the camera does)."""
    from hbtool.io.runtime_input import runtime_specs, to_runtime

    specs = runtime_specs(input_names, cfg.inputs)
    if not specs:
        return None
    return lambda feeds: {k: to_runtime(v, specs[k]) if k in specs else v for k, v in feeds.items()}


def _total_macs(graph: Graph) -> int:
    from hbtool.ir.macs import node_macs

    return sum(node_macs(n, graph) for n in graph.nodes)


def _mean_cosine(errs: dict[str, dict[str, float]]) -> float:
    return float(np.mean([e["cosine"] for e in errs.values()])) if errs else 1.0


def run_calibration(cfg: HbConfig, progress: Callable[[str, int, int], None] | None = None,
                    stats_cache: dict[str, Any] | None = None, evaluate: bool = True,
                    samples: Iterable[Mapping[str, np.ndarray]] | None = None,
                    staging: AtomicFileSet | None = None,
                    on_float_graph: Callable[[Graph], None] | None = None) -> CalibrationResult:
    """Quantize the model of ``cfg``; returns the plan and its measured errors (writes nothing).

    ``stats_cache`` (a dict the caller keeps between calls on the same model and data, as
    ``hbtool debug`` does for each node_info it tries) holds the statistics of the first call;
    a later call whose tensors are all in it skips the statistics pass and gets the very same
    numbers. ``evaluate=False`` skips the per-tensor evaluation of the quantized model (a third of
    a call on a recogniser): the plan, models and method are the same, ``output_errors`` and
    ``node_errors`` are empty. ``hbtool debug --auto`` measures every variant itself.
    ``samples`` (``{input name: array}`` per sample, as :func:`hbtool.quant.samples.array_calibration_data`
    takes them) replaces the config's ``cal_data_dir``: the caller's arrays give exactly what the same
    arrays saved as ``.npy`` files in the folders give.
    ``staging`` (the caller's :class:`~hbtool.utils.atomic.AtomicFileSet` for :func:`write_outputs`, which then
    commits it): the four model files are staged into it while the final evaluation runs, the main thread's idle
    time then, instead of after it (ResNet50: 330 MB written and synced to disk); nothing reaches a target before
    the commit. Without it nothing is written.
    ``on_float_graph``: called once with the float graph (the result's ``graph``, final by then) right after the
    statistics pass, for a caller with its own use of the float model that can start it there: ``hbtool debug
    --workers N`` runs it on the debug samples in a worker process, beside the rest of this calibration (the plans and
    the choice of method, mostly on one core here), not beside the statistics pass, which keeps every core busy.
    """
    return _Calibration(cfg, progress, stats_cache, samples, staging, on_float_graph).run(evaluate)


class _Calibration:
    """One run of :func:`run_calibration`, as named steps in the order they run.

    The steps share what earlier steps found (the float graph, the statistics, the weight plan,
    the bias corrections, the graph that gets quantized), so they are methods of one object
    rather than closures; each attribute is set by exactly one step, before any later step reads it.
    """

    def __init__(self, cfg: HbConfig, progress: Callable[[str, int, int], None] | None,
                 stats_cache: dict[str, Any] | None, samples: Iterable[Mapping[str, np.ndarray]] | None,
                 staging: AtomicFileSet | None = None, on_float_graph: Callable[[Graph], None] | None = None):
        self.cfg = cfg
        self.on_float_graph = on_float_graph
        self.staging = staging
        self.cal = cfg.calibration
        self.progress = progress
        self.stats_cache = stats_cache
        self.samples = samples
        self.options: dict[str, Any] = {}   # what each option did: {option: {"applied": ..., "skipped": ...}}
        self.built_plans: dict[Any, tuple[QuantPlan, dict[str, Any]]] = {}   # candidate -> (plan, options after it)
        self.bias_delta: dict[str, Any] | None = None
        self.evaluate = False   # run() sets it: the models are then serialized (and staged) for their files here
        self.serialized: dict[str, bytes] = {}   # {payload key: the bytes write_outputs writes}, as each is made

    def run(self, evaluate: bool) -> CalibrationResult:
        t0 = time.perf_counter()
        self.evaluate = evaluate
        self.prepare_graph()
        self.load_data()
        with ThreadPoolExecutor(1) as self.background:   # the float references are computed beside the statistics pass
            self.collect_statistics()
            self.reference_outputs()
        if self.on_float_graph is not None:    # the statistics pass is over: its cores are free, the graph final
            self.on_float_graph(self.graph)
        self.plan_weights()
        self.correct_biases()
        self.quantization_source()
        method, candidates = self.choose_method()
        result = self.final_result(method, candidates, evaluate)
        result.seconds = time.perf_counter() - t0
        return result

    # ------------------------------------------------------------------------------ the steps
    def prepare_graph(self) -> None:
        """The float graph with placement; a loaded model's scales; the BPU tensors to quantize."""
        cfg, cal = self.cfg, self.cal
        check_int16_supported(load_march(cfg.model.march), cfg.model.node_info, bool(cal.enable_int16), list(cal.optimization or []))
        self.loaded: dict | None = {} if cal.calibration_type == "load" else None
        self.node_info: dict[str, dict[str, Any]] = {}
        self.original, self.graph = prepare_float_graph(cfg, self.loaded, self.node_info, self.stats_cache)
        if not any(n.meta.get("on") == "BPU" for n in self.graph.nodes):
            raise NotDeployableError(
                "no node of the model can run on the BPU, so there is nothing to quantize",
                "see the reason of every node with hbtool checker -c cfg.yaml; the model needs at least one supported op (Conv, MatMul, ...)",
            )
        clamp_masks(self.graph)
        self.tensors = bpu_activation_tensors(self.graph)
        loaded = self.loaded
        if loaded is not None:
            if not loaded:
                raise InputError(
                    "calibration_parameters.calibration_type: load, but the model has no QuantizeLinear/DequantizeLinear pairs or HzCalibration nodes",
                    "give a QAT/QDQ export or an hbtool *_calibrated_model.onnx, or choose another calibration_type (a model quantized "
                    "only in its weights keeps their integers with any calibration_type)",
                )
            missing = [t for t in self.tensors if t not in loaded]
            if missing and not self._has_data():
                raise InputError(
                    f"calibration_type load: {len(missing)} BPU tensors have no scale in the model (first: '{missing[0]}')",
                    "add cal_data_dir so hbtool can calibrate the rest, or export scales for every tensor",
                )

    def _has_data(self) -> bool:
        return self.samples is not None or any(self.cfg.calibration.cal_data_dir)

    def load_data(self) -> None:
        """The samples: the caller's, the config's folders, or random ones for a fully loaded model."""
        if self.samples is not None:
            from hbtool.quant.samples import array_calibration_data

            self.data = array_calibration_data(self.cfg, self.graph, self.samples)
        elif self.loaded is not None and not self._has_data():
            self.data = CalibrationSet.random(self.cfg, 8, graph=self.graph)
        else:
            self.data = load_calibration_data(self.cfg, self.graph)
        self.total = self.data.num_samples
        self._done = 0

    def _tick(self, n: int) -> None:
        self._done += n
        if self.progress:
            self.progress("statistics", self._done, self.total)

    def collect_statistics(self) -> None:
        """smooth_quant's migration, then one statistics pass (or the cache) over the observed tensors."""
        cal, graph, data = self.cal, self.graph, self.data
        if getattr(cal, "smooth_quant", False):
            self.options["smooth_quant"] = _smooth(graph, data, float(getattr(cal, "smooth_alpha", 0.5)), self.loaded is not None)
        reps = stat_representatives(graph, self.tensors)
        observed = sorted(set(reps.values()), key=self.tensors.index)
        self.use_ptf = bool(getattr(cal, "ptf", False))
        ptf_axes = {t: -1 for t in ptf_tensors(graph)[0]} if self.use_ptf else {}
        ptf_axes.update({o: a for o, a in output_channel_axes(graph).items() if o in self.tensors and o not in ptf_axes})  # per-channel maxima
        from hbtool.config.optimization import switches as optimization_switches

        self.switches = optimization_switches(cal.optimization)
        # bias correction everywhere (the key or Horizon's optimization switch), or on node_info's nodes only
        # (not for a loaded model: its biases are its own, and an hbtool calibrated model already carries its correction)
        self.everywhere = bias_correction_everywhere(cal) and self.loaded is None
        self.bias_nodes = nodes_asking(self.node_info, "bias_correction") if self.loaded is None else set()
        self.mean_axes: dict[str, int] = (mean_inputs(graph, None if self.everywhere else self.bias_nodes)
                                          if (self.everywhere or self.bias_nodes) else {})
        # the graph is final from here on: serialized once, as the optimized float model file, for the statistics
        # pass, the float references, the final evaluation and the file (the stage metadata changes nothing onnxruntime
        # computes; tests/unit/quant/test_models_serialized_once.py checks the file is the returned graph's bytes)
        self.float_bytes = serialized_onnx(graph, stage="optimized_float")
        # and once without its weights, which every session here is handed as arrays (collect.SessionModel)
        self.float_model = session_model(graph)
        self.references = self.background.submit(self._float_references)
        self.root_stats = _cached_stats(self.stats_cache, graph, observed, data, self._tick, self.mean_axes, ptf_axes, cal.batch_size,
                                        self.float_model)
        self.stats = {t: self.root_stats[reps[t]] for t in self.tensors}

    def reference_outputs(self) -> None:
        """The evaluation samples and the float model's outputs on them (what every candidate is scored against)."""
        self.eval_batches, self.f_refs = self.references.result()

    def _float_references(self) -> tuple[list[dict[str, np.ndarray]], list[list[np.ndarray]]]:
        """(evaluation batches, the float model's outputs on them); runs on a background thread during the statistics pass."""
        n_eval = EVAL_SAMPLES if _total_macs(self.graph) < 1e9 else EVAL_SAMPLES // 2
        eval_batches = [b for _, b in zip(range(n_eval), self.data.iter_batches(1))]
        f_sess = open_session(self.float_model, spinning=False)
        return eval_batches, [f_sess.run(list(self.graph.outputs), b) for b in eval_batches]

    def plan_weights(self) -> None:
        """Weight scales (clipped where node_info asks), the int4 choice and the precision policy of the plans."""
        cfg, cal, graph = self.cfg, self.cal, self.graph
        wclip = getattr(cal, "weight_clip", "none") or "none"
        weights = plan_weights(graph, per_channel=cal.per_channel, clip=wclip)
        weights = clip_node_weights(graph, weights, nodes_asking(self.node_info, "mse"), cal.per_channel)
        # an already-quantized model's weight integers are kept (hbtool.quant.prequantized)
        self.weights, self.weights_kept, self.weights_requantized = honour_model_weights(graph, weights)
        self.output16 = "set_model_output_int16" in (cal.optimization or [])
        self.march = load_march(cfg.model.march)
        from hbtool.quant.int4 import choose_int4_nodes

        self.int4_choice = choose_int4_nodes(graph, self.node_info, getattr(cal, "default_precision", "int8") or "int8", self.march)
        self.weights8 = dict(self.weights)
        # int8-only marches (X3) have no int16 to promote to, and X5 promotes only on request; random data (skip) gives no signal-to-noise
        # worth promoting by, so a quick-path estimate never depends on the accident of a random scale
        self.auto16 = bool(getattr(cal, "auto_int16", True)) and self.march.auto_int16
        self.min_sqnr = float("-inf") if cal.calibration_type == "skip" else INT8_MIN_SQNR_DB

    def correct_biases(self) -> None:
        """The bias shift that weight rounding causes, per layer (or a loaded model's own)."""
        graph = self.graph
        if self.loaded is not None:   # an older hbtool calibrated model kept its correction beside the graph
            self.bias_delta = loaded_bias_delta(graph) or None
            return
        mean_axes = self.mean_axes
        bias_delta = bias_corrections(graph, self.weights, {t: self.root_stats[t].channel_mean for t in mean_axes}) if mean_axes else None
        if bias_delta and not self.everywhere:  # node_info Weight: bias_correction on some nodes only
            bias_delta = {k: v for k, v in bias_delta.items() if k in self.bias_nodes}
        self.bias_delta = without_kept_weights(bias_delta, graph, self.weights_kept)

    def quantization_source(self) -> None:
        """The graph that gets quantized: the float graph, with learned-rounding weights when asked for
        and the bias corrections folded in; ``self.graph`` itself stays the float reference."""
        cal, graph, progress = self.cal, self.graph, self.progress
        qsrc = graph
        round_nodes = nodes_asking(self.node_info, "adaround")
        if cal.adaround or round_nodes:
            from hbtool.quant.adaround import adaround

            learn = self.weights if cal.adaround else adaround_subset(graph, self.weights, round_nodes)
            learned = adaround(graph, learn, self.data.iter_batches(1), progress=(lambda d, t: progress("adaround", d, t)) if progress else None,
                               context=self.weights)
            qsrc = graph.copy()
            for name, value in learned.items():
                qsrc.values[name].data = value
        if self.bias_delta:   # into the bias constants, so calibrated model, quantized model and compile agree (fold_bias_delta)
            grouped = sorted(n for n in self.bias_delta if (node := graph.node(n)) is not None and int(node.attr("group", 1) or 1) > 1)
            self.options["bias_correction"] = {"applied": sorted(self.bias_delta), "grouped": grouped}
            qsrc, self.bias_delta = fold_bias_delta(qsrc, self.bias_delta)
        self.qsrc = qsrc

    def choose_method(self) -> tuple[str, dict[str, float]]:
        """(method, {candidate: output cosine}): the candidate closest to float for default/mix, else the configured one."""
        ctype = self.cal.calibration_type
        if ctype == "load":
            return "max", {}
        if ctype not in ("default", "mix"):
            return {"skip": "max"}.get(ctype, ctype), {}
        candidates: dict[str, float] = {}
        best = None
        seen: dict[tuple, str] = {}
        methods: list[Any] = list(CANDIDATES) + (["mix"] if ctype == "mix" else [])
        # the plans are built here, in order; the first plan's scoring model (every activation's numbers as inputs:
        # hbtool.quant.candidate_scoring) is opened on a scoring thread while the other plans are built, and every
        # candidate of the same layout is scored on that one session with its own numbers fed, several candidates at
        # once (scoring_streams). A session opens before any scoring that waits for it is taken off the queue, so no
        # scoring thread waits for a session that no thread is opening
        with ThreadPoolExecutor(scoring_streams(len(methods))) as pool:
            scores: dict[str, Any] = {}
            same_as: dict[str, str] = {}
            models: dict[Any, tuple[ScoringModel, Any]] = {}
            for method in methods:
                plan = self.plan_for(self.per_tensor_methods() if method == "mix" else method)
                self.built_plans[method] = (plan, dict(self.options))
                key = tuple(sorted((t, q.bits, q.scale) for t, q in plan.tensors.items()))
                if key in seen:  # the same scales as an earlier method (small histograms): same result
                    same_as[method] = seen[key]
                    continue
                seen[key] = method
                layout = plan_layout(self.graph, plan, self.weights)
                if layout not in models:
                    model = ScoringModel(self.qsrc, plan, dict(self.weights))
                    models[layout] = (model, pool.submit(open_session, session_model(model.graph), 0, True, False))
                model, session = models[layout]
                scores[method] = pool.submit(self._scored, session, model.feeds(plan))
            if self.evaluate:
                # while onnxruntime scores (the GIL free), the two float models' files, which no candidate changes
                self._float_files()
            for k, method in enumerate(methods):
                if method in same_as:
                    candidates[method] = candidates[same_as[method]]
                    continue
                candidates[method] = scores[method].result()
                log.info("calibration candidate %s: output cosine %.6f", method, candidates[method])
                if self.progress:
                    self.progress("candidates", k + 1, len(methods))
                if best is None or candidates[method] > candidates[best]:
                    best = method
        return best, candidates

    def final_result(self, method: str, candidates: dict[str, float], evaluate: bool) -> CalibrationResult:
        """The chosen plan's calibrated and integer models, their measured errors and the options' summary."""
        cfg, graph = self.cfg, self.graph
        if method in self.built_plans and not (self.int4_choice or self.int4_choice.kept):
            # the plan the candidate was scored with, and what its options reported then: building it again gives the
            # same plan (a plan is a function of the statistics and the config). Not with int4, whose plans set the
            # shared weight scales in place (the last plan built set them)
            plan, options = self.built_plans[method]
            self.options.update(options)
        else:
            plan = self.plan_for(self.per_tensor_methods() if method == "mix" else method)
        if self.loaded is not None:
            apply_loaded_scales(plan, self.loaded)
            method = "load"
        if graph.prequantized is not None:
            self.options["prequantized"] = prequantized_summary(graph, self.cal.calibration_type, self.weights_kept,
                                                                self.weights_requantized, self.loaded, plan,
                                                                self.march.has_int16, self.tensors)
        program = self.lowered(plan)
        present = {o for n in program.nodes for o in n.outputs}
        node_tensors = [t for t in plan.tensors if t in present and t not in graph.outputs]
        node_scales = {t: log2_decode if plan.tensors[t].is_log2 else plan.tensors[t].channel_scales() for t in node_tensors}
        out_channels: dict[str, RunningChannelErrors] = {}
        serialized: dict[str, bytes] = {}
        if evaluate:
            with ThreadPoolExecutor(2) as evaluation:
                # the float side of the evaluation needs only the compared tensors' names: its session opens and runs
                # the batches its budget holds (onnxruntime, outside the GIL) while this thread builds and serializes the
                # quantized model
                float_outputs = evaluation.submit(evaluation_float_outputs, graph, node_tensors, self.eval_batches, self.float_model)
                qgraph = build_quantized_graph(program)
                # onnxruntime opens and runs both models (outside the GIL; their weights handed over as arrays:
                # collect.SessionModel) while this thread puts the weights back into the quantized model for its file
                # (the message built once), builds the calibrated graph and serializes the two files nobody runs, as
                # write_outputs would (the same bytes)
                qmodel = to_onnx(qgraph, stage="quantized", in_memory=stays_in_memory)
                errors = evaluation.submit(evaluate_outputs, graph, qgraph, self.eval_batches, None, node_tensors, node_scales,
                                           test_feeds=runtime_feeds(cfg, list(graph.inputs)), channel_out=out_channels,
                                           serialized=(self.float_model, session_model_of(qmodel, qgraph)),
                                           exact_test=computes_exactly(program), float_outputs=float_outputs)
                put_back_in_memory_weights(qmodel, qgraph)
                self._float_files()
                serialized = self.serialized
                serialized["quantized_model"] = qmodel.SerializeToString()
                del qmodel
                cgraph, _ = build_calibrated_graph(self.qsrc, plan, self.weights)
                serialized["calibrated_model"] = serialized_onnx(cgraph, stage="calibrated")
                self._stage_models(serialized)
                out_err, node_err = errors.result()
        else:
            qgraph = build_quantized_graph(program)
            cgraph, _ = build_calibrated_graph(self.qsrc, plan, self.weights)
            out_err, node_err = {}, {}
        if not candidates and out_err:
            candidates = {method: _mean_cosine(out_err)}
        result = CalibrationResult(graph, plan, self.weights, method, candidates, node_err, out_err, num_samples=self.total,
                                   serialized=serialized)
        result.original = self.original
        result.calibrated = cgraph
        result.quantized_source = self.qsrc
        result.program = program
        result.quantized = qgraph
        result.options = _options_summary(self.options, plan)
        stats, node_info, switches, march = self.stats, self.node_info, self.switches, self.march
        if self.cal.calibration_type != "skip":   # random data (the quick path) says nothing about an output's real range
            coarse = coarse_int8_outputs(graph, plan, stats, node_info, switches, march.has_int16)
            if coarse:
                result.options["coarse_outputs"] = coarse
        # every output, channel by channel (random data, the quick path, says nothing about real channels)
        judged = judge_outputs(graph, plan, out_channels, node_info, march.has_int16) if self.cal.calibration_type != "skip" else {}
        if judged:
            result.options["output_channels"] = judged
        result.data = self.data
        for line in option_lines(result):
            log.info("%s", line)
        return result

    def _float_files(self) -> None:
        """The original and the optimized float models' files, serialized and staged once (``self.serialized``).

        Why apart from the other two models: neither depends on the chosen candidate, so calibrate makes them while
        onnxruntime scores the candidates (the main thread waits there, the GIL free; ResNet50: 200 MB written and
        synced), instead of during the final evaluation, which keeps both cores busy. The bytes are the calls
        write_outputs makes (``tests/unit/quant/test_models_serialized_once.py``)."""
        if "original_float_model" in self.serialized:
            return
        self.serialized["original_float_model"] = serialized_onnx(self.original, stage="original_float")
        self.serialized["optimized_float_model"] = self.float_bytes
        self._stage_models(self.serialized)

    def _stage_models(self, serialized: dict[str, bytes]) -> None:
        """Write the model files (``serialized``: the bytes write_outputs writes) into the caller's staging, while
        onnxruntime runs the evaluation: the writes and the disk syncs leave the interpreter (the GIL) free. A file
        already staged stays as it was staged (the same bytes)."""
        if self.staging is None:
            return
        for key, path in output_files(self.cfg).items():
            if key in serialized and path not in self.staging:
                self.staging.stage(path, serialized[key])

    # ------------------------------------------------------------------------- shared by the steps
    def plan_for(self, method: str | dict[str, str]) -> QuantPlan:
        """The activation plan for one method (or per-tensor methods), with the enabled options applied."""
        cal, graph, stats = self.cal, self.graph, self.stats
        plan = build_plan(graph, stats, method, self.auto16, self.node_info, self.output16, cal.max_percentile, min_sqnr_db=self.min_sqnr,
                          all_int16=bool(cal.enable_int16), switches=self.switches,
                          int16_wide_outputs=self.march.has_int16 and cal.calibration_type != "skip")
        plan.bias_delta = dict(self.bias_delta or {})
        if getattr(cal, "softmax_log2", False):
            done, skipped = apply_softmax_log2(graph, plan)
            self.options["softmax_log2"] = {"applied": done, "skipped": skipped}
        if self.use_ptf:
            done, skipped = apply_ptf(graph, plan, stats)
            self.options["ptf"] = {"applied": done, "skipped": skipped}
        if self.int4_choice or self.int4_choice.kept:
            from hbtool.quant.int4 import apply_int4

            self.options["int4"] = apply_int4(graph, plan, stats, self.int4_choice, self.weights, self.weights8)
        return plan

    def per_tensor_methods(self) -> dict[str, str]:
        """``mix``: for every tensor the method with the best expected SQNR on its own histogram."""
        mp = self.cal.max_percentile
        return {t: max(CANDIDATES, key=lambda m: sqnr_db(st, threshold(st, m, 127, mp), 127)) for t, st in self.stats.items()}

    def lowered(self, plan: QuantPlan) -> Graph:
        """The integer program of ``plan`` (:func:`~hbtool.quant.quantized_model.build_quantized_graph` gives it its ONNX bodies)."""
        program, _ = lower_to_integer(self.qsrc, plan, self.weights, rounding=self.cfg.compiler.rounding, inputs=self.cfg.inputs)
        return program

    def output_cosine(self, test: Graph) -> float:
        """Mean output cosine of ``test`` against the float model on the evaluation samples."""
        return self._output_cosine_of(session_model(test))

    def _output_cosine_of(self, model: bytes | SessionModel) -> float:
        """:meth:`output_cosine` of a serialized model."""
        return self._scored(open_session(model, basic=True, spinning=False), {})

    def _scored(self, session: Any, extra_feeds: dict[str, np.ndarray]) -> float:
        """Mean output cosine of ``session`` (an open session, or a future of one) on the evaluation samples,
        ``extra_feeds`` (a scoring model's numbers) added to every sample's inputs."""
        sess = session.result() if hasattr(session, "result") else session
        outputs = list(self.graph.outputs)
        acc = {o: RunningErrors() for o in outputs}
        for b, refs in zip(self.eval_batches, self.f_refs):
            for o, r, v in zip(outputs, refs, sess.run(outputs, {**b, **extra_feeds})):
                acc[o].update(r, v)
        return _mean_cosine({o: a.result() for o, a in acc.items()})


def _cached_stats(cache: dict[str, Any] | None, graph: Graph, observed: list[str], data: CalibrationSet, tick: Callable[[int], None],
                  mean_axes: dict[str, int], ptf_axes: dict[str, int], batch_size: int,
                  model: bytes | SessionModel | None = None) -> dict[str, TensorStats]:
    """The statistics of ``observed``: from ``cache`` when it has them all, else one pass over the data.

    A full pass replaces the cache (histogram subsets are drawn per pass, so mixing passes would
    not give what one plain calibration gives); channel means alone are exact and added on top.
    """
    def complete(stats: dict[str, TensorStats]) -> bool:
        return all(t in stats for t in observed) and all(stats[t].channel_absmax is not None for t in ptf_axes if t in stats)

    if cache is not None and complete(cache.get("stats", {})):
        stats = cache["stats"]
        missing = {t: a for t, a in mean_axes.items() if stats.get(t) is None or stats[t].channel_mean is None}
        if missing:
            for t, st in collect_stats(graph, [], data.iter_batches(batch_size), None, missing, model=model).items():
                if t in stats:
                    stats[t].channel_mean = st.channel_mean
                else:
                    stats[t] = st
        return stats
    stats = collect_stats(graph, observed, data.iter_batches(batch_size), tick, mean_axes, ptf_axes, model=model,
                          num_samples=data.num_samples)
    if cache is not None:
        cache["stats"] = stats
    return stats


def _smooth(graph: Graph, data: CalibrationSet, alpha: float, loading: bool) -> dict[str, Any]:
    """``smooth_quant``: per-channel maxima of the candidate tensors, then fold the migration into ``graph``."""
    if loading:
        return {"applied": [], "skipped": {"*": "calibration_type load: the loaded scales belong to the unsmoothed model"}}
    sites, skipped = smooth_sites(graph)
    if not sites:
        return {"applied": [], "skipped": skipped}
    pre = collect_stats(graph, [], data.iter_batches(1), None, channel_maxes={s.tensor: -1 for s in sites})
    applied = apply_smooth_quant(graph, sites, {t: st.channel_absmax for t, st in pre.items() if st.channel_absmax is not None}, alpha)
    done = {d["tensor"] for d in applied}
    for s in sites:
        if s.tensor not in done:
            skipped[s.tensor] = "no outlier channels"
    return {"applied": applied, "skipped": skipped}


def _options_summary(options: dict[str, Any], plan: QuantPlan) -> dict[str, Any]:
    """What ptf / softmax_log2 / smooth_quant did in the final plan (for quant_info and the report)."""
    out = dict(options)
    if "ptf" in out:
        out["ptf"] = {"applied": [t for t, q in plan.tensors.items() if q.ptf_alpha is not None], "skipped": out["ptf"]["skipped"]}
    if "softmax_log2" in out:
        out["softmax_log2"] = {"applied": [t for t, q in plan.tensors.items() if q.is_log2], "skipped": out["softmax_log2"]["skipped"]}
    return out


# below this an int8 model output keeps less than a tenth of its signal amplitude above the rounding noise
OUTPUT_WARN_SQNR_DB = 20.0


def coarse_int8_outputs(graph: Graph, plan: QuantPlan, stats: dict[str, TensorStats], node_info: dict | None,
                        switches: Switches, has_int16: bool) -> list[dict[str, Any]]:
    """Model outputs whose int8 form drowns their values in rounding noise, with the setting that fixes each.

    The classic case is a classifier ending in Softmax on a march that keeps int8 by default (X5):
    the BPU's Softmax writes probabilities with a fixed step of 1/128, so every probability under
    0.4 % becomes 0 and a flat distribution becomes all zeros. Nothing fails and the report's
    output cosine is the only sign, so the user is told which output and what to write. Outputs the
    user pinned to int8 (``set_model_output_int8``, node_info ``OutputType: int8``) are left alone.
    """
    if switches.model_output_bits == 8:
        return []
    producers = graph.producer_map()
    out = []
    for name in graph.outputs:
        q, st = plan.tensors.get(name), stats.get(name)
        node = producers.get(name)
        if q is None or st is None or q.bits != 8 or node is None or q.is_log2 or q.axis_scales is not None:
            continue   # (a segmented output is judged per channel: output_channels.py)
        if str(((node_info or {}).get(node.name) or {}).get("OutputType", "")).lower() == "int8":
            continue
        db = sqnr_db(st, q.threshold, 127)
        if db >= OUTPUT_WARN_SQNR_DB:
            continue
        if has_int16:
            fix = (f"write calibration_parameters.optimization: set_model_output_int16, or node_info "
                   f"{{'{node.name}': {{OutputType: int16}}}}")
        else:
            fix = f"this march has no int16: run '{node.name}' on the CPU (run_on_cpu) or end the model before it"
        if node.op_type == "Softmax":
            fix += "; or end the model at the logits and apply the Softmax after it"
        out.append({"output": name, "node": node.name, "op_type": node.op_type, "sqnr_db": round(float(db), 1),
                    "step": float(q.scale), "absmax": float(st.absmax), "fix": fix})
    return out


def option_lines(result: CalibrationResult) -> list[str]:
    """One line per enabled option: how many tensors / sites it changed (names in quant_info.json)."""
    lines = []
    o = result.options
    if "prequantized" in o:
        lines += prequantized_lines(o["prequantized"], result.method)
    if "ptf" in o:
        n, k = len(o["ptf"]["applied"]), len(o["ptf"]["skipped"])
        lines.append(f"ptf: {n} LayerNorm input(s) with per-channel power-of-two scales, {k} kept one scale (reasons in quant_info.json)")
    if "softmax_log2" in o:
        n, k = len(o["softmax_log2"]["applied"]), len(o["softmax_log2"]["skipped"])
        lines.append(f"softmax_log2: {n} Softmax output(s) as 4-bit log2 codes, {k} left linear")
    if "smooth_quant" in o:
        n, k = len(o["smooth_quant"]["applied"]), len(o["smooth_quant"]["skipped"])
        lines.append(f"smooth_quant: {n} site(s) smoothed, {k} not (reasons in quant_info.json)")
    if "bias_correction" in o:
        n, k = len(o["bias_correction"]["applied"]), len(o["bias_correction"]["grouped"])
        lines.append(f"bias_correction: {n} layer bias(es) corrected for the mean shift of weight rounding ({k} grouped or "
                     "depthwise; names in quant_info.json); bias_correction: false turns it off")
    if "int4" in o:
        lines.append(f"int4: {len(o['int4']['applied'])} tensor-unit node(s) on the 4-bit path, {len(o['int4']['kept_int8'])} kept int8")
        lines += [f"int4: {n} stays int8: {why}" for n, why in o["int4"]["kept_int8"].items()]
    lines += judgement_lines(o.get("output_channels", {}), {c["output"] for c in o.get("coarse_outputs", [])})
    for c in o.get("coarse_outputs", []):
        lines.append(f"warning: output '{c['output']}' ({c['op_type']}) is int8 with a step of {c['step']:.3g} for values up to "
                     f"{c['absmax']:.3g}: {c['sqnr_db']:.1f} dB signal-to-noise (below {OUTPUT_WARN_SQNR_DB:g} dB"
                     f"{', all of it under one step' if c['absmax'] < c['step'] / 2 else ''}); fix: {c['fix']}")
    return lines


def output_files(cfg: HbConfig) -> dict[str, Path]:
    """``{payload key: path}`` of every file ``hbtool calibrate`` writes into working_dir, in writing order."""
    wd = Path(cfg.model.working_dir)
    prefix = cfg.model.output_model_file_prefix
    return {
        "original_float_model": wd / f"{prefix}_original_float_model.onnx",
        "optimized_float_model": wd / f"{prefix}_optimized_float_model.onnx",
        "calibrated_model": wd / f"{prefix}_calibrated_model.onnx",
        "quantized_model": wd / f"{prefix}_quantized_model.onnx",
        "quant_info": wd / f"{prefix}_quant_info.json",
        "log": wd / "hb_calibrate.log",
    }


def write_outputs(cfg: HbConfig, result: CalibrationResult, report_text: str,
                  staging: AtomicFileSet | None = None) -> dict[str, Path]:
    """Write every calibrate output into working_dir (all or none: a failure keeps the earlier files).

    ``staging``: the :class:`~hbtool.utils.atomic.AtomicFileSet` given to :func:`run_calibration`, which staged the
    models it had serialized (``result.serialized``) into it; the rest is staged here and the set committed."""
    files = output_files(cfg)
    done = result.serialized   # what the evaluation already serialized (the same graphs, the same bytes)
    makers: dict[str, Callable[[], bytes]] = {
        "original_float_model": lambda: done.get("original_float_model") or serialized_onnx(result.original, stage="original_float"),
        "optimized_float_model": lambda: done.get("optimized_float_model") or serialized_onnx(result.graph, stage="optimized_float"),
        "calibrated_model": lambda: done.get("calibrated_model") or serialized_onnx(result.calibrated, stage="calibrated"),
        "quantized_model": lambda: done.get("quantized_model") or to_onnx(result.quantized, stage="quantized").SerializeToString(),
        "quant_info": lambda: (json.dumps(quant_info(result), indent=1) + "\n").encode(),
        "log": lambda: report_text.encode(),
    }
    with contextlib.ExitStack() as stack:
        staged = staging if staging is not None else stack.enter_context(AtomicFileSet())
        for key, path in files.items():
            # staged during the evaluation from result.serialized; a caller that cleared those bytes gets fresh ones
            # (staged later, so renamed later: they are what the file holds)
            if not (key in done and path in staged):
                staged.stage(path, makers[key]())
        if "dump_calibration_data" in cfg.model.debug_mode and result.data is not None:
            for path, data in calibration_dump(Path(cfg.model.working_dir), result.data).items():
                staged.stage(path, data)
            files["calibration_data"] = Path(cfg.model.working_dir) / CALIBRATION_DUMP_DIR
        staged.commit()
    result.files = files
    return files


CALIBRATION_DUMP_DIR = "calibration_data"


def calibration_dump(working_dir: Path, data: CalibrationSet) -> dict[Path, bytes]:
    """``debug_mode: dump_calibration_data``: Horizon's ``calibration_data/<input>/<k>.npy``.

    Sample k of every input, as the model with its preprocessing takes it (the
    ``*_original_float_model.onnx`` input: training colour order and layout, batch axis),
    float32 for image inputs; what Horizon's precision debugger reads as ``calibrated_data``.
    """
    import io

    out: dict[Path, bytes] = {}
    for k in range(data.num_samples):
        for name, arr in data.sample(k).items():
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)
            out[working_dir / CALIBRATION_DUMP_DIR / safe_file_name(name) / f"{k}.npy"] = buf.getvalue()
    return out


def quant_info(result: CalibrationResult) -> dict[str, Any]:
    return {
        "method": result.method,
        "candidates": result.candidates,
        "num_samples": result.num_samples,
        "tensors": {name: tq.to_json() for name, tq in result.plan.tensors.items()},
        "weights": {
            name: {"dtype": "int8", "axis": axis, "scales": [float(s) for s in scales]}
            for name, (scales, axis) in result.weight_scales.items()
        },
        "outputs": result.output_errors,
        "options": result.options,
        "float_fallbacks": [
            {"node": n.name, "op_type": n.op_type, "reason": n.meta["fallback"]}
            for n in (result.program.nodes if result.program is not None else []) if n.meta.get("fallback")
        ],
    }
