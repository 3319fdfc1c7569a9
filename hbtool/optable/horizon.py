"""Horizon's published supported-op lists, per march: which ONNX ops its toolchain runs on the BPU.

Source: D-Robotics rdk_doc, ``docs/07_Advanced_development/04_toolchain_development/intermediate/
supported_op_list.md`` (the "RDK X3 / RDK Ultra / RDK X5 supported ONNX op list" tables, OE for
opset 10/11): RDK Ultra is Journey 5 (``bayes``), RDK X5 is ``bayes-e``, RDK X3 is ``bernoulli2``
(docs/horizon_compatibility.md). ``BPU`` is the list's "BPU加速" (under its constraints; "run_on_bpu"
ops such as Softmax and Min count as BPU), ``CPU`` its "CPU计算" (with or without ※), ``None`` an op
the list does not name (ops newer than opset 11, such as HardSwish, GELU, LayerNormalization, and
hbtool's own fused ops). Only the placement is recorded here; the constraints are in the source.
"""

from __future__ import annotations

MARCHES = ("bayes", "bayes-e", "bernoulli2")
B, C = "BPU", "CPU"

#: ``op -> (bayes, bayes-e, bernoulli2)``
HORIZON: dict[str, tuple[str | None, str | None, str | None]] = {
    "Abs": (B, None, C), "Add": (B, B, B), "And": (C, C, C), "ArgMax": (B, B, B), "ArgMin": (B, B, C),
    "AveragePool": (B, B, B), "BatchNormalization": (B, B, B), "Cast": (C, C, C), "Clip": (B, B, B), "Concat": (B, B, B),
    "ConstantOfShape": (B, B, B), "Conv": (B, B, B), "ConvTranspose": (B, B, B), "Cos": (B, B, B), "CumSum": (C, C, C),
    "DepthToSpace": (B, B, B), "Div": (B, B, B), "Einsum": (C, C, C), "Elu": (B, B, C), "Equal": (B, B, C), "Erf": (C, B, C),
    "Exp": (B, B, B), "Expand": (B, B, C), "Flatten": (B, B, C), "Gather": (B, B, C), "GatherElements": (B, B, C),
    "GatherND": (C, C, C), "Gemm": (B, B, B), "GlobalAveragePool": (B, B, B), "GlobalMaxPool": (B, B, B), "Greater": (B, B, C),
    "GreaterOrEqual": (B, B, C), "HardSigmoid": (B, B, C), "If": (C, C, C), "InstanceNormalization": (C, C, C),
    "IsInf": (C, C, C), "IsNaN": (C, C, C), "LeakyRelu": (B, B, B), "Less": (B, B, C), "LessOrEqual": (B, B, C),
    "Log": (B, B, C), "LogSoftmax": (C, C, C), "Loop": (C, C, C), "MatMul": (B, B, B), "Max": (B, B, C), "MaxPool": (B, B, B),
    "Min": (B, B, C), "Mul": (B, B, B), "Neg": (C, C, C), "NonZero": (None, None, C), "Not": (C, C, C), "Or": (C, C, C),
    "PRelu": (C, B, B), "Pad": (B, B, B), "Pow": (B, B, B), "Range": (C, C, C), "Reciprocal": (B, B, B),
    "ReduceL2": (C, C, C), "ReduceMax": (B, B, C), "ReduceMean": (B, B, B), "ReduceMin": (C, C, C), "ReduceSum": (B, B, C),
    "Relu": (B, B, B), "Reshape": (B, B, C), "Resize": (B, B, B), "ScatterElements": (C, C, C), "ScatterND": (C, C, C),
    "Selu": (C, B, C), "Shape": (B, B, B), "Sigmoid": (B, B, B), "Sin": (B, B, B), "Slice": (B, B, B), "Softmax": (B, B, B),
    "Softplus": (B, B, B), "Softsign": (C, B, C), "SpaceToDepth": (B, B, B), "Split": (B, B, B), "Sqrt": (B, B, B),
    "Squeeze": (B, B, C), "Sub": (B, B, C), "Tanh": (B, B, B), "Tile": (B, B, C), "TopK": (B, B, C), "Transpose": (B, B, C),
    "Unsqueeze": (B, B, C), "Upsample": (B, B, B), "Where": (C, C, C), "Xor": (C, C, C),
}

#: why hbtool differs from Horizon where the rule's own reason does not say it all (``op -> text``)
DIFFERENCES: dict[str, str] = {
    "Shape": "Horizon's 'BPU' here is constant folding, which hbtool's import does too (every static Shape is folded); "
             "a Shape node that is left reads a dynamic dimension, which the BPU cannot have",
    "ConstantOfShape": "Horizon's 'BPU' here is constant folding, which hbtool's import does too; one that is left "
                       "builds a tensor of a run-time shape, which the BPU cannot have",
}


def horizon_placement(op: str, march: str) -> str | None:
    """``BPU``, ``CPU`` or None (not in Horizon's list) for ``op`` on ``march``."""
    row = HORIZON.get(op)
    return None if row is None else row[MARCHES.index(march)]
