"""The 4-bit path (MegEngine-style): uint4/int4 activations and int4 weights on the tensor unit.

What is 4-bit
=============

* weights: int4, symmetric, per output channel, codes in [-7, 7] (zero point 0), the scale
  chosen by an MSE search of each channel's clip (at 4 bits the max wastes most of the 15 levels);
* activations read by a 4-bit Conv / Gemm / MatMul / Linear: ``uint4`` codes in [0, 15] when the
  tensor is post-ReLU (calibration saw no negative value), else ``int4`` codes in [-8, 7]. The
  clip is the MSE-optimal threshold of the tensor's histogram at 15 (uint4) or 7 (int4) steps.

uint4 has zero point 0. MegEngine's uint4 is asymmetric: ``x = s (q - z)``, and for a post-ReLU
range ``[0, max]`` the asymmetric quantizer's zero point is exactly 0, so its ``z * sum(W)``
term (folded into the int32 bias) vanishes and padding with 0 stays exact. A signed tensor
gets int4 (symmetric) instead of a shifted uint4: no zero-point term, and the conv's zero
padding stays a zero code. The bias stays int32 at ``s_x * s_w[c]`` as for int8.

A 4-bit tensor lives in the int8 container the kernels compute with: its producer's
requantization clamps to the code range (:func:`hbtool.quant.lower.clamped_codes`), so every
value it holds is a 4-bit code, and the 4-bit consumer's kernel checks it (``input_range``).
Products are exact uint4 x int4 (or int4 x int4) MACs into the int64/int32 accumulator.

Which nodes
===========

``node_info: {NAME: {InputType: uint4|int4, WeightType: int4}}`` asks for one node;
``calibration_parameters.default_precision: int4`` for every eligible one. The rules below are
small functions whose docstring is the reason printed for a node kept at int8. The first layer
(it reads the model input), the output layer and a layer too noisy at 4 bits (its estimated
4-bit SQNR under ``INT4_MIN_SQNR_DB``) stay int8 unless node_info forces them; a march
without a 4-bit path (``int4.supported: false`` in its description) refuses an explicit request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from hbtool.errors import InputError
from hbtool.ir.graph import Graph, Node
from hbtool.ir.hz_ops import HZ_PREPROCESS
from hbtool.quant.observers import TensorStats
from hbtool.quant.plan import SCALE_PRESERVING, QuantPlan
from hbtool.quant.thresholds import sqnr_db, threshold
from hbtool.quant.weights import channel_absmax, channel_floor, weight_input_and_axis

log = logging.getLogger("hbtool.int4")

UINT4, INT4 = "uint4", "int4"
CODE_RANGE = {UINT4: (0, 15), INT4: (-8, 7)}
#: activation steps: a uint4 threshold spans 15 codes, a symmetric int4 one 7 (as int8 spans 127)
ACT_QMAX = {UINT4: 15, INT4: 7}
#: int4 weights are symmetric in [-7, 7]
WEIGHT4_QMAX = 7
TENSOR_UNIT_OPS = ("Conv", "Gemm", "MatMul", "Linear")
#: ops whose lowering requantizes through a clamp, so they can write 4-bit codes
CLAMPING_PRODUCERS = ("Conv", "Gemm", "MatMul", "Linear", "Add", "Sub")
#: ops lowered to a table, which the lowering builds clipped to the 4-bit range (``lower.clamped_table_function``);
#: a Relu / Clip fused into its producer is that producer's clamp, a standalone one is such a table
TABLE_PRODUCERS = ("Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Swish", "Gelu", "Tanh", "LeakyRelu", "Elu",
                   "Mish", "Softplus")
#: ops that neither compute nor requantize on the way to a model output (the output layer rule)
_PASS_THROUGH = set(SCALE_PRESERVING) | {"Relu", "Clip", "Softmax", "Sigmoid", "LogSoftmax"}


# --------------------------------------------------------------------------- the config
def march_has_int4(march: Any) -> bool:
    """The march's description declares a 4-bit tensor-unit path (``int4.supported``)."""
    try:
        return bool(march.param("int4.supported"))
    except KeyError:
        return False


def requested(node_info: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str | None]]:
    """``{node: {"input": uint4|int4|None, "weight": int4|int8|None}}`` of the node_info entries that ask for 4 bits."""
    out: dict[str, dict[str, str | None]] = {}
    for name, info in (node_info or {}).items():
        inp = str(info.get("InputType") or "").lower() or None
        wt = str(info.get("WeightType") or "").lower() or None
        if inp in CODE_RANGE or wt == INT4:
            out[name] = {"input": inp if inp in CODE_RANGE else None, "weight": wt}
    return out


