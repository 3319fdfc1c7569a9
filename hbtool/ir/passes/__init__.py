"""Float graph optimizations: each module one rewrite, listed in run order in ``FLOAT_PASSES``.

Order: pass-through nodes first (they hide patterns), then ``auto_pad`` made explicit (the
whole-input pool test reads pads), ``-inf`` borders folded into MaxPool pads, and whole-input pools made global, Einsum rewritten into
MatMul early (the attention and Linear patterns below see MatMul), then bias-Add and BatchNorm
folding (they need the layer right before them; parallel linear branches fold into their
Conv first, so that a BatchNorm after the sum then folds too), then exact Col2Im folds as Reshape/Transpose, then
layout-chain collapsing (it merges the reshapes that window and roll patterns are written
around, and those the Col2Im rewrite leaves), then the pattern fusions, Linear last because BN
folding into a MatMul leaves a MatMul + Add for it.
"""

from __future__ import annotations

from hbtool.ir.graph import Graph
from hbtool.ir.pass_manager import GraphPass, PassResult, run_passes
from hbtool.ir.passes.col2im_to_rearrange import col2im_to_rearrange
from hbtool.ir.passes.collapse_reshape_transpose import collapse_reshape_transpose
from hbtool.ir.passes.einsum_to_matmul import einsum_to_matmul
from hbtool.ir.passes.explicit_pads import explicit_pads
from hbtool.ir.passes.fold_batchnorm import fold_batchnorm
from hbtool.ir.passes.fold_conv_bias import fold_conv_bias
from hbtool.ir.passes.fold_pad_into_maxpool import fold_pad_into_maxpool
from hbtool.ir.passes.fold_parallel_branches import fold_parallel_branches
from hbtool.ir.passes.fuse_activations import fuse_activations
from hbtool.ir.passes.fuse_gelu import fuse_gelu
from hbtool.ir.passes.fuse_group_norm import fuse_group_norm
from hbtool.ir.passes.fuse_layernorm import fuse_layernorm
from hbtool.ir.passes.fuse_linear import fuse_linear
from hbtool.ir.passes.fuse_roll import fuse_roll
from hbtool.ir.passes.fuse_window_ops import fuse_window_ops
from hbtool.ir.passes.remove_identity import remove_identity
from hbtool.ir.passes.mask_where_to_bias import mask_where_to_bias
from hbtool.ir.passes.pool_to_global import pool_to_global
from hbtool.ir.passes.remove_nan_guards import remove_nan_guards
from hbtool.ir.passes.split_gemm_activation_bias import split_gemm_activation_bias

FLOAT_PASSES: list[GraphPass] = [
    GraphPass("remove_identity", remove_identity, "drop Identity and inference Dropout nodes"),
    GraphPass("explicit_pads", explicit_pads, "Conv / pool auto_pad SAME_* / VALID -> explicit pads"),
    GraphPass("fold_pad_into_maxpool", fold_pad_into_maxpool, "Pad with -inf read only by a MaxPool -> that MaxPool's pads"),
    GraphPass("pool_to_global", pool_to_global, "AveragePool / MaxPool with one window over the whole input -> global pool"),
    GraphPass("split_gemm_activation_bias", split_gemm_activation_bias, "Gemm with an activation C -> Gemm + Add (C is no bias)"),
    GraphPass("remove_nan_guards", remove_nan_guards, "drop Where(IsNaN(x), c, x) guards: nothing is NaN in integer arithmetic"),
    GraphPass("einsum_to_matmul", einsum_to_matmul, "Einsum batched matrix products -> Transpose/Reshape + MatMul"),
    GraphPass("mask_where_to_bias", mask_where_to_bias, "Where(mask, -inf, scores) before Softmax -> scores + additive mask bias"),
    GraphPass("fold_conv_bias", fold_conv_bias, "Conv/ConvTranspose + per-channel constant Add -> the layer's bias"),
    GraphPass("fold_parallel_branches", fold_parallel_branches,
              "Conv(x) + identity / BatchNorm(x) / smaller Conv(x) branch -> one Conv (re-parameterization)"),
    GraphPass("fold_batchnorm", fold_batchnorm, "fold BatchNormalization into the preceding layer's weights, else Mul+Add"),
    GraphPass("col2im_to_rearrange", col2im_to_rearrange, "Col2Im with blocks tiling the image exactly -> Reshape/Transpose/Reshape"),
    GraphPass("collapse_reshape_transpose", collapse_reshape_transpose, "merge Reshape/Transpose/Squeeze/Unsqueeze/Flatten chains"),
    GraphPass("fuse_roll", fuse_roll, "torch.roll exported as Slice+Concat -> Roll"),
    GraphPass("fuse_window_ops", fuse_window_ops, "Swin window partition / reverse -> WindowPartition / WindowReverse"),
    GraphPass("fuse_group_norm", fuse_group_norm, "GroupNorm(1, C) as Reshape + InstanceNormalization -> ChannelLayerNorm over C, H, W"),
    GraphPass("fuse_layernorm", fuse_layernorm, "decomposed LayerNorm -> LayerNormalization"),
    GraphPass("fuse_gelu", fuse_gelu, "Erf / Tanh GELU decompositions -> Gelu"),
    GraphPass("fuse_activations", fuse_activations, "HardSigmoid / HardSwish / Swish decompositions -> one op"),
    GraphPass("fuse_linear", fuse_linear, "MatMul + bias Add with constant weights -> Linear"),
]


def optimize_float(graph: Graph) -> list[PassResult]:
    """Run every float optimization on ``graph`` in place; returns what each pass changed."""
    return run_passes(graph, FLOAT_PASSES)


__all__ = [
    "FLOAT_PASSES",
    "col2im_to_rearrange",
    "collapse_reshape_transpose",
    "einsum_to_matmul",
    "explicit_pads",
    "fold_batchnorm",
    "fold_conv_bias",
    "fold_pad_into_maxpool",
    "fold_parallel_branches",
    "fuse_activations",
    "fuse_gelu",
    "fuse_group_norm",
    "fuse_layernorm",
    "fuse_linear",
    "fuse_roll",
    "fuse_window_ops",
    "mask_where_to_bias",
    "optimize_float",
    "pool_to_global",
    "remove_identity",
    "remove_nan_guards",
    "split_gemm_activation_bias",
]
