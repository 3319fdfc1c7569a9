"""``benchmarks/debug_options.py`` (issue 34): each transformer option of ``calibration_parameters`` calibrated,
compiled and measured as one variant, with the nodes it changed counted, SmoothQuant forced onto every absorbable
site, and the per-channel activation-scale estimate. On the tests' transformer (outlier channels in its residual
stream, all int8), where PTF has something to act on: the numbers the benchmark's table is made of must be real.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.debug_models import all_int8_session

    return all_int8_session(tmp_path_factory.mktemp("options"))


def _run(session, name, **overrides):
    from benchmarks.debug_options import OptionVariantJob

    return OptionVariantJob(name, tuple(overrides.items())).run(session)


def test_ptf_changes_the_layernorm_inputs_producers_and_consumers_and_lifts_the_cosine(tiny):
    base = _run(tiny, "base")
    ptf = _run(tiny, "ptf", ptf=True)
    assert base["changed_count"] == 0 and base["sites"] == {}
    assert abs(base["cosine"] - tiny.measure(tiny.base, {}).cosine) < 1e-6    # the plain calibration, compiled
    assert ptf["sites"]["ptf"] > 0
    graph = tiny.base.graph
    producers, consumers = graph.producer_map(), graph.consumer_map()
    layernorm_inputs = {n.inputs[0] for n in graph.nodes if n.op_type == "LayerNormalization"}
    expected = {producers[t].name for t in layernorm_inputs if t in producers} | {
        c.name for t in layernorm_inputs for c in consumers.get(t, [])}
    assert set(ptf["changed"]["ptf"]) <= expected and ptf["changed_count"] == len(ptf["changed"]["ptf"]) > 0
    assert ptf["cosine"] > base["cosine"] and ptf["fps"] > 0


def test_forced_smooth_quant_takes_every_absorbable_site_and_leaves_the_threshold_as_it_was(tiny):
    from hbtool.quant import smooth_quant

    defaults = smooth_quant.apply_smooth_quant.__defaults__
    plain = _run(tiny, "smooth", smooth_quant=True, smooth_alpha=0.5)
    forced = _run(tiny, "forced", smooth_quant=True, smooth_alpha=0.5, forced=True)
    assert smooth_quant.apply_smooth_quant.__defaults__ == defaults
    sites, _ = smooth_quant.smooth_sites(tiny.base.graph)
    assert forced["sites"]["smooth_quant"] == len(sites) > plain["sites"]["smooth_quant"]
    assert forced["changed_count"] == len({s.producer.name for s in sites} | {c.name for s in sites for c, _, _ in s.consumers})
    assert forced["cosine"] != plain["cosine"]          # the migration moved the constants the program computes with


def test_per_channel_activation_scales_on_every_node_beat_one_scale_per_tensor(tiny):
    from benchmarks.debug_options import per_channel_scales
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.sensitivity import evaluate

    model = tiny.switchable()
    names = [n.name for n in model.nodes]
    one_scale = evaluate(model, tiny.samples, model.mask(off=[]), tiny.output_names, tiny.float_outputs,
                         resolve_metric("cosine", None))[1]
    exact = per_channel_scales(tiny, names, pow2=False)
    pow2 = per_channel_scales(tiny, names, pow2=True)
    assert exact["tensors"] == pow2["tensors"] > 0
    assert exact["median_channel_ratio"] > 1.0
    assert exact["cosine"] > one_scale and pow2["cosine"] > one_scale
    assert per_channel_scales(tiny, [], pow2=False)["cosine"] == pytest.approx(one_scale, abs=1e-6)
