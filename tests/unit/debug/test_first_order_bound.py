"""The first-order bound of issue 34 (:mod:`hbtool.debug.bound`): no set of <= k remedied nodes beats it where the
first-order model's error on that set is within the bound's margin, and the check says so where the model breaks.

Why: ``debug --auto`` could say what it found, never that nothing better exists within the budget. The bound rests on
an assumption (a set's remedy is the sum of its nodes' single remedies), so the tests check the maths on sets small
enough to enumerate, on a real model and on constructed ones where the assumption holds exactly or is broken.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hbtool.debug import bound as B


def _proj(z, t):
    z = np.asarray(z, float)
    return B.Projection(float(t), z, float(t * t + z @ z))


def _first_order(base_z, base_t, rows, gains_t):
    names = [f"n{i}" for i in range(len(rows))]
    return names, B.FirstOrder(names, {"y": _proj(base_z, base_t)}, {"y": np.asarray(rows, float)},
                               {"y": np.asarray(gains_t, float)})


def test_the_relaxation_is_certified_below_every_subset_and_the_true_minimum():
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    for trial in range(5):
        n, m = 8, 6
        d = rng.normal(size=(n, m))
        a = rng.normal(size=m) * 3
        for k in (1, 3, 8):
            lower, found = B.min_norm(a, d, np.ones(n), k)
            subsets = min(np.linalg.norm(a - d[list(s)].sum(axis=0)) for r in range(k + 1)
                          for s in itertools.combinations(range(n), r))
            relaxed = minimize(lambda x: np.sum((a - d.T @ x) ** 2), np.zeros(n), bounds=[(0, 1)] * n, method="SLSQP",
                               constraints=[{"type": "ineq", "fun": lambda x: k - x.sum()}]).fun
            assert lower <= np.sqrt(max(relaxed, 0)) + 1e-9 <= subsets + 1e-6
            # Frank-Wolfe converges slowly near the optimum; its certified bound is what the bound uses
            assert found >= lower and found == pytest.approx(np.sqrt(max(relaxed, 0)), abs=1e-2)
            assert lower == pytest.approx(np.sqrt(max(relaxed, 0)), abs=1e-2)


def test_the_knapsack_vertex_is_the_linear_programs_optimum():
    from scipy.optimize import linprog

    rng = np.random.default_rng(1)
    for _ in range(10):
        g = rng.normal(size=12)
        w = rng.uniform(0, 1, size=12)
        w[rng.integers(12)] = 0.0          # a free item
        s = B._lmo_knapsack(g, w, 1.5)
        lp = linprog(g, A_ub=[w], b_ub=[1.5], bounds=[(0, 1)] * 12)
        assert g @ s == pytest.approx(lp.fun, abs=1e-9) and w @ s <= 1.5 + 1e-12


def test_the_cosine_bound_holds_for_every_vector_within_its_limits():
    rng = np.random.default_rng(2)
    for _ in range(200):
        t_max, p_min = rng.uniform(0.1, 3), rng.uniform(0.01, 3)
        t, p = rng.uniform(-1, t_max), rng.uniform(p_min, p_min + 3)
        assert t / np.hypot(t, p) <= B.cosine_bound(t_max, p_min) + 1e-12
    assert B.cosine_bound(1.0, 0.0) == 1.0 and B.cosine_bound(-1.0, 1.0) == 0.0


def test_an_additive_model_never_beats_its_bound_and_a_complementary_pair_is_caught():
    rng = np.random.default_rng(3)
    n, m = 7, 5
    rows = rng.normal(size=(n, m)) * 0.3
    base_z = rng.normal(size=m) * 2
    gains_t = rng.uniform(-0.05, 0.05, size=n)
    names, first = _first_order(base_z, 5.0, rows, gains_t)
    # the measured sets follow the model exactly: every one is within the zero margin and under the bound
    sets = [list(s) for r in range(n + 1) for s in itertools.combinations(range(n), r)]
    exact = [first.error([names[i] for i in s], {"y": _proj(base_z - rows[s].sum(axis=0), 5.0 + gains_t[s].sum())})
             for s in sets]
    for k in range(n + 1):
        c = B.check(first, k, exact)
        assert c.holds and not c.beaten
        assert max(e.cosine for e in exact if len(e.nodes) <= k) <= c.bound + 1e-9
    # a pair that removes the whole error only together (each alone removes little): the model breaks there
    pair = [names[0], names[1]]
    broken = exact + [first.error(pair, {"y": _proj(np.zeros(m) + 1e-3, 5.0)}, "complementary")]
    c = B.check(first, 2, broken)
    assert not c.holds and [e.label for e in c.beaten] == ["complementary"]
    # stated with the margin the broken set needs, the bound covers it again
    assert c.bound_with_margin >= broken[-1].cosine


@pytest.fixture(scope="module")
def enumerated(tmp_path_factory):
    """The tests' transformer all-int8, its first 7 candidates: the first-order inputs and all 128 subsets measured."""
    from hbtool.debug.auto import int16_candidates
    from tests.debug_models import all_int8_session

    session = all_int8_session(tmp_path_factory.mktemp("bound"))
    order = [n for _, n in int16_candidates(session, [n.name for n in session.switchable().nodes])][:7]
    first = B.FirstOrder.from_singles(order, [j.run(session) for j in B.single_jobs(order, samples=4)])
    sets = [list(s) for r in range(len(order) + 1) for s in itertools.combinations(order, r)]
    errors = B.model_errors(first, sets, [j.run(session) for j in B.set_jobs(sets, samples=4)])
    return session, order, first, errors


