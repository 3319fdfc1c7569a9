"""Which ops the BPU runs, on which unit, under which constraints.

Each constraint is a small function taking a :class:`RuleContext` and returning ``None`` when
the node satisfies it, or a short detail string when it does not. Its docstring, formatted
with the march's ``limits``, is the reason the checker prints for a node that falls back to
the CPU (the habit of Arm's Vela compiler), so the rule and its explanation cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.march.description import March


@dataclass
class RuleContext:
    node: Node
    graph: Graph
    march: March

    def shape(self, tensor: str) -> tuple[int, ...] | None:
        return self.graph.shape(tensor)

    def in_shape(self, k: int = 0) -> tuple[int, ...] | None:
        return self.shape(self.node.inputs[k]) if k < len(self.node.inputs) and self.node.inputs[k] else None

    def out_shape(self, k: int = 0) -> tuple[int, ...] | None:
        return self.shape(self.node.outputs[k])

    def const(self, k: int) -> np.ndarray | None:
        if k >= len(self.node.inputs):
            return None
        return self.graph.const(self.node.inputs[k])

    def lim(self, key: str) -> int:
        return self.march.limit(key)

    def data_inputs(self) -> list[str]:
        """Inputs computed at run time (not constants, not omitted)."""
        return [i for i in self.node.inputs if i and not self.graph.is_const(i)]


Rule = Callable[[RuleContext], "str | None"]


@dataclass(frozen=True)
class OpSupport:
    """How one ONNX op type maps onto the BPU."""

    bpu_type: str
    unit: str  # tensor | vector | data_movement
    rules: tuple[Rule, ...]


def reason_of(rule: Rule, march: March, detail: str | None) -> str:
    """The user-facing reason: the rule's docstring with the march limits filled in, plus detail."""
    doc = " ".join((rule.__doc__ or rule.__name__).split())
    try:
        doc = doc.format(**march.limits, march=march.name)
    except (KeyError, IndexError):
        pass
    return f"{doc} ({detail})" if detail else doc


# ------------------------------------------------------------------ generic rules
INDEX_OUTPUT_OPS = {"ArgMax", "ArgMin"}


def tensors_are_floating_point(ctx: RuleContext) -> str | None:
    """The BPU computes on quantized floating-point feature maps; integer and boolean tensors (token ids, masks, indices) are handled on the CPU"""
    outputs = [] if ctx.node.op_type in INDEX_OUTPUT_OPS else ctx.node.outputs
    for t in ctx.node.inputs[:1] + outputs:
        if not t:
            continue
        dt = ctx.graph.dtype(t)
        if dt is not None and not np.issubdtype(dt, np.floating):
            return f"'{t}' is {dt}"
    return None


def shapes_are_static(ctx: RuleContext) -> str | None:
    """The BPU needs static tensor shapes"""
    for t in ctx.data_inputs() + ctx.node.outputs:
        if t and ctx.shape(t) is None:
            return f"'{t}' has no static shape"
    return None


def rank_at_most_max(ctx: RuleContext) -> str | None:
    """BPU tensors have at most {max_rank} dimensions"""
    for t in ctx.data_inputs() + ctx.node.outputs:
        s = ctx.shape(t)
        if s is not None and len(s) > ctx.lim("max_rank"):
            return f"'{t}' has rank {len(s)}"
    return None


def dims_within_limit(ctx: RuleContext) -> str | None:
    """Every BPU tensor dimension must be at most {max_dim}"""
    for t in ctx.data_inputs() + ctx.node.outputs:
        s = ctx.shape(t)
        if s is not None and any(d > ctx.lim("max_dim") for d in s):
            return f"'{t}' has shape {'x'.join(map(str, s))}"
    return None


def needs_a_feature_map_input(ctx: RuleContext) -> str | None:
    """A node whose inputs are all constants is folded away, not run on the BPU"""
    return None if ctx.data_inputs() else "all inputs are constant"


GENERIC_RULES: tuple[Rule, ...] = (needs_a_feature_map_input, tensors_are_floating_point, shapes_are_static, rank_at_most_max, dims_within_limit)


