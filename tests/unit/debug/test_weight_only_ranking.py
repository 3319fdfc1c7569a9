"""The weight-only ranking of ``hbtool debug --auto`` under a task metric (issue 12's recogniser case).

A coarse task metric (exact agreement) ties most nodes on the few samples of the four-way
ranking; the weight remedies get their own, cheaper ranking on more samples. Here one conv's
weights carry the task in differences far below their int8 step (see :func:`cancelling_convs`):
that conv must lead the weight ranking by a clear margin, and ``--auto`` must try its weight
remedy.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from hbtool.config import load_config
from hbtool.debug.auto import WEIGHT_REMEDIES, weight_pool
from hbtool.debug.run import run_debug
from hbtool.debug.sensitivity import WeightGain
from tests.debug_models import write_config
from tests.helpers import make_model, tensor, vinfo

HOOK = '''
import numpy as np

def agreement(quantized, float_):
    q, f = quantized["y"], float_["y"]
    return float(np.mean(np.argmax(q, axis=1) == np.argmax(f, axis=1)))
'''


def cancelling_convs(path):
    """spread (1x1) -> relu -> mix (1x1) -> y, where ``mix``'s weights cancel on ``spread``'s common part.

    ``spread`` writes 16 channels that are one common map plus small differences; every row of
    ``mix`` sums to zero, so ``y`` (and the task, its arg-max channel) reads only the
    differences. Rounding ``mix``'s weights breaks the zero sums: the common part, far larger
    than the differences, leaks into ``y``. The activations stay fine (``y``'s range is small).
    """
    rng = np.random.default_rng(3)
    base = rng.standard_normal((1, 4)) * 0.5
    spread = (np.abs(base) + 0.03 * rng.standard_normal((16, 4))).astype(np.float32)[:, :, None, None]
    mix = rng.standard_normal((8, 16))
    mix = (mix - mix.mean(axis=1, keepdims=True)).astype(np.float32)[:, :, None, None]
    nodes = [helper.make_node("Conv", ["x", "spread", "b1"], ["c1"], name="spread"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "mix", "b2"], ["y"], name="mix")]
    m = make_model(nodes, [vinfo("x", [1, 4, 8, 8])], [vinfo("y", [1, 8, 8, 8])],
                   [tensor("spread", spread), tensor("b1", np.full(16, 2.0, np.float32)), tensor("mix", mix),
                    tensor("b2", np.zeros(8, np.float32))])
    onnx.save(m, path)
    return path


@pytest.fixture(scope="module")
def debugged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wrank")
    (tmp / "my_metrics.py").write_text(HOOK)
    # bias correction (on by default) removes most of the common part's mean leak this model is built on;
    # the weight ranking is about the rounding itself, so it is off here
    cfg = write_config(tmp, cancelling_convs(tmp / "m.onnx"), "1x4x8x8", debug={"metric": "my_metrics:agreement"}, samples=8,
                       extra_cal={"bias_correction": False})
    return run_debug(load_config(cfg), auto=True, samples=8, max_fps_loss=0.9, candidates=1)


def test_weight_ranking_finds_the_rounding_conv(debugged):
    gains = {g.name: g for g in debugged.weight_ranking}
    assert set(gains) == {"spread", "mix"}
    top = debugged.weight_ranking[0]
    assert top.name == "mix"
    others = max(g.cosine_gain for g in debugged.weight_ranking[1:])
    assert top.cosine_gain > 0.01 and top.cosine_gain > 3 * max(others, 1e-6)


def test_auto_tries_a_weight_remedy_on_it(debugged):
    tried = {(st.remedy, st.node) for st in debugged.auto.steps}
    assert any(node == "mix" and remedy.startswith("weight_") for remedy, node in tried), tried
    assert debugged.auto.final.cosine >= debugged.auto.steps[0].cosine


def test_weight_pool_skips_taken_and_flat_nodes():
    gains = [WeightGain("a", "Conv", 0.2, 0.01), WeightGain("b", "Conv", 0.0, 0.0), WeightGain("c", "Conv", 0.0, 0.003),
             WeightGain("d", "Conv", 0.0, 0.001)]
    pool = weight_pool(gains, {"a"}, 2)
    assert [n for n, _ in pool] == ["c", "d"] and all(r == [WEIGHT_REMEDIES[-1]] for _, r in pool)


def test_groups_of_the_weight_ranking_are_tried_together(debugged):
    groups = [st for st in debugged.auto.steps if st.remedy.startswith("group_")]
    # both weighted nodes in one group (every size of GROUP_SIZES covers them): one try per group remedy
    # bias correction is off in this config, so it is a group remedy too (the first, and the cheapest)
    assert {st.remedy for st in groups} == {"group_bias_correction", "group_adaround", "group_mse"}
    assert all(st.node == "top 2 of the weight ranking" and set(st.note.split(", ")) == {"mix", "spread"} for st in groups)
    assert all(np.isfinite(st.metric) and np.isfinite(st.cosine) for st in groups)


def test_weight_groups_are_the_distinct_top_k():
    from hbtool.debug.auto import weight_groups

    gains = [WeightGain(f"n{k}", "Conv", 0.0, 0.1 - k * 0.001) for k in range(12)]
    assert weight_groups(gains) == [[f"n{k}" for k in range(5)], [f"n{k}" for k in range(10)], [f"n{k}" for k in range(12)]]
    assert weight_groups(gains[:3]) == [["n0", "n1", "n2"]]
    assert weight_groups([]) == []


def test_bias_correction_is_no_remedy_when_it_is_already_on_everywhere():
    """Bias correction is on by default: per node and per group it would change nothing, so --auto skips it;
    with ``bias_correction: false`` it is a remedy (per node, and first of the group remedies)."""
    from types import SimpleNamespace

    from hbtool.debug.auto import GROUP_REMEDIES, bias_corrected_everywhere, remedies_for
    from hbtool.debug.sensitivity import Sensitivity

    s = Sensitivity("conv", "Conv", True, {"weights": 0.3, "activations": 0.0}, {"weights": 0.2, "activations": 0.0},
                    {"weights": 0.9, "activations": 1.0}, {"weights": 0.95, "activations": 0.9})
    assert "weight_bias_correction" in [r for r, _ in remedies_for(s)]
    assert "weight_bias_correction" not in [r for r, _ in remedies_for(s, corrected=True)]
    assert [r for r, _ in remedies_for(s, corrected=True)] == ["weight_mse", "weight_adaround"]
    on = SimpleNamespace(calibration=SimpleNamespace(bias_correction=True, optimization=[]))
    off = SimpleNamespace(calibration=SimpleNamespace(bias_correction=False, optimization=[]))
    switch = SimpleNamespace(calibration=SimpleNamespace(bias_correction=False, optimization=["bias_correction"]))
    assert bias_corrected_everywhere(on) and bias_corrected_everywhere(switch) and not bias_corrected_everywhere(off)
    assert GROUP_REMEDIES[0][0] == "group_bias_correction"
