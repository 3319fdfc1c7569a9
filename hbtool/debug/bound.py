"""A first-order upper bound on the worst output cosine any set of <= k remedied nodes (or any set within the FPS
budget) can reach, and the measurement of the model error it rests on (issue 34: "or proves it unreachable").

The searches measure sets; none says that no other set does better. This module gives a number that no set beats,
under a stated, measured assumption. Per output, with ``y_f`` the float output (all debug samples stacked, as the
cosine is), ``u = y_f / |y_f|`` and ``y(S)`` the output with the nodes of ``S`` remedied (everything else int8):

* ``cos(S) = t / sqrt(t^2 + |y_perp|^2)`` with ``t = u.y(S)`` and ``y_perp`` the part of ``y(S)`` orthogonal to
  ``y_f`` (the error that moves the cosine). For any contraction ``Q`` (here: ``y_perp``'s ``M`` coordinates where the
  all-int8 error is largest, plus its remainder's direction), ``|y_perp| >= |z|`` with ``z = Q y_perp``, so
  ``cos(S) <= t / sqrt(t^2 + |z|^2)``: the right side grows with ``t`` and falls with ``|z|``. ``|z(empty)|`` is the
  whole all-int8 orthogonal error (the remainder direction keeps it), so the bound is exact at ``S = {}``.
* The first-order model: each node's remedy alone moves ``z`` by ``-delta_i = z({i}) - z(empty)`` and ``t`` by
  ``h_i = t({i}) - t(empty)`` (one masked evaluation a node: the de-quantize-alone pass); a set moves them by the
  sums. Its convex relaxation over the sets of <= k nodes, ``H_k = {z(empty) - sum lambda_i delta_i : 0 <= lambda <= 1,
  sum lambda <= k}``, holds every set's prediction; ``p_min(k) = min |h| over H_k`` (a convex quadratic program,
  solved by Frank-Wolfe with its duality gap subtracted: a certified lower bound, never the solver's optimism) and
  ``t_max(k) = t(empty) + the k largest positive h_i`` give ``cos <= t_max / sqrt(t_max^2 + p_min^2)``. For an FPS
  budget the constraint ``sum lambda <= k`` becomes each resource's knapsack of the price model's int16 prices
  (:class:`hbtool.debug.price.Int16Prices`; BPU cycles, DDR bytes): a set that fits both lies in each, so each
  resource alone gives a bound and the smaller is kept.
* The model error of a measured set ``S``: ``dist_p(S)``, the distance from its measured ``z(S)`` to ``H_|S|`` (0 when
  the set's projections are what some relaxed first-order combination predicts; a set whose remedies overlap, the
  usual case on one residual stream, lies inside), and ``e_t(S) = t(S) - t_max(|S|)`` (positive breaks it). A bound
  stated with margin ``m`` (``p_min - m_p``, ``t_max + m_t``) holds for every set whose own errors are within ``m``
  (the triangle inequality); :func:`check` measures them on the sets the searches chose.

What it is not: a bound of the real remedy where float activations are measured (float is the optimistic reference,
not a bound of int16 or of another threshold: a coarser step can cancel another error), nor of the compiled program
(a set's own calibration re-chooses the method), nor of other samples than the ones measured; and the first-order
assumption is only checked on the sets measured, never proven for the others.

Measured (docs/debug.md, session debug-bound): on the tests' transformer and on the all-int8 PP-OCRv5 recogniser the
model does not hold. The recogniser's pure bound saturates at 0.977 while the top 117 nodes by single loss reach
0.997 (remedies complementary in aggregate), and every measured set of 2+ nodes lies 0.25-0.92 of the all-int8 error
from the model; so ``--auto`` does not report the bound, and this module stays the measurement (and the check that
says when a bound like it is no proof).

The inputs are tasks (:class:`ProjectionJob`) run where the session is, here or on ``--workers`` processes
(:meth:`hbtool.debug.trials.TrialRunner.jobs`), on one onnxruntime thread each, in chunks of :data:`BOUND_CHUNK`
sets fixed in advance: the values do not depend on the worker count. Only ``M + 3`` numbers per output and set travel;
each task recomputes ``u``, the coordinates and the remainder direction from its own all-int8 evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

#: sets per task: fixed, so the tasks never depend on the worker count; each task pays one extra evaluation (the
#: all-int8 reference its projections are read against)
BOUND_CHUNK = 12

#: coordinates of the orthogonal error kept per output (the largest of the all-int8 error; the rest is one direction)
BOUND_COORDINATES = 2048

#: Frank-Wolfe iterations of the relaxation (its certified lower bound is kept, so fewer only loosen the bound)
FW_ITERATIONS = 3000
#: ... of a measured set's distance from the model (its best value is kept, so fewer only overstate the distance)
DISTANCE_ITERATIONS = 300


@dataclass(frozen=True)
class Projection:
    """One output of one set: ``t = u.y`` (along the float output), ``z = Q y_perp`` (the orthogonal error's kept
    coordinates and remainder) and ``norm2 = y.y``: the measured cosine is ``t / sqrt(norm2)``."""

    t: float
    z: np.ndarray
    norm2: float

    @property
    def p(self) -> float:
        return float(np.linalg.norm(self.z))

    @property
    def cosine(self) -> float:
        return self.t / math.sqrt(self.norm2) if self.norm2 > 0 else 0.0


def _stack(rows, k: int) -> np.ndarray:
    return np.concatenate([np.asarray(r[k], np.float64).reshape(-1) for r in rows])


class _Axes:
    """``u``, the kept coordinates and the remainder direction of one output, from its all-int8 error."""

    def __init__(self, f: np.ndarray, y0: np.ndarray, coordinates: int):
        fn = float(np.linalg.norm(f))
        self.u = f / fn if fn > 0 else f
        perp = self.perp(y0)
        keep = min(coordinates, perp.size)
        size = np.abs(perp)
        # the largest ``keep`` (a partition, not a sort: the recogniser's outputs have millions of elements)
        self.kept = np.sort(np.argpartition(-size, keep - 1)[:keep]) if 0 < keep < size.size else np.arange(keep)
        rest = perp.copy()
        rest[self.kept] = 0.0
        rn = float(np.linalg.norm(rest))
        self.rest = rest / rn if rn > 0 else None

    def perp(self, y: np.ndarray) -> np.ndarray:
        return y - float(self.u @ y) * self.u

    def project(self, y: np.ndarray) -> Projection:
        perp = self.perp(y)
        z = perp[self.kept]
        if self.rest is not None:
            z = np.append(z, float(self.rest @ perp))
        return Projection(float(self.u @ y), z, float(y @ y))


@dataclass(frozen=True)
class ProjectionJob:
    """The projections of each set of ``sets`` remedied (``remedy``: float activations or int16 in a dual model, as
    :class:`hbtool.debug.marginal.MarginalGainJob`), everything else int8, on the first ``samples`` debug samples
    (0: all). Returns ``(base, [per set])``, each ``{output: Projection}``; ``base`` is the all-int8 model."""

    sets: tuple[tuple[str, ...], ...]
    samples: int = 0
    remedy: str = "float"
    coordinates: int = BOUND_COORDINATES

    def run(self, session) -> tuple[dict[str, Projection], list[dict[str, Projection]]]:
        from hbtool.debug.marginal import _sub, switches_of

        model = session.switchable().single_threaded()
        sw = switches_of(model)
        sub, sub_float = _sub(session, self.samples)
        names = session.output_names

        def outputs(chosen) -> list[np.ndarray]:
            rows = model.run(sub, sw.mask(model, chosen, self.remedy), names)
            return [_stack(rows, k) for k in range(len(names))]

        ys = outputs(())
        axes = {o: _Axes(np.asarray(sub_float[o], np.float64).reshape(-1), y, self.coordinates) for o, y in zip(names, ys)}
        base = {o: axes[o].project(y) for o, y in zip(names, ys)}
        return base, [{o: axes[o].project(y) for o, y in zip(names, outputs(chosen))} for chosen in self.sets]


def single_jobs(names: list[str], samples: int = 0, remedy: str = "float",
                coordinates: int = BOUND_COORDINATES) -> list[ProjectionJob]:
    """The de-quantize-alone pass: each node remedied alone, in chunks of :data:`BOUND_CHUNK`."""
    return [ProjectionJob(tuple((n,) for n in names[k:k + BOUND_CHUNK]), samples, remedy, coordinates)
            for k in range(0, len(names), BOUND_CHUNK)]


def set_jobs(sets: list[list[str]], samples: int = 0, remedy: str = "float",
             coordinates: int = BOUND_COORDINATES) -> list[ProjectionJob]:
    """The measured sets (to check the first-order model on), in chunks of :data:`BOUND_CHUNK`."""
    return [ProjectionJob(tuple(tuple(s) for s in sets[k:k + BOUND_CHUNK]), samples, remedy, coordinates)
            for k in range(0, len(sets), BOUND_CHUNK)]


def flatten(results: Iterable) -> tuple[dict[str, Projection], list[dict[str, Projection]]]:
    """The results of :class:`ProjectionJob` tasks, in order: the first task's all-int8 projections and every set's."""
    base, out = None, []
    for b, sets in results:
        base = base or b
        out += sets
    return base or {}, out


# ---------------------------------------------------------------------------------------------------------------
# the relaxation: min |a - D lambda| over a box with knapsack constraints, certified by the Frank-Wolfe gap


def _lmo_knapsack(grad: np.ndarray, weights: np.ndarray, capacity: float) -> np.ndarray:
    """The vertex of ``{0 <= s <= 1, weights.s <= capacity}`` minimising ``grad.s`` (a fractional knapsack: the
    free items with a negative gradient, then the others by gradient per weight, the last one cut)."""
    s = np.zeros_like(grad)
    s[(grad < 0) & (weights <= 0)] = 1.0
    idx = np.where((grad < 0) & (weights > 0))[0]
    if idx.size == 0 or capacity <= 0:
        return s
    idx = idx[np.argsort(grad[idx] / weights[idx], kind="stable")]
    w = weights[idx]
    before = np.concatenate(([0.0], np.cumsum(w)[:-1]))
    s[idx] = np.clip((capacity - before) / w, 0.0, 1.0)
    return s


@dataclass(frozen=True)
class _Quadratic:
    """``|a - d.T lambda|^2`` as ``c - 2 b.lambda + lambda.G.lambda`` (``G = d d.T``: one product for every ``a``)."""

    gram: np.ndarray

    @classmethod
    def of(cls, d: np.ndarray) -> "_Quadratic":
        return cls(d @ d.T)


def min_norm(a: np.ndarray, d: np.ndarray, weights: np.ndarray, capacity: float,
             iterations: int = FW_ITERATIONS, quadratic: _Quadratic | None = None) -> tuple[float, float]:
    """(certified lower bound, best value found) of ``min |a - d.T lambda|`` over ``{0 <= lambda <= 1,
    weights.lambda <= capacity}`` (``d``: one row per node). Frank-Wolfe on the squared norm with exact line search;
    the lower bound is the best primal value minus its duality gap, so it never exceeds the true minimum."""
    n = d.shape[0]
    c = float(a @ a)
    if n == 0:
        return math.sqrt(c), math.sqrt(c)
    gram = (quadratic or _Quadratic.of(d)).gram
    b = d @ a
    lam = np.zeros(n)
    g_lam = np.zeros(n)             # gram @ lam
    lower, best = -math.inf, c
    for _ in range(iterations):
        value = c - 2 * float(b @ lam) + float(lam @ g_lam)
        grad = 2 * (g_lam - b)
        s = _lmo_knapsack(grad, weights, capacity)
        gap = float(grad @ (lam - s))
        best = min(best, value)
        lower = max(lower, value - gap)
        if gap <= 1e-9 * max(c, 1e-30):
            break
        direction = s - lam
        g_dir = gram @ direction
        curv = float(direction @ g_dir)
        step = 1.0 if curv <= 0 else min(1.0, max(0.0, -float(grad @ direction) / (2 * curv)))
        lam = lam + step * direction
        g_lam = g_lam + step * g_dir
    return math.sqrt(max(lower, 0.0)), math.sqrt(max(best, 0.0))


def cosine_bound(t_max: float, p_min: float) -> float:
    """The largest cosine of a vector whose component along the reference is <= ``t_max`` and whose orthogonal part
    is at least ``p_min`` long (1.0 when ``p_min`` <= 0: nothing is bounded)."""
    if p_min <= 0:
        return 1.0
    if t_max <= 0:
        return 0.0
    return t_max / math.hypot(t_max, p_min)


def _linear_max(gains: np.ndarray, weights: np.ndarray, capacity: float) -> float:
    """max ``gains.lambda`` over the same polytope (the fractional knapsack)."""
    return float(-(-gains) @ _lmo_knapsack(-gains, weights, capacity)) if gains.size else 0.0


# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraint:
    """The sets a bound is over, relaxed: ``weights.lambda <= capacity`` per row (a count: one row of ones and k)."""

    label: str
    weights: tuple[np.ndarray, ...]
    capacity: tuple[float, ...]

    @classmethod
    def count(cls, n: int, k: int) -> "Constraint":
        return cls(f"<= {k} nodes", (np.ones(n),), (float(k),))

    @classmethod
    def budget(cls, prices, floor_fps: float, names: list[str]) -> "Constraint":
        """Each resource's share of the room ``floor_fps`` leaves (a set the price model fits uses <= 1 of each)."""
        rows, caps = [], []
        for per_node, room in zip((prices.cycles, prices.ddr_bytes), prices.room(floor_fps)):
            if math.isinf(room):
                continue
            cost = np.array([max(per_node.get(n, 0.0), 0.0) for n in names])
            if room <= 0:
                rows.append(np.where(cost > 0, 1.0, 0.0))
                caps.append(0.0)
            else:
                rows.append(cost / room)
                caps.append(1.0)
        return cls(f"FPS >= {floor_fps!r}", tuple(rows) or (np.zeros(len(names)),), tuple(caps) or (1.0,))


