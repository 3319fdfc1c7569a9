"""The op table is the test: every probe (each op in its common forms between two convolutions) on every
march goes checker -> calibrate -> compile -> simulate with no BPU op left in float and simulate equal to
the quantized ONNX model bit for bit; docs/ops.md is what the table renders now.

The whole table costs about 30 s of CPU (every probe is a 1x8x8x8 model, four calibration samples).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

import pytest

from hbtool.optable.horizon import MARCHES
from hbtool.optable.probes import PROBES
from hbtool.optable.run import run_probe
from hbtool.optable.table import build_table, known_ops, probes_of, render

DOC = Path(__file__).resolve().parents[3] / "docs" / "ops.md"


@lru_cache(maxsize=None)
def _cached(probe_id: str, march: str):
    probe = next(p for p in PROBES if p.id == probe_id)
    logging.disable(logging.WARNING)
    try:
        return run_probe(probe, march)
    finally:
        logging.disable(logging.NOTSET)


def cached_run(probe, march):
    return _cached(probe.id, march)


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_probe_is_integer_and_bit_exact(probe, march):
    r = cached_run(probe, march)
    assert r.error is None, r.error
    assert not r.fallbacks, f"{probe.id} on {march}: BPU node(s) left in float: {r.fallbacks}"
    assert r.max_lsb == 0, f"{probe.id} on {march}: simulate differs from the quantized ONNX by {r.max_lsb} LSB"
    if r.on == "BPU":
        assert r.kernels, f"{probe.id} on {march}: on the BPU without an integer kernel or data movement"
    if r.on == "CPU":
        assert all(p[2] for p in r.placements), f"{probe.id} on {march}: on the CPU without a reason"


def test_docs_ops_md_is_current():
    text = render(build_table(run=cached_run))
    assert DOC.exists() and DOC.read_text() == text, "docs/ops.md is out of date: run python -m hbtool.optable --write"


def test_every_op_with_a_bpu_rule_has_a_probe_or_is_internal():
    from hbtool.march.op_rules import OP_TABLE
    from hbtool.optable.table import INTERNAL_OPS

    missing = [op for op in known_ops() if op in OP_TABLE and not probes_of(op) and op not in INTERNAL_OPS]
    assert not missing, f"ops the checker may place on the BPU with no probe: {missing}"


def test_a_bpu_op_without_an_integer_kernel_fails_the_table(monkeypatch):
    """The test can fail: PRelu with its lowering removed stays in float on the BPU, and the probe says so."""
    from hbtool.quant import lower

    monkeypatch.delattr(lower._Lowerer, "_lower_PRelu")
    probe = next(p for p in PROBES if p.op == "PRelu")
    r = run_probe(probe, "bayes")
    assert r.on == "BPU" and r.fallbacks and not r.ok
