"""``--auto``: the cheapest remedies first, each measured, greedily until the target is met.

For the nodes of the sensitivity ranking, in rank order, the remedies the ranking points to:

0. back to int8 (``InputType`` + ``WeightType: int8``) for a node on the 4-bit path
   (``default_precision: int4``): the cheapest step up, its MACs at the int8 rate;
1. int16 activations (``OutputType: int16``, then ``InputType`` + ``OutputType``) where the
   node's activations matter: the tensor unit runs the node at half speed, nothing moves;
2. weight remedies on that node only (``Weight: mse``, ``bias_correction``, ``adaround``) where
   its weights matter: the integer program keeps its shape, so the FPS does not change;
   With a task metric, the weight-only ranking's top nodes (:func:`weight_pool`) join the
   candidates with learned rounding;
   With a task metric, weight remedies on *groups* of the weight-only ranking's top nodes come
   first (:func:`weight_groups`): on a recogniser the loss is spread over many layers' weights,
   so no single layer's fix moves the metric while the top 20 together recover most of it;
   learned rounding of a group is sequential (each layer on the inputs of the already-rounded
   layers before it), and MSE clipping of a group is the cheaper alternative. Greedy over the
   group size (5, 10, 20, all), each judged by the metric; no FPS cost. Only when the weights
   carry the loss: every weight float must recover a quarter of it (``weight_share``), else the
   group phase is skipped (a model whose loss is in its int8 activations gains nothing from it);
2b. with a task metric, int16 on *groups* of outputs (``OutputType: int16``): the 5, 10, 20 and 40
   outputs whose int8 quantization has the lowest expected SQNR (the statistic ``auto_int16``
   promotes by), and every output under its threshold; each priced in FPS, the best within the
   budget kept. A model calibrated with ``auto_int16: false`` loses its accuracy over many
   activations at once, which one node at a time cannot see on a coarse metric. Beside them the budget
   set: the outputs of the most expected gain per FPS price (:mod:`hbtool.debug.price`) that fit the budget;
3. after a pass over every candidate, CPU placement (``ON: CPU``) as the last resort: exact,
   but it splits the BPU program and runs the node in float on the CPU.

The search is bounded: with a ``deadline`` (``hbtool debug --time-limit``, 30 minutes by default)
no try starts whose measured cost would end past it less the measured cost of the ending (the final
calibration and measure, the report: :meth:`_AutoSearch.ending_seconds`); the best found so far is
the result, and the report says where it stopped and what the time was kept for. Each phase is
ordered so that a stop loses least: the groups' remedies from the cheapest to compute (bias
correction, MSE clipping, then learned rounding), the nodes in rank order.

Every try is a real calibration with that ``node_info`` (the statistics reused, so exactly what
plain ``hbtool calibrate`` gives with the fragment), measured on its quantized model: cosine of
each output, the user metric, and for structural remedies the estimated FPS of the compiled
program (the perf cost model). A try is kept when it improves the ranked metric (the worst
output's cosine breaks ties; a task-metric difference within twice its standard error over 8 folds
of the debug samples, :func:`paired_noise`, is a tie) and keeps the FPS loss within the budget; the best of a node's
remedies is kept, the cheapest one that already meets the target wins.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from hbtool.debug.sensitivity import Sensitivity, WeightGain
from hbtool.debug.session import DebugSession, Measured
from hbtool.debug.trials import Failed, Trial, TrialRunner, measure_variant

log = logging.getLogger(__name__)

#: an improvement smaller than this (in the ranked metric) is noise, not a fix
MIN_GAIN = 1e-5
#: a kept remedy must close at least this fraction of the gap to the target (a node changed is a cost)
RELATIVE_GAIN = 0.10

INT8 = ("int8", {"InputType": "int8", "WeightType": "int8"})
INT16_OUT = ("int16_output", {"OutputType": "int16"})
INT16_IO = ("int16_input_output", {"InputType": "int16", "OutputType": "int16"})
WEIGHT_REMEDIES = [(f"weight_{w}", {"Weight": w}) for w in ("mse", "bias_correction", "adaround")]
CPU = ("cpu", {"ON": "CPU"})
#: nodes of the weight-only ranking (see :func:`hbtool.debug.sensitivity.rank_weights`) tried besides the main ranking's
WEIGHT_CANDIDATES = 3
STRUCTURAL = {"int8", "int16_output", "int16_input_output", "cpu"}
#: group sizes of the weight-only ranking's top nodes tried together (``None``: every weighted node)
GROUP_SIZES: tuple[int | None, ...] = (5, 10, 20, None)
#: the smallest group of int16 outputs (the worst int8 SQNR first); each next group doubles it while it is
#: smaller than the candidates (all of them is enable_int16's job), and every output under auto_int16's threshold
#: is tried too. The phase stops at the first
#: group over the FPS budget, so a cheap model (a detector whose int16 maps cost little) can go as far as its
#: budget lets it, and a dear one stops early
INT16_GROUP_SMALLEST = 5
#: the group phase runs only when every weight float recovers at least this share of the loss (the
#: per-node rule of :func:`remedies_for`, for the model as a whole): else no weight group can fix it
GROUP_MIN_WEIGHT_SHARE = 0.25
#: cheapest to compute first: a correction from the cached channel means, a search per layer, then learned rounding
GROUP_REMEDIES = [("group_bias_correction", {"Weight": "bias_correction"}), ("group_mse", {"Weight": "mse"}),
                  ("group_adaround", {"Weight": "adaround"})]


#: the prefix search of :meth:`_AutoSearch._bisect` cuts the interval into this many parts per round (its probes:
#: one fewer); fixed, so the tries of a round, and the result, never depend on the worker count
BISECT_SPLIT = 3
#: rounds of the block-removal step after the prefix search (each round: the subset cut into 2, 3, 4, ... blocks)
PRUNE_ROUNDS = 8
#: tries the block-removal step may spend in all (its rounds grow to one try per node of the subset: on a 40-node
#: group that fails everywhere, 2 + 4 + 8 + 16 + 32 + 40)
PRUNE_TRIES = 16
#: the least FPS price of a candidate node when ordering by expected gain per FPS lost (1 % of the MACs): a remedy
#: that costs no FPS is not infinitely good, and the node's own gain still orders those
PRICE_FLOOR = 0.01
#: the shares of the FPS budget a budget set is filled to (:meth:`_AutoSearch._budget_sets`): the price is a sum of
#: per-node estimates, not the compiled program, so a set filled to a smaller share is tried beside the full one
BUDGET_SHARES = (1.0, 0.8)


#: the share of the quantized nodes whose activations the activation reference (:meth:`_AutoSearch._activation_reference`) leaves
#: float: issue 34's bar on how many nodes a fix may change
ACTIVATION_REFERENCE_SHARE = 0.15

#: a task-metric difference under this many standard errors (over the folds of the debug samples) is a tie
NOISE_Z = 2.0


def paired_noise(a: Measured, b: Measured) -> float:
    """``NOISE_Z`` standard errors of the task-metric difference ``a - b``, from its spread over the folds of
    the debug samples (:meth:`hbtool.debug.metrics_hook.Metric.fold_values`); 0 without fold values.

    Why: on a few dozen images a detector's F1 moves by whole detections. On the PP-OCRv4 seal detector
    (64 debug images) the 80 worst-SQNR outputs at int16 scored F1 0.923 against 0.946 for 40, yet 0.943
    against 0.907 on 256 images neither had seen: the ranked difference was noise, and the larger group
    (cosine 0.983 against 0.972) was the better one. A difference the debug set cannot resolve is a tie."""
    if not a.folds or not b.folds or len(a.folds) != len(b.folds) or len(a.folds) < 2:
        return 0.0
    d = np.asarray(a.folds, dtype=np.float64) - np.asarray(b.folds, dtype=np.float64)
    return float(NOISE_Z * d.std(ddof=1) / np.sqrt(len(d)))


def bias_corrected_everywhere(cfg) -> bool:
    """Bias correction already on for every layer (the default): a per-node ``Weight: bias_correction`` changes nothing."""
    from hbtool.quant.node_weights import bias_correction_everywhere

    return bias_correction_everywhere(cfg.calibration)


@dataclass
class Step:
    remedy: str
    node: str | None
    cosine: float
    outputs: dict[str, float]          # per output cosine
    metric: float
    fps: float | None
    kept: bool
    note: str = ""
    metric_noise: float = 0.0          # paired_noise against the model kept when the step was tried (0: unknown)


@dataclass
class AutoResult:
    steps: list[Step] = field(default_factory=list)
    node_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    final: Measured | None = None
    base_fps: float | None = None
    changed: list[str] = field(default_factory=list)
    quantized_nodes: int = 0
    reached: bool = False
    tries: int = 0
    #: tries calibrated and measured, read or not: with N workers a round runs N tries at a time, and those after the
    #: one that ended the round ran for nothing (the search never reads them: not in ``tries``, nor reported)
    tries_run: int = 0
    stopped: str = ""      # why the search ended before its last try (the time limit), else empty
    #: the widest int16 try (every candidate output at int16): nodes, cosine, metric, fps, within_fps_budget, reaches_target
    bound: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)   # phases skipped, and why
    #: float activations on the ACTIVATION_REFERENCE_SHARE of the nodes of the most activation loss: nodes, cosine, reaches_target
    activation_reference: dict[str, Any] | None = None
    #: wall seconds of the work before the first round, by part (``prices_and_gains``: the batch on the workers), and
    #: of the ending (``final_measure``: the model kept calibrated again where a worker measured it, and measured)
    seconds: dict[str, float] = field(default_factory=dict)
    #: the PTQ model as the search measured it first (its outputs with their worst channels): the report's
    #: ``outputs`` (:func:`hbtool.debug.run.to_json`), not measured again
    ptq: Measured | None = None


def merge(node_info: dict[str, dict[str, Any]], node: str, entry: dict[str, str]) -> dict[str, dict[str, Any]]:
    out = copy.deepcopy(node_info)
    out[node] = {**(out.get(node) or {}), **entry}
    return out


def with_group(node_info: dict[str, dict[str, Any]], names: list[str], entry: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``node_info`` with ``entry`` merged into every node of ``names`` not already on the CPU."""
    info = copy.deepcopy(node_info)
    for n in names:
        if (info.get(n) or {}).get("ON") != "CPU":
            info = merge(info, n, entry)
    return info


