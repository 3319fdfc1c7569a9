"""``*_quantized_model.onnx``: the integer program as a model stock onnxruntime runs.

Each ``Hz*`` node of the program becomes a model-local function whose body is its kernel's
ONNX form (:mod:`hbtool.kernels`): integers carried in float64 tensors, exact, so the model
computes bit for bit what the emulator, and the chip model, compute. Data-movement nodes
move those integers as they are; the few ops onnxruntime has no float64 kernel for run on
float32 copies (exact for int8/int16 values).
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.ir.onnx_export import to_onnx
from hbtool.ir.onnx_import import attr_value
from hbtool.kernels.movement import DATA_MOVEMENT_OPS, MODE_DEPENDENT_MOVES

import onnx


def _body_from_nodes(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str], opset: int, name: str) -> Graph:
    body = Graph(name, opset)
    body.inputs, body.outputs = list(inputs), list(outputs)
    for t in inputs + outputs:
        body.value(t)
    for k, n in enumerate(nodes):
        attrs = {a.name: attr_value(a) for a in n.attribute}
        body.add_node(n.op_type, list(n.input), list(n.output), attrs, name=n.name or f"{n.op_type}_{k}", domain=n.domain)
    return body


def kernel_body(node: Node, opset: int) -> Graph:
    kernel = node.meta["kernel"]
    ins = [f"x{i}" for i in range(len(node.inputs))]
    nodes, _ = kernel.onnx_nodes(ins if len(ins) > 1 else ins[0], "y", name_prefix="k", constants="node", opset=opset)
    return _body_from_nodes(nodes, ins, ["y"], opset, f"{node.op_type}_body")


def _float_carrier_body(node: Node, opset: int) -> Graph:
    """Run ``node`` on float32: cast its integer input down and the result back to float64."""
    body = Graph(f"{node.op_type}_f32", opset)
    ins = [f"x{i}" for i in range(len(node.inputs))]
    body.inputs, body.outputs = ins, ["y"]
    body.add_node("Cast", ["x0"], ["x0f"], {"to": onnx.TensorProto.FLOAT}, name="to_f32")
    body.add_node(node.op_type, ["x0f"] + ins[1:], ["yf"], dict(node.attrs), name="op", domain=node.domain)
    body.add_node("Cast", ["yf"], ["y"], {"to": onnx.TensorProto.DOUBLE}, name="to_f64")
    return body


def build_quantized_graph(program: Graph) -> Graph:
    """Attach ONNX bodies to the program's kernel nodes (a shallow copy: constants are shared)."""
    g = Graph(program.name, program.opset)
    g.values = dict(program.values)
    g.inputs, g.outputs = list(program.inputs), list(program.outputs)
    g.metadata = dict(program.metadata)
    for node in program.nodes:
        new = Node(node.name, node.op_type, list(node.inputs), list(node.outputs), dict(node.attrs), node.domain, node.body, {})
        if "kernel" in node.meta:
            new.body = kernel_body(node, program.opset)
            new.attrs = {k: v for k, v in node.attrs.items() if isinstance(v, (int, float, str))}
        elif node.meta.get("float_carrier") and len(node.outputs) == 1:
            inner_attrs = dict(node.attrs)
            new.body = _float_carrier_body(node, program.opset)
            new.op_type, new.domain, new.attrs = f"F32{node.op_type}", "hbtool", {}
            del inner_attrs
        g.nodes.append(new)
    return g


def computes_exactly(program: Graph) -> bool:
    """Whether the quantized model of ``program`` computes the same numbers under any onnxruntime optimization level.

    True when every node is an integer kernel (its body: integer codes in float64, convolutions and matrix products
    split so that every float32 partial sum is an exact integer; the boundary quantize and dequantize are elementwise)
    or moves values without arithmetic (a Resize may interpolate: not counted). Exact integer arithmetic gives one
    result in any order or memory layout, so onnxruntime's blocked-layout convolutions and fusions change the time,
    not the numbers. A float node (a CPU op, a BPU op without an integer lowering) computes in float, where the level
    can change the rounding: then False."""
    for node in program.nodes:
        if "kernel" in node.meta and not node.meta.get("fallback"):
            continue
        if node.meta.get("float_carrier") or (node.op_type in EXACT_MOVES and not node.meta.get("fallback")):
            continue
        return False
    return True


# ops whose outputs are copies or picks of input values: exact in any layout (a linear Resize interpolates)
EXACT_MOVES = DATA_MOVEMENT_OPS - MODE_DEPENDENT_MOVES


def to_quantized_onnx(program: Graph) -> onnx.ModelProto:
    return to_onnx(build_quantized_graph(program), stage="quantized")
