"""Every model output judged channel by channel, and pieces of different ranges kept at their own scales.

Why: a model output often concatenates quantities of unrelated ranges. A YOLOv8 export ends
``Concat(boxes in pixels 0-640, sigmoid class scores mostly < 0.1)``; with one int8 scale for the
whole output the step is ~5 px and every score rounds to 0, while the output's cosine stays 0.99
because the box channels carry its energy. Two things follow:

* **Segments.** A BPU Concat that writes a model output (read by nothing else) moves each piece's
  codes unchanged, so each piece can keep its own scale: the output's dequantize runs on the CPU,
  where a per-channel scale vector costs what one scale does. :func:`output_segments` picks the
  Concats whose pieces differ in range by more than :data:`SEGMENT_RANGE_RATIO`; the plan then
  leaves the pieces out of one scale group (plan.py) and :func:`apply_output_segments` gives the
  output per-channel scales along the Concat's axis (``TensorQuant.axis_scales``). Nothing
  changes on the BPU: same int8 codes, no requantization, so no FPS is lost.
* **Judgement.** :func:`judge_outputs` gives, per output, the SNR of every channel of the
  deployed (quantized) model against float on the evaluation samples
  (:class:`~hbtool.io.metrics.RunningChannelErrors`, the one definition every report uses), and
  names each channel under :data:`CHANNEL_WARN_SNR_DB` with the fix: int16 where the march has it,
  else the CPU. The judgement goes into ``quant_info.json`` (``options.output_channels``) and the
  log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from hbtool.ir.graph import Graph
from hbtool.io.metrics import RunningChannelErrors

#: pieces whose observed ranges differ by more than this (two bits of int8) get their own scales
SEGMENT_RANGE_RATIO = 4.0
#: below this an output channel keeps less than a tenth of its amplitude above the rounding noise
CHANNEL_WARN_SNR_DB = 20.0
#: at most this many channel numbers are spelled out in a warning line (quant_info.json has them all)
NAMED_CHANNELS = 12


@dataclass(frozen=True)
class Segments:
    """A model output made by a BPU Concat of pieces that keep their own scales."""

    node: str
    axis: int                    # the Concat axis, negative (from the end)
    pieces: tuple[str, ...]      # the Concat's inputs, in order
    channels: tuple[int, ...]    # each piece's extent along the axis


def output_segments(graph: Graph, stats: Mapping[str, Any], node_info: Mapping[str, Any] | None = None) -> dict[str, Segments]:
    """``{output tensor: Segments}`` for the BPU Concats that should keep their pieces' scales.

    A Concat qualifies when it writes a model output that no node reads (its dequantize is the
    CPU's), every input is data (no constant piece) with a known extent along the axis and
    observed statistics, the user pinned no OutputType on it, and the largest piece's range is
    more than :data:`SEGMENT_RANGE_RATIO` times the smallest's.
    """
    consumers = graph.consumer_map()
    outputs = set(graph.outputs)
    found: dict[str, Segments] = {}
    for node in graph.nodes:
        if node.op_type != "Concat" or node.meta.get("on") != "BPU" or not node.outputs or node.outputs[0] not in outputs:
            continue
        out = node.outputs[0]
        if consumers.get(out) or "OutputType" in ((node_info or {}).get(node.name) or {}):
            continue
        pieces = list(node.inputs)
        if len(pieces) < 2 or any(not p or graph.is_const(p) or p not in stats for p in pieces):
            continue
        shapes = [graph.shape(p) for p in pieces]
        if any(s is None for s in shapes):
            continue
        rank = len(shapes[0])
        axis = int(node.attr("axis", 0))
        axis = axis if axis < 0 else axis - rank
        if not -rank <= axis < 0 or any(len(s) != rank or not isinstance(s[axis], (int, np.integer)) or s[axis] < 1 for s in shapes):
            continue
        ranges = [float(stats[p].absmax) for p in pieces]
        if min(ranges) <= 0 or max(ranges) <= SEGMENT_RANGE_RATIO * min(ranges):
            continue
        found[out] = Segments(node.name, axis, tuple(pieces), tuple(int(s[axis]) for s in shapes))
    return found


#: an output whose channels' ranges differ by more than this keeps under 8 codes for the small ones in int8
WIDE_RANGE_RATIO = 16.0


def output_channel_axes(graph: Graph) -> dict[str, int]:
    """``{model output: channel axis}`` whose per-channel maxima calibration should collect."""
    out = {}
    for name in graph.outputs:
        axis = channel_axis_of(graph, name)
        if axis is not None:
            out[name] = axis
    return out


def wide_range_outputs(graph: Graph, stats: Mapping[str, Any], segments: Mapping[str, Segments],
                       node_info: Mapping[str, Any] | None = None) -> list[str]:
    """Model outputs (not segmented) whose channels differ in range by more than :data:`WIDE_RANGE_RATIO`:
    in int8 their small channels keep a few codes, so they get int16 where the march has it.

    Only an output of rank 3 or more counts (a map whose channels can be quantities of different
    kinds, a detector's head); a rank-2 output's last axis holds one kind (class logits, an
    embedding), where a small channel is a small value, not a lost one. It must be observed with its
    own per-channel maxima (not a permutation chain's statistics); one whose node pins
    ``OutputType`` is the user's choice."""
    producers = graph.producer_map()
    found = []
    for name in graph.outputs:
        st = stats.get(name)
        node = producers.get(name)
        if name in segments or st is None or getattr(st, "name", name) != name or st.channel_absmax is None or node is None:
            continue
        if len(graph.shape(name) or ()) < 3:
            continue
        if "OutputType" in ((node_info or {}).get(node.name) or {}):
            continue
        c = np.asarray(st.channel_absmax, np.float64).reshape(-1)
        c = c[c > 0]
        if c.size >= 2 and c.min() * WIDE_RANGE_RATIO < c.max():
            found.append(name)
    return found


def apply_output_segments(plan: Any, segments: Mapping[str, Segments]) -> None:
    """Give each segmented output per-channel scales: piece k's scale on piece k's channels.

    The output's container is the widest piece's (an int8 piece beside an int16 one is moved into
    int16 without a change of value); ``scale`` and ``threshold`` are the largest pieces'.
    """
    for out, seg in segments.items():
        tq = plan.tensors.get(out)
        parts = [plan.tensors.get(p) for p in seg.pieces]
        if tq is None or any(p is None or p.is_log2 or p.ptf_alpha is not None for p in parts):
            continue  # (the Concat then has pieces of different scales and no lowering: a reported float fallback)
        scales = np.concatenate([np.full(n, float(np.float32(p.scale))) for p, n in zip(parts, seg.channels)])
        tq.bits = max(p.bits for p in parts)
        tq.axis_scales = scales
        tq.scale_axis = seg.axis
        tq.scale = float(scales.max())
        tq.threshold = float(max(p.threshold for p in parts))
        tq.method = "segments"
        tq.ptf_alpha = None
        tq.code_range = None


def segment_pieces(graph: Graph, plan: Any, output: str) -> list[tuple[str, int]]:
    """``[(piece tensor, its channel count along the output's scale axis)]`` of a segmented output."""
    tq = plan.tensors[output]
    concat = graph.producer(output)
    rank = len(graph.shape(output) or ())
    return [(p, int((graph.shape(p) or [0] * rank)[tq.scale_axis])) for p in concat.inputs]


def refresh_output_segments(graph: Graph, plan: Any) -> None:
    """Recompute each segmented output's per-channel scales from its pieces' current scales (QAT trains them)."""
    for name, tq in plan.tensors.items():
        if tq.axis_scales is None or graph.producer(name) is None:
            continue
        pieces = segment_pieces(graph, plan, name)
        scales = np.concatenate([np.full(n, float(np.float32(plan.tensors[p].scale))) for p, n in pieces])
        tq.axis_scales, tq.scale = scales, float(scales.max())
        tq.threshold = float(max(plan.tensors[p].threshold for p, _ in pieces))


def channel_axis_of(graph: Graph, output: str) -> int | None:
    """The axis :func:`~hbtool.io.metrics.output_channel_axis` gives this output (from its shape)."""
    from hbtool.io.metrics import output_channel_axis

    shape = graph.shape(output)
    return None if shape is None else output_channel_axis(tuple(shape))


def judge_outputs(graph: Graph, plan: Any, channel_errors: Mapping[str, RunningChannelErrors],
                  node_info: Mapping[str, Any] | None, has_int16: bool) -> dict[str, dict[str, Any]]:
    """Per output: worst channel, its SNR, the channels under :data:`CHANNEL_WARN_SNR_DB` and the fix.

    ``channel_errors`` holds each output's per-channel errors of the quantized model against float.
    An output the user pinned to int8 (node_info ``OutputType: int8``) is judged but not warned
    about; a float output (on the CPU) is exact and not listed.
    """
    producers = graph.producer_map()
    out: dict[str, dict[str, Any]] = {}
    for name in graph.outputs:
        acc = channel_errors.get(name)
        q = plan.tensors.get(name)
        if acc is None or q is None or acc.dot is None:
            continue
        snr, cos = acc.snr_db, acc.cosine
        worst = int(np.argmin(snr))
        low = [int(c) for c in np.where(snr < CHANNEL_WARN_SNR_DB)[0]]
        node = producers.get(name)
        pinned = node is not None and str(((node_info or {}).get(node.name) or {}).get("OutputType", "")).lower() == "int8"
        entry: dict[str, Any] = {
            "axis": acc.axis, "channels": int(snr.size), "dtype": q.dtype,
            "worst_channel": worst, "worst_snr_db": _db(snr[worst]), "worst_cosine": round(float(cos[worst]), 6),
            "low_channels": low, "low_snr_db": [_db(snr[c]) for c in low],
        }
        if q.axis_scales is not None:
            entry["segments"] = _segment_ranges(q)
        if low and not pinned:
            entry["warning"] = True
            # a segmented output's low channels are fixed where their piece is made, not at the Concat
            owners = _piece_producers(graph, node, plan, low) if q.axis_scales is not None and node is not None else []
            if owners:
                entry["fix"] = "; ".join(_fix(p.name, p.op_type, plan.tensors.get(p.outputs[0], q), has_int16, True, piece=True)
                                         for p in owners)
            else:
                entry["fix"] = _fix(node.name if node is not None else name, node.op_type if node is not None else "", q, has_int16,
                                    len(low) < snr.size)
        out[name] = entry
    return out


#: the SNR written for a channel that is all zero in float but not in the quantized model (-inf dB)
NO_SIGNAL_DB = -999.0


def _db(v: float) -> float | None:
    """JSON-safe dB rounded to 0.1: None for an exact channel (+inf), :data:`NO_SIGNAL_DB` for -inf."""
    v = float(v)
    if v == float("inf"):
        return None
    return NO_SIGNAL_DB if v == float("-inf") else round(v, 1)


def _segment_ranges(q: Any) -> list[dict[str, Any]]:
    """Runs of equal scale: ``[{"channels": [first, last], "scale": s}, ...]``."""
    s = np.asarray(q.axis_scales)
    runs, start = [], 0
    for k in range(1, s.size + 1):
        if k == s.size or s[k] != s[start]:
            runs.append({"channels": [start, k - 1], "scale": float(s[start])})
            start = k
    return runs


def _piece_producers(graph: Graph, concat: Any, plan: Any, channels: list[int]) -> list[Any]:
    """The nodes writing the pieces of a segmented output's Concat that hold ``channels``."""
    producers = graph.producer_map()
    tq = plan.tensors[concat.outputs[0]]
    owners, start = [], 0
    for piece in concat.inputs:
        n = int((graph.shape(piece) or [0] * -tq.scale_axis)[tq.scale_axis])
        p = producers.get(piece)
        if p is not None and any(start <= c < start + n for c in channels) and p not in owners:
            owners.append(p)
        start += n
    return owners


def _fix(node: str, op_type: str, q: Any, has_int16: bool, some_fine: bool, piece: bool = False) -> str:
    if q.bits == 16:
        return (f"the channels stay below {CHANNEL_WARN_SNR_DB:g} dB even in int16: end the model before '{node}' "
                "and compute it on the CPU, or rescale those channels in the model")
    if has_int16 and piece:   # the piece alone: the other pieces keep their int8 scales
        fix = f"give '{node}' an int16 output: node_info {{'{node}': {{OutputType: int16}}}}"
    elif has_int16:
        fix = (f"give '{node}' an int16 output: node_info {{'{node}': {{OutputType: int16}}}} "
               "or calibration_parameters.optimization: set_model_output_int16")
    else:
        fix = f"this march has no int16: run '{node}' on the CPU (node_info {{'{node}': {{ON: CPU}}}}) or end the model before it"
    if op_type != "Concat" and some_fine and not piece:
        fix += "; or output the channels of different ranges as separate outputs (a Concat at the output keeps each piece's scale)"
    return fix


def channel_list(channels: list[int]) -> str:
    """``4-9, 12`` (runs), at most :data:`NAMED_CHANNELS` numbers, then ``and N more``."""
    runs: list[str] = []
    k = 0
    shown = channels[:NAMED_CHANNELS]
    while k < len(shown):
        j = k
        while j + 1 < len(shown) and shown[j + 1] == shown[j] + 1:
            j += 1
        runs.append(str(shown[k]) if j == k else f"{shown[k]}-{shown[j]}")
        k = j + 1
    more = len(channels) - len(shown)
    return ", ".join(runs) + (f" and {more} more" if more > 0 else "")


def judgement_lines(judged: Mapping[str, Mapping[str, Any]], warned: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Log lines: one per segmented output (what was done), one warning per output with low channels
    (not for the outputs in ``warned``, which the whole-output warning already names)."""
    lines = []
    for name, j in judged.items():
        if "segments" in j:
            lines.append(f"output '{name}': {len(j['segments'])} concatenated pieces keep their own scales "
                         f"(dequantized per channel on the CPU; no cost on the BPU)")
        if j.get("warning") and name not in warned:
            lines.append(f"warning: output '{name}' channel(s) {channel_list(j['low_channels'])} (axis {j['axis']}) keep under "
                         f"{CHANNEL_WARN_SNR_DB:g} dB signal-to-noise in {j['dtype']} (worst: channel {j['worst_channel']}, "
                         f"{j['worst_snr_db']:.1f} dB); fix: {j['fix']}")  # a warned output's worst channel is finite
    return lines
