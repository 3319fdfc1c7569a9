"""What calibration does with the quantization an already-quantized model fixes.

The import (:mod:`hbtool.ir.prequantized`) turns QDQ, weight-only and QOperator models into their
float graph and keeps what they fixed aside. Here that is used:

* **weights** keep the model's integers and scales whatever the calibration type: the float
  weight is exactly ``codes * scale``, so re-quantizing it on hbtool's own grid could only add
  rounding error against the model's meaning. A per-tensor scale becomes one scale per output
  channel, all equal. Weights the BPU cannot hold as they are (a non-zero zero point, codes
  outside [-127, 127] such as int16 weights or -128, per-input-channel or blocked scales, a weight
  a float optimization rewrote) are quantized by hbtool per output channel, with the reason;
* **activation scales** are taken with ``calibration_type: load`` (one per tensor, as from
  ``HzCalibration`` nodes); with any other type hbtool calibrates every activation from the data
  and the model's scales are reported as unused. A scale the BPU cannot take as it is (a non-zero
  zero point or unsigned range: the BPU is symmetric; one scale per channel; int16 on a march
  without int16) becomes the symmetric scale that holds the same range, with the reason and fix.

Everything it decides is listed under ``options.prequantized`` in ``quant_info.json`` and
summarised in one log line (:func:`prequantized_lines`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hbtool.errors import InputError
from hbtool.ir.graph import Graph
from hbtool.ir.prequantized import FixedActivation, Prequantized
from hbtool.quant.weights import WEIGHT_QMAX, channel_floor

_SYMMETRIC_FIX = ("quantize the activations symmetrically to int8 (onnxruntime: activation_type=QuantType.QInt8, "
                  "extra_options={'ActivationSymmetric': True}), or let hbtool calibrate them (a calibration_type other than load)")


DEAD_CHANNELS = "channel scales"

_ACTIVATION_FIXES = {
    "asymmetric": _SYMMETRIC_FIX,
    "per-channel": "quantize activations with one scale per tensor",
    "int16": "choose a march with int16 (bayes), or quantize the activations to int8",
    "twice": "quantize each tensor once (one QuantizeLinear per tensor)",
}


def without_kept_weights(bias_delta: dict[str, np.ndarray] | None, graph: Graph, kept: list[str]) -> dict[str, np.ndarray] | None:
    """Bias corrections minus the layers whose weights keep the model's integers: nothing of theirs was rounded."""
    if not bias_delta or not kept:
        return bias_delta
    keep = set(kept)
    return {name: d for name, d in bias_delta.items()
            if (node := graph.node(name)) is None or not any(i in keep for i in node.inputs[1:2])} or None


def honour_model_weights(graph: Graph, weights: dict[str, tuple[np.ndarray, int]]
                         ) -> tuple[dict[str, tuple[np.ndarray, int]], list[str], dict[str, str]]:
    """``weights`` (``plan_weights``) with the model's own scales where its integers fit the BPU.

    Returns (weights, names kept as the model quantized them, {name: why hbtool re-quantized it}).
    """
    pre: Prequantized | None = getattr(graph, "prequantized", None)
    if pre is None:
        return weights, [], {}
    out = dict(weights)
    kept: list[str] = []
    requantized: dict[str, str] = {}
    for name, (scales, axis) in weights.items():
        fixed = pre.weights.get(name)
        if fixed is None:
            continue
        value = graph.const(name)
        why = _weight_obstacle(fixed, value, axis)
        if why:
            requantized[name] = why
            continue
        channels = value.shape[axis]
        scales = np.broadcast_to(fixed.scale.reshape(-1), (channels,)).astype(np.float32)
        # a dead channel's tiny scale would make the bias codes and requantization ratio of that channel unrepresentable;
        # hbtool floors it as it floors its own (weights.channel_floor), and those channels' weights round to ~0
        floored = (channel_floor(scales.astype(np.float64) * WEIGHT_QMAX) / WEIGHT_QMAX).astype(np.float32)
        low = np.flatnonzero(floored > scales)
        out[name] = (np.maximum(floored, scales), axis)
        if low.size:
            requantized[name] = (f"{DEAD_CHANNELS} ({low.size}, first {int(low[0])}) under 2^-16 of the layer's largest: "
                                 "floored to it, as hbtool floors its own; the other channels keep their integers")
            continue
        kept.append(name)
    return out, kept, requantized