# ------------------------------------------------------------- tensor-unit rules
def weights_are_constant(ctx: RuleContext) -> str | None:
    """The tensor unit takes its weights from constants stored with the model; a weight computed at run time needs the CPU"""
    return None if ctx.const(1) is not None else f"weight '{ctx.node.inputs[1]}' is computed at run time"


def conv_is_1d_or_2d(ctx: RuleContext) -> str | None:
    """hbtool lowers 1-D and 2-D convolutions to the tensor unit; 3-D convolutions are not lowered yet"""
    s = ctx.in_shape(0)
    return None if s is None or len(s) in (3, 4) else f"input rank {len(s)}"


def conv_kernel_within_limit(ctx: RuleContext) -> str | None:
    """Conv kernel height and width must be within 1..{conv_max_kernel} on the tensor unit of march {march}"""
    w = ctx.const(1)
    if w is None:
        return None
    k = w.shape[2:]
    return None if all(1 <= d <= ctx.lim("conv_max_kernel") for d in k) else f"kernel {'x'.join(map(str, k))}"


def conv_channels_within_limit(ctx: RuleContext) -> str | None:
    """Conv input channels per group must be at most {conv_max_channels_per_group}, and C x KH x KW at most {conv_max_kernel_volume}"""
    w = ctx.const(1)
    if w is None:
        return None
    cin = int(w.shape[1])
    vol = int(np.prod(w.shape[1:]))
    if cin > ctx.lim("conv_max_channels_per_group"):
        return f"{cin} channels per group"
    if vol > ctx.lim("conv_max_kernel_volume"):
        return f"C x KH x KW = {vol}"
    return None


def conv_stride_dilation_pad_within_limit(ctx: RuleContext) -> str | None:
    """Conv stride must be at most {conv_max_stride}, dilation at most {conv_max_dilation}, padding at most {conv_max_pad}"""
    n = ctx.node
    if any(s > ctx.lim("conv_max_stride") for s in n.attr("strides", []) or []):
        return f"strides {n.attr('strides')}"
    if any(d > ctx.lim("conv_max_dilation") for d in n.attr("dilations", []) or []):
        return f"dilations {n.attr('dilations')}"
    if any(p > ctx.lim("conv_max_pad") for p in n.attr("pads", []) or []):
        return f"pads {n.attr('pads')}"
    return None


def convtranspose_within_limit(ctx: RuleContext) -> str | None:
    """ConvTranspose needs at most {convtranspose_max_channels} channels and kernels up to {convtranspose_max_kernel}"""
    w = ctx.const(1)
    if w is None:
        return None
    if w.shape[0] > ctx.lim("convtranspose_max_channels"):
        return f"{w.shape[0]} channels"
    if any(d > ctx.lim("convtranspose_max_kernel") for d in w.shape[2:]):
        return f"kernel {'x'.join(map(str, w.shape[2:]))}"
    return None


def matmul_sizes_within_limit(ctx: RuleContext) -> str | None:
    """MatMul M and K must be at most {matmul_max_mk} and batch dimensions at most {matmul_max_batch_dim}"""
    a, b = ctx.in_shape(0), ctx.in_shape(1)
    if a is None or b is None or len(a) < 2 or len(b) < 1:
        return None
    m, k = a[-2], a[-1]
    if m > ctx.lim("matmul_max_mk") or k > ctx.lim("matmul_max_mk"):
        return f"M={m}, K={k}"
    batch = list(a[:-2]) + list(b[:-2])
    if any(d > ctx.lim("matmul_max_batch_dim") for d in batch):
        return f"batch dims {batch}"
    return None


def gemm_weight_is_constant(ctx: RuleContext) -> str | None:
    """Gemm runs on the tensor unit as a linear layer when its B operand is a constant"""
    return None if ctx.const(1) is not None else "B is computed at run time"


# ------------------------------------------------------------- vector-unit rules
def elementwise_rank_within_limit(ctx: RuleContext) -> str | None:
    """Elementwise ops on the vector unit take tensors of at most {max_elementwise_rank} dimensions"""
    for t in ctx.data_inputs() + ctx.node.outputs:
        s = ctx.shape(t)
        if s is not None and len(s) > ctx.lim("max_elementwise_rank"):
            return f"'{t}' has rank {len(s)}"
    return None


