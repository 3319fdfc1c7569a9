"""``remove_node_type`` / ``remove_node_name``: drop nodes at the model edges, as hb_model_modifier.

Horizon deletes nodes that sit directly at a model input (Quantize, Transpose) or output
(Dequantize, Transpose, Cast, Reshape, Softmax) so the application does that work itself,
usually fused with its own pre/post-processing: without the input Quantize the model takes the
int8 codes ``clamp(round(x / scale))``; without the output Dequantize it returns the integer
codes, to be multiplied by the scale. The removal is done on the integer program before the
compiler passes, so the artifact, ``simulate`` and ``perf`` all see the smaller model.

Types are removed in the order given, each wherever it is at an edge, repeatedly (removing a
Dequantize can put a Transpose at the edge); names are removed likewise. What was removed is
recorded in the artifact (``removed_nodes``, like hb_model_info's "deleted nodes"), with the
scale the application needs. A node that is not at an edge, or whose input has other readers,
is refused with the reason, as hb_model_modifier refuses it.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from hbtool.errors import InputError
from hbtool.ir.graph import Graph, Node
from hbtool.ir.hz_ops import HZ_DEQUANTIZE, HZ_QUANTIZE, HZ_SOFTMAX

log = logging.getLogger(__name__)

# YAML type name -> program op types it stands for
TYPE_OPS = {
    "Quantize": (HZ_QUANTIZE,),
    "Dequantize": (HZ_DEQUANTIZE,),
    "Transpose": ("Transpose",),
    "Cast": ("Cast",),
    "Reshape": ("Reshape", "Flatten", "Squeeze", "Unsqueeze"),
    "Softmax": ("Softmax", HZ_SOFTMAX),
}
AT_INPUT = ("Quantize", "Transpose")
AT_OUTPUT = ("Dequantize", "Transpose", "Cast", "Reshape", "Softmax")


def _yaml_type(node: Node) -> str | None:
    for name, ops in TYPE_OPS.items():
        if node.op_type in ops:
            return name
    return None


def _scale_of(node: Node) -> list[float] | None:
    kernel = node.meta.get("kernel")
    scale = getattr(kernel, "scale", None)
    return None if scale is None else [float(s) for s in np.asarray(scale).reshape(-1)]


def _edge(program: Graph, node: Node) -> str | None:
    """'input' / 'output' when ``node`` can be cut off the program there, else None."""
    data = [i for i in node.inputs if i and not program.is_const(i)]
    consumers = program.consumer_map()
    if len(data) == 1 and data[0] in program.inputs and len(node.outputs) == 1 \
            and len(consumers.get(data[0], [])) == 1:
        return "input"
    if len(data) == 1 and len(node.outputs) == 1 and node.outputs[0] in program.outputs \
            and not consumers.get(node.outputs[0]) and data[0] not in program.outputs \
            and len(consumers.get(data[0], [])) == 1:
        return "output"
    return None


def _cut(program: Graph, node: Node, edge: str) -> dict[str, Any]:
    data = next(i for i in node.inputs if i and not program.is_const(i))
    out = node.outputs[0]
    kind = _yaml_type(node)
    record = {"name": node.name, "op_type": kind or node.op_type, "at": edge, "scale": _scale_of(node)}
    kernel = node.meta.get("kernel")
    if edge == "input":
        program.inputs[program.inputs.index(data)] = out
        record.update(tensor=data, new_tensor=out)
        if kind == "Quantize":
            bits = int(getattr(kernel, "bits", 8))
            record["bits"] = bits
            v = program.values[out]
            v.dtype = np.dtype(np.int8 if bits == 8 else np.int16)
    else:
        program.outputs[program.outputs.index(out)] = data
        record.update(tensor=out, new_tensor=data)
    program.nodes.remove(node)
    return record


def remove_edge_nodes(program: Graph, types: list[str], names: list[str]) -> list[dict[str, Any]]:
    """Remove the edge nodes asked for; returns one record per removed node."""
    removed: list[dict[str, Any]] = []
    for kind in types:
        while True:
            hit = None
            for node in program.nodes:
                if _yaml_type(node) != kind:
                    continue
                edge = _edge(program, node)
                if edge == "input" and kind in AT_INPUT or edge == "output" and kind in AT_OUTPUT:
                    hit = (node, edge)
                    break
            if hit is None:
                break
            removed.append(_cut(program, *hit))
        if not any(r["op_type"] == kind for r in removed):
            log.warning("remove_node_type %s: no %s node at a model input or output", kind, kind)
    for name in names:
        node = next((n for n in program.nodes if n.name == name), None)
        if node is None:
            raise InputError(f"model_parameters.remove_node_name: no node '{name}' in the compiled program",
                             "name a node at a model input or output (hbtool info lists the program)")
        edge = _edge(program, node)
        kind = _yaml_type(node)
        ok = edge == "input" and kind in AT_INPUT or edge == "output" and kind in AT_OUTPUT
        if not ok:
            where = f"at the model {edge}" if edge else "not at a model input or output (or its input has other readers)"
            raise InputError(
                f"model_parameters.remove_node_name: '{name}' ({node.op_type}) is {where}; only "
                "Quantize/Transpose at an input and Dequantize/Transpose/Cast/Reshape/Softmax at an "
                "output can be removed", "remove the name, or remove the nodes before it first (the order counts)")
        removed.append(_cut(program, node, edge))
    for r in removed:
        log.info("removed %s node '%s' at the model %s", r["op_type"], r["name"], r["at"])
    return removed
