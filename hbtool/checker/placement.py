"""Decides, for every node of the optimized float graph, BPU or CPU, and why.

Placement is written into ``node.meta``: ``on`` ("BPU"|"CPU"), ``bpu_type``, ``unit``,
``reason`` (for CPU nodes) and ``subgraph`` (BPU subgraph id). Later stages (calibrate,
compile, perf) read these annotations instead of deciding again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.march.description import March
from hbtool.march.op_rules import CPU_BY_DESIGN, CPU_REASON_OF_NODE, GENERIC_RULES, RuleContext, march_rules, reason_of, support_for


@dataclass
class Placement:
    on: str
    bpu_type: str | None
    unit: str | None
    reason: str | None


def integer_derived_tensors(graph: Graph) -> set[str]:
    """Tensors computed only from integer/boolean model inputs and constants (ids, masks).

    Arithmetic on such tensors (an attention mask turned into additive -inf/-1e4 biases) is
    cheap, exact in float, and its values (float-min, -inf) cannot be quantized; it stays on
    the CPU and feeds the BPU as one more input.
    """
    derived = {
        name for name in graph.inputs
        if graph.dtype(name) is not None and not np.issubdtype(graph.dtype(name), np.floating)
    }
    for node in graph.nodes:
        if node.op_type in _LOOKUPS and graph.is_const(node.inputs[0]):
            continue  # an embedding lookup yields a feature map, whatever the index type
        if node.op_type == "DequantizeLinear":
            continue  # a quantized model input (int8/uint8 pixels of a tf2onnx full-int8 model) read as the real values it codes
        data = [i for i in node.inputs if i and not graph.is_const(i)]
        if data and all(i in derived for i in data):
            derived.update(o for o in node.outputs if o)
    return derived


_LOOKUPS = {"Gather", "GatherElements", "GatherND"}


def place_node(node: Node, graph: Graph, march: March, integer_derived: set[str]) -> Placement:
    """The placement of one node under the march's rules (without user overrides)."""
    support = support_for(node.op_type)
    if node.domain not in ("", "hbtool"):
        return Placement("CPU", None, None, f"op of domain '{node.domain}' has no BPU implementation")
    if support is None:
        if node.op_type in CPU_REASON_OF_NODE:
            return Placement("CPU", None, None, CPU_REASON_OF_NODE[node.op_type](node, graph))
        why = CPU_BY_DESIGN.get(node.op_type, f"{node.op_type} has no BPU implementation on march {march.name}")
        return Placement("CPU", None, None, why)
    data = [i for i in node.inputs if i and not graph.is_const(i)]
    is_lookup = node.op_type in _LOOKUPS and graph.is_const(node.inputs[0])
    if data and all(i in integer_derived for i in data) and not is_lookup:
        return Placement(
            "CPU", None, None,
            "computes on values derived only from integer model inputs (ids, masks): exact and cheap in float on the CPU, and its extreme values cannot be quantized",
        )
    ctx = RuleContext(node, graph, march)
    for rule in GENERIC_RULES + march_rules(march.name, node.op_type) + support.rules:
        detail = rule(ctx)
        if detail is not None:
            return Placement("CPU", None, None, reason_of(rule, march, detail))
    return Placement("BPU", support.bpu_type, support.unit, None)


def place_graph(graph: Graph, march: March, node_info: Mapping[str, Mapping[str, str | None]] | None = None) -> None:
    """Annotate every node with its placement, honouring ``node_info`` ``ON`` overrides."""
    integer_derived = integer_derived_tensors(graph)
    node_info = node_info or {}
    for node in graph.nodes:
        p = place_node(node, graph, march, integer_derived)
        wanted = (node_info.get(node.name) or {}).get("ON")
        if wanted == "CPU" and p.on == "BPU":
            p = Placement("CPU", None, None, "node_info asks for the CPU")
        elif wanted == "BPU" and p.on == "CPU":
            p = Placement("CPU", None, None, f"node_info asks for the BPU, but: {p.reason}")
        node.meta.update(on=p.on, bpu_type=p.bpu_type, unit=p.unit, reason=p.reason)
    assign_subgraphs(graph)


def assign_subgraphs(graph: Graph) -> int:
    """Group BPU nodes into subgraphs separated by CPU nodes; returns how many there are.

    A node's stage counts the CPU nodes on the longest path before it; BPU nodes joined by an
    edge and at the same stage share a subgraph. Stages never decrease along an edge, so no
    subgraph can need the output of a CPU node that needs the subgraph itself.
    """
    producers = graph.producer_map()
    stage: dict[str, int] = {}
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for node in graph.nodes:
        preds = [producers[i] for i in node.inputs if i in producers]
        s = 0
        for p in preds:
            s = max(s, stage[p.name] + (1 if p.meta.get("on") == "CPU" and node.meta.get("on") == "BPU" else 0))
        stage[node.name] = s
        if node.meta.get("on") == "BPU":
            parent[node.name] = node.name
            for p in preds:
                if p.meta.get("on") == "BPU" and stage[p.name] == s:
                    parent[find(p.name)] = find(node.name)
    ids: dict[str, int] = {}
    for node in graph.nodes:
        if node.meta.get("on") == "BPU":
            root = find(node.name)
            if root not in ids:
                ids[root] = len(ids)
            node.meta["subgraph"] = ids[root]
        else:
            node.meta["subgraph"] = None
    return len(ids)
