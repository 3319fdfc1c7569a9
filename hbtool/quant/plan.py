"""The quantization plan: which tensors are quantized, to int8 or int16, with which scale.

Tensors that a data-movement op only rearranges (Reshape, Transpose, Slice, Concat, MaxPool,
window partition/reverse, roll, ReLU...) share one scale with their input: the BPU moves the
integers and requantizes nothing. Such tensors are grouped with a union-find; a group's
threshold is the largest of its members' thresholds, and it is int16 when any member must be.

A group whose calibrated range is zero (a residual branch ending in a BatchNorm with gamma = 0,
a dead channel, an all-zero constant branch) has no scale of its own: any scale represents it.
A tiny one (the threshold floor) would make its producer's requantization ratio
``s_in * s_w / s_out`` millions, so such a group takes the largest threshold of its neighbours
instead (:func:`degenerate_thresholds`): the other inputs and the outputs of the nodes that
read it, else the inputs of the node that writes it. An Add of the zero branch and an identity
then gives both operands the identity's scale, and every ratio around it stays near 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.quant.observers import TensorStats
from hbtool.quant.thresholds import sqnr_db, threshold

# a tensor whose int8 version would have a lower signal-to-noise ratio goes to int16 (auto_int16)
INT8_MIN_SQNR_DB = 30.0

QMAX = {8: 127, 16: 32767}

#: the threshold floor of a range that is not zero but yields none (thresholds.py floors zero ranges to it too);
#: a group observed no larger is numerically zero and a zero-range group: a deep randomly initialised
#: network decays to such values (MobileViT-XXS ends near 1e-41), whose float32 scales underflow to 0 and
#: whose LayerNorms would need output steps below 2**-50 of gamma
ZERO_RANGE = 1e-8
#: the threshold of a zero-range group with no calibrated neighbour at all
ZERO_RANGE_FALLBACK = 1.0

# ops that keep their input's integers: the output shares the input's scale
SCALE_PRESERVING = {
    "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Split", "Concat", "Gather",
    "Expand", "Tile", "Pad", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "WindowPartition",
    "WindowReverse", "Roll", "DepthToSpace", "SpaceToDepth", "Resize", "Upsample", "Identity",
}

# ops whose output scale is fixed by the integer kernel
FIXED_OUTPUT_SCALE = {"Softmax": {8: 2.0**-7, 16: 2.0**-15}}

# ops whose inputs/outputs want int16 when auto_int16 is on (the J5 talk: LayerNorm, Softmax;
# LUT ops keep their resolution with int16 in and out)
INT16_OUTPUTS = {"Softmax", "LayerNormalization", "ChannelLayerNorm", "InstanceNormalization"}
INT16_INPUTS = {"HzPreprocess", "Softmax", "LayerNormalization", "ChannelLayerNorm", "InstanceNormalization", "Gelu", "Erf", "Sigmoid", "Tanh", "Exp", "Swish", "HardSwish", "Sqrt", "Reciprocal", "Div", "Log", "Pow"}


@dataclass
class TensorQuant:
    """The quantization of one activation tensor."""

    name: str
    bits: int
    scale: float
    threshold: float
    method: str
    group: int
    #: PTF: int64 [C] power-of-two factors, channel c of the last axis has scale ``scale * 2**alpha_c``
    ptf_alpha: np.ndarray | None = None
    #: a 4-bit tensor (:mod:`hbtool.quant.int4`): its codes are held to ``(0, 15)`` (uint4) or ``(-8, 7)``
    #: (int4) by its producer's clamp, inside the ``bits``-bit container the kernels compute with
    code_range: tuple[int, int] | None = None
    #: a model output concatenated from pieces of different ranges (:mod:`hbtool.quant.output_channels`):
    #: float64 [C] scales along ``scale_axis`` (negative, from the end), one per channel, each piece's own
    #: scale; ``scale`` is their largest. The BPU's Concat moves each piece's codes unchanged and the
    #: output's dequantize on the CPU multiplies channel by channel.
    axis_scales: np.ndarray | None = None
    scale_axis: int | None = None

    @property
    def dtype(self) -> str:
        """``uint4`` / ``int4`` for a 4-bit tensor, else ``int8`` / ``int16``."""
        if self.code_range is not None:
            return "uint4" if self.code_range[0] == 0 else "int4"
        return f"int{self.bits}"

    @property
    def is_log2(self) -> bool:
        """A log2-coded tensor (``softmax_log2``): codes k stand for ``2**-k``; ``scale`` is unused."""
        return self.method == "log2"

    def channel_scales(self) -> float | np.ndarray:
        """The scale, or with PTF the per-channel scales ``scale * 2**alpha`` (float64 [C]), or a segmented
        output's per-channel scales (along ``scale_axis``)."""
        if self.axis_scales is not None:
            return np.asarray(self.axis_scales, np.float64)
        if self.ptf_alpha is None:
            return self.scale
        return self.scale * np.exp2(np.asarray(self.ptf_alpha, np.float64))

    def to_json(self) -> dict[str, Any]:
        out = {"dtype": self.dtype, "scale": self.scale, "threshold": self.threshold, "method": self.method, "group": self.group}
        if self.is_log2:
            out["dtype"] = f"log2_{self.bits}bit"
        if self.ptf_alpha is not None:
            out["ptf_alpha"] = [int(a) for a in np.asarray(self.ptf_alpha).reshape(-1)]
        if self.axis_scales is not None:
            out["axis_scales"] = [float(v) for v in np.asarray(self.axis_scales).reshape(-1)]
            out["scale_axis"] = int(self.scale_axis)
        return out


