"""A ranking evaluation (:func:`hbtool.debug.sensitivity.evaluate`) gives the numbers it gave with the per-channel
scan, without running it: the whole-output columns (the metric's, the worst cosine) do not depend on it."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.debug import metrics
from hbtool.debug.metrics import per_output, score, worst
from hbtool.debug.metrics_hook import Metric
from hbtool.debug.sensitivity import evaluate


class _Rows:
    """A switchable model's stand-in: per sample, the outputs it was given (the mask is not read)."""

    def __init__(self, rows):
        self.rows = rows

    def run(self, samples, mask, outputs):
        return self.rows


def _case():
    rng = np.random.default_rng(0)
    names = ["logits", "boxes"]
    float_out = {"logits": rng.normal(size=(3, 5, 7)).astype(np.float32),
                 "boxes": rng.normal(size=(3, 4)).astype(np.float32)}
    noise = {n: (0.05 * (k + 1) * rng.normal(size=v.shape)).astype(np.float32) for k, (n, v) in enumerate(float_out.items())}
    rows = [[float_out[n][i:i + 1] + noise[n][i:i + 1] for n in names] for i in range(3)]
    quant = {n: np.concatenate([r[k] for r in rows]) for k, n in enumerate(names)}
    return names, float_out, rows, quant


@pytest.mark.parametrize("metric", [Metric("cosine"), Metric("mse"), Metric("sqnr"), Metric("chebyshev"),
                                    Metric("hook", lambda q, f: float(np.abs(q["boxes"] - f["boxes"]).sum()))])
def test_same_numbers_without_the_channel_scan(metric, monkeypatch):
    names, float_out, rows, quant = _case()
    with_channels = per_output(float_out, quant)          # what both calls computed before: channels included
    assert "worst_channel" in with_channels["logits"]
    want_value = metric.hook(quant, float_out) if metric.is_hook else score(with_channels, metric.name)
    want_cosine = worst(with_channels, "cosine")

    def no_scan(*args, **kwargs):
        raise AssertionError("the per-channel scan ran")

    monkeypatch.setattr(metrics, "worst_channel", no_scan)
    value, cosine = evaluate(_Rows(rows), [{}] * 3, np.zeros(0), names, float_out, metric)
    assert value == want_value and cosine == want_cosine
    if not metric.is_hook:
        assert metric.value(quant, float_out) == want_value