# --------------------------------------------------------------------------- eligibility rules
def _tensor_unit(node: Node, graph: Graph) -> bool:
    """only Conv, Gemm, MatMul and Linear with a constant weight have a 4-bit path on the tensor unit"""
    return node.op_type in TENSOR_UNIT_OPS and weight_input_and_axis(node, graph) is not None


def _on_bpu(node: Node, graph: Graph) -> bool:
    """the node runs on the CPU, where there is no 4-bit arithmetic"""
    return node.meta.get("on") == "BPU"


def _tensors_from(graph: Graph, start: list[str], follow: Callable[[str], list[str]]) -> Iterator[str]:
    """Every tensor reached from ``start`` by ``follow`` (each once; constants are not entered)."""
    frontier, seen = list(start), set()
    while frontier:
        t = frontier.pop()
        if not t or t in seen or graph.is_const(t):
            continue
        seen.add(t)
        yield t
        frontier.extend(follow(t))


def _not_first_layer(node: Node, graph: Graph) -> bool:
    """first layer: it reads the model input (8-bit pixels), which loses most at 4 bits (MegEngine keeps it int8)"""
    producers = graph.producer_map()

    def up(t: str) -> list[str]:
        p = producers.get(t)
        return [i for i in p.inputs if i] if p is not None and p.op_type in _PASS_THROUGH | {HZ_PREPROCESS} else []

    return not any(t in graph.inputs for t in _tensors_from(graph, [node.inputs[0]], up))


def _not_output_layer(node: Node, graph: Graph) -> bool:
    """output layer: its result reaches a model output through no other tensor-unit layer (the logits keep 8 bits)"""
    consumers = graph.consumer_map()

    def down(t: str) -> list[str]:
        return [o for c in consumers.get(t, []) if c.op_type not in TENSOR_UNIT_OPS for o in c.outputs]

    return not any(t in graph.outputs for t in _tensors_from(graph, list(node.outputs), down))


def _producers_clamp(node: Node, graph: Graph) -> bool:
    """its input is written by an op that cannot clamp to 4-bit codes (a requantizing Conv/Gemm/MatMul/Add or an activation table can)"""
    producers = graph.producer_map()

    def through(t: str) -> list[str]:
        """The data inputs of a scale-preserving producer (all of a Concat's, the first of the others')."""
        p = producers[t]
        if p.op_type not in SCALE_PRESERVING:
            return []
        data = [i for i in p.inputs if i and not graph.is_const(i)]
        return data if p.op_type == "Concat" else data[:1]

    for t in _tensors_from(graph, [node.inputs[0]], through):
        p = producers.get(t)
        if p is None or p.meta.get("on") != "BPU":
            return False
        if p.op_type not in SCALE_PRESERVING and p.op_type not in CLAMPING_PRODUCERS + TABLE_PRODUCERS:
            return False
    return True


#: rules every 4-bit node must pass, forced or not
HARD_RULES: tuple[Callable[[Node, Graph], bool], ...] = (_tensor_unit, _on_bpu)
#: rules a 4-bit input must pass, forced or not (int4 weights alone do not need it)
INPUT_RULES: tuple[Callable[[Node, Graph], bool], ...] = (_producers_clamp,)
#: rules node_info can override
SOFT_RULES: tuple[Callable[[Node, Graph], bool], ...] = (_not_first_layer, _not_output_layer)


def reason(rule: Callable[..., bool]) -> str:
    return (rule.__doc__ or rule.__name__).strip().splitlines()[0]


# --------------------------------------------------------------------------- the choice
@dataclass
class Int4Choice:
    """The nodes that take the 4-bit path and why the others did not."""

    #: ``{node: {"input": uint4|int4|None (auto), "weight": 4|8, "forced": bool}}``
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``{node: reason}`` of the tensor-unit nodes kept at int8
    kept: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.nodes)


