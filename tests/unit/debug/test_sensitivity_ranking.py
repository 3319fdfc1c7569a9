"""The sensitivity ranking is real: keeping its top-5 nodes in float improves the output cosine
more than keeping any of several random sets of 5 in float."""

from __future__ import annotations

import numpy as np

from hbtool.config import load_config
from hbtool.debug.sensitivity import evaluate
from hbtool.debug.run import run_debug
from tests.debug_models import tiny_transformer, write_config


def test_top5_beats_random_sets(tmp_path):
    model = tiny_transformer(tmp_path / "m.onnx")
    cfg = load_config(write_config(tmp_path, model, "1x16x32", {"auto_int16": False}))
    r = run_debug(cfg, samples=8)
    m, s = r.model, r.session
    by_name = {n.name: n for n in m.nodes}

    def fixed_cosine(names):
        off = [i for n in names for i in by_name[n].acts + by_name[n].weights]
        return evaluate(m, s.samples, m.mask(off=off), s.output_names, s.float_outputs, s.metric)[1]

    full = evaluate(m, s.samples, m.mask(off=[]), s.output_names, s.float_outputs, s.metric)[1]
    top = fixed_cosine([x.name for x in r.ranking[:5]])
    rng = np.random.default_rng(0)
    names = [n.name for n in m.nodes]
    randoms = [fixed_cosine(list(rng.choice(names, 5, replace=False))) for _ in range(6)]
    assert full < 0.9 and top > full + 0.05
    assert all(top > c for c in randoms), (top, randoms)
    # the analyses cover every quantized node, and the error jumps are marked
    assert len(r.node_errors) == len(m.nodes) and any(e.marked for e in r.node_errors)
    assert any(f.kind == "layernorm_input" for f in r.flags)
