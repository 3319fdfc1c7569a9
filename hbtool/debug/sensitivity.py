"""Accuracy error: how much each node's quantization moves the model outputs.

Four masked evaluations per node, weights and activations apart (a node's activations are the
tensors it writes; its weights the constants it reads):

* quantize only this node's weights / activations (everything else float): the loss it causes alone;
* de-quantize only this node's weights / activations (everything else quantized): the gain of fixing it.

The ranking follows the configured metric (the user's task metric when there is a hook, else
the worst output's cosine); ``sensitivity`` is the largest of the four effects, so a node that
matters only in combination with the others (de-quantize gain) ranks as high as one that
hurts alone. Cost: ``4 x nodes`` evaluations on ``samples`` samples, one session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from hbtool.debug.masked import MaskedModel
from hbtool.debug.metrics import per_output, score, worst
from hbtool.debug.metrics_hook import Metric


@dataclass
class Sensitivity:
    name: str
    op_type: str
    has_weights: bool
    quant_only: dict[str, float]     # "weights"/"activations" -> loss of the metric vs float (>= 0 worse)
    dequant_only: dict[str, float]   # "weights"/"activations" -> gain of the metric vs fully quantized
    cosine_quant_only: dict[str, float]
    cosine_dequant_only: dict[str, float]
    #: "weights"/"activations" -> the same effects in worst-output cosine (breaks ties of a coarse task metric)
    cosine_effect: dict[str, float] = field(default_factory=dict)
    #: False for a node left out by the evaluation budget of a large model (its effects unknown, ranked last)
    evaluated: bool = True

    @property
    def sensitivity(self) -> float:
        return max(list(self.quant_only.values()) + list(self.dequant_only.values()) + [0.0])

    def effect(self, kind: str) -> tuple[float, float]:
        """(metric effect, cosine effect) of ``kind``: the larger of its quantize-only loss and de-quantize-only gain."""
        return (max(self.quant_only.get(kind, 0.0), self.dequant_only.get(kind, 0.0)), self.cosine_effect.get(kind, 0.0))

    def kind(self) -> str:
        """"weights" or "activations": the part whose fix or loss is larger."""
        return "weights" if self.has_weights and self.effect("weights") > self.effect("activations") else "activations"

    @property
    def order(self) -> tuple[float, float]:
        return max(self.effect("weights"), self.effect("activations"))


def evaluate(model: MaskedModel, samples, mask: np.ndarray, outputs: list[str], float_out: dict[str, np.ndarray], metric: Metric) -> tuple[float, float]:
    """(metric, worst output cosine) of the masked model on ``samples``.

    The whole outputs' errors once, without the per-channel scan: nothing here reads a channel, and on the all-int8
    PP-OCRv5 recogniser (one 40 x 18385 output a sample) the scan, done twice (here and in a built-in metric's
    :meth:`Metric.value`), was about a quarter of a ranking evaluation's time (cProfile of a ``--workers`` process:
    per_output 90 of 296 s, the channel scan 68 s of it). The same numbers: the whole-output columns do not depend on it."""
    rows = model.run(samples, mask, outputs)
    q = {n: np.concatenate([np.asarray(r[k]) for r in rows]) for k, n in enumerate(outputs)}
    f = {n: float_out[n] for n in outputs}
    outs = per_output(f, q, channels=False)
    value = metric.value(q, f) if metric.is_hook else score(outs, metric.name)
    return value, worst(outs, "cosine")


def references(model: MaskedModel, samples, outputs: list[str], float_out: dict[str, np.ndarray],
               metric: Metric) -> tuple[float, float, float]:
    """(metric with every quantizer off, metric and worst output cosine with every quantizer on): the reference
    points the four-way effects are measured from."""
    ideal, _ = evaluate(model, samples, model.mask(on=[]), outputs, float_out, metric)
    full, full_cos = evaluate(model, samples, model.mask(off=[]), outputs, float_out, metric)
    return ideal, full, full_cos


def node_sensitivity(model: MaskedModel, samples, outputs: list[str], float_out: dict[str, np.ndarray], metric: Metric,
                     n, ideal: float, full: float, full_cos: float) -> Sensitivity:
    """The four-way effects of one node of ``model`` (up to four masked evaluations)."""
    qo, do, cq, cd = {}, {}, {}, {}
    for kind, idx in (("weights", n.weights), ("activations", n.acts)):
        if not idx:
            continue
        v, c = evaluate(model, samples, model.mask(on=idx), outputs, float_out, metric)
        qo[kind], cq[kind] = ideal - v, c
        v, c = evaluate(model, samples, model.mask(off=idx), outputs, float_out, metric)
        do[kind], cd[kind] = v - full, c
    ce = {kind: max(1.0 - cq[kind], cd[kind] - full_cos, 0.0) for kind in cq}
    return Sensitivity(n.name, n.op_type, bool(n.weights), qo, do, cq, cd, ce)


def _not_evaluated(n) -> Sensitivity:
    return Sensitivity(n.name, n.op_type, bool(n.weights), {}, {}, {}, {}, {}, evaluated=False)


def _ordered(out: list[Sensitivity]) -> list[Sensitivity]:
    return sorted(out, key=lambda s: (not s.evaluated, *(-v for v in s.order)))


def rank(model: MaskedModel, samples, outputs: list[str], float_out: dict[str, np.ndarray], metric: Metric,
         progress: Callable[[str, int, int], None] | None = None, only: set[str] | None = None) -> tuple[list[Sensitivity], dict[str, float]]:
    """Every node's sensitivity (of ``only``'s nodes, when given), most sensitive first, and the reference points."""
    ideal, full, full_cos = references(model, samples, outputs, float_out, metric)
    out = []
    total = len(model.nodes)
    for k, n in enumerate(model.nodes):
        if only is not None and n.name not in only:
            out.append(_not_evaluated(n))
            continue
        out.append(node_sensitivity(model, samples, outputs, float_out, metric, n, ideal, full, full_cos))
        if progress:
            progress("sensitivity", k + 1, total)
    return _ordered(out), {"float": ideal, "quantized": full, "quantized_cosine": full_cos}


@dataclass
class WeightGain:
    """What de-quantizing only one node's weights (everything else quantized) gains, on more samples."""

    name: str
    op_type: str
    metric_gain: float
    cosine_gain: float

    @property
    def order(self) -> tuple[float, float]:
        return (self.metric_gain, self.cosine_gain)