@dataclass
class ModelError:
    """The first-order model's error on one measured set, per output: ``p`` the distance of the measured ``z`` from the
    relaxed prediction of its size, ``t`` the measured ``t`` above the largest predicted (positive breaks the bound);
    and the measured worst cosine."""

    nodes: tuple[str, ...]
    p: dict[str, float]
    t: dict[str, float]
    cosine: float
    label: str = ""
    #: per output: |z| measured minus |z| of the set's own first-order prediction (negative: it removed more)
    p_direct: dict[str, float] = field(default_factory=dict)
    #: per output: t measured minus the set's own first-order prediction (positive: it added more)
    t_direct: dict[str, float] = field(default_factory=dict)

    def excess(self, o: str, budget: bool = False) -> tuple[float, float]:
        """(shortfall of |z|, excess of t) the bound must allow for this set: for a node count the smaller of the
        hull distance and the direct shortfall (either keeps |z(S)| >= p_min - it), for an FPS budget the direct ones
        (the count's hull is not the budget's)."""
        direct = max(0.0, -self.p_direct[o])
        if budget:
            return direct, max(0.0, self.t_direct[o])
        return min(self.p[o], direct), max(0.0, self.t[o])


@dataclass(frozen=True)
class Margin:
    """The first-order error a bound allows, per output: how much shorter ``z`` and how much longer ``t`` may be."""

    p: dict[str, float]
    t: dict[str, float]

    @classmethod
    def zero(cls) -> "Margin":
        return cls({}, {})

    @classmethod
    def worst_of(cls, errors: list[ModelError], budget: bool = False) -> "Margin":
        """The largest error of the measured sets (:meth:`ModelError.excess`)."""
        outs = {o for e in errors for o in e.p}
        return cls({o: max([0.0] + [e.excess(o, budget)[0] for e in errors]) for o in outs},
                   {o: max([0.0] + [e.excess(o, budget)[1] for e in errors]) for o in outs})

    def within(self, e: ModelError, tol: float = 1e-9, budget: bool = False) -> bool:
        return all(e.excess(o, budget)[0] <= self.p.get(o, 0.0) + tol and e.excess(o, budget)[1] <= self.t.get(o, 0.0) + tol
                   for o in e.p)