def choose_int4_nodes(graph: Graph, node_info: Mapping[str, Mapping[str, Any]], default_precision: str, march: Any) -> Int4Choice:
    """The 4-bit nodes of ``graph`` (placed, optimized) from node_info and default_precision."""
    asked = requested(node_info)
    if default_precision not in ("int8", INT4):
        raise InputError(f"calibration_parameters.default_precision: '{default_precision}' is not supported",
                         "use int8 or int4")
    if not asked and default_precision != INT4:
        return Int4Choice()
    if not march_has_int4(march):
        what = "default_precision: int4" if default_precision == INT4 else f"node_info asks int4/uint4 for '{next(iter(asked))}'"
        raise InputError(f"{what}, but march '{march.name}' has no 4-bit tensor-unit path",
                         "remove the int4/uint4 settings, or compile for march bayes")
    by_name = {n.name: n for n in graph.nodes}
    for name in asked:
        if name not in by_name:
            raise InputError(f"node_info: node '{name}' asks for 4 bits but is not in the model",
                             "use a node name that hbtool checker lists")
    choice = Int4Choice()
    for node in graph.nodes:
        ask = asked.get(node.name)
        if ask is None and (default_precision != INT4 or node.op_type not in TENSOR_UNIT_OPS):
            continue
        info = (node_info or {}).get(node.name) or {}
        if ask is None and any(str(info.get(k) or "").lower() in ("int8", "int16") for k in ("InputType", "WeightType")):
            choice.kept[node.name] = "node_info gives it an 8/16-bit InputType or WeightType"
            continue
        rules = HARD_RULES if ask is not None else SOFT_RULES + HARD_RULES
        if ask is None or ask["input"] is not None:
            rules = rules + INPUT_RULES
        failed = next((r for r in rules if not r(node, graph)), None)
        if failed is not None:
            if ask is not None:
                raise InputError(f"node_info: node '{node.name}' ({node.op_type}) cannot take 4 bits: {reason(failed)}",
                                 f"remove InputType/WeightType int4 from '{node.name}'")
            choice.kept[node.name] = reason(failed)
            continue
        weight = 8 if ask is not None and ask["weight"] == "int8" else 4
        inp = None if ask is None else ask["input"]
        if ask is not None and ask["input"] is None and ask["weight"] == INT4:
            inp = "int8"  # int8 x int4: only the weights are asked for
        choice.nodes[node.name] = {"input": inp, "weight": weight, "forced": ask is not None}
    for name, why in choice.kept.items():
        log.info("int4: %s stays int8: %s", name, why)
    return choice


# --------------------------------------------------------------------------- weights
def int4_weight_scales(w: np.ndarray, axis: int, steps: int = 71) -> np.ndarray:
    """Per output channel, the int4 scale whose clip minimises the squared weight error (float32 [C])."""
    rows = np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)
    amax = channel_floor(channel_absmax(w, axis))
    best = amax.copy()
    best_err = np.full(amax.shape, np.inf)
    for frac in np.linspace(0.3, 1.0, steps):
        s = (amax * frac / WEIGHT4_QMAX)[:, None]
        err = ((rows - np.clip(np.round(rows / s), -WEIGHT4_QMAX, WEIGHT4_QMAX) * s) ** 2).sum(axis=1)
        better = err < best_err
        best[better] = amax[better] * frac
        best_err[better] = err[better]
    return (best / WEIGHT4_QMAX).astype(np.float32)


def weight_noise_ratio(w: np.ndarray, scales: np.ndarray, axis: int, qmax: int = WEIGHT4_QMAX) -> float:
    """``||W - Q(W)||^2 / ||W||^2`` of per-channel weights quantized with ``scales`` to ``[-qmax, qmax]``."""
    rows = np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)
    s = np.asarray(scales, np.float64).reshape(-1, 1)
    err = float(((rows - np.clip(np.round(rows / s), -qmax, qmax) * s) ** 2).sum())
    return err / max(float((rows**2).sum()), 1e-30)


def noise_db(ratio: float) -> float:
    """A noise-to-signal power ratio as a signal-to-noise ratio in dB."""
    return float(-10.0 * np.log10(max(ratio, 1e-12)))