def weight_share(model: MaskedModel, samples, outputs: list[str], float_out: dict[str, np.ndarray], metric: Metric) -> float:
    """How much of the quantized model's loss its weights carry: ``(every weight float - all quantized)
    / (float - all quantized)``, the larger of the share in the metric and in the worst output's
    cosine, on ``samples`` (a coarse task metric may not move where the weights' rounding
    interacts with the activations'; the cosine does). Near 0 the loss is in the activations and no
    weight remedy can fix it."""
    ideal = evaluate(model, samples, model.mask(on=[]), outputs, float_out, metric)
    full = evaluate(model, samples, model.mask(off=[]), outputs, float_out, metric)
    weights = evaluate(model, samples, model.mask(off=[w for n in model.nodes for w in n.weights]), outputs, float_out, metric)
    shares = [(weights[c] - full[c]) / (ideal[c] - full[c]) for c in (0, 1) if ideal[c] - full[c] > 1e-12]
    return float(max(shares)) if shares else 0.0


def rank_weights(model: MaskedModel, samples, outputs: list[str], float_out: dict[str, np.ndarray], metric: Metric,
                 progress: Callable[[str, int, int], None] | None = None) -> list[WeightGain]:
    """The weight remedies' own ranking: one evaluation per weighted node, most helpful first.

    Weight rounding of one layer rarely moves a coarse task metric (an exact-transcription rate)
    on the few samples the four-way ranking can afford, so the layer whose rounding costs the
    most hides among ties. This pass spends its budget on the one question the weight remedies
    (learned rounding, float placement) answer -- what is gained when only these weights are
    float -- on more samples, ranked by the metric and then by the worst output's cosine.
    """
    full, full_cos = evaluate(model, samples, model.mask(off=[]), outputs, float_out, metric)
    weighted = [n for n in model.nodes if n.weights]
    out = []
    for k, n in enumerate(weighted):
        v, c = evaluate(model, samples, model.mask(off=n.weights), outputs, float_out, metric)
        out.append(WeightGain(n.name, n.op_type, v - full, c - full_cos))
        if progress:
            progress("weight sensitivity", k + 1, len(weighted))
    out.sort(key=lambda g: tuple(-v for v in g.order))
    return out


