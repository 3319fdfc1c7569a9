"""Give the tensors onnxruntime's optimizer invents names of hbtool's own.

onnxruntime's fusions name what they add from fixed stems: MatMulAddFusion writes
``gemm_input_shape``, ``gemm_output_shape``, ``gemm_input_reshape_arg_token_4``,
``gemm_output_reshape_token_65_new_shape`` ... A folded model that keeps those names breaks the
next onnxruntime session that optimizes it (the second fold after the opset lift, the
calibration statistics model, a user's session on the quantized model): its ConstantSharing
pass merges the equal shape initializers and drops their graph arguments but not their stored
values, MatMulAddFusion then fuses one more MatMul+Add and generates the same stem again, and the
session dies with ``graph_utils.cc AddInitializerWithOrtValue ... Attempt to replace the
existing tensor``. The clash needs names that onnxruntime itself generated, so renaming every
tensor a fold created (to a name built from the node that produces, or first reads, it) makes
the model safe for any later session; the user's own tensor names are left as they were.
"""

from __future__ import annotations

from typing import Iterable

import onnx


def tensor_names(model: onnx.ModelProto) -> set[str]:
    """Every tensor name at the top level of ``model`` (inputs, outputs, initializers, node outputs)."""
    g = model.graph
    names = {v.name for v in g.input} | {v.name for v in g.output} | {t.name for t in g.initializer}
    names |= {t.name for t in g.sparse_initializer if t.values.name} | {v.name for v in g.value_info}
    for node in g.node:
        names.update(o for o in node.output if o)
    return names


def rename_invented_tensors(model: onnx.ModelProto, original: Iterable[str]) -> int:
    """Rename, in place, the top-level tensors of ``model`` whose names are not in ``original``.

    A node output becomes ``<node name>_output_<k>``; an initializer ``<first reader>_input_<k>``
    (unique against every name in the model). Returns how many names changed.
    """
    g = model.graph
    keep = set(original)
    taken = tensor_names(model) | keep
    mapping: dict[str, str] = {}

    def fresh(stem: str) -> str:
        name, k = stem, 1
        while name in taken:
            name, k = f"{stem}_{k}", k + 1
        taken.add(name)
        return name

    for node in g.node:
        for k, out in enumerate(node.output):
            if out and out not in keep and out not in mapping:
                mapping[out] = fresh(f"{node.name or node.op_type}_output_{k}")
    readers: dict[str, str] = {}
    for node in g.node:
        for k, inp in enumerate(node.input):
            readers.setdefault(inp, f"{node.name or node.op_type}_input_{k}")
    for init in g.initializer:
        if init.name not in keep and init.name not in mapping:
            mapping[init.name] = fresh(readers.get(init.name, init.name))
    if not mapping:
        return 0
    for init in g.initializer:
        init.name = mapping.get(init.name, init.name)
    for vi in list(g.value_info):
        vi.name = mapping.get(vi.name, vi.name)
    _rename_references(g, mapping)
    return len(mapping)


def _rename_references(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    """Rename node inputs/outputs, following outer-scope references into control-flow bodies."""
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in mapping:
                node.input[k] = mapping[name]
        for k, name in enumerate(node.output):
            if name in mapping:
                node.output[k] = mapping[name]
        for attr in node.attribute:
            bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for body in bodies:
                local = {v.name for v in body.input} | {t.name for t in body.initializer}
                local |= {o for n in body.node for o in n.output}
                inner = {k: v for k, v in mapping.items() if k not in local}
                if inner:
                    _rename_references(body, inner)