@dataclass
class QuantPlan:
    tensors: dict[str, TensorQuant] = field(default_factory=dict)
    groups: dict[int, list[str]] = field(default_factory=dict)
    method: str = "max"
    #: ``{node: per-output-channel float delta}`` added to that node's bias before it is
    #: quantized (bias correction); travels in the calibrated model's metadata
    bias_delta: dict[str, np.ndarray] = field(default_factory=dict)
    #: ``{weight tensor: 4}`` for the int4 weights of the 4-bit path (absent: int8)
    weight_bits: dict[str, int] = field(default_factory=dict)

    def bits(self, tensor: str) -> int | None:
        t = self.tensors.get(tensor)
        return None if t is None else t.bits

    def scale(self, tensor: str) -> float | None:
        t = self.tensors.get(tensor)
        return None if t is None else t.scale


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def add(self, x: str) -> None:
        self.parent.setdefault(x, x)

    def find(self, x: str) -> str:
        self.add(x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


def bpu_activation_tensors(graph: Graph) -> list[str]:
    """Every non-constant tensor read or written by a BPU node (these get quantized)."""
    seen: dict[str, None] = {}
    for node in graph.nodes:
        if node.meta.get("on") != "BPU":
            continue
        for t in node.inputs + node.outputs:
            if t and not graph.is_const(t):
                seen.setdefault(t, None)
    return list(seen)


# ops between an attention MatMul and its Softmax (scaling, masking, reshaping)
_LOGIT_PATH_OPS = {"Add", "Sub", "Mul", "Div", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Where", "Slice", "Concat"}


def _logit_paths(graph: Graph) -> set[str]:
    """Tensors from the producing MatMul up to each Softmax input.

    Softmax turns an absolute logit error into a relative probability error (exp), so the
    logits need int16 resolution all the way from the MatMul that computes them: an int8
    score tensor quantizes a range of ~100 in steps of ~0.8 and flattens the attention.
    """
    producers = graph.producer_map()
    marked: set[str] = set()
    for node in graph.nodes:
        if node.op_type != "Softmax" or node.meta.get("on") != "BPU":
            continue
        frontier = [node.inputs[0]]
        for _ in range(16):
            nxt = []
            for t in frontier:
                if t in marked or graph.is_const(t):
                    continue
                marked.add(t)
                p = producers.get(t)
                if p is None or p.meta.get("on") != "BPU" or p.op_type not in _LOGIT_PATH_OPS:
                    continue
                nxt.extend(i for i in p.inputs if i and not graph.is_const(i))
            frontier = nxt
            if not frontier:
                break
    return marked


def _data_inputs(graph: Graph, node: Node) -> list[str]:
    return [i for i in node.inputs if i and not graph.is_const(i)]


def build_plan(
    graph: Graph,
    stats: Mapping[str, TensorStats],
    method: str | Mapping[str, str] = "max",
    auto_int16: bool = True,
    node_info: Mapping[str, Mapping[str, Any]] | None = None,
    output_int16: bool = False,
    percentile: float = 0.99995,
    min_sqnr_db: float = INT8_MIN_SQNR_DB,
    all_int16: bool = False,
    switches: Any = None,
    segment_outputs: bool = True,
    int16_wide_outputs: bool = False,
) -> QuantPlan:
    """Choose bits and scale for every BPU activation tensor.

    ``method`` is one method for all tensors or a per-tensor mapping (``mix``). ``node_info``
    entries with ``InputType``/``OutputType`` ``int16`` force those tensors to int16.
    ``switches`` (:class:`hbtool.config.optimization.Switches`) carries Horizon's optimization
    values. A group's bits, strongest first: an explicit int16 (node_info, a ``set_<Op>_*_int16``
    or ``set_model_output_int16``), an explicit int8 (``set_<Op>_*_int8``,
    ``set_model_output_int8``: auto_int16 leaves it alone), every tensor int16
    (``all_int16``, ``set_all_nodes_int16``), then auto_int16. ``segment_outputs``: a model output that a
    Concat makes of pieces of different ranges keeps each piece's scale (:mod:`hbtool.quant.output_channels`);
    ``int16_wide_outputs`` (a march with int16): any other output of rank >= 3 whose channels differ in range more than 16x is int16.
    """
    from hbtool.config.optimization import Switches
    from hbtool.quant.output_channels import apply_output_segments, output_segments, wide_range_outputs

    node_info = node_info or {}
    sw = switches if switches is not None else Switches()
    output_int16 = output_int16 or sw.model_output_bits == 16
    # an output Concat of pieces of different ranges keeps each piece's scale (output_channels.py)
    segments = output_segments(graph, stats, node_info) if segment_outputs and not output_int16 else {}
    builder = _PlanBuilder(graph, stats, method, auto_int16, percentile, min_sqnr_db, segments)
    builder.read_nodes(node_info, sw)
    builder.read_model_outputs(output_int16, sw.model_output_bits == 8, all_int16 or sw.all_int16)
    if int16_wide_outputs:   # channels of very different ranges that no Concat separates: int16 (output_channels.py)
        builder.explicit16.update(o for o in wide_range_outputs(graph, stats, segments, node_info)
                                  if o in builder.uf.parent and o not in builder.force8)
    plan = builder.build()
    apply_output_segments(plan, segments)
    check_plan_scales(plan)
    return plan


class _PlanBuilder:
    """The steps of :func:`build_plan`: read every BPU node's wishes, group the tensors, give each group its bits and scale."""

    def __init__(self, graph: Graph, stats: Mapping[str, TensorStats], method: str | Mapping[str, str], auto_int16: bool,
                 percentile: float, min_sqnr_db: float, segments: Mapping[str, Any]):
        self.graph, self.stats, self.method, self.segments = graph, stats, method, segments
        self.auto_int16, self.percentile, self.min_sqnr_db = auto_int16, percentile, min_sqnr_db
        self.tensors = bpu_activation_tensors(graph)
        self.uf = _UnionFind()
        for t in self.tensors:
            self.uf.add(t)
        self.explicit16: set[str] = set()   # int16 asked for (node_info, set_<Op>_*_int16, model outputs)
        self.force8: set[str] = set()       # int8 asked for: auto_int16 leaves these alone
        self.want16: set[str] = set()       # auto_int16's wishes (kernels that want int16, logit paths)
        self.base16: set[str] = set()       # every tensor int16 (enable_int16 / set_all_nodes_int16)
        self.fixed: dict[str, tuple[str, str]] = {}   # output of a fixed-scale kernel -> (op type, node)
        self.const_absmax: dict[str, float] = {}      # a Concat's constant inputs widen its group's range

    # ------------------------------------------------------------------ what the nodes and the config ask for
    def read_nodes(self, node_info: Mapping[str, Mapping[str, Any]], sw: Any) -> None:
        graph, uf = self.graph, self.uf
        for node in graph.nodes:
            if node.meta.get("on") != "BPU":
                continue
            data = _data_inputs(graph, node)
            if node.op_type == "Concat":
                consts = [i for i in node.inputs if i and graph.is_const(i)]
                if consts and node.outputs[0] in uf.parent:
                    self.const_absmax[node.outputs[0]] = max(float(np.abs(graph.const(c)).max()) for c in consts)
            if node.op_type in SCALE_PRESERVING and data and node.outputs[0] not in self.segments:
                for o in node.outputs:
                    if o:
                        for i in (data if node.op_type == "Concat" else data[:1]):
                            uf.union(i, o)
            if self.auto_int16:
                if node.op_type in INT16_INPUTS:
                    self.want16.update(data)
                if node.op_type in INT16_OUTPUTS:
                    self.want16.update(o for o in node.outputs if o)
            self._read_node_info(node, data, node_info.get(node.name) or {})
            for bits_map, names in ((sw.op_input_bits, data), (sw.op_output_bits, [o for o in node.outputs if o])):
                bits_wanted = bits_map.get(node.op_type)
                if bits_wanted == 16:
                    self.explicit16.update(names)
                elif bits_wanted == 8:
                    self.force8.update(names)
            if node.op_type in FIXED_OUTPUT_SCALE:
                self.fixed[node.outputs[0]] = (node.op_type, node.name)

    def _read_node_info(self, node: Node, data: list[str], info: Mapping[str, Any]) -> None:
        if str(info.get("InputType", "")).lower() == "int16":
            self.explicit16.update(data)
        for k, v in info.items():  # InputType<i>: the i-th input only
            if k.startswith("InputType") and k[9:].isdigit() and str(v).lower() == "int16":
                i = int(k[9:])
                if i < len(node.inputs) and node.inputs[i] and not self.graph.is_const(node.inputs[i]):
                    self.explicit16.add(node.inputs[i])
        if str(info.get("OutputType", "")).lower() == "int16":
            self.explicit16.update(o for o in node.outputs if o)

    def read_model_outputs(self, output_int16: bool, output_int8: bool, all_int16: bool) -> None:
        if self.auto_int16:
            self.want16.update(_logit_paths(self.graph))
        if output_int16:
            self.explicit16.update(o for o in self.graph.outputs if o in self.uf.parent)
        if output_int8:
            self.force8.update(o for o in self.graph.outputs if o in self.uf.parent)
        if all_int16:
            self.base16 = set(self.tensors)

    # ------------------------------------------------------------------ the groups
    def build(self) -> QuantPlan:
        groups: dict[str, list[str]] = {}
        for t in self.tensors:
            groups.setdefault(self.uf.find(t), []).append(t)
        plan = QuantPlan(method=self.method if isinstance(self.method, str) else "mix")
        zero_groups: dict[int, tuple[list[str], int, str]] = {}
        for gid, (root, members) in enumerate(sorted(groups.items(), key=lambda kv: self.tensors.index(kv[1][0]))):
            bits, pinned8 = self._bits(members)
            chosen = self._quantize(members, bits, pinned8)
            if chosen is None:  # a (numerically) zero range, or none observed: the neighbours decide, below
                zero_groups[gid] = (members, bits, self._method_name())
                continue
            bits, scale, thr, used = chosen
            plan.groups[gid] = members
            for m in members:
                plan.tensors[m] = TensorQuant(m, bits, scale, float(thr), used, gid)
        for gid, thr in degenerate_thresholds(self.graph, plan, {g: v[0] for g, v in zero_groups.items()}).items():
            members, bits, used = zero_groups[gid]
            plan.groups[gid] = members
            scale = float(np.float32(thr / QMAX[bits]))
            for m in members:
                plan.tensors[m] = TensorQuant(m, bits, scale, float(thr), f"{used}+zero_range", gid)
        plan.groups = dict(sorted(plan.groups.items()))
        return plan

    def _method_name(self) -> str:
        return self.method if isinstance(self.method, str) else "mix"

    def _bits(self, members: list[str]) -> tuple[int, bool]:
        """A group's bits, strongest wish first (build_plan's docstring), and whether int8 is pinned."""
        if any(m in self.explicit16 for m in members):
            bits = 16
        elif any(m in self.force8 for m in members):
            bits = 8
        else:
            bits = 16 if any(m in self.want16 or m in self.base16 for m in members) else 8
        return bits, bits == 8 and any(m in self.force8 for m in members)

    def _threshold(self, members: list[str], qmax: int) -> float:
        t = 0.0
        for m in members:
            st = self.stats.get(m)
            if st is not None:
                t = max(t, threshold(st, self.method if isinstance(self.method, str) else self.method.get(m, "max"), qmax,
                                     self.percentile))
        for m in members:
            t = max(t, self.const_absmax.get(m, 0.0))
        return t if t > 0 else ZERO_RANGE

    def _quantize(self, members: list[str], bits: int, pinned8: bool) -> tuple[int, float, float, str] | None:
        """``(bits, scale, threshold, method used)`` of a group; None for a zero-range group.

        auto_int16 takes an int8 group to int16 when a member's int8 SQNR falls under ``min_sqnr_db``."""
        qmax = QMAX[bits]
        fixed_members = [m for m in members if m in self.fixed]
        if fixed_members:
            op_type = self.fixed[fixed_members[0]][0]
            scale = FIXED_OUTPUT_SCALE[op_type][bits]
            return bits, scale, scale * qmax, f"fixed:{op_type}"
        used = self._method_name()
        stats = self.stats
        observed = max([stats[m].absmax for m in members if m in stats] + [self.const_absmax.get(m, 0.0) for m in members])
        if not observed > ZERO_RANGE:
            return None
        thr = self._threshold(members, qmax)
        if bits == 8 and self.auto_int16 and not pinned8:
            worst = min((sqnr_db(stats[m], thr, qmax) for m in members if m in stats), default=float("inf"))
            if worst < self.min_sqnr_db:
                bits, qmax = 16, QMAX[16]
                thr = self._threshold(members, qmax)
                used = f"{used}+sqnr"
        return bits, float(np.float32(thr / qmax)), thr, used


def check_plan_scales(plan: QuantPlan) -> None:
    """Refuse a plan with a scale that is not finite and > 0, naming the tensor and where its threshold came from.

    Every kernel's ``build`` refuses such a scale too, but only here is the tensor known; a NaN
    or infinite scale would otherwise turn codes into NaN, which an index cast makes int64 min.
    """
    for name, tq in plan.tensors.items():
        if tq.is_log2:
            continue
        s = np.asarray(tq.channel_scales(), np.float64)
        if s.size == 0 or not bool(np.all(np.isfinite(s) & (s > 0))):
            bad = s[~(np.isfinite(s) & (s > 0))].flat[0] if s.size else "none"
            raise ValueError(f"quantization plan: tensor {name!r} got scale {bad} (threshold {tq.threshold}, "
                             f"method {tq.method}); every scale must be finite and > 0")


def degenerate_thresholds(graph: Graph, plan: QuantPlan, zero_groups: Mapping[int, list[str]]) -> dict[int, float]:
    """Thresholds for the zero-range groups ``{gid: members}`` from their calibrated neighbours.

    A zero group takes the largest threshold among the tensors next to it (see the module
    docstring); groups next only to other zero groups are resolved in later rounds, as the
    known region grows; a region with no calibrated tensor at all gets
    :data:`ZERO_RANGE_FALLBACK`.
    """
    producers = graph.producer_map()
    consumers = graph.consumer_map()
    neighbours: dict[int, tuple[set[str], set[str]]] = {}
    for gid, members in zero_groups.items():
        near: set[str] = set()  # the consumers' other operands and outputs: what the zero tensor is added into
        far: set[str] = set()   # the producer's inputs: used when no consumer side is known
        for m in members:
            for node in consumers.get(m, []):
                if node.meta.get("on") == "BPU":
                    near.update(t for t in _data_inputs(graph, node) + [o for o in node.outputs if o])
            p = producers.get(m)
            if p is not None and p.meta.get("on") == "BPU":
                far.update(_data_inputs(graph, p))
        neighbours[gid] = (near - set(members), far - set(members))
    known = {t: q.threshold for t, q in plan.tensors.items()}
    out: dict[int, float] = {}
    pending = dict(neighbours)
    while pending:
        found = {}
        for gid, (near, far) in pending.items():
            thr = max((known[t] for t in near if t in known), default=0.0)
            if thr <= 0:
                thr = max((known[t] for t in far if t in known), default=0.0)
            if thr > 0:
                found[gid] = thr
        if not found:
            break
        for gid, thr in found.items():
            out[gid] = thr
            known.update({m: thr for m in zero_groups[gid]})
            del pending[gid]
    for gid in pending:
        out[gid] = ZERO_RANGE_FALLBACK
    return out