def activation_losses(model: MaskedModel, samples, outputs: list[str], float_out: dict[str, np.ndarray], metric: Metric,
                      names: list[str], progress: Callable[[str, int, int], None] | None = None) -> dict[str, float]:
    """Per node of ``names``: what quantizing only its activations (everything else float) costs the worst
    output's cosine; one masked evaluation per node, the int16 budget set's expected gain.

    Why not the int8 SQNR of the output alone: on the all-int8 PP-OCRv5 recogniser the outputs that cost the
    most alone are the HardSwish products (``Mul``) and residual ``Add``s whose SQNR is unremarkable; the set
    of the most of this loss per FPS price within a 10 % budget predicts cosine 0.986 on the masked model, the
    same budget spent by SQNR 0.971. A loss alone is additive where the loss is spread over many activations
    (their noises add), which is the case int16 groups are for."""
    acts = {n.name: n.acts for n in model.nodes}
    _, ideal = evaluate(model, samples, model.mask(on=[]), outputs, float_out, metric)
    out: dict[str, float] = {}
    for k, name in enumerate(names):
        if acts.get(name):
            _, cos = evaluate(model, samples, model.mask(on=acts[name]), outputs, float_out, metric)
            out[name] = max(ideal - cos, 0.0)
        if progress:
            progress("int16 gains", k + 1, len(names))
    return out


#: nodes per task of the gains pass (:class:`ActivationGains`): fixed, so the tasks, and each node's value, never
#: depend on the worker count; each task pays one extra evaluation (its own float reference), 1/24 more work
GAIN_CHUNK = 24


