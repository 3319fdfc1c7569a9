"""Feature maps and weights whose ranges make int8 hard, flagged with the reason.

* a long tail: the largest value is far above the bulk (max / 99.9th percentile of |x|), so a
  max-calibrated int8 step is coarse for nearly every value;
* a LayerNorm input whose channels differ strongly in range (the FQ-ViT case: a residual
  stream with a few huge channels), which one scale per tensor cannot serve;
* weight channels with outliers (max |w| far above the channel's mean |w|), and layers whose
  channel ranges are very uneven.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hbtool.ir.graph import Graph
from hbtool.quant.weights import channel_absmax, weight_input_and_axis

TAIL_RATIO = 20.0
CHANNEL_RATIO = 20.0
WEIGHT_OUTLIER_RATIO = 20.0
WEIGHT_UNEVEN_RATIO = 100.0
DEAD_CHANNEL_FRACTION = 1e-6  # channels below this fraction of the largest channel are dead, not uneven
KEEP_VALUES = 4096


@dataclass
class RangeFlag:
    tensor: str
    node: str
    kind: str          # "activation" | "layernorm_input" | "weight"
    ratio: float
    reason: str


@dataclass
class RangeObserver:
    """Accumulates, over the float runs, the ranges of the tensors it is shown."""

    tensors: list[str]
    layernorm_inputs: set[str]
    absmax: dict[str, float] = field(default_factory=dict)
    channel_max: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)

    def __call__(self, vals: dict[str, np.ndarray]) -> None:
        rng = np.random.default_rng(len(self.values))
        for t in self.tensors:
            a = vals.get(t)
            if a is None or a.size == 0 or not np.issubdtype(a.dtype, np.floating):
                continue
            self.absmax[t] = max(self.absmax.get(t, 0.0), float(np.abs(a).max()))
            axis = a.ndim - 1 if (t in self.layernorm_inputs or a.ndim != 4) else 1
            cm = np.abs(a).max(axis=tuple(i for i in range(a.ndim) if i != axis))
            self.channel_max[t] = cm if t not in self.channel_max else np.maximum(self.channel_max[t], cm)
            flat = a.reshape(-1)
            pick = flat if flat.size <= KEEP_VALUES else flat[rng.choice(flat.size, KEEP_VALUES, replace=False)]
            prev = self.values.get(t)
            self.values[t] = pick.astype(np.float32) if prev is None else np.concatenate([prev, pick])[-8 * KEEP_VALUES:]


def activation_flags(obs: RangeObserver, owners: dict[str, str]) -> list[RangeFlag]:
    flags = []
    for t, amax in obs.absmax.items():
        bulk = float(np.percentile(np.abs(obs.values[t]), 99.9)) if t in obs.values else 0.0
        ratio = amax / bulk if bulk > 0 else 0.0
        if ratio > TAIL_RATIO:
            flags.append(RangeFlag(t, owners.get(t, t), "activation", ratio,
                                   f"long tail: max |x| is {ratio:.0f}x the 99.9th percentile, int8 steps are coarse for the bulk"))
        if t in obs.layernorm_inputs and t in obs.channel_max:
            cm = obs.channel_max[t]
            med = float(np.median(cm))
            cr = float(cm.max() / med) if med > 0 else 0.0
            if cr > CHANNEL_RATIO:
                flags.append(RangeFlag(t, owners.get(t, t), "layernorm_input", cr,
                                       f"LayerNorm input: largest channel range {cr:.0f}x the median (inter-channel variation; try ptf or int16)"))
    return sorted(flags, key=lambda f: -f.ratio)


def weight_flags(graph: Graph) -> list[RangeFlag]:
    flags = []
    for node in graph.nodes:
        if node.meta.get("on") != "BPU":
            continue
        wa = weight_input_and_axis(node, graph)
        if wa is None:
            continue
        w = np.asarray(graph.const(wa[0]), np.float64)
        rows = np.abs(np.moveaxis(w, wa[1], 0).reshape(w.shape[wa[1]], -1))
        mean = rows.mean(axis=1)
        ratio = float(np.max(np.where(mean > 0, rows.max(axis=1) / np.maximum(mean, 1e-30), 0.0)))
        if ratio > WEIGHT_OUTLIER_RATIO:
            flags.append(RangeFlag(wa[0], node.name, "weight", ratio,
                                   f"weight channel with outliers: max |w| is {ratio:.0f}x the channel's mean |w| (try Weight: mse)"))
        cm = channel_absmax(w, wa[1])
        # a channel a million times below the largest is dead (trained to ~0, or a denormal): its
        # own per-channel scale handles it, and it would make the ratio a 39-digit number
        live = cm[cm > cm.max(initial=0.0) * DEAD_CHANNEL_FRACTION]
        if live.size > 1 and live.max() / live.min() > WEIGHT_UNEVEN_RATIO:
            flags.append(RangeFlag(wa[0], node.name, "weight", float(live.max() / live.min()),
                                   f"uneven channel ranges: {live.max() / live.min():.0f}x between channels (per-channel scales needed)"))
    return sorted(flags, key=lambda f: -f.ratio)


def weight_channel_ranges(graph: Graph, node_name: str) -> np.ndarray | None:
    node = graph.node(node_name)
    wa = weight_input_and_axis(node, graph) if node is not None else None
    if wa is None:
        return None
    w = np.asarray(graph.const(wa[0]), np.float64)
    return np.abs(np.moveaxis(w, wa[1], 0).reshape(w.shape[wa[1]], -1))
