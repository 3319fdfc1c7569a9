"""Greedy by marginal gain: a set of nodes chosen by what each adds GIVEN the nodes already chosen.

Why: the single-node activation loss (:func:`hbtool.debug.sensitivity.activation_losses`) ranks each node alone,
everything else float. On a model that loses its accuracy over many activations at once (the all-int8 PP-OCRv5
recogniser, issue 34) the errors of residual adds and HardSwish products may cancel or compound, so the top k by
loss alone need not be the best k. This pass measures the interactions: in rounds, every remaining candidate is
added to the current set in the switchable model (its activations left float, or switched to int16 where the
model has int16 quantizers: :func:`dual_precision_graph`), the cosine of each is measured, and the ``take`` best
are added.

What it assumes, and what it is not: a greedy set is not an optimum (a node that helps only beside another node
not yet chosen is never seen; ``take`` > 1 adds nodes whose gains were measured apart); float activations are the
remedy's upper reference, not a bound of every remedy (a coarser step on one node can cancel another's error);
the int16 state of the dual model uses the thresholds of the calibration with every candidate output at int16
(a mixed calibration may choose another method); the gains are measured on the first ``samples`` debug samples.

The tasks (:class:`MarginalGainJob`) run where the session is, here or on ``--workers`` processes
(:meth:`hbtool.debug.trials.TrialRunner.jobs`), on one onnxruntime thread each, in chunks fixed by
:data:`MARGINAL_CHUNK`: the values, and so the choices, do not depend on the worker count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from hbtool.ir.graph import Graph
from hbtool.quant.calibrated_model import CALIBRATION_OP

#: candidates per task of a round: fixed, so the tasks never depend on the worker count
MARGINAL_CHUNK = 12

#: the remedies a switchable state can model: the activations left float, or their int16 fake-quantization
REMEDIES = ("float", "int16")


def _sub(session, samples: int):
    total = max(len(session.samples), 1)
    count = min(samples, total) if samples else total
    sub = session.samples[:count]
    sub_float = {o: v[: count * (v.shape[0] // total)] for o, v in session.float_outputs.items()}
    return sub, sub_float


@dataclass
class Switches:
    """Which mask entries carry each node's remedy: the int8 activation quantizers to turn off, and (in a dual
    model) the int16 ones to turn on."""

    int8: dict[str, list[int]]
    int16: dict[str, list[int]] = field(default_factory=dict)
    #: the int16 quantizers of the dual model: off in the all-int8 state
    all_int16: list[int] = field(default_factory=list)

    def mask(self, model, chosen: Iterable[str], remedy: str) -> np.ndarray:
        """Everything quantized int8 (weights too), the activations of ``chosen`` float or int16."""
        off = list(self.all_int16)
        on16: list[int] = []
        for name in chosen:
            off += self.int8.get(name, [])
            if remedy == "int16":
                on16 += self.int16.get(name, [])
        m = model.mask(off=off)
        if on16:
            m[on16] = 1.0
        return m


def switches_of(model) -> Switches:
    """The node -> mask-entries map of a switchable model, plain or dual (:func:`dual_precision_graph`).

    In a dual model the int8 quantizer of a tensor reads the output of its int16 twin, so the switchable model gives
    the twin to the node that computes the tensor and the int8 quantizer to no node (its input is the twin's
    output): a twin is an activation quantizer whose value another quantizer reads; both go to the twin's node."""
    reader = {}
    for q in model.quantizers:
        switch = model.graph.node(f"{q.quant_name}_switch") if q.kind == "act" else None
        if switch is not None:
            reader[switch.inputs[0]] = q     # the value the quantizer reads
    int8: dict[str, list[int]] = {}
    int16: dict[str, list[int]] = {}
    for n in model.nodes:
        for i in n.acts:
            q = model.quantizers[i]
            behind = reader.get(q.quant_name)
            if behind is not None and behind.index != i:
                int16.setdefault(n.name, []).append(i)
                int8.setdefault(n.name, []).append(behind.index)
            else:
                int8.setdefault(n.name, []).append(i)
    return Switches(int8, int16, sorted(i for v in int16.values() for i in v))


DUAL_SUFFIX = "_hb16"


def dual_precision_graph(int8_calibrated: Graph, int16_calibrated: Graph) -> Graph:
    """The int8 calibrated graph with an int16 fake-quantizer in front of every int8 activation quantizer whose tensor
    the int16 calibration quantizes at 16 bits: ``x -> q16 -> x_hb16 -> q8 -> y``. In the switchable model built on it
    (:class:`hbtool.debug.masked.MaskedModel`) both are switches: q16 off and q8 on is the int8 model, q16 on and q8
    off that tensor at int16, both off float. Weights stay int8 (the plan quantizes every weight to int8)."""
    g = int8_calibrated.copy()
    sixteen = {n.inputs[0]: n for n in int16_calibrated.nodes
               if n.op_type == CALIBRATION_OP and n.attrs.get("method") != "weight" and int(n.attrs.get("bits", 8)) == 16}
    for node in [n for n in g.nodes if n.op_type == CALIBRATION_OP and n.attrs.get("method") != "weight"]:
        src = node.inputs[0]
        twin = sixteen.get(src)
        if twin is None or int(node.attrs.get("bits", 8)) != 8:
            continue
        mid = g.unique_name(f"{src}{DUAL_SUFFIX}")
        v = g.values.get(src)
        g.set_value(mid, v.shape if v else None, v.dtype if v is not None and v.dtype is not None else np.float32)
        g.add_node(CALIBRATION_OP, [src], [mid], dict(twin.attrs), name=f"{mid}_HzCalibration", domain=twin.domain,
                   body=twin.body)
        node.inputs = [mid, *node.inputs[1:]]
    g.toposort()
    return g


