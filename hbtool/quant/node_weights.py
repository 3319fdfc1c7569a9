"""Per-node weight remedies: ``node_info: {conv: {Weight: mse | bias_correction | adaround}}``.

``weight_clip``, ``bias_correction`` and ``adaround`` act on every layer; the debugger
(``hbtool debug --auto``) finds the few layers whose weight rounding costs accuracy and asks for
a remedy on those only, so the fragment it writes must mean the same to plain ``hbtool
calibrate``. These helpers are what calibrate applies for such entries; the global keys keep
their meaning and a node entry adds to them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hbtool.ir.graph import Graph
from hbtool.quant.weights import input_channel_axis, weight_input_and_axis, weight_scales


def bias_correction_everywhere(cal: Any) -> bool:
    """Bias correction on for every layer: ``calibration_parameters.bias_correction`` (the default) or
    Horizon's ``optimization: bias_correction`` switch."""
    from hbtool.config.optimization import switches

    return bool(cal.bias_correction or switches(cal.optimization).bias_correction)


def nodes_asking(node_info: Mapping[str, Mapping[str, Any]] | None, remedy: str) -> set[str]:
    """Names of the nodes whose node_info entry has ``Weight: remedy``."""
    return {name for name, entry in (node_info or {}).items() if (entry or {}).get("Weight") == remedy}


def clip_node_weights(graph: Graph, weights: dict[str, tuple[np.ndarray, int]], nodes: set[str], per_channel: bool) -> dict[str, tuple[np.ndarray, int]]:
    """``weights`` with the MSE-clipped scales for the weights of ``nodes``."""
    out = dict(weights)
    for node in graph.nodes:
        if node.name not in nodes or node.meta.get("on") != "BPU":
            continue
        wa = weight_input_and_axis(node, graph)
        if wa is not None and wa[0] in out:
            out[wa[0]] = (weight_scales(graph.const(wa[0]), wa[1], per_channel, "mse"), wa[1])
    return out


def mean_inputs(graph: Graph, nodes: set[str] | None) -> dict[str, int]:
    """``{data input: channel axis}`` of the BPU layers bias correction needs means for (``None``: every layer)."""
    axes: dict[str, int] = {}
    for node in graph.nodes:
        if node.meta.get("on") != "BPU" or (nodes is not None and node.name not in nodes):
            continue
        ia = input_channel_axis(node, graph)
        if ia is not None and not graph.is_const(ia[0]):
            axes[ia[0]] = ia[1]
    return axes


def adaround_subset(graph: Graph, weights: Mapping[str, tuple[np.ndarray, int]], nodes: set[str]) -> dict[str, tuple[np.ndarray, int]]:
    """The weight plan restricted to the weights of ``nodes`` (adaround learns only what it is given)."""
    keep = {}
    for node in graph.nodes:
        if node.name in nodes and node.meta.get("on") == "BPU":
            wa = weight_input_and_axis(node, graph)
            if wa is not None and wa[0] in weights:
                keep[wa[0]] = weights[wa[0]]
    return keep
