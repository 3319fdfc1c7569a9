"""The debugger's cost on a large model: the ``If`` switches and the sensitivity budget.

* the onnxruntime session runs each fake-quantizer switch as an ``If`` (off: nothing computed);
  at masks 0 and 1 it must give bit for bit what the arithmetic switch ``x + m (fq(x) - x)`` of
  the IR graph gives, and at 1 exactly the calibrated model;
* over the MAC budget the four-way sensitivity is evaluated for the nodes with the largest op
  error or error jump only: exactly those, with the same numbers a full run gives them, and the
  others listed last as not evaluated.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.config import load_config
from hbtool.debug.masked import MASK
from hbtool.debug.run import _evaluations, run_debug
from hbtool.debug.session import run_outputs
from hbtool.quant.calibrate import _total_macs
from hbtool.quant.collect import float_session
from tests.debug_models import tiny_transformer, write_config


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("debug_budget")
    return load_config(write_config(tmp, tiny_transformer(tmp / "m.onnx"), "1x16x32", {"auto_int16": False}, samples=4))


@pytest.fixture(scope="module")
def full(cfg):
    return run_debug(cfg, samples=2, sensitivity_samples=1)


def test_if_switches_equal_the_arithmetic_switches_and_the_calibrated_model(full):
    model, samples, outs = full.model, full.session.samples, full.session.output_names
    arith = float_session(model.graph, basic=True)
    calibrated = run_outputs(full.session.base.calibrated, samples, outs)
    for mask in (model.mask(on=[]), model.mask(off=[]), model.mask(on=model.nodes[3].acts)):
        for k, f in enumerate(samples):
            a = arith.run(outs, {**f, MASK: mask})
            b = model.run([f], mask, outs)[0]
            for x, y in zip(a, b):
                assert np.array_equal(x, y)
    on = np.concatenate([model.run([f], model.mask(off=[]), outs)[0][0] for f in samples])
    assert np.array_equal(on, calibrated[outs[0]])
    off = np.concatenate([model.run([f], model.mask(on=[]), outs)[0][0] for f in samples])
    assert np.array_equal(off, full.session.float_outputs[outs[0]])


def test_budget_evaluates_the_worst_op_errors_only(cfg, full):
    macs = _total_macs(full.session.base.graph)
    nodes = full.model.nodes
    budget = macs * (2 + 12)                       # 1 sample: the references and 12 evaluations
    cut = run_debug(cfg, samples=2, sensitivity_samples=1, sensitivity_budget=budget)
    done = [s for s in cut.ranking if s.evaluated]
    assert 0 < len(done) < len(nodes) and _evaluations([n for n in nodes if n.name in {s.name for s in done}]) <= 12
    assert all(not s.evaluated for s in cut.ranking[len(done):])       # the others come last
    proxy = {e.name: max(1 - e.isolated["cosine"], e.jump, 0.0) for e in full.node_errors}
    worst_skipped = max(proxy[s.name] for s in cut.ranking if not s.evaluated)
    assert min(proxy[s.name] for s in done) >= worst_skipped
    ref = {s.name: s for s in full.ranking}
    for s in done:                                 # a subset of the full ranking, not an approximation
        assert s.quant_only == ref[s.name].quant_only and s.dequant_only == ref[s.name].dequant_only