@dataclass(frozen=True)
class MarginalGainJob:
    """One task of a round: the worst output cosine with ``chosen`` + each of ``names`` remedied (``remedy``: float
    activations or int16), everything else int8, on the first ``samples`` debug samples (0: all). Runs on the
    session's switchable model (a dual one for int16: the session's ``masked_graphs``) on one onnxruntime thread."""

    chosen: tuple[str, ...]
    names: tuple[str, ...]
    samples: int
    remedy: str = "float"

    def run(self, session) -> dict[str, float]:
        from hbtool.debug.sensitivity import evaluate

        model = session.switchable().single_threaded()
        sw = switches_of(model)
        sub, sub_float = _sub(session, self.samples)
        out = {}
        for name in self.names:
            mask = sw.mask(model, [*self.chosen, name], self.remedy)
            out[name] = float(evaluate(model, sub, mask, session.output_names, sub_float, session.metric)[1])
        return out


@dataclass(frozen=True)
class SetCosineJob:
    """The worst output cosine of one set remedied (``remedy``), everything else int8, on the first ``samples`` debug
    samples (0: all): a point of a curve."""

    chosen: tuple[str, ...]
    samples: int = 0
    remedy: str = "float"

    def run(self, session) -> float:
        from hbtool.debug.sensitivity import evaluate

        model = session.switchable().single_threaded()
        sub, sub_float = _sub(session, self.samples)
        mask = switches_of(model).mask(model, self.chosen, self.remedy)
        return float(evaluate(model, sub, mask, session.output_names, sub_float, session.metric)[1])


@dataclass
class GreedyStep:
    """One round: the nodes added, the cosine the round measured for the set (on the selection samples)."""

    added: list[str]
    cosine: float
    evaluations: int
    seconds: float
    #: the cosine of the set with each candidate of the round added (the round's measurements, for the record)
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class GreedyResult:
    order: list[str]                 # the chosen nodes, in the order they were added
    steps: list[GreedyStep]
    stopped: str = ""                # why it ended early ("" = the size was reached or the candidates spent)

    def prefix(self, k: int) -> list[str]:
        return self.order[:k]


def greedy_marginal(run_jobs: Callable[[list], Iterable[Any]], candidates: list[str], size: int, take: int,
                    samples: int, remedy: str = "float", deadline: float | None = None, target: float | None = None,
                    progress: Callable[[GreedyStep], None] | None = None) -> GreedyResult:
    """Rounds of: each remaining candidate added to the chosen set alone (one masked evaluation each, in
    :data:`MARGINAL_CHUNK` tasks through ``run_jobs``), the ``take`` with the highest cosine added (ties: the earlier
    candidate), until ``size`` nodes are chosen, the candidates are spent, the set reaches ``target`` on the
    selection samples, or ``deadline`` (``time.monotonic()``) passes between rounds.

    The choice reads only the values, in the candidates' order, so it does not depend on where the tasks ran."""
    chosen: list[str] = []
    steps: list[GreedyStep] = []
    left = list(candidates)
    stopped = ""
    while len(chosen) < size and left:
        if deadline is not None and time.monotonic() >= deadline:
            stopped = "time"
            break
        t = time.perf_counter()
        jobs = [MarginalGainJob(tuple(chosen), tuple(left[k:k + MARGINAL_CHUNK]), samples, remedy)
                for k in range(0, len(left), MARGINAL_CHUNK)]
        values: dict[str, float] = {}
        for part in run_jobs(jobs):
            values.update(part)
        ranked = sorted(left, key=lambda n: (-values[n], left.index(n)))
        added = ranked[: min(take, size - len(chosen))]
        chosen += added
        left = [n for n in left if n not in added]
        step = GreedyStep(added, values[added[-1]] if len(added) == 1 else float("nan"), len(values), time.perf_counter() - t,
                          values)
        # the set's own cosine after the round: the best single value is exact only for take == 1
        if len(added) > 1:
            step.cosine = float(next(iter(run_jobs([SetCosineJob(tuple(chosen), samples, remedy)]))))
        steps.append(step)
        if progress:
            progress(step)
        if target is not None and step.cosine >= target:
            stopped = "target"
            break
    return GreedyResult(chosen, steps, stopped)