def pow_exponent_is_constant(ctx: RuleContext) -> str | None:
    """Pow runs as a lookup table only with a constant scalar exponent"""
    e = ctx.const(1)
    if e is None:
        return "exponent is a feature map"
    return None if e.size == 1 else f"exponent has {e.size} values"


def layernorm_size_within_limit(ctx: RuleContext) -> str | None:
    """LayerNorm normalises rows of up to {layernorm_max_size} elements in one pass on the vector unit, and longer rows up to {layernorm_two_pass_max_size} elements in two (the row's sums, then the normalisation)"""
    s = ctx.in_shape(0)
    if s is None:
        return None
    axis = int(ctx.node.attr("axis", -1))
    axis = axis + len(s) if axis < 0 else axis
    # LayerNormalization: the axes from ``axis`` on; ChannelLayerNorm: ``axis`` alone (strided, any position);
    # InstanceNormalization: the spatial axes
    if ctx.node.op_type == "ChannelLayerNorm":
        axes = ctx.node.attr("axes")  # GroupNorm(1, C): axes 1..r-1
        size = int(s[axis]) if axes is None else int(np.prod([s[int(a)] for a in axes]))
    elif ctx.node.op_type == "InstanceNormalization":
        size = int(np.prod(s[2:]))
    else:
        size = int(np.prod(s[axis:]))
    return None if size <= ctx.lim("layernorm_two_pass_max_size") else f"{size} elements per row"


def reduce_axes_are_constant(ctx: RuleContext) -> str | None:
    """Reductions on the BPU need their axes known at compile time"""
    # Any constant axes will do, in any layout: axes that are contiguous once size-1 dimensions
    # are dropped (NCHW [2, 3], channels-last (B, H, W, C) [1, 2], tokens (B, L, C) [1]) are a
    # reshape (free) and one sum; others first go through a transpose that brings them together,
    # which the compiler folds into the reduction's read and perf costs as data movement
    # (ir/patterns.py reduction_needs_transpose).
    from hbtool.ir.patterns import reduce_axes

    if ctx.in_shape(0) is None or reduce_axes(ctx.graph, ctx.node) is not None:
        return None
    return f"axes '{ctx.node.inputs[1]}' computed at run time"


def pool_kernel_within_limit(ctx: RuleContext) -> str | None:
    """Pooling kernels, strides and pads must be at most {pool_max_kernel}"""
    n = ctx.node
    for key in ("kernel_shape", "strides", "pads"):
        if any(v > ctx.lim("pool_max_kernel") for v in n.attr(key, []) or []):
            return f"{key} {n.attr(key)}"
    return None


def pool_is_2d(ctx: RuleContext) -> str | None:
    """Pooling on the BPU works on 3-D (NCL) or 4-D (NCHW) feature maps"""
    s = ctx.in_shape(0)
    return None if s is None or len(s) in (3, 4) else f"input rank {len(s)}"


def argmax_channels_within_limit(ctx: RuleContext) -> str | None:
    """ArgMax/ArgMin on the BPU reduce axis 1 with at most {argmax_max_channels} channels"""
    s = ctx.in_shape(0)
    axis = int(ctx.node.attr("axis", 0))
    if s is None:
        return None
    axis = axis + len(s) if axis < 0 else axis
    if axis != 1:
        return f"axis {axis}"
    return None if s[1] <= ctx.lim("argmax_max_channels") else f"{s[1]} channels"


def prelu_slope_is_constant(ctx: RuleContext) -> str | None:
    """PRelu runs on the BPU with constant slopes (one, or one per channel): its integer kernel holds one multiplier per slope"""
    return None if ctx.const(1) is not None else f"slope '{ctx.node.inputs[1]}' is computed at run time"


def min_max_takes_two_operands(ctx: RuleContext) -> str | None:
    """Elementwise Max/Min on the BPU compare two operands (feature maps, or a feature map and a constant); ONNX's one- or three-operand forms run on the CPU"""
    return None if len(ctx.node.inputs) == 2 else f"{len(ctx.node.inputs)} operands"


