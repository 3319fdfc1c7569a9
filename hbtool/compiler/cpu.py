"""Float nodes that stay on the CPU, grouped into ONNX subgraphs the runtime executes.

Nodes the checker put on the CPU (and BPU nodes without an integer lowering yet) run in
float on the A55 cluster. Each maximal run of them in program order becomes one subgraph,
embedded in the artifact as an ONNX model and executed by onnxruntime in ``simulate``. A run
in program order only reads tensors computed before it, so the grouping can never create a
cycle. The quantize/dequantize at the BPU's boundary are not part of these subgraphs: they
are integer kernels with their own description in the artifact.
"""

from __future__ import annotations

from dataclasses import dataclass

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.hz_ops import HZ_CPU_SUBGRAPH
from hbtool.ir.macs import node_macs

CPU_SUBGRAPH_OP = HZ_CPU_SUBGRAPH


@dataclass
class CpuSubgraph:
    name: str
    inputs: list[str]
    outputs: list[str]
    onnx_bytes: bytes
    nodes: list[str]
    flops: int = 0


def _is_cpu_float(node: Node) -> bool:
    return "kernel" not in node.meta and node.meta.get("on") != "BPU"


def _subgraph(program: Graph, nodes: list[Node], name: str, later_reads: set[str]) -> CpuSubgraph:
    produced = {o for n in nodes for o in n.outputs if o}
    inputs: list[str] = []
    for n in nodes:
        for i in n.inputs:
            if i and i not in produced and i not in inputs and not program.is_const(i):
                inputs.append(i)
    outputs = [o for n in nodes for o in n.outputs if o and (o in later_reads or o in program.outputs)]
    g = Graph(name, program.opset)
    for n in nodes:
        g.nodes.append(Node(n.name, n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs), n.domain, n.body))
        for t in list(n.inputs) + list(n.outputs):
            if t and t in program.values:
                g.values[t] = program.values[t]
    g.inputs, g.outputs = inputs, outputs
    from hbtool.ir.onnx_export import to_onnx  # onnx loads only when compiling (not for simulate's CPU_SUBGRAPH_OP)

    model = to_onnx(g, stage="cpu_subgraph")
    flops = sum(2 * int(node_macs(n, program)) for n in nodes)
    return CpuSubgraph(name, inputs, outputs, model.SerializeToString(), [n.name for n in nodes], flops)


def extract_cpu_subgraphs(program: Graph) -> list[CpuSubgraph]:
    """Replace each run of float CPU nodes by one ``HzCpuSubgraph`` node; returns the subgraphs."""
    runs: list[list[Node]] = []
    current: list[Node] = []
    for node in program.nodes:
        if _is_cpu_float(node):
            current.append(node)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    subgraphs: list[CpuSubgraph] = []
    for k, run in enumerate(runs):
        members = set(id(n) for n in run)
        later_reads = {i for n in program.nodes if id(n) not in members for i in n.inputs}
        sg = _subgraph(program, run, f"cpu_subgraph_{k}", later_reads)
        index = program.nodes.index(run[0])
        for n in run:
            program.nodes.remove(n)
        node = Node(sg.name, CPU_SUBGRAPH_OP, list(sg.inputs), list(sg.outputs), {"index": k}, HBTOOL_DOMAIN)
        node.meta.update(on="CPU", unit="cpu", flops=sg.flops)
        program.nodes.insert(index, node)
        subgraphs.append(sg)
    program.remove_unused()
    return subgraphs