# --------------------------------------------------------------------------- the plan
def apply_int4(graph: Graph, plan: QuantPlan, stats: Mapping[str, TensorStats], choice: Int4Choice,
               weights: dict[str, tuple[np.ndarray, int]], weights8: Mapping[str, tuple[np.ndarray, int]]) -> dict[str, Any]:
    """Give the chosen nodes' inputs 4-bit code ranges and their weights int4 scales (in place).

    ``weights`` is updated in place from ``weights8`` (the int8 scales): int4 scales for the
    weights of 4-bit nodes, the int8 ones back for all others, so one dict serves every plan.
    Returns the summary ``{"applied": {node: "uint4 x int4"...}, "kept_int8": {node: reason}}``.
    """
    by_name = {n.name: n for n in graph.nodes}
    applied: dict[str, str] = {}
    kept = dict(choice.kept)
    plan.weight_bits = {}
    sqnr: dict[str, float] = {}
    scales4: dict[str, np.ndarray] = {}
    for name, spec in choice.nodes.items():
        node = by_name[name]
        x = node.inputs[0]
        tq = plan.tensors.get(x)
        wname = weight_input_and_axis(node, graph)[0]
        inp = spec["input"]
        if inp != "int8":
            why = _plan_obstacle(graph, plan, x)
            if why is not None:
                if spec["forced"]:
                    raise InputError(f"node_info: node '{name}' cannot take a 4-bit input: {why}",
                                     f"give '{name}' InputType int8, or remove its 4-bit settings")
                kept[name] = why
                log.info("int4: %s stays int8: %s", name, why)
                continue
            members = plan.groups[tq.group]
            negative = min((stats[m].minimum for m in members if m in stats), default=0.0) < 0
            if inp is None:
                inp = INT4 if negative else UINT4
            elif inp == UINT4 and negative:
                raise InputError(f"node_info: node '{name}' asks InputType uint4, but its input '{x}' takes negative values "
                                 "(uint4 is for post-ReLU inputs, zero point 0)", f"give '{name}' InputType int4")
            current = tq.code_range
            if current is not None and current != CODE_RANGE[inp]:
                inp = INT4  # two 4-bit readers disagree: the signed range holds both
            qmax = ACT_QMAX[inp]
            thr = max((threshold(stats[m], "mse", qmax) for m in members if m in stats), default=tq.threshold)
            noise = 10.0 ** (-sqnr_db(stats[x], thr, qmax) / 10.0) if x in stats else 0.0
            if spec["weight"] == 4:
                noise += _weight_noise(graph, wname, weights8, scales4)
            sqnr[name] = noise_db(noise)
            if not spec["forced"] and not _quiet_enough(sqnr[name]):
                kept[name] = _quiet_enough.__doc__.strip().splitlines()[0].format(sqnr=sqnr[name], floor=INT4_MIN_SQNR_DB)
                log.info("int4: %s stays int8: %s", name, kept[name])
                continue
            scale = float(np.float32(thr / qmax))
            for m in members:
                t = plan.tensors[m]
                t.scale, t.threshold, t.code_range = scale, float(thr), CODE_RANGE[inp]
                t.method = f"{t.method.split('+')[0]}+{inp}_mse"
        elif spec["weight"] == 4:
            sqnr[name] = noise_db(_weight_noise(graph, wname, weights8, scales4))
            if not spec["forced"] and not _quiet_enough(sqnr[name]):
                kept[name] = _quiet_enough.__doc__.strip().splitlines()[0].format(sqnr=sqnr[name], floor=INT4_MIN_SQNR_DB)
                log.info("int4: %s stays int8: %s", name, kept[name])
                continue
        if spec["weight"] == 4:
            plan.weight_bits[wname] = 4
        applied[name] = f"{inp if inp != 'int8' else 'int8'} x int{spec['weight']}"
    for w, (scales, axis) in weights8.items():
        if plan.weight_bits.get(w) == 4:
            weights[w] = (scales4[w] if w in scales4 else int4_weight_scales(graph.const(w), axis), axis)
        else:
            weights[w] = (scales, axis)
    return {"applied": applied, "kept_int8": kept, "sqnr_db": {n: round(v, 2) for n, v in sqnr.items()}}


#: the estimated 4-bit signal-to-noise ratio (dB) below which a layer not forced by node_info keeps int8
INT4_MIN_SQNR_DB = 14.0


def _quiet_enough(db: float) -> bool:
    """sensitive at 4 bits: its estimated 4-bit SQNR is {sqnr:.1f} dB, under {floor:.0f} dB (node_info InputType/WeightType int4 forces it)

    The estimate adds the relative noise of the 4-bit input (its histogram, clipped at the MSE
    threshold) and of the int4 weights (per channel, MSE-searched clips): the output noise of a
    layer whose input and weight errors are independent. The trained tiny CNN's convs sit at
    16.9-17.9 dB and lose nothing at 4 bits; the PP-LCNet layers under 14 dB (10-14 dB: a few
    values' range dominates) took its agreement with float from 16/16 to 7/16 (docs/int4.md)."""
    return db >= INT4_MIN_SQNR_DB


def _weight_noise(graph: Graph, wname: str, weights8: Mapping[str, tuple[np.ndarray, int]], scales4: dict) -> float:
    """The int4 weight noise ratio of weight ``wname`` (its int4 scales computed once, kept in ``scales4``)."""
    if wname not in weights8:
        return 0.0
    axis = weights8[wname][1]
    w = graph.const(wname)
    if wname not in scales4:
        scales4[wname] = int4_weight_scales(w, axis)
    return weight_noise_ratio(w, scales4[wname], axis)


def _plan_obstacle(graph: Graph, plan: QuantPlan, x: str) -> str | None:
    """Why the planned input tensor ``x`` cannot be 4-bit (None: it can)."""
    tq = plan.tensors.get(x)
    if tq is None:
        return "its input is not quantized on the BPU"
    if tq.bits != 8:
        return f"its input is int{tq.bits} (an int16 choice outranks 4 bits)"
    if tq.is_log2 or tq.ptf_alpha is not None:
        return "its input has a special scale (log2 / PTF)"
    if any(m in graph.outputs for m in plan.groups.get(tq.group, [])):
        return "its input is also a model output, which keeps 8 bits"
    return None