@dataclass(frozen=True)
class ActivationLossJob:
    """One task of the gains pass: :func:`activation_losses` of ``names`` on the session's first ``samples`` debug
    samples, run where the session is (here, or a ``--workers`` process: :meth:`hbtool.debug.trials.TrialRunner.jobs`).

    A node's value depends only on the switchable model, the samples and the node, not on the other nodes of its
    task, so chunking changes nothing; and it runs on one onnxruntime thread wherever it runs (the float sums
    differ in the last bits with the thread count), so the values are bit for bit the same for any worker count."""

    names: tuple[str, ...]
    samples: int

    def run(self, session) -> dict[str, float]:
        total = max(len(session.samples), 1)
        sub = session.samples[: self.samples]
        sub_float = {o: v[: self.samples * (v.shape[0] // total)] for o, v in session.float_outputs.items()}
        # one onnxruntime thread here and on every worker: the values are then the same wherever the task ran
        model = session.switchable().single_threaded()
        return activation_losses(model, sub, session.output_names, sub_float, session.metric, list(self.names))


class ActivationGains:
    """``--auto``'s expected gain of each node's int16 output (:func:`activation_losses` on the first ``samples``
    debug samples): callable here on a list of names, or cut into :class:`ActivationLossJob` tasks (:meth:`jobs`)
    that the search runs on its workers beside the prices, so both cores work before its first round."""

    def __init__(self, session, samples: int, progress: Callable[[str, int, int], None] | None = None):
        self.session, self.samples, self.progress = session, int(samples), progress

    def jobs(self, names: list[str]) -> list[ActivationLossJob]:
        return [ActivationLossJob(tuple(names[k:k + GAIN_CHUNK]), self.samples) for k in range(0, len(names), GAIN_CHUNK)]

    def __call__(self, names: list[str]) -> dict[str, float]:
        out: dict[str, float] = {}
        jobs = self.jobs(names)
        for k, job in enumerate(jobs):
            out.update(job.run(self.session))
            if self.progress:
                self.progress("int16 gains", k + 1, len(jobs))
        return out


@dataclass(frozen=True)
class FloatActivationsJob:
    """The worst output cosine of the switchable model with the activations of ``names`` float and everything else
    quantized, on every debug sample: what no remedy of those nodes' activations (int16, another threshold) can
    beat, where float activations dominate every such remedy (an assumption: a coarser step on one node can
    cancel another's error). A task, like :class:`ActivationLossJob`."""

    names: tuple[str, ...]

    def run(self, session) -> float:
        model = session.switchable().single_threaded()
        chosen = set(self.names)
        idx = [i for n in model.nodes if n.name in chosen for i in n.acts]
        return evaluate(model, session.samples, model.mask(off=idx), session.output_names, session.float_outputs,
                        session.metric)[1]


def first_samples(session, count: int) -> tuple[list, dict[str, np.ndarray]]:
    """The session's first ``count`` debug samples and the float outputs of those (stacked per output)."""
    total = max(len(session.samples), 1)
    return session.samples[:count], {o: v[: count * (v.shape[0] // total)] for o, v in session.float_outputs.items()}


#: nodes per task of the four-way ranking on the workers (:class:`SensitivityJob`): fixed, so the tasks never depend
#: on the worker count; each task pays two extra evaluations (its own reference points), on the recogniser about
#: 2 of 26
RANK_CHUNK = 8
#: weighted nodes per task of the weight-only ranking (:class:`WeightGainJob`; one extra evaluation each)
WEIGHT_CHUNK = 12


@dataclass(frozen=True)
class SensitivityJob:
    """One task of the four-way ranking: :func:`node_sensitivity` of ``names`` on the session's first ``samples``
    debug samples, with the reference points (:func:`references`), run where the session is (here, or a
    ``--workers`` process: :meth:`hbtool.debug.trials.TrialRunner.jobs`). On one onnxruntime thread wherever it
    runs, like :class:`ActivationLossJob`, so the values are bit for bit the same for any worker count."""

    names: tuple[str, ...]
    samples: int

    def run(self, session) -> tuple[tuple[float, float, float], list[Sensitivity]]:
        model = session.switchable().single_threaded()
        sub, sub_float = first_samples(session, self.samples)
        refs = references(model, sub, session.output_names, sub_float, session.metric)
        nodes = {n.name: n for n in model.nodes}
        return refs, [node_sensitivity(model, sub, session.output_names, sub_float, session.metric, nodes[name], *refs)
                      for name in self.names]


@dataclass(frozen=True)
class WeightGainJob:
    """One task of the weight-only ranking (:func:`rank_weights`): the gain of de-quantizing only each of ``names``'
    weights, on the session's first ``samples`` debug samples, one onnxruntime thread (see :class:`SensitivityJob`)."""

    names: tuple[str, ...]
    samples: int

    def run(self, session) -> list[WeightGain]:
        model = session.switchable().single_threaded()
        sub, sub_float = first_samples(session, self.samples)
        full, full_cos = evaluate(model, sub, model.mask(off=[]), session.output_names, sub_float, session.metric)
        nodes = {n.name: n for n in model.nodes}
        out = []
        for name in self.names:
            v, c = evaluate(model, sub, model.mask(off=nodes[name].weights), session.output_names, sub_float, session.metric)
            out.append(WeightGain(name, nodes[name].op_type, v - full, c - full_cos))
        return out


def _run_jobs(runner, session, jobs: list, progress, stage: str, deadline: float | None = None,
              estimate: Callable[[Any], float] | None = None) -> list:
    """``job.run`` of each job, in order: on ``runner``'s workers (anything with ``jobs(list)`` and ``workers``:
    :class:`hbtool.debug.trials.TrialRunner`), or here on ``session`` where ``runner`` is None. With ``deadline`` (a
    :func:`time.monotonic` value) the jobs go in waves of one per worker, and no wave starts that the last one's
    time (before the first wave: the longest of its jobs by ``estimate``, seconds from costs measured earlier in the
    run) says would end after it: the results are then the first jobs' only."""
    import time

    def run(part: list):
        return runner.jobs(part) if runner is not None else (job.run(session) for job in part)

    out: list = []
    width = max(1, int(getattr(runner, "workers", 1))) if deadline is not None else max(len(jobs), 1)
    wave = 0.0
    for k in range(0, len(jobs), width):
        started = time.monotonic()
        # the last wave's time; before the first, the longest of its jobs by ``estimate``
        expected = wave if wave or estimate is None else max((estimate(job) for job in jobs[k:k + width]), default=0.0)
        if deadline is not None and started + expected > deadline:
            break
        for r in run(jobs[k:k + width]):
            out.append(r)
            if progress:
                progress(stage, len(out), len(jobs))
        wave = time.monotonic() - started
    return out


def ranking_jobs(session, samples: int, only: set[str] | None = None, order: list[str] | None = None) -> list[SensitivityJob]:
    """The :class:`SensitivityJob` tasks of :func:`rank_on`: ``order``'s nodes (default: the graph's) in ``only``, in
    chunks of :data:`RANK_CHUNK`."""
    nodes = [n.name for n in session.switchable().nodes]
    names = [name for name in (order or nodes) if only is None or name in only]
    return [SensitivityJob(tuple(names[k:k + RANK_CHUNK]), samples) for k in range(0, len(names), RANK_CHUNK)]


def ranking_of(session, results: list) -> tuple[list[Sensitivity], dict[str, float], int]:
    """The ranking from :class:`SensitivityJob` results (a node not in them listed as not evaluated), the reference
    points (empty where nothing ran) and how many nodes were evaluated."""
    got = {s.name: s for _, part in results for s in part}
    out = [got.get(n.name) or _not_evaluated(n) for n in session.switchable().nodes]
    reference = {}
    if results:
        ideal, full, full_cos = results[0][0]
        reference = {"float": ideal, "quantized": full, "quantized_cosine": full_cos}
    return _ordered(out), reference, len(got)


def rank_on(runner, session, samples: int, only: set[str] | None = None, order: list[str] | None = None,
            progress: Callable[[str, int, int], None] | None = None,
            deadline: float | None = None,
            estimate: Callable[[SensitivityJob], float] | None = None) -> tuple[list[Sensitivity], dict[str, float], int]:
    """:func:`rank` as :class:`SensitivityJob` tasks on ``runner`` (its workers, or here one by one), on the session's
    switchable model and its first ``samples`` debug samples: the same numbers whatever the worker count.

    ``order``: the nodes in the order to evaluate them (default: the graph's), so that a ``deadline`` (no chunk
    started that the last wave's time says ends after it) leaves out the least likely ones; the nodes not evaluated
    (outside ``only``, or past the deadline) are listed last as such. Returns the ranking, the reference points
    (empty where nothing ran) and how many nodes were evaluated. ``estimate``: a job's expected seconds, for the
    first wave (:func:`_run_jobs`)."""
    jobs = ranking_jobs(session, samples, only, order)
    return ranking_of(session, _run_jobs(runner, session, jobs, progress, "sensitivity", deadline, estimate))


def rank_weights_on(runner, session, samples: int,
                    progress: Callable[[str, int, int], None] | None = None) -> list[WeightGain]:
    """:func:`rank_weights` as :class:`WeightGainJob` tasks on ``runner`` (see :func:`rank_on`)."""
    weighted = [n.name for n in session.switchable().nodes if n.weights]
    jobs = [WeightGainJob(tuple(weighted[k:k + WEIGHT_CHUNK]), samples) for k in range(0, len(weighted), WEIGHT_CHUNK)]
    out = [g for part in _run_jobs(runner, session, jobs, progress, "weight sensitivity") for g in part]
    out.sort(key=lambda g: tuple(-v for v in g.order))
    return out