def _weight_obstacle(fixed, value: np.ndarray | None, axis: int) -> str:
    if value is None or value is not fixed.value:
        return "a float optimization rewrote it (e.g. a BatchNorm folded into it)"
    if fixed.zero_point_nonzero:
        return "its zero point is not 0 (the BPU's weights are symmetric)"
    lo, hi = fixed.code_range
    if lo < -WEIGHT_QMAX or hi > WEIGHT_QMAX:
        return f"its integers reach [{lo}, {hi}] (the BPU's int8 weights hold [-{WEIGHT_QMAX}, {WEIGHT_QMAX}])"
    if fixed.block:
        return f"it has one scale per block of {fixed.block} (the BPU scales whole output channels)"
    if fixed.axis is not None and fixed.axis != axis % value.ndim:
        return f"its scales run along axis {fixed.axis}, the BPU scales output channels (axis {axis % value.ndim})"
    return ""


def fixed_activation_scales(graph: Graph, has_int16: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``{tensor: LoadedScale}`` of the model's activation quantization, and the scales taken differently (with why)."""
    from hbtool.quant.load import LoadedScale
    from hbtool.quant.plan import QMAX

    pre: Prequantized | None = getattr(graph, "prequantized", None)
    if pre is None:
        return {}, []
    loaded: dict[str, LoadedScale] = {}
    changed: list[dict[str, Any]] = []
    for tensor, records in pre.activations.items():
        widest = max(records, key=lambda r: max(abs(v) for v in r.float_range()))
        bits = 16 if widest.bits == 16 and has_int16 else 8
        kind, own = _activation_obstacle(widest, has_int16)
        reason = own
        if len({(float(np.max(r.scale)), int(np.max(r.zero_point))) for r in records}) > 1 and not own:
            kind, reason = "twice", "the model quantizes it twice with different scales: the wider range is kept"
        lo, hi = widest.float_range()
        # float32, as every scale hbtool plans (plan.py) and as the calibrated model stores it: compile re-reads it from
        # there, and a float64 scale that rounds differently flips bias codes on exact .5 ties (EfficientNet-Lite0 int8 from
        # TFLite: 13 outputs of one layer 1 LSB apart between simulate and the quantized ONNX)
        scale = float(np.float32(widest.scale.reshape(-1)[0] if not own else max(abs(lo), abs(hi)) / QMAX[bits]))
        if not (np.isfinite(scale) and scale > 0):
            raise InputError(f"node '{widest.node}' quantizes '{tensor}' with scale {float(np.max(widest.scale))}; "
                             "a scale must be finite and > 0",
                             "export the quantized model with calibrated, non-zero scales, or calibrate the float model with hbtool")
        loaded[tensor] = LoadedScale(bits, scale)
        if not reason:
            continue
        changed.append({"tensor": tensor, "node": widest.node, "kind": kind, "model": _describe(widest),
                        "taken": {"dtype": f"int{bits}", "scale": float(scale)}, "reason": reason})
    return loaded, changed


def _activation_obstacle(fixed: FixedActivation, has_int16: bool) -> tuple[str, str]:
    """(kind, why) when the BPU cannot take the model's scale as it is, else ("", "")."""
    if not fixed.per_tensor:
        return "per-channel", (f"one scale per channel of axis {fixed.axis} (the BPU's activations have one scale): "
                               "the range of all channels is kept")
    if not fixed.symmetric:
        lo, hi = fixed.float_range()
        return "asymmetric", (f"zero point {int(np.max(fixed.zero_point))} in [{fixed.qmin}, {fixed.qmax}] (the BPU is symmetric, zero point 0): "
                f"the range [{lo:.4g}, {hi:.4g}] is kept as +-{max(abs(lo), abs(hi)):.4g}")
    if fixed.bits == 16 and not has_int16:
        return "int16", "int16, which this march does not have: the range is kept in int8"
    return "", ""


def _describe(fixed: FixedActivation) -> dict[str, Any]:
    return {"scale": [float(v) for v in np.asarray(fixed.scale).reshape(-1)],
            "zero_point": [int(v) for v in np.asarray(fixed.zero_point).reshape(-1)], "range": [fixed.qmin, fixed.qmax]}


def plan_departures(plan, loaded: dict[str, Any], tensors: set[str]) -> list[dict[str, Any]]:
    """Loaded scales the plan did not keep as given: a group sharing one scale, or a kernel fixing it."""
    out = []
    for tensor in sorted(t for t in tensors if t in loaded):
        tq = plan.tensors.get(tensor)
        if tq is None:
            continue
        want = loaded[tensor]
        if tq.bits == want.bits and np.isclose(float(tq.scale), want.scale, rtol=1e-6, atol=0.0):
            continue
        if tq.method.startswith("fixed:"):
            why = f"the BPU's {tq.method[6:]} writes a fixed scale"
        else:
            members = [m for m, q in plan.tensors.items() if q.group == tq.group and m != tensor]
            why = (f"its integers are moved, not requantized, into/out of {', '.join(repr(m) for m in members[:3])}"
                   f"{' ...' if len(members) > 3 else ''}: one scale for all, the largest")
        out.append({"tensor": tensor, "model": {"dtype": f"int{want.bits}", "scale": want.scale},
                    "taken": {"dtype": tq.dtype, "scale": float(tq.scale)}, "reason": why})
    return out


def prequantized_summary(graph: Graph, ctype: str, weights_kept: list[str], weights_requantized: dict[str, str],
                         loaded: dict[str, Any] | None, plan, has_int16: bool, bpu_tensors: list[str]) -> dict[str, Any]:
    """What calibration did with the model's own quantization (``options.prequantized`` in quant_info.json)."""
    pre: Prequantized = graph.prequantized
    load = ctype == "load" and loaded is not None
    changed = fixed_activation_scales(graph, has_int16)[1] if load else []
    bpu = set(bpu_tensors)
    return {
        "form": pre.form,
        "calibration_type": ctype,
        "weights_kept": sorted(weights_kept),
        "weights_requantized": weights_requantized,
        "activation_scales_in_model": len(pre.activations),
        "activation_scales_taken": sorted(t for t in bpu if t in loaded) if load else [],
        "activation_scales_changed": [c for c in changed if c["tensor"] in bpu],
        "activation_scales_shared": plan_departures(plan, loaded, bpu) if load else [],
        "calibrated_from_data": sorted(t for t in bpu if not load or t not in loaded),
        "relus_restored": list(pre.relus_added),
        "kept_on_cpu": list(pre.kept_nodes),
    }


def prequantized_lines(info: dict[str, Any], method: str) -> list[str]:
    """The one line that says what happened to the model's own quantization, then a warning per kind of scale not honoured."""
    kept, req = len(info["weights_kept"]), len(info["weights_requantized"])
    weights = f"{kept} weight(s) keep the model's int8 values and scales" + (f", {req} changed by hbtool (below)" if req else "")
    n_model = info["activation_scales_in_model"]
    n_data = len(info["calibrated_from_data"])
    if info["calibration_type"] == "load":
        acts = (f"took {len(info['activation_scales_taken'])} activation scale(s) from the model (calibration_type load)"
                + (f", calibrated {n_data} from data" if n_data else ""))
    elif n_model:
        acts = (f"the model's {n_model} activation scale(s) are not used: every activation calibrated from data ({method}); "
                "calibration_type: load takes them")
    else:
        acts = f"activations calibrated from data ({method})"
    extra = f"; {len(info['relus_restored'])} ReLU(s) the quantizer folded into an unsigned range put back" if info["relus_restored"] else ""
    lines = [f"already-quantized model ({info['form']}): {weights}; {acts}{extra}"]
    floored = {w: why for w, why in info["weights_requantized"].items() if why.startswith(DEAD_CHANNELS)}
    other = {w: why for w, why in info["weights_requantized"].items() if w not in floored}
    if other:
        first, why = next(iter(other.items()))
        lines.append(f"warning: {len(other)} weight(s) of the model cannot keep their integers on the BPU (first '{first}': {why}); "
                     "hbtool quantized them per output channel from their float values; fix: quantize weights symmetrically "
                     "to int8 per output channel (onnxruntime: weight_type=QuantType.QInt8, per_channel=True)")
    if floored:
        first, why = next(iter(floored.items()))
        lines.append(f"note: {len(floored)} weight(s) have dead channels whose scale hbtool raises (first '{first}': {why})")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for c in info["activation_scales_changed"]:
        by_kind.setdefault(c["kind"], []).append(c)
    for kind, items in by_kind.items():
        first = items[0]
        fix = _ACTIVATION_FIXES[kind]
        lines.append(f"warning: {len(items)} activation scale(s) of the model cannot be honoured on the BPU as they are "
                     f"(first '{first['tensor']}': {first['reason']}); took {first['taken']['dtype']} scale "
                     f"{first['taken']['scale']:.6g}; fix: {fix}")
    if info["activation_scales_shared"]:
        first = info["activation_scales_shared"][0]
        lines.append(f"note: {len(info['activation_scales_shared'])} loaded scale(s) changed by the BPU's shared scales "
                     f"(first '{first['tensor']}': {first['reason']}); names in quant_info.json")
    if info["kept_on_cpu"]:
        lines.append(f"note: {len(info['kept_on_cpu'])} quantize node(s) stay on the CPU ({'; '.join(info['kept_on_cpu'][:3])})")
    return lines
