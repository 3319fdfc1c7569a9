"""The error metrics of the debug tables, each with the direction that is better.

A model with several outputs (a detector's boxes and scores) is judged per output and the
worst output decides: one cosine over a concatenation would let a large, easy output hide a
broken small one.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from hbtool.io.metrics import RunningErrors, channel_errors, output_channel_axis

#: metric -> "higher" or "lower" (which way is better); the order of the table columns
DIRECTION = {"cosine": "higher", "mse": "lower", "sqnr_db": "higher", "l1": "lower", "chebyshev": "lower"}

#: the built-in names ``debug_parameters.metric`` accepts -> the column that is ranked
BUILTIN = {"cosine": "cosine", "mse": "mse", "sqnr": "sqnr_db", "chebyshev": "chebyshev", "mre": "mre"}


class Accumulator(RunningErrors):
    """:class:`~hbtool.io.metrics.RunningErrors` (what calibrate and simulate report) plus the
    debug tables' MSE, SQNR and mean relative error, over many samples with nothing kept."""

    def __init__(self) -> None:
        super().__init__()
        self.ref_abs = 0.0

    def update(self, ref: np.ndarray, got: np.ndarray) -> None:
        super().update(ref, got)
        self.ref_abs += float(np.abs(np.asarray(ref, np.float32)).sum(dtype=np.float64))

    def result(self) -> dict[str, float]:
        n = max(self.n, 1)
        signal, noise = self.cos.na, self.sq_sum
        sqnr = 10 * np.log10(signal / noise) if noise > 0 else (200.0 if signal > 0 else 0.0)
        return {"cosine": float(min(self.cos.value, 1.0)), "mse": noise / n, "sqnr_db": float(min(sqnr, 200.0)),
                "l1": self.abs_sum / n, "chebyshev": self.cheb, "mre": self.abs_sum / max(self.ref_abs, 1e-30)}


def errors(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    acc = Accumulator()
    acc.update(ref, got)
    return acc.result()


def per_output(float_out: Mapping[str, np.ndarray], quant_out: Mapping[str, np.ndarray],
               channels: bool = True) -> dict[str, dict[str, float]]:
    """``{output: metrics}`` of outputs stacked over the samples, with the worst channel's beside them
    (``channels=False``: without, for a caller that judges by the whole outputs)."""
    out = {}
    for name in float_out:
        out[name] = errors(float_out[name], quant_out[name])
        if channels:
            out[name].update(worst_channel(float_out[name], quant_out[name]))
    return out


def worst_channel(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """``worst_channel``, its ``worst_channel_snr_db`` (held to +-200) and ``worst_channel_cosine``:
    the channel a whole-output number hides (a detector's scores beside its pixel boxes); {} for one channel."""
    ref, got = np.asarray(ref), np.asarray(got)
    acc = channel_errors(ref, got, output_channel_axis(ref.shape))
    if acc.dot is None or acc.dot.size < 2:
        return {}
    k = int(np.argmin(acc.snr_db))
    return {"worst_channel": k, "worst_channel_snr_db": float(np.clip(acc.snr_db[k], -200.0, 200.0)),
            "worst_channel_cosine": float(acc.cosine[k])}


def worst(per_out: Mapping[str, Mapping[str, float]], metric: str = "cosine") -> float:
    """The worst output's value of ``metric`` (the smallest where higher is better)."""
    vals = [m[metric] for m in per_out.values()]
    if not vals:
        return 1.0
    return min(vals) if DIRECTION.get(metric, "lower") == "higher" else max(vals)


def score(per_out: Mapping[str, Mapping[str, float]], metric: str) -> float:
    """A higher-is-better number for a built-in metric of the worst output (errors are negated)."""
    column = BUILTIN[metric]
    value = worst(per_out, column)
    return value if DIRECTION.get(column, "lower") == "higher" else -value