def argmax_first_index_on_ties(ctx: RuleContext) -> str | None:
    """ArgMax/ArgMin on the BPU return the first index of equal values; select_last_index=1 runs on the CPU"""
    return None if not int(ctx.node.attr("select_last_index", 0)) else "select_last_index=1"


def clip_bounds_are_constant(ctx: RuleContext) -> str | None:
    """Clip runs on the BPU with constant bounds"""
    for k in (1, 2):
        if k < len(ctx.node.inputs) and ctx.node.inputs[k] and ctx.const(k) is None:
            return "bounds are feature maps"
    return None


# ------------------------------------------------------- data-movement rules
def resize_is_spatial(ctx: RuleContext) -> str | None:
    """Resize on the BPU scales H and W of a 4-D tensor with nearest interpolation (NCHW or NHWC) or linear (bilinear, NCHW); cubic interpolation runs on the CPU"""
    s, o = ctx.in_shape(0), ctx.out_shape(0)
    if s is None or o is None:
        return None
    if len(s) != 4:
        return f"rank {len(s)}"
    # the channels stay put: axis 1 (NCHW) or axis 3 (channels-last, tf2onnx / timm heads)
    if s[0] != o[0] or (s[1] != o[1] and s[3] != o[3]):
        return "scales N or C"
    mode = ctx.node.attr_text("mode", "nearest")
    if mode == "linear" and s[1] != o[1]:
        return "linear interpolation of a channels-last tensor"
    return None if mode in ("nearest", "linear") else f"mode {mode}"


def resize_scales_are_constant(ctx: RuleContext) -> str | None:
    """Resize on the BPU needs constant roi, scales and sizes: the source pixels and weights are fixed when the model is compiled"""
    for k in range(1, len(ctx.node.inputs)):
        if ctx.node.inputs[k] and ctx.const(k) is None:
            return f"'{ctx.node.inputs[k]}' computed at run time"
    return None


RESIZE_COORDINATE_MODES = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners", "tf_half_pixel_for_nn")


def resize_coordinates_have_an_integer_form(ctx: RuleContext) -> str | None:
    """Resize on the BPU maps output to input pixels by the asymmetric, half_pixel, pytorch_half_pixel, align_corners or tf_half_pixel_for_nn rule, over all axes, without antialiasing; tf_crop_and_resize, antialias and keep_aspect_ratio_policy run on the CPU"""
    if ctx.node.op_type != "Resize":  # Upsample: asymmetric coordinates by definition
        return None
    text = ctx.node.attr_text
    coords = text("coordinate_transformation_mode", "half_pixel")
    if coords not in RESIZE_COORDINATE_MODES:
        return f"coordinate_transformation_mode {coords}"
    if int(ctx.node.attr("antialias", 0)):
        return "antialias=1"
    if ctx.node.attr("axes") is not None:
        return "axes attribute"
    policy = text("keep_aspect_ratio_policy", "stretch")
    return None if policy == "stretch" else f"keep_aspect_ratio_policy {policy}"


def gather_indices_are_constant(ctx: RuleContext) -> str | None:
    """Gather runs on the BPU as data movement only with constant indices; a lookup by run-time indices (token embedding) runs on the CPU"""
    return None if ctx.const(1) is not None else f"indices '{ctx.node.inputs[1]}' come at run time"


def pad_is_constant_mode(ctx: RuleContext) -> str | None:
    """Pad on the BPU pads with a constant value, by edge replication or by reflection, with constant pad sizes and value"""
    mode = ctx.node.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        return f"mode {mode}"
    for k, what in ((1, "pad sizes"), (2, "pad value"), (3, "pad axes")):
        if len(ctx.node.inputs) > k and ctx.node.inputs[k] and ctx.const(k) is None:
            return f"{what} computed at run time"
    return None


def slice_parameters_are_constant(ctx: RuleContext) -> str | None:
    """Slice on the BPU needs constant starts, ends, axes and steps"""
    for k in range(1, len(ctx.node.inputs)):
        if ctx.node.inputs[k] and ctx.const(k) is None:
            return "slice bounds computed at run time"
    return None


