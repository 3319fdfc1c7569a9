"""``calibration_type: load``: take activation scales from the model instead of from data.

Two sources are read, so a model quantized elsewhere can be deployed with its own scales:

* ``HzCalibration`` nodes, as in hbtool's own ``*_calibrated_model.onnx`` (a previous run, or a
  QAT result written back in that form);
* ``QuantizeLinear -> DequantizeLinear`` pairs on activations and QOperator outputs, as written by
  QAT exports (PyTorch's fake-quant export) and onnxruntime's quantizer: the import has already
  removed them and kept their scales (:mod:`hbtool.ir.prequantized`); an int8/int16 zero-point
  type gives the bit width, and a scale the symmetric J5 cannot take as it is (a non-zero zero
  point) becomes the symmetric scale of the same range (:mod:`hbtool.quant.prequantized`).

The calibration nodes are removed, leaving the float graph; weights that arrive as integers keep
them (:func:`hbtool.quant.prequantized.honour_model_weights`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbtool.errors import InputError
from hbtool.ir.graph import Graph
from hbtool.quant.calibrated_model import CALIBRATION_OP


@dataclass(frozen=True)
class LoadedScale:
    bits: int
    scale: float
    ptf_alpha: tuple[int, ...] | None = None  # hbtool's PTF: per-channel power-of-two factors
    log2: bool = False                         # hbtool's log2-coded Softmax output


def strip_quantization(graph: Graph, has_int16: bool = True) -> dict[str, LoadedScale]:
    """Remove HzCalibration nodes in place; return ``{float tensor: scale}`` of those and of the model's Q/DQ pairs."""
    from hbtool.quant.prequantized import fixed_activation_scales

    loaded: dict[str, LoadedScale] = {}
    for node in list(graph.nodes):
        if node.op_type == CALIBRATION_OP and node.attrs.get("method") != "weight":
            src, dst = node.inputs[0], node.outputs[0]
            alpha = node.attrs.get("ptf_alpha")
            if not (np.isfinite(float(node.attrs["scale"])) and float(node.attrs["scale"]) > 0):
                raise InputError(f"{CALIBRATION_OP} '{node.name}' has scale {node.attrs['scale']}; a scale must be finite and > 0",
                                 "recalibrate the model: hbtool calibrate writes only finite, positive scales")
            loaded[_bypass(graph, node, src, dst)] = LoadedScale(
                int(node.attrs["bits"]), float(node.attrs["scale"]), None if alpha is None else tuple(int(a) for a in alpha),
                node.attrs.get("method") == "log2")
        elif node.op_type == CALIBRATION_OP:
            _bypass(graph, node, node.inputs[0], node.outputs[0])
    # QuantizeLinear -> DequantizeLinear pairs and QOperator models: the import already turned them into the
    # float graph and kept their scales (hbtool.ir.prequantized); scales the BPU cannot take as they are become
    # the symmetric scale of the same range (hbtool.quant.prequantized says which and why)
    loaded.update(fixed_activation_scales(graph, has_int16)[0])
    graph.remove_unused()
    return loaded


def _bypass(graph: Graph, node, src: str, dst: str) -> str:
    """Remove ``node`` (src -> dst) and return the name the value keeps (a graph output's, if any)."""
    if node in graph.nodes:
        graph.nodes.remove(node)
    if dst in graph.outputs:
        prod = graph.producer(src)
        if prod is not None and src not in graph.outputs:
            prod.outputs = [dst if o == src else o for o in prod.outputs]
            for n in graph.nodes:
                n.inputs = [dst if i == src else i for i in n.inputs]
            return dst
    graph.replace_uses(dst, src)
    return src


def apply_loaded_scales(plan, loaded: dict[str, LoadedScale]) -> int:
    """Overwrite the plan's scales with loaded ones, one scale per shared-scale group.

    A group takes the largest loaded scale among its members (none clips what another member
    allows); groups whose scale the kernel fixes (Softmax outputs) keep it, unless the model
    codes them in log2. A tensor alone in its group keeps loaded PTF factors. Returns the
    number of groups set from the model.
    """
    from hbtool.quant.plan import FIXED_OUTPUT_SCALE, QMAX, TensorQuant

    count = 0
    for gid, members in plan.groups.items():
        found = [loaded[m] for m in members if m in loaded]
        if not found:
            continue
        if len(members) == 1 and found[0].log2:
            plan.tensors[members[0]] = TensorQuant(members[0], found[0].bits, 1.0, 1.0, "log2", gid)
            count += 1
            continue
        if plan.tensors[members[0]].method.startswith("fixed:"):
            continue
        if plan.tensors[members[0]].is_log2:  # the model has a linear Softmax output here: the kernel fixes its scale
            bits = 16 if found[0].bits == 16 else 8
            scale = FIXED_OUTPUT_SCALE["Softmax"][bits]
            plan.tensors[members[0]] = TensorQuant(members[0], bits, scale, scale * QMAX[bits], "fixed:Softmax", gid)
            continue
        bits = max(f.bits for f in found)
        scale = max(f.scale * 2.0 ** max(f.ptf_alpha or (0,)) for f in found)
        alpha = found[0].ptf_alpha if len(members) == 1 else None
        for m in members:
            tq = plan.tensors[m]
            tq.bits, tq.scale, tq.threshold, tq.method = bits, scale, scale * QMAX[bits], "load"
            tq.ptf_alpha = None
            if alpha is not None:
                tq.scale, tq.ptf_alpha = found[0].scale, np.asarray(alpha, np.int64)
        count += 1
    return count