@dataclass
class FirstOrder:
    """The all-int8 projections and each node's single-remedy moves, per output (see the module docstring)."""

    names: list[str]
    base: dict[str, Projection]
    #: output -> rows delta_i = z(empty) - z({i}), in :attr:`names`' order
    delta: dict[str, np.ndarray]
    #: output -> h_i = t({i}) - t(empty)
    gain_t: dict[str, np.ndarray]
    #: output -> the cosine of each node remedied alone
    single_cosine: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._quadratic = {o: _Quadratic.of(d) for o, d in self.delta.items()}
        self._p_min: dict[tuple[str, str], float] = {}

    @classmethod
    def from_singles(cls, names: list[str], results: Iterable) -> "FirstOrder":
        base, sets = flatten(results)
        delta = {o: np.array([b.z - s[o].z for s in sets]).reshape(len(sets), -1) for o, b in base.items()}
        gain_t = {o: np.array([s[o].t - b.t for s in sets]) for o, b in base.items()}
        cos = {o: np.array([s[o].cosine for s in sets]) for o in base}
        return cls(list(names), base, delta, gain_t, cos)

    def _index(self, nodes) -> np.ndarray:
        pos = {n: k for k, n in enumerate(self.names)}
        return np.array([pos[n] for n in nodes if n in pos], dtype=int)

    def p_min(self, o: str, c: Constraint) -> float:
        """The certified least ``|z|`` of the relaxed model over the constraint (the largest over its rows)."""
        key = (o, c.label)
        if key not in self._p_min:
            self._p_min[key] = self._solve(o, c)
        return self._p_min[key]

    def _solve(self, o: str, c: Constraint) -> float:
        return max(min_norm(self.base[o].z, self.delta[o], w, cap, quadratic=self._quadratic[o])[0] for w, cap in zip(c.weights, c.capacity))

    def t_max(self, o: str, c: Constraint) -> float:
        return self.base[o].t + min(_linear_max(self.gain_t[o], w, cap) for w, cap in zip(c.weights, c.capacity))

    def bound(self, c: Constraint, margin: Margin | None = None) -> float:
        """No set within ``c`` has a worst output cosine above this, where the first-order model's error on it is
        within ``margin`` (the worst output's cosine is at most any one output's)."""
        m = margin or Margin.zero()
        return min(cosine_bound(self.t_max(o, c) + m.t.get(o, 0.0), self.p_min(o, c) - m.p.get(o, 0.0)) for o in self.base)

    def bound_k(self, k: int, margin: Margin | None = None) -> float:
        return self.bound(Constraint.count(len(self.names), k), margin)

    def error(self, nodes: Iterable[str], measured: Mapping[str, Projection], label: str = "") -> ModelError:
        """The model's error on one measured set (see the module docstring)."""
        nodes = tuple(nodes)
        idx = self._index(nodes)
        c = Constraint.count(len(self.names), len(idx))
        p, t, direct, t_direct = {}, {}, {}, {}
        for o, b in self.base.items():
            # the distance from the measured z to the relaxed predictions of its size: min |(z0 - z(S)) - D lambda|,
            # its best value found (an upper bound of the distance: a conservative margin)
            p[o] = min_norm(b.z - measured[o].z, self.delta[o], c.weights[0], c.capacity[0], DISTANCE_ITERATIONS,
                            self._quadratic[o])[1]
            t[o] = measured[o].t - self.t_max(o, c)
            predicted = b.z - self.delta[o][idx].sum(axis=0) if idx.size else b.z
            direct[o] = measured[o].p - float(np.linalg.norm(predicted))
            t_direct[o] = measured[o].t - (b.t + float(self.gain_t[o][idx].sum()))
        return ModelError(nodes, p, t, min(m.cosine for m in measured.values()), label, direct, t_direct)