def reshape_target_is_constant(ctx: RuleContext) -> str | None:
    """Reshape/Expand/Tile/Squeeze/Unsqueeze on the BPU need a constant target shape or axes"""
    for k in range(1, len(ctx.node.inputs)):
        if ctx.node.inputs[k] and ctx.const(k) is None:
            return "target shape computed at run time"
    return None


def split_sizes_are_constant(ctx: RuleContext) -> str | None:
    """Split on the BPU needs constant split sizes"""
    if len(ctx.node.inputs) > 1 and ctx.node.inputs[1] and ctx.const(1) is None:
        return "split sizes computed at run time"
    return None


# ---------------------------------------------------------------- the table
OP_TABLE: dict[str, OpSupport] = {}


def _register(op_types: Iterable[str], bpu_type: str, unit: str, *rules: Rule) -> None:
    for op in op_types:
        OP_TABLE[op] = OpSupport(bpu_type, unit, tuple(rules))


_register(["Conv"], "HzSQuantizedConv", "tensor", weights_are_constant, conv_is_1d_or_2d, conv_kernel_within_limit, conv_channels_within_limit, conv_stride_dilation_pad_within_limit)
_register(["ConvTranspose"], "HzSQuantizedConvTranspose", "tensor", weights_are_constant, conv_is_1d_or_2d, convtranspose_within_limit)
_register(["MatMul"], "HzSQuantizedMatmul", "tensor", matmul_sizes_within_limit)
_register(["Linear"], "HzSQuantizedConv", "tensor", weights_are_constant, matmul_sizes_within_limit)
_register(["Gemm"], "HzSQuantizedConv", "tensor", gemm_weight_is_constant)

_register(["Add"], "HzSElementwiseAdd", "vector", elementwise_rank_within_limit)
_register(["Sub"], "HzSElementwiseSub", "vector", elementwise_rank_within_limit)
_register(["Mul"], "HzSElementwiseMul", "vector", elementwise_rank_within_limit)
_register(["Div"], "HzSElementwiseDiv", "vector", elementwise_rank_within_limit)
_register(["Max", "Min"], "HzSElementwiseMinMax", "vector", min_max_takes_two_operands, elementwise_rank_within_limit)
_register(["Relu"], "HzRelu", "vector")
_register(["LeakyRelu"], "HzPRelu", "vector")
_register(["PRelu"], "HzPRelu", "vector", prelu_slope_is_constant)
_register(["Clip"], "HzClip", "vector", clip_bounds_are_constant)
_register(
    ["Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Gelu", "Swish", "HardSwish", "HardSigmoid",
     "Softplus", "Elu", "Selu", "Abs", "Neg", "Sin", "Cos", "Mish", "Softsign"],
    "HzLut", "vector",
)
_register(["Pow"], "HzLut", "vector", pow_exponent_is_constant)
_register(["HzPreprocess"], "HzSQuantizedPreprocess", "vector")
_register(["Softmax"], "HzSoftmax", "vector")
_register(["LogSoftmax"], "HzSoftmax", "vector")
_register(["LayerNormalization", "ChannelLayerNorm", "InstanceNormalization"], "HzLayerNorm", "vector", layernorm_size_within_limit)
_register(["BatchNormalization"], "HzSElementwiseMul", "vector")
_register(["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2"], "HzSQuantizedReduce", "vector", reduce_axes_are_constant)
_register(["MaxPool", "AveragePool"], "HzSQuantizedPool", "vector", pool_is_2d, pool_kernel_within_limit)
_register(["GlobalAveragePool", "GlobalMaxPool"], "HzSQuantizedPool", "vector", pool_is_2d)
_register(["ArgMax", "ArgMin"], "HzArgMax", "vector", argmax_channels_within_limit, argmax_first_index_on_ties)

_register(["Reshape", "Expand", "Tile"], "Reshape", "data_movement", reshape_target_is_constant)
_register(["Squeeze", "Unsqueeze"], "Reshape", "data_movement", reshape_target_is_constant)
_register(["Flatten"], "Reshape", "data_movement")
_register(["Transpose"], "Transpose", "data_movement")
_register(["Concat"], "Concat", "data_movement")
_register(["Split"], "Split", "data_movement", split_sizes_are_constant)
_register(["Slice"], "Slice", "data_movement", slice_parameters_are_constant)
_register(["Pad"], "HzPad", "data_movement", pad_is_constant_mode)
_register(["Gather"], "Gather", "data_movement", gather_indices_are_constant)
_register(["Resize", "Upsample"], "HzResize", "data_movement", resize_is_spatial, resize_scales_are_constant,
          resize_coordinates_have_an_integer_form)