def test_on_a_real_model_no_subset_beats_the_bound_stated_with_its_own_error(enumerated):
    _, order, first, errors = enumerated
    assert len(errors) == 2 ** len(order)
    # exact at the all-int8 point: the kept coordinates and the remainder carry the whole orthogonal error
    empty = errors[0]
    assert empty.nodes == () and first.bound_k(0) == pytest.approx(empty.cosine, abs=1e-9)
    for e in errors:
        own = B.Margin({"y": e.excess("y")[0]}, {"y": e.excess("y")[1]})
        assert e.cosine <= first.bound_k(len(e.nodes), own) + 1e-9
        if B.Margin.zero().within(e, 1e-9):
            assert e.cosine <= first.bound_k(len(e.nodes)) + 1e-9
    # the worst error of all sets as the margin: a bound every subset respects
    worst = B.Margin.worst_of(errors)
    for k in range(len(order) + 1):
        assert max(e.cosine for e in errors if len(e.nodes) <= k) <= first.bound_k(k, worst) + 1e-9


def test_on_the_transformer_the_first_order_model_breaks_and_the_check_says_so(enumerated):
    """Measured: on this model the nodes' remedies are complementary (sets of 3+ reach more than any relaxed sum of
    their singles predicts), so the pure bound is beaten; the check must not call it a proof."""
    _, order, first, errors = enumerated
    checks = [B.check(first, k, errors) for k in range(len(order) + 1)]
    assert checks[0].bound == pytest.approx(errors[0].cosine, abs=1e-9)
    broken = [c for c in checks if c.beaten]
    assert broken and not any(c.holds for c in broken)
    assert all(e.cosine > c.bound for c in broken for e in c.beaten)


def test_the_inputs_on_two_workers_are_the_serial_ones_bit_for_bit(enumerated, monkeypatch):
    from hbtool.debug.trials import TrialRunner

    session, order, first, _ = enumerated
    monkeypatch.setattr(B, "BOUND_CHUNK", 3)
    jobs = B.single_jobs(order, samples=4)
    assert len(jobs) == 3
    with TrialRunner(session, workers=2) as runner:
        there = B.FirstOrder.from_singles(order, list(runner.jobs(jobs)))
    assert np.array_equal(there.delta["y"], first.delta["y"]) and np.array_equal(there.gain_t["y"], first.gain_t["y"])
    assert there.bound_k(3) == first.bound_k(3)