def model_errors(first: FirstOrder, sets: list[list[str]], results: Iterable,
                 labels: list[str] | None = None) -> list[ModelError]:
    """The first-order model's error on each measured set (the results of :func:`set_jobs` over ``sets``)."""
    _, measured = flatten(results)
    labels = labels or [""] * len(sets)
    return [first.error(s, m, lab) for s, m, lab in zip(sets, measured, labels)]


@dataclass
class BoundCheck:
    """The bound at a node budget, checked on measured sets."""

    k: int
    bound: float                      # the pure first-order bound (no margin)
    bound_with_margin: float          # stated with the worst error of the measured sets
    margin: Margin
    errors: list[ModelError]
    beaten: list[ModelError]          # measured sets of <= k nodes above the pure bound

    @property
    def holds(self) -> bool:
        """Every measured set within the pure first-order model (no margin needed) and none above the bound."""
        return not self.beaten and all(Margin.zero().within(e) for e in self.errors)


def check(first: FirstOrder, k: int, errors: list[ModelError]) -> BoundCheck:
    margin = Margin.worst_of(errors)
    pure = first.bound_k(k)
    beaten = [e for e in errors if len(e.nodes) <= k and e.cosine > pure + 1e-9]
    return BoundCheck(k, pure, first.bound_k(k, margin), margin, errors, beaten)


def summary(errors: list[ModelError], first: FirstOrder) -> dict[str, float]:
    """The measured first-order errors in units of the all-int8 orthogonal error ``|z(empty)|``, over every output."""
    rel = lambda key: [getattr(e, key)[o] / first.base[o].p for e in errors for o in getattr(e, key)  # noqa: E731
                       if first.base[o].p > 0]
    if not errors:
        return {}
    return {"sets": len(errors), "dist_max": max(rel("p")), "dist_median": float(np.median(rel("p"))),
            "t_excess_max": max(rel("t")), "direct_min": min(rel("p_direct")),
            "direct_median": float(np.median(rel("p_direct"))),
            "outside": sum(1 for e in errors if not Margin.zero().within(e, 1e-6 * max(b.p for b in first.base.values())))}