_register(["DepthToSpace", "SpaceToDepth"], "HzDepthToSpace", "data_movement")
_register(["WindowPartition"], "HzWindowPartition", "data_movement")
_register(["WindowReverse"], "HzWindowReverse", "data_movement")
_register(["Roll"], "HzRoll", "data_movement")

# Ops the BPU can evaluate but that hbtool keeps on the CPU on purpose, with the reason.
CPU_BY_DESIGN: dict[str, str] = {
    "Cast": "type conversion between integer and float tensors happens at the CPU boundary",
    "Where": "selection by a boolean mask runs on the CPU (mask inputs are not quantized feature maps)",
    "Equal": "comparison produces a boolean tensor, which the BPU does not carry",
    "Greater": "comparison produces a boolean tensor, which the BPU does not carry",
    "Less": "comparison produces a boolean tensor, which the BPU does not carry",
    "GreaterOrEqual": "comparison produces a boolean tensor, which the BPU does not carry",
    "LessOrEqual": "comparison produces a boolean tensor, which the BPU does not carry",
    "IsNaN": "NaN tests produce a boolean tensor; nothing is NaN in the BPU's integer arithmetic",
    "IsInf": "Inf tests produce a boolean tensor; nothing is Inf in the BPU's integer arithmetic",
    "Xor": "boolean logic runs on the CPU",
    "Not": "boolean logic runs on the CPU",
    "And": "boolean logic runs on the CPU",
    "Or": "boolean logic runs on the CPU",
    "NonZero": "output size depends on the data; the BPU needs static shapes",
    "NonMaxSuppression": "post-processing with a data-dependent output size runs on the CPU",
    "TopK": "sorting runs on the CPU in hbtool",
    "Shape": "shape computation is folded at import; a remaining Shape node depends on a dynamic dimension",
    "ConstantOfShape": "shape computation runs on the CPU",
    "Range": "index generation runs on the CPU",
    "CumSum": "running sums are not a BPU operation",
    "ScatterND": "scatter writes run on the CPU",
    "ScatterElements": "scatter writes run on the CPU",
    "GatherND": "gather by run-time multi-dimensional index runs on the CPU",
    "GatherElements": "gather by run-time index runs on the CPU",
    "GroupNormalization": "GroupNormalization has no integer kernel in hbtool: it normalises channel groups with per-channel "
                          "gamma/beta, which needs a reshape around the LayerNorm kernel that hbtool does not emit yet",
    "If": "control flow runs on the CPU",
    "Loop": "control flow runs on the CPU",
}


def einsum_reason(node: Node, graph: Graph) -> str:
    """The CPU reason of an Einsum that the float pass einsum_to_matmul left: its equation and why."""
    from hbtool.ir.passes.einsum_to_matmul import einsum_not_matmul_reason, equation_of

    why = einsum_not_matmul_reason(node, graph) or "its operands are not floating point"
    return f"Einsum '{equation_of(node)}' is not a batched matrix product ({why}); only those become BPU MatMuls"


# Ops kept on the CPU whose reason depends on the node (its attributes, its shapes).
CPU_REASON_OF_NODE: dict[str, Callable[[Node, Graph], str]] = {"Einsum": einsum_reason}


def support_for(op_type: str) -> OpSupport | None:
    return OP_TABLE.get(op_type)


# ------------------------------------------------------- where the generations differ
# Rules that apply on one march only, on top of the op's own rules: what an older BPU generation
# does not run (Horizon's per-march supported-op lists; horizon-toolchain reference, section 3.4).
def bernoulli2_moves_data_on_the_cpu(ctx: RuleContext) -> str | None:
    """The Bernoulli2 BPU (RDK X3) has no general data-movement unit: Reshape, Transpose, Gather, Tile, Expand, Squeeze, Unsqueeze and Flatten run on the CPU (Horizon's X3 op list)"""
    return f"{ctx.node.op_type} on march bernoulli2"