def mark_kept(steps: list[Step], remedy: str, node: str | None) -> None:
    """Mark the latest step of ``remedy`` on ``node`` as the kept one."""
    for st in reversed(steps):
        if st.node == node and st.remedy == remedy:
            st.kept = True
            return


def compile_variant(session: DebugSession, result, node_info: dict[str, dict[str, Any]]):
    """The variant compiled in memory from its calibrated model (what ``hbtool compile`` builds from it)."""
    from hbtool.compiler.compile import compile_model
    from hbtool.utils.atomic import atomic_write_bytes

    cfg = session.config_with(node_info)
    with tempfile.TemporaryDirectory(prefix="hbtool_debug_") as tmp:
        path = Path(tmp) / f"{cfg.model.output_model_file_prefix}_calibrated_model.onnx"
        atomic_write_bytes(path, calibrated_bytes(result))
        return compile_model(cfg, calibrated=path)


def calibrated_bytes(result) -> bytes:
    """The calibrated model's file as ``hbtool calibrate`` writes it, serialized once per result (kept in
    ``result.serialized``): the final model's is compiled for its measure and written by ``hbtool debug``'s report,
    both at the end of the command, on one core."""
    from hbtool.ir.onnx_export import to_onnx

    cache = getattr(result, "serialized", None)
    data = cache.get("calibrated_model") if cache is not None else None
    if data is None:
        data = to_onnx(result.calibrated, stage="calibrated").SerializeToString()
        if cache is not None:
            cache["calibrated_model"] = data
    return data


def fps_of(session: DebugSession, compiled, node_info: dict[str, dict[str, Any]]) -> float:
    """The perf model's FPS of a compiled variant."""
    from hbtool.costmodel.schedule import estimate

    return float(estimate(compiled.header, session.config_with(node_info).compiler.core_num, program=compiled.program).fps)


def estimate_fps(session: DebugSession, measured: Measured) -> float:
    """The perf model's FPS of the variant, compiled in memory from its calibrated model."""
    return fps_of(session, compile_variant(session, measured.result, measured.node_info), measured.node_info)