def bernoulli2_runs_softmax_and_norms_on_the_cpu(ctx: RuleContext) -> str | None:
    """The Bernoulli2 BPU (RDK X3) has no Softmax, LayerNorm or Sub: they run on the CPU (Horizon's X3 op list; Softmax only at the model tail by run_on_bpu)"""
    return f"{ctx.node.op_type} on march bernoulli2"


def bernoulli2_matmul_of_feature_maps_is_1xbxmxk(ctx: RuleContext) -> str | None:
    """On the Bernoulli2 BPU (RDK X3) a MatMul of two feature maps runs only as 1xBxMxK x 1x1xKxN; other products of two run-time tensors run on the CPU"""
    if len(ctx.data_inputs()) < 2:
        return None
    a, b = ctx.in_shape(0), ctx.in_shape(1)
    if a is not None and b is not None and len(a) == 4 and len(b) == 4 and a[0] == 1 and b[0] == 1 and b[1] == 1:
        return None
    return f"{'x'.join(map(str, a or ()))} x {'x'.join(map(str, b or ()))}"


def bernoulli2_lut_size_within_8192(ctx: RuleContext) -> str | None:
    """On the Bernoulli2 BPU (RDK X3) a lookup-table activation (Sigmoid, Tanh, SiLU...) takes a feature map of at most 8192 elements once aligned (the smaller of H x W-to-8 x C-to-4 and H x W x C-to-32); a larger one runs on the CPU"""
    s = ctx.out_shape(0)
    if s is None or len(s) != 4:
        return None
    _, c, h, w = (int(d) for d in s)
    size = min(h * (-(-w // 8) * 8) * (-(-c // 4) * 4), h * w * (-(-c // 32) * 32))
    return None if size <= 8192 else f"aligned size {size}"


def bernoulli2_has_no_min_max_unit(ctx: RuleContext) -> str | None:
    """The Bernoulli2 BPU (RDK X3) computes elementwise Add and Mul only: Max, Min and ArgMin run on the CPU (Horizon's X3 op list)"""
    return f"{ctx.node.op_type} on march bernoulli2"


def bernoulli2_lut_chw_within_8192(ctx: RuleContext) -> str | None:
    """On the Bernoulli2 BPU (RDK X3) Sin, Cos, Sqrt and Softplus take a feature map of at most 8192 elements (C x H x W); a larger one runs on the CPU"""
    s = ctx.out_shape(0)
    if s is None or len(s) != 4:
        return None
    size = int(np.prod(s[1:]))
    return None if size <= 8192 else f"C x H x W = {size}"


MARCH_RULES: dict[str, dict[str, tuple[Rule, ...]]] = {
    "bernoulli2": {
        **{op: (bernoulli2_moves_data_on_the_cpu,) for op in
           ("Reshape", "Transpose", "Gather", "Tile", "Expand", "Squeeze", "Unsqueeze", "Flatten")},
        **{op: (bernoulli2_runs_softmax_and_norms_on_the_cpu,) for op in
           ("Softmax", "LogSoftmax", "LayerNormalization", "ChannelLayerNorm", "InstanceNormalization", "Sub")},
        "MatMul": (bernoulli2_matmul_of_feature_maps_is_1xbxmxk,),
        **{op: (bernoulli2_lut_size_within_8192,) for op in ("Sigmoid", "Tanh", "Swish", "HardSwish", "HardSigmoid", "Gelu", "Erf", "Exp", "Mish",
                                                              "Selu", "Softsign")},
        **{op: (bernoulli2_has_no_min_max_unit,) for op in ("Max", "Min", "ArgMin")},
        **{op: (bernoulli2_lut_chw_within_8192,) for op in ("Sin", "Cos", "Sqrt", "Softplus")},
    },
}


def march_rules(march: str, op_type: str) -> tuple[Rule, ...]:
    """The rules only ``march`` applies to ``op_type`` (checked before the op's own rules)."""
    return MARCH_RULES.get(march, {}).get(op_type, ())