def weight_pool(gains: list[WeightGain], taken: set[str], count: int) -> list[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """The weight ranking's top nodes the main ranking did not pick, with the weight remedy that learns the rounding.

    Their CPU placement (the float weights the ranking measured) follows in the last pass.
    """
    out = []
    for g in gains:
        if len(out) >= count:
            break
        if g.name not in taken and max(g.order) > 0:
            out.append((g.name, [WEIGHT_REMEDIES[-1]]))
    return out


def weight_groups(gains: list[WeightGain], sizes: tuple[int | None, ...] = GROUP_SIZES) -> list[list[str]]:
    """The weight ranking's top-k node names for each k of ``sizes`` (distinct groups only, smallest first)."""
    order = [g.name for g in gains]
    out: list[list[str]] = []
    for k in sizes:
        names = order[:k] if k else order
        if names and names not in out:
            out.append(names)
    return out


def int16_candidates(session: DebugSession, nodes: list[str] | list[Sensitivity]) -> list[tuple[float, str]]:
    """``(expected int8 SQNR in dB, node)`` of every node whose output can go int16, the lowest SQNR first (the
    statistic ``auto_int16`` promotes by, from the calibration statistics). Nodes already int16, or whose output
    has no statistics, are not candidates."""
    from hbtool.quant.thresholds import sqnr_db

    stats = (session.stats_cache or {}).get("stats", {})
    plan = session.base.plan
    scored = []
    for name in (getattr(n, "name", n) for n in nodes):
        node = session.base.graph.node(name)
        if node is None or not node.outputs:
            continue
        tq = plan.tensors.get(node.outputs[0])
        if tq is None or tq.bits != 8 or tq.is_log2:
            continue
        members = plan.groups.get(tq.group, [node.outputs[0]])
        values = [sqnr_db(stats[m], tq.threshold, 127) for m in members if m in stats]
        if values:
            scored.append((min(values), name))
    scored.sort()
    return scored


def int16_gains(session: DebugSession, names: list[str]) -> dict[str, float]:
    """A node's expected gain from int16: the relative noise power of its int8 output, ``10^(-SQNR/10)``, which
    int16 (256 times finer steps) all but removes."""
    sqnr = {name: v for v, name in int16_candidates(session, names)}
    return {n: float(10.0 ** (-sqnr[n] / 10.0)) for n in names if n in sqnr}


def int16_groups(session: DebugSession, nodes: list[str] | list[Sensitivity], sizes: tuple[int, ...] | None = None) -> list[list[str]]:
    """Nodes whose int8 output has the lowest expected SQNR (the statistic ``auto_int16`` promotes by),
    worst first: the top k for each k of ``sizes`` (default: 5, 10, 20, ... doubling, each fewer
    than the candidates), every node under the ``auto_int16`` threshold, and last, where there is another
    group, every candidate (the widest int16 remedy: its try bounds what int16 can do); distinct groups,
    smallest first.
    ``nodes``: the quantized nodes (names, or the ranking's entries). Nodes already int16, or whose output
    has no statistics, are not candidates."""
    from hbtool.quant.plan import INT8_MIN_SQNR_DB

    scored = int16_candidates(session, nodes)
    order = [name for _, name in scored]
    under = sum(1 for v, _ in scored if v < INT8_MIN_SQNR_DB)
    if sizes is None:
        sizes = tuple(INT16_GROUP_SMALLEST * 2 ** i for i in range(64) if INT16_GROUP_SMALLEST * 2 ** i < len(order))
    out: list[list[str]] = []
    for k in sorted({k for k in sizes if k < len(order)} | ({under} if under else set())):
        if order[:k] and order[:k] not in out:
            out.append(order[:k])
    if out and order not in out:     # a model of a few candidates has no groups: its per-node pass is short
        out.append(order)
    return out


def remedies_for(s: Sensitivity, four_bit: set[str] | frozenset[str] = frozenset(),
                 corrected: bool = False) -> list[tuple[str, dict[str, str]]]:
    """The cheap remedies the ranking points to, in cost order (``four_bit``: the nodes on the 4-bit path;
    ``corrected``: bias correction is already on everywhere, so it is not a remedy to try)."""
    w = s.effect("weights") if s.has_weights else (0.0, 0.0)
    a = s.effect("activations")
    col = 0 if max(w[0], a[0]) > 0 else 1   # a coarse task metric may not see one node: then cosine decides
    top = max(w[col], a[col])
    out = [INT8] if s.name in four_bit else []
    if a[col] >= 0.25 * top or not s.has_weights:
        out += [INT16_OUT, INT16_IO]
    if s.has_weights and w[col] >= 0.25 * top:
        out += [r for r in WEIGHT_REMEDIES if not (r[1]["Weight"] == "bias_correction" and corrected)]
    return out


Ranking = list[Sensitivity] | Callable[[], list[Sensitivity]]


class _Lazy:
    """A ranking given as a list, or as the function that computes it: called once, when a phase first needs it.

    Why: on the PP-OCRv5 recogniser the four-way sensitivity ranking of its 222 nodes took 159 s of a
    338 s run, before the first try; the int16 groups rank by ``auto_int16``'s SQNR from the calibration
    statistics and need none of it, and a search that ends there never needs it."""

    def __init__(self, value):
        self._value, self._source = (None, value) if callable(value) else (list(value or []), None)

    def __call__(self) -> list:
        if self._value is None:
            self._value = list(self._source())
        return self._value


def run_auto(session: DebugSession, ranking: Ranking, target_cosine: float, max_fps_loss: float,
             ideal_metric: float, candidates: int | None = None,
             progress: Callable[[str, int, int], None] | None = None,
             weight_ranking: list[WeightGain] | Callable[[], list[WeightGain]] | None = None,
             weight_candidates: int = WEIGHT_CANDIDATES,
             deadline: float | None = None, weight_share: float | None = None,
             workers: int | None = 1, cluster: str | None = None, nodes: list[str] | None = None,
             int16_gains: Callable[[list[str]], dict[str, float]] | None = None,
             runner: TrialRunner | None = None, report_seconds: float = 0.0) -> AutoResult:
    """Greedy remedies (see the module docstring); ``max_fps_loss`` is a fraction (0.1 = 10 %);
    ``deadline``: a :func:`time.monotonic` value the command must end by (no try started that would end past it
    less the ending, :meth:`_AutoSearch.out_of_time`); ``weight_share``:
    the weights' share of the loss (:func:`hbtool.debug.sensitivity.weight_share`): below
    :data:`GROUP_MIN_WEIGHT_SHARE` the group phase (weight remedies only) is skipped.
    ``ranking`` / ``weight_ranking``: the rankings, or functions computing them, called only when a phase
    needs them (:class:`_Lazy`); ``nodes``: the quantized nodes' names (default: the ranking's).
    ``workers`` / ``cluster``: where the tries of a round run (:mod:`hbtool.debug.trials`); the result is
    the same for any of them. ``int16_gains``: each candidate's expected gain from an int16 output, for the
    budget set (:func:`hbtool.debug.sensitivity.activation_losses`; default: the int8 noise, :func:`int16_gains`).
    ``runner``: an open :class:`TrialRunner` to run on (``hbtool debug`` opens one for the whole command, so its
    workers also run the rankings); else one is opened here with ``workers`` / ``cluster`` and ``deadline``.
    ``report_seconds``: what the caller still runs after the search (its report), kept free before the deadline with
    the search's own ending (:meth:`_AutoSearch.ending_seconds`): the deadline is the command's, not the search's."""
    rankings, weights = _Lazy(ranking), _Lazy(weight_ranking)
    names = list(nodes) if nodes is not None else [s.name for s in rankings()]
    with contextlib.nullcontext(runner) if runner is not None else TrialRunner(session, workers, cluster, deadline) as runner:
        search = _AutoSearch(session, runner, target_cosine, max_fps_loss, ideal_metric, progress, deadline, len(names))
        search.gains = int16_gains
        search.report_seconds = report_seconds
        runner.ending = search.ending_seconds     # the runner starts no slice of tries that would eat into the ending
        search.int8_back_phase(rankings, candidates)
        search.weight_groups_phase(weights, weight_share)
        search.int16_groups_phase(names)
        search.nodes_phase(rankings, weights, candidates, weight_candidates)
        try:
            return search.result()
        finally:
            runner.ending = None
            if hasattr(runner, "search_ended"):
                runner.search_ended()


@dataclass
class _Try:
    """A try of a round as the search reads it back: what it was, and its measurement (``None``: not applicable)."""

    remedy: str
    label: str | None
    trial: Trial
    names: list[str]
    measured: Measured | None = None
    step: int | None = None     # the index of its step in the result (:meth:`_AutoSearch._record`)


class _AutoSearch:
    """The state the phases of :func:`run_auto` share: the model kept so far (``cur``), the budget, the result."""

    def __init__(self, session: DebugSession, runner: TrialRunner, target_cosine: float, max_fps_loss: float,
                 ideal_metric: float, progress: Callable[[str, int, int], None] | None, deadline: float | None,
                 quantized_nodes: int):
        self.started = time.monotonic()
        self.report_seconds = 0.0    # the report's share of the ending (:meth:`ending_seconds`), set by run_auto
        self.session, self.runner, self.target_cosine, self.ideal_metric = session, runner, target_cosine, ideal_metric
        self.progress, self.deadline = progress, deadline
        base_info = copy.deepcopy(session.cfg.model.node_info or {})
        self.cur = measure_variant(session, session.base, base_info, priced=True, channels=True)
        self.ptq = self.cur
        self.res = AutoResult(base_fps=self.cur.fps, quantized_nodes=quantized_nodes, ptq=self.cur)
        self.runs_before = getattr(runner, "tries_run", 0)     # the runner may be shared (``hbtool debug`` opens one per command)
        self.res.seconds["base_measure"] = time.monotonic() - self.started
        # the least a try costs (a calibration and this measure): the runner's price of a try before any is measured
        runner.measure_seconds = max(getattr(runner, "measure_seconds", 0.0), self.res.seconds["base_measure"])
        self.res.steps.append(Step("ptq", None, self.cur.cosine, _cosines(self.cur), self.cur.metric, self.cur.fps, True))
        self.hook = session.metric.is_hook
        self.floor_fps = self.cur.fps * (1.0 - max_fps_loss)
        self.corrected = bias_corrected_everywhere(session.cfg)
        self.unreachable = False     # the widest int16 try missed the target (:meth:`_bound_verdict`)
        self.prices = None           # the int16 prices of the candidates (:meth:`_budget_sets`), once computed
        self.gains: Callable[[list[str]], dict[str, float]] | None = None   # expected gains for the budget set
        self.bisected: list[_Try] = []   # the bisection's tries (subsets of a budget set or a group), as measured
        self.recorded: list[_Try] = []   # every try with a step, in the order measured (:meth:`_keep_the_best_measured`)

    # ------------------------------------------------------------------ judging a try
    def done(self, m: Measured) -> bool:
        return m.cosine >= self.target_cosine and (not self.hook or m.metric >= self.ideal_metric - 1e-12)

    def ending_seconds(self) -> float:
        """What the command still runs after the search's last try, from costs measured in this run: the model kept
        calibrated again here where a worker measured it (the longest calibration of a try; none where the kept
        model's calibration is here), measured with its outputs' channels (as the PTQ model was when the search
        began: ``base_measure``), and the report (:data:`REPORT_SECONDS`, given by ``hbtool debug``)."""
        calibrate = self.runner.calibrate_seconds if getattr(self.runner, "parallel", False) else 0.0
        return calibrate + self.res.seconds.get("base_measure", 0.0) + self.report_seconds

    def out_of_time(self) -> bool:
        """No try started whose measured cost (:meth:`TrialRunner.slice_seconds`) would end past the deadline less the
        ending (:meth:`ending_seconds`); the first time, say where the search stopped and what the time was kept for."""
        if self.deadline is None:
            return False
        left = self.deadline - time.monotonic()
        slice_, ending = self.runner.slice_seconds(), self.ending_seconds()
        if left > slice_ + ending:
            return False
        if not self.res.stopped:
            self.res.stopped = (f"time limit reached after {self.res.tries} tries: {max(left, 0.0):.0f} s were left, "
                                f"a try takes {slice_:.0f} s and the ending {ending:.0f} s (the kept model's final "
                                "calibration and measure, the report); the best found so far is kept")
            log.warning("debug --auto: %s", self.res.stopped)
        return True

    def better(self, a: Measured, b: Measured) -> bool:
        """``a`` improves on ``b`` by a step worth a node: 10 % of what is left to gain, at least MIN_GAIN.

        With a task metric, a difference within its noise on the debug samples (:func:`paired_noise`)
        is a tie, and a tie goes to the worst output's cosine, as a difference under MIN_GAIN does;
        a noisy tie needs a cosine gain of 10 % of what is left to 1, also past the target: a metric
        possibly given up is not traded for a cosine gain in the fifth decimal."""
        cosine_gain = a.cosine > b.cosine + max(MIN_GAIN, RELATIVE_GAIN * (self.target_cosine - b.cosine))
        if self.hook:
            need = max(MIN_GAIN, RELATIVE_GAIN * (self.ideal_metric - b.metric))
            noise = paired_noise(a, b)
            if a.metric > b.metric + max(need, noise):
                return True
            if abs(a.metric - b.metric) <= MIN_GAIN:
                return cosine_gain
            return abs(a.metric - b.metric) <= noise and a.cosine > b.cosine + max(MIN_GAIN, RELATIVE_GAIN * (1.0 - b.cosine))
        return cosine_gain

    def beats(self, a: Measured, b: Measured) -> bool:
        """``a`` is to be kept rather than ``b`` (both measured, both within the FPS budget): :meth:`better` without
        a task metric (a cosine gain of 10 % of the gap to the target: a node changed is a cost); with one, a higher
        task metric (by more than :data:`MIN_GAIN`) unless :meth:`better` prefers ``b`` anyway (a difference within
        the noise, and ``b``'s worst output cosine 10 % of what is left to 1 higher: issue 11's seal detector).

        Why not :meth:`better` with a task metric: its noise tie lets a model that loses the metric stand in for one
        that has it when their cosines are close. On the all-int8 PP-OCRv5 recogniser (issue 34) the bisection of
        a 100-output budget set at transcription agreement 0.969 kept a 70-output prefix at 0.875 (3 of 32 lines
        fewer, within the fold noise of 8 folds of 4 lines, cosine 0.974 both): fewer nodes, which the user did
        not ask for, bought with the metric the user did rank by."""
        if not self.hook:
            return self.better(a, b)
        return a.metric > b.metric + MIN_GAIN and not self.better(b, a)

    def in_budget(self, m: Measured) -> bool:
        return m.fps is None or m.fps >= self.floor_fps

    def as_good(self, m: Measured, best: Measured) -> bool:
        """``m`` (a subset of ``best``'s remedy) does what ``best`` does: reaches the target where ``best`` does,
        else ``best`` is neither a step worth a node better than ``m`` (:meth:`better`) nor to be kept rather than
        it (:meth:`beats`: with a task metric, a subset that loses the metric is not as good, noise or not); within
        the FPS budget, and better than the model kept."""
        if not self.in_budget(m):
            return False
        if self.done(best):
            return self.done(m)
        return self.better(m, self.cur) and not self.better(best, m) and not self.beats(best, m)

    def _tick(self, phase: str, k: int, total: int) -> None:
        if self.progress:
            self.progress(phase, k, total)

    def _tries(self, tries: list[_Try], phase: str) -> Iterator[_Try]:
        """The round's tries with their measurements, in order (run by the :class:`TrialRunner`); a try that
        cannot be built is reported as not applicable and not yielded. Ends early at the deadline."""
        results = self.runner.run([t.trial for t in tries])
        for k, (t, m) in enumerate(zip(tries, results)):
            self.res.tries += 1
            self._tick(phase, k + 1, len(tries))
            if isinstance(m, Failed):
                self.res.steps.append(Step(t.remedy, t.label, float("nan"), {}, float("nan"), None, False, f"not applicable: {m.error}"))
                continue
            if m.fps is None:
                m.fps = self.cur.fps      # a remedy that keeps the program's shape keeps its FPS
            t.measured = m
            yield t
        self.out_of_time()

    def _record(self, t: _Try, note: str = "") -> bool:
        """The try's step; True when it is within the FPS budget."""
        m = t.measured
        ok = self.in_budget(m)
        if not ok:
            note = f"over the FPS budget ({m.fps:.1f} < {self.floor_fps:.1f})" + (f": {note}" if note else "")
        t.step = len(self.res.steps)
        self.recorded.append(t)
        self.res.steps.append(Step(t.remedy, t.label, m.cosine, _cosines(m), m.metric, m.fps, False, note, paired_noise(m, self.cur)))
        log.info("auto: %s on %s: worst cosine %.5f, metric %.5g, FPS %s %s", t.remedy, t.label, m.cosine, m.metric, m.fps, note)
        return ok

    def _keep(self, remedy: str, label: str, m: Measured, nodes: list[str]) -> None:
        mark_kept(self.res.steps, remedy, label)
        self.cur = m
        self.res.changed += [n for n in nodes if n not in self.res.changed]

    # ------------------------------------------------------------------ the phases (module docstring)
    def weight_groups_phase(self, weight_ranking: _Lazy, weight_share: float | None) -> None:
        """2.: the best (remedy, k) over all weight-group tries, if it is a fix; no FPS cost."""
        res = self.res
        if not self.hook:
            return
        if weight_share is not None and weight_share < GROUP_MIN_WEIGHT_SHARE:
            self._note(f"group weight remedies skipped: every weight float recovers {weight_share:.0%} of the loss "
                       f"(under {GROUP_MIN_WEIGHT_SHARE:.0%}), so the loss is in the activations")
            return
        if self.done(self.cur) or self.out_of_time():
            return
        groups = weight_groups(weight_ranking())
        if not groups:
            return
        group_remedies = [r for r in GROUP_REMEDIES if not (self.corrected and r[1]["Weight"] == "bias_correction")]
        best: _Try | None = None
        for name, entry in group_remedies:
            if self.out_of_time():
                break
            tries = [_Try(name, f"top {len(names)} of the weight ranking", Trial(with_group(self.cur.node_info, names, entry)), names)
                     for names in groups]
            for t in self._tries(tries, "auto groups"):
                self._record(t, ", ".join(t.names))
                if self.better(t.measured, self.cur) and (best is None or self.better(t.measured, best.measured)):
                    best = t
                if best is not None and self.done(best.measured):
                    break
            if (best is not None and self.done(best.measured)) or res.stopped:
                break
        if best is not None:
            self._keep(best.remedy, best.label, best.measured, best.names)

    def int16_groups_phase(self, nodes: list[str]) -> None:
        """2b.: int16 on sets of outputs, priced in FPS, the best within the budget kept; then the fewest of its
        nodes that do what it does (:meth:`_bisect`).

        One wide round, all submitted together (``--workers`` run them side by side): the widest group (every
        candidate output at int16) first, then the budget sets (:meth:`_budget_sets`: the most expected gain
        per FPS price that fits the budget, and the same at :data:`BUDGET_SHARES` of it), then the groups of
        the worst-SQNR outputs smallest first. The widest try is the bound: if even it misses the target, no
        int16 set can reach it, and the report says so with its numbers. The round is read in that order with
        the rule of one-at-a-time: a set that reaches the target ends the phase, a group over the FPS budget
        ends it (larger ones cost more), the best within the budget is kept; the widest counts as the last group."""
        if self.done(self.cur) or self.out_of_time():
            return
        groups = int16_groups(self.session, nodes)
        if not groups:
            return

        def group_try(names: list[str], label: str, remedy: str = "group_int16_output") -> _Try:
            return _Try(remedy, label, Trial(with_group(self.cur.node_info, names, INT16_OUT[1]), priced=True), names)

        widest = group_try(groups[-1], f"{len(groups[-1])} outputs of the lowest int8 SQNR (every candidate: the int16 bound)")
        budget = [group_try(names, f"{len(names)} outputs of the most expected gain per FPS price ({share:.0%} of the budget)",
                            "budget_int16_output") for share, names in self._budget_sets(groups[-1])]
        tries = [widest] + budget + [group_try(names, f"{len(names)} outputs of the lowest int8 SQNR") for names in groups[:-1]]
        best: _Try | None = None
        seen: list[_Try] = []
        ended = False       # a set reached the target or a group went over the budget: the larger ones are not read
        bound: _Try | None = None
        for t in self._tries(tries, "auto int16 groups"):
            if t is widest:     # its step goes after the groups' (the steps in size order), its verdict now
                bound = t
                self._bound_verdict(t, t.measured.fps is None or t.measured.fps >= self.floor_fps)
                continue
            ok = self._record(t, ", ".join(t.names))
            seen.append(t)
            if ok and self.better(t.measured, self.cur) and (best is None or self.better(t.measured, best.measured)):
                best = t
            if (best is not None and self.done(best.measured)) or (not ok and t.remedy == "group_int16_output"):
                ended = True
                break
        if bound is not None:
            self._record(bound, ", ".join(bound.names))
        if not ended and bound is not None and not self.res.stopped:
            ok = bound.measured.fps is None or bound.measured.fps >= self.floor_fps
            if ok and self.better(bound.measured, self.cur) and (best is None or self.better(bound.measured, best.measured)):
                best = bound
            seen.append(bound)
        if (best is None or not self.done(best.measured)) and not self.res.stopped and self._cut_into_budget(seen):
            return
        for t in self.bisected:     # a part of a budget set over the budget may be the best within it
            if (t.measured.fps is None or t.measured.fps >= self.floor_fps) and self.better(t.measured, self.cur) \
                    and (best is None or self.better(t.measured, best.measured)):
                best = t
        in_budget = [t for t in seen + self.bisected if t.remedy in ("budget_int16_output", "bisect_int16_output")
                     and (t.measured.fps is None or t.measured.fps >= self.floor_fps)]
        if bound is not None and self.done(bound.measured) and (best is None or not self.done(best.measured)) and not self.res.stopped:
            top = max(in_budget, key=lambda t: t.measured.cosine, default=None)
            self._note(f"the target needs more than the FPS budget: every candidate output at int16 reaches it "
                       f"({self._numbers(bound.measured)}), no set within the budget that hbtool tried does"
                       + (f" (the best: {len(best.names)} outputs, {self._numbers(best.measured)})" if best is not None else "")
                       + (f"; the best within the budget of the sets by expected gain per FPS price and their parts "
                          f"({len(top.names)} outputs) reaches "
                          f"{self._numbers(top.measured)} (a measured set, not a proof that no other set reaches the target)"
                          if top is not None else ""))
        if best is None:
            return
        self._bisect_and_keep(best, seen)

    def _bisect_and_keep(self, best: _Try, seen: list[_Try]) -> tuple[list[str], Measured, str | None]:
        """``best`` cut down to the fewest outputs that do what it does (:meth:`_bisect`), starting above the longest
        prefix of it already seen to fall short, and kept where that is within the FPS budget; returns the bisection's."""
        misses = [len(t.names) for t in seen
                  if len(t.names) < len(best.names) and t.names == best.names[:len(t.names)] and not self.as_good(t.measured, best.measured)]
        names, m, label = self._bisect(best.names, best.measured, max(misses, default=0))
        if m.fps is None or m.fps >= self.floor_fps:
            self._keep(best.remedy if label is None else "bisect_int16_output", label or best.label, m, names)
        return names, m, label

    def _cut_into_budget(self, seen: list[_Try]) -> bool:
        """A budget set that reaches the target only over the FPS budget (its price is a sum of estimates: on the
        PP-OCRv5 recogniser the compiled set of 146 outputs came out 1 % under the floor the sum promised) is cut
        down, by the bisection, to the fewest of its outputs, best value first, that still reach the target within
        the budget. True where that was found and kept."""
        over = [t for t in seen if t.remedy == "budget_int16_output" and self.done(t.measured)
                and t.measured.fps is not None and t.measured.fps < self.floor_fps]
        if not over:
            return False
        reach = min(over, key=lambda t: len(t.names))
        names, m, label = self._bisect_and_keep(reach, seen)
        if label is None or not self.done(m) or (m.fps is not None and m.fps < self.floor_fps):
            self._note(f"no part of the budget set of {len(reach.names)} outputs that reaches the target "
                       f"({self._numbers(reach.measured)}) reaches it within the FPS budget")
            return False
        return True

    def _budget_sets(self, order: list[str]) -> list[tuple[float, list[str]]]:
        """``(share, names)``: the outputs of ``order`` with the most expected gain (``self.gains``: each activation's loss
        alone, else the int8 noise their int16 removes, :func:`int16_gains`) per FPS price (:mod:`hbtool.debug.price`, from the cost model) whose summed price fits
        each share of :data:`BUDGET_SHARES` of the FPS budget; distinct sets, none that is a group already.
        Empty where the programs cannot be priced (said in the notes)."""
        from hbtool.debug.price import budget_set

        try:
            t0 = time.monotonic()
            prices, gains = self._prices_and_gains(order)
        except Exception as exc:   # pricing is an aid: without it the groups still run
            self._note(f"no budget set: the int16 prices could not be computed ({type(exc).__name__}: {str(exc)[:120]})")
            return []
        self.prices = prices
        self.res.seconds["prices_and_gains"] = time.monotonic() - t0
        log.info("auto: int16 prices and gains of %d outputs in %.1f s (FPS %.0f -> %.0f with all)", len(order),
                 time.monotonic() - t0, prices.fps([]), prices.fps(order))
        out: list[tuple[float, list[str]]] = []
        for share in BUDGET_SHARES:
            names = budget_set(order, gains, prices, self.floor_fps, share)
            if names and len(names) < len(order) and all(set(names) != set(n) for _, n in out):
                out.append((share, names))
        return out

    def _prices_and_gains(self, order: list[str]):
        """The int16 prices of ``order`` (two costed programs) and each output's expected gain, computed as one
        batch of independent tasks on the runner's workers: the two pricing programs first (the longest), then
        the gains pass in chunks (:class:`hbtool.debug.sensitivity.ActivationGains`), in that fixed order, so the
        numbers, and the search's decisions, are the same for any worker count. A gains function that cannot be
        cut into tasks (a plain callable) runs here after the prices."""
        from hbtool.debug.price import pricing_programs, prices_from

        jobs = pricing_programs(self.cur.node_info, order)
        gains_src = self.gains or functools.partial(int16_gains, self.session)
        chunks = gains_src.jobs(order) if hasattr(gains_src, "jobs") else []
        results = []
        for k, r in enumerate(self.runner.jobs(jobs + chunks)):
            results.append(r)
            if k >= len(jobs):
                self._tick("int16 gains", k + 1 - len(jobs), len(chunks))
        prices = prices_from(results[:len(jobs)], order)
        if not chunks:
            return prices, gains_src(order)
        gains: dict[str, float] = {}
        for r in results[len(jobs):]:
            gains.update(r)
        self._activation_reference(gains)
        return prices, gains

    def _activation_reference(self, gains: dict[str, float]) -> None:
        """The activations of the :data:`ACTIVATION_REFERENCE_SHARE` of the quantized nodes with the most gain left float in
        the switchable model (one evaluation on the debug samples, :class:`hbtool.debug.sensitivity.FloatActivationsJob`):
        what removing those nodes' activation error altogether gives. Said in the notes as a reference, not a bound:
        on the all-int8 PP-OCRv5 recogniser the KL thresholds on the same 33 nodes gave cosine 0.929 where float
        activations gave 0.922 (a coarser step there cancels part of the other nodes' error), and another set of
        33 nodes is not covered (docs/debug.md, issue 34)."""
        from hbtool.debug.sensitivity import FloatActivationsJob

        count = int(ACTIVATION_REFERENCE_SHARE * self.res.quantized_nodes)
        top = [n for n in sorted(gains, key=lambda n: (-gains[n], n)) if gains[n] > 0][:count]
        if not top or self.out_of_time():
            return
        try:
            t0 = time.monotonic()
            cosine = float(next(iter(self.runner.jobs([FloatActivationsJob(tuple(top))]))))
        except Exception as exc:   # an aid to the verdict, not a step of the search
            self._note(f"no activation reference: {type(exc).__name__}: {str(exc)[:120]}")
            return
        self.res.seconds["activation_reference"] = time.monotonic() - t0
        reaches = cosine >= self.target_cosine
        self.res.activation_reference = {"nodes": len(top), "share": ACTIVATION_REFERENCE_SHARE, "cosine": cosine,
                                         "reaches_target": reaches, "names": top}
        self._note(f"activation reference: float activations on the {len(top)} nodes of the most activation loss "
                   f"({len(top)} of {self.res.quantized_nodes}, {ACTIVATION_REFERENCE_SHARE:.0%}) give worst output cosine {cosine:.4f} "
                   f"in the fake-quant model, everything else int8"
                   + (f": removing those nodes' activation error does not reach {self.target_cosine:g}"
                      if not reaches else f": removing those nodes' activation error reaches {self.target_cosine:g}")
                   + " (a reference, not a proof: a remedy can beat float activations on a node (a coarser threshold "
                     "can cancel other nodes' error), and other sets of that size are not covered)")

    def _numbers(self, m: Measured) -> str:
        """A try's numbers as the notes say them: worst output cosine (and metric), FPS against the PTQ model's."""
        text = f"worst output cosine {m.cosine:.4f}"
        if self.hook:
            text += f", metric {m.metric:.4g}"
        if m.fps is not None and self.res.base_fps:
            text += f", {m.fps:.0f} FPS ({100.0 * (m.fps / self.res.base_fps - 1.0):+.1f} %)"
        return text

    def _note(self, text: str) -> None:
        self.res.notes.append(text)
        log.info("auto: %s", text)

    def _bound_verdict(self, t: _Try, ok: bool) -> None:
        """What the widest int16 try says about the target: out of reach of int16 when even it misses."""
        m = t.measured
        self.res.bound = {"nodes": len(t.names), "cosine": m.cosine, "metric": m.metric, "fps": m.fps,
                          "within_fps_budget": ok, "reaches_target": self.done(m),
                          # when the verdict was read (wall time varies from run to run; the decisions do not)
                          "after_tries": self.res.tries, "after_seconds": time.monotonic() - self.started}
        if self.done(m):
            return
        self.unreachable = True
        want = f"< {self.target_cosine:g}" if m.cosine < self.target_cosine else f"reaches {self.target_cosine:g}"
        metric = f"; metric {m.metric:.4g} < float's {self.ideal_metric:.4g}" if self.hook and m.metric < self.ideal_metric - 1e-12 else ""
        self._note(f"unreachable with int16: every candidate output at int16 ({len(t.names)} of the {self.res.quantized_nodes} "
                   f"quantized nodes) gives worst output cosine {m.cosine:.4f} {want}{metric}"
                   + (f", FPS {100.0 * (m.fps / self.res.base_fps - 1.0):+.1f} %" if m.fps is not None and self.res.base_fps else "")
                   + " (a measured bound of hbtool's int16 remedy, weights int8; not a proof for every remedy)")

    def _bisect(self, names: list[str], best: Measured, lo: int) -> tuple[list[str], Measured, str | None]:
        """The fewest of ``names`` (worst SQNR first) whose int16 does what all of them do (:meth:`as_good`).

        Two steps, each a few rounds of real tries: the shortest prefix (a search that thirds the interval
        ``(lo, len(names)]`` per round: ``lo`` is a prefix known to fall short), then, on that prefix, whole
        blocks left out (delta debugging: halves, quarters, ... of it; the first block whose removal still
        does it goes). The probes of a round never depend on the worker count, so neither does the result.
        Returns the subset, its measurement and its try's label (``None``: the whole of ``names``)."""
        hi, keep, label = len(names), best, None
        remedy = "bisect_int16_output"
        while hi - lo > 1 and not self.out_of_time():
            probes = sorted({lo + (hi - lo) * j // BISECT_SPLIT for j in range(1, BISECT_SPLIT)} - {lo, hi})
            tries = [_Try(remedy, f"{k} of the {len(names)} outputs, in order (a prefix)",
                          Trial(with_group(self.cur.node_info, names[:k], INT16_OUT[1]), priced=True), names[:k]) for k in probes]
            found = False
            for t in self._tries(tries, "auto bisect"):
                self._record(t, ", ".join(t.names))
                self.bisected.append(t)
                if self.as_good(t.measured, best):
                    hi, keep, label, found = len(t.names), t.measured, t.label, True
                    break
            if not found:
                if self.res.stopped:
                    break
                lo = probes[-1]      # every probe fell short (or could not be built)
            else:
                lo = max([k for k in probes if k < hi], default=lo)
        subset = names[:hi]
        blocks, rounds, spent = 2, 0, 0
        while (len(subset) > 1 and blocks <= len(subset) and rounds < PRUNE_ROUNDS and spent + blocks <= PRUNE_TRIES
               and not self.out_of_time()):
            rounds += 1
            spent += blocks
            bounds = [len(subset) * j // blocks for j in range(blocks + 1)]
            tries = []
            for j in range(blocks):
                rest = subset[:bounds[j]] + subset[bounds[j + 1]:]
                tries.append(_Try(remedy, f"{len(rest)} of the {len(names)} outputs",
                                  Trial(with_group(self.cur.node_info, rest, INT16_OUT[1]), priced=True), rest))
            found = False
            for t in self._tries(tries, "auto bisect"):
                self._record(t, ", ".join(t.names))
                self.bisected.append(t)
                if self.as_good(t.measured, best):
                    subset, keep, label, found = t.names, t.measured, t.label, True
                    break
            if found:
                blocks = max(blocks - 1, 2)
            elif blocks >= len(subset):
                break
            else:
                blocks = min(2 * blocks, len(subset))
        return subset, keep, label

    def int8_back_phase(self, rankings: _Lazy, candidates: int | None) -> None:
        """0.: on a model with a 4-bit path, its ranked 4-bit nodes back to int8 first, one by one: the cheapest step
        up (the node keeps the int8 rate and its place), before any int16 group is priced."""
        four_bit = set(((self.session.base.options or {}).get("int4") or {}).get("applied") or {})
        if not four_bit or self.done(self.cur) or self.out_of_time():
            return
        ranking = rankings()
        top = [s for s in ranking if max(s.order) > 0 and s.name in four_bit][: candidates or max(5, len(ranking) // 4)]
        for s in gain_per_fps_order(self.session, top, four_bit, self.corrected):
            if self.done(self.cur) or self.out_of_time():
                return
            self._try_node(s.name, [INT8])

    def nodes_phase(self, rankings: _Lazy, weight_rankings: _Lazy, candidates: int | None,
                    weight_candidates: int) -> None:
        """0.-3.: node by node, the cheap remedies over every candidate first, then CPU placement; the candidates
        (the top of the ranking) in the order of their expected gain per FPS lost (:func:`gain_per_fps_order`).

        Skipped, without a task metric, where the widest int16 try missed the target: no node's int16 can then
        reach it, and the pass (the ranking first, then single nodes) would spend the time limit on steps
        worth a node each; with a task metric, single nodes' weight remedies still move it."""
        if self.done(self.cur) or self.out_of_time():
            return
        if self.unreachable and not self.hook:
            self._note("per-node pass skipped: the target is out of reach of int16 (above), so of every single node's "
                       "int16; single-node weight remedies and CPU placement were not tried")
            return
        ranking, weight_ranking = rankings(), weight_rankings()
        four_bit = set(((self.session.base.options or {}).get("int4") or {}).get("applied") or {})
        top = [s for s in ranking if max(s.order) > 0][: candidates or max(5, len(ranking) // 4)]
        order = gain_per_fps_order(self.session, top, four_bit, self.corrected, self.prices, self.floor_fps)
        pool = [(s.name, remedies_for(s, four_bit, self.corrected)) for s in order]
        pool += weight_pool(weight_ranking, {name for name, _ in pool}, weight_candidates)
        total, tick = len(pool) * 2, 0
        for phase in ("cheap", "cpu"):
            for node, cheap in pool:
                tick += 1
                self._tick("auto", tick, total)
                if self.done(self.cur) or self.out_of_time():
                    break
                if phase == "cpu" and (self.cur.node_info.get(node) or {}).get("ON") == "CPU":
                    continue
                if phase == "cheap" and node in self.res.changed:
                    continue
                self._try_node(node, cheap if phase == "cheap" else [CPU])
            if self.done(self.cur) or self.res.stopped:
                break

    def _try_node(self, node: str, remedies: list[tuple[str, dict[str, str]]]) -> None:
        """Each remedy on one node (one round); the best that improves within the FPS budget is kept."""
        tries = [_Try(name, node, Trial(merge(self.cur.node_info, node, entry), priced=name in STRUCTURAL), [node])
                 for name, entry in remedies]
        best: _Try | None = None
        for t in self._tries(tries, "auto node"):
            ok = self._record(t)
            if ok and self.better(t.measured, self.cur) and (best is None or self.better(t.measured, best.measured)):
                best = t
            if best is not None and self.done(best.measured):
                break
        if best is not None:
            self._keep(best.remedy, node, best.measured, [node])

    def _keep_the_best_measured(self) -> None:
        """The model kept is never one that a try measured within the FPS budget beats (:meth:`beats`): where the
        phases (a bisection cut by the time limit, a later phase's rule) left ``cur`` below the best in-budget try
        of the whole search, that try is kept instead, and the notes say so. No new try: every candidate was
        measured on the same samples. A model that reaches the target is not replaced (the fewest nodes that do
        it are the point of the bisection)."""
        if self.done(self.cur):
            return
        pool = [t for t in self.recorded if t.measured is not None and self.in_budget(t.measured)]
        top = max(pool, key=lambda t: (t.measured.metric, t.measured.cosine), default=None)
        if top is None or top.measured is self.cur or not self.beats(top.measured, self.cur):
            return
        before = self.cur
        self.res.steps[top.step].kept = True
        self.cur = top.measured
        base = self.session.cfg.model.node_info or {}
        changed = [n for n, e in top.measured.node_info.items() if (e or {}) != (base.get(n) or {})]
        self.res.changed = [n for n in self.res.changed if n in changed] + [n for n in changed if n not in self.res.changed]
        self._note(f"kept the best try measured within the FPS budget, {top.remedy} on {top.label} "
                   f"({self._numbers(top.measured)}), instead of the model the phases ended on ({self._numbers(before)})")

    def result(self) -> AutoResult:
        """The model kept (:meth:`_keep_the_best_measured`), calibrated here where a worker measured it, and measured
        with its outputs' worst channels."""
        self._keep_the_best_measured()
        self.res.tries_run = getattr(self.runner, "tries_run", 0) - self.runs_before
        t0 = time.monotonic()
        final = self.runner.materialize(self.cur)
        if final is self.ptq:
            full = self.ptq          # nothing kept: the PTQ model as measured when the search began (with its channels)
        else:
            full = measure_variant(self.session, final.result, final.node_info, priced=False, channels=True)
            full.fps = final.fps
        self.res.seconds["final_measure"] = time.monotonic() - t0
        self.res.node_info = full.node_info
        self.res.final = full
        self.res.reached = self.done(full)
        return self.res


def gain_per_fps_order(session: DebugSession, top: list[Sensitivity], four_bit: set[str], corrected: bool,
                       prices=None, floor_fps: float | None = None) -> list[Sensitivity]:
    """``top`` by expected gain per FPS lost: the node's effect in the ranking (the task metric's, else cosine's)
    over the price of its structural remedies (int16, int8 from int4): its int16 output's share of the FPS
    budget where the cost model priced it (``prices``, :class:`hbtool.debug.price.Int16Prices`, with the
    budget's ``floor_fps``), else the share of the model's multiply-accumulates it slows down; at least
    :data:`PRICE_FLOOR`; a node with weight remedies only costs no FPS (the floor). Ties keep the rank order."""
    from hbtool.ir.macs import node_macs

    if not top:
        return []
    graph = session.base.graph
    macs = {n.name: float(node_macs(n, graph)) for n in graph.nodes}
    total = max(sum(macs.values()), 1.0)
    col = 0 if any(s.order[0] > 0 for s in top) else 1

    def key(s: Sensitivity) -> float:
        structural = any(name in STRUCTURAL for name, _ in remedies_for(s, four_bit, corrected))
        if not structural:
            price = 0.0
        elif prices is not None and floor_fps is not None and s.name in prices.cycles and s.name not in four_bit:
            price = prices.relative(s.name, floor_fps)
        else:
            price = macs.get(s.name, 0.0) / total
        return -s.order[col] / max(price, PRICE_FLOOR)

    return sorted(top, key=key)


def _cosines(m: Measured) -> dict[str, float]:
    """Each output's cosine, as a step records it."""
    return {o: v["cosine"] for o, v in m.outputs.items()}
