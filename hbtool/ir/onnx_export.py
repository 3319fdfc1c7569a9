"""IR -> ONNX: every model hbtool writes goes through here, and onnxruntime must run it.

hbtool-domain ops (fusions with no standard ONNX form) are written as model-local functions
whose bodies are their standard-op decomposition, so Netron shows one node and onnxruntime
inlines the body. Same-named ops with different bodies (a window partition at two window
sizes) get distinct function names ``Op__1``, ``Op__2``; the importer maps them back.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hbtool import __version__
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.onnx_import import IN_MEMORY_LOCATION, STAGE_KEY
from hbtool.utils.atomic import atomic_write_bytes


def _attr_type_from_schema(node_op: str, domain: str, opset: int, key: str) -> int | None:
    try:
        schema = onnx.defs.get_schema(node_op, opset, domain)
        return int(schema.attributes[key].type)
    except Exception:
        return None


def make_attribute(op_type: str, domain: str, opset: int, key: str, value: Any) -> onnx.AttributeProto:
    """Build an AttributeProto; empty lists take their type from the op schema."""
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, (list, tuple)) and len(value) == 0:
        attr_type = _attr_type_from_schema(op_type, domain, opset, key) or onnx.AttributeProto.INTS
        return helper.make_attribute(key, [], attr_type=attr_type)
    if isinstance(value, (list, tuple)) and isinstance(value[0], np.ndarray):
        return helper.make_attribute(key, [numpy_helper.from_array(v) for v in value])
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        value = [v.item() if isinstance(v, np.generic) else v for v in value]
    return helper.make_attribute(key, value)


def _make_node(node: Node, opset: int, op_type: str | None = None) -> onnx.NodeProto:
    proto = helper.make_node(op_type or node.op_type, node.inputs, node.outputs, name=node.name, domain=node.domain)
    for key, value in node.attrs.items():
        proto.attribute.append(make_attribute(node.op_type, node.domain, opset, key, value))
    return proto


def _body_signature(node: Node, opset: int) -> bytes:
    func = _make_function(node, node.op_type, opset)
    func.ClearField("name")
    return func.SerializeToString(deterministic=True)


def _make_function(node: Node, name: str, opset: int) -> onnx.FunctionProto:
    body = node.body
    assert body is not None
    nodes = []
    for inner in body.nodes:
        nodes.append(_make_node(inner, opset))
    # constants of the body become Constant nodes: functions have no initializers
    const_nodes = []
    used = {i for n in body.nodes for i in n.inputs}
    for vname, v in body.values.items():
        if v.is_const and vname in used:
            const_nodes.append(helper.make_node("Constant", [], [vname], value=numpy_helper.from_array(np.asarray(v.data), vname)))
    domains = sorted({n.domain for n in body.nodes} - {""})
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_function(
        HBTOOL_DOMAIN, name, list(body.inputs), list(body.outputs), const_nodes + nodes, opsets, attributes=sorted(node.attrs)
    )


def _value_info(graph: Graph, name: str) -> onnx.ValueInfoProto:
    v = graph.values.get(name)
    if v is None or v.dtype is None:
        return helper.make_empty_tensor_value_info(name)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype))
    return helper.make_tensor_value_info(name, elem, list(v.shape) if v.shape is not None else None)


# numpy types whose TensorProto is the array's little-endian bytes in ``raw_data`` (numpy_helper.from_array's plain case:
# no string data, no 2/4/6-bit packing)
_RAW_DTYPES = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                              np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))


def _raw_data_is_the_array(array: np.ndarray) -> bool:
    """Whether ``array``'s TensorProto holds its own bytes in ``raw_data`` (:data:`_RAW_DTYPES` on a little-endian host)."""
    return array.dtype in _RAW_DTYPES and sys.byteorder == "little"


def put_tensor(tensor: onnx.TensorProto, array: np.ndarray, name: str) -> None:
    """Fill an empty ``tensor`` (already in its model, e.g. ``graph.initializer.add()``) with what
    ``numpy_helper.from_array(array, name)`` holds: the same fields set, so the same serialized bytes, without
    building the message apart and copying it in (a 100 MB weight set was copied twice more that way).
    ``tests/unit/ir/test_initializers_in_place.py`` compares the bytes for every type."""
    if not _raw_data_is_the_array(array):
        tensor.CopyFrom(numpy_helper.from_array(array, name))   # strings, bfloat16, float8, packed int4 / int2 ...
        return
    tensor.dims.extend(array.shape)
    if name:
        tensor.name = name
    tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    tensor.raw_data = array.tobytes()   # a native little-endian type: from_array's bytes


def put_in_memory_reference(tensor: onnx.TensorProto, array: np.ndarray, name: str) -> None:
    """Fill an empty ``tensor`` with ``array``'s name, shape and type and an external-data reference to
    :data:`IN_MEMORY_LOCATION` instead of its bytes: the model is then serialized without the weight, and whoever opens
    it supplies the array (serializing a 100 MB weight set, and onnxruntime parsing and copying it again, took 0.6-1 s a
    session on ResNet50)."""
    tensor.dims.extend(array.shape)
    tensor.name = name
    tensor.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key = "location"
    entry.value = IN_MEMORY_LOCATION


def put_back_in_memory_weights(model: onnx.ModelProto, graph: Graph) -> None:
    """Fill every :data:`IN_MEMORY_LOCATION` reference of ``model`` (``to_onnx(graph, in_memory=...)``) with the
    graph's array, in place: the model is then the bytes ``to_onnx(graph)`` gives, without building its nodes again
    (calibrate opens a session on the model without its weights, then writes the file from the same message)."""
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL and any(
                e.key == "location" and e.value == IN_MEMORY_LOCATION for e in tensor.external_data):
            name = tensor.name
            tensor.Clear()
            put_tensor(tensor, np.asarray(graph.values[name].data), name)


class DanglingTensorError(RuntimeError):
    """The IR reads a tensor that nothing defines: a bug in hbtool, never the user's model."""


def check_defined_before_use(graph: Graph) -> None:
    """Refuse an IR in which a node or output reads a tensor nothing defines before it.

    Such a model would be written without complaint and only fail when onnxruntime loads it
    ("... is not a graph input, initializer, or output of a previous node"), far from the
    pass that broke it; raising here names the node and the tensor instead.
    """
    defined = set(graph.inputs) | {name for name, v in graph.values.items() if v.is_const}
    for node in graph.nodes:
        for name in node.inputs:
            if name and name not in defined:
                raise DanglingTensorError(
                    f"node '{node.name}' ({node.op_type}) reads tensor '{name}', which is not a graph input, "
                    "a constant or the output of an earlier node; refusing to write a corrupt model"
                )
        defined.update(o for o in node.outputs if o)
    for name in graph.outputs:
        if name not in defined:
            raise DanglingTensorError(f"graph output '{name}' is produced by no node; refusing to write a corrupt model")


def to_onnx(graph: Graph, stage: str | None = None, producer: str = "hbtool",
            in_memory: Callable[[np.ndarray], bool] | None = None) -> onnx.ModelProto:
    """Build an ONNX model from the IR; ``stage`` is recorded in the model's metadata.

    ``in_memory``: the constants it accepts are written as references to :data:`IN_MEMORY_LOCATION`, without their
    bytes (a model for a session that is handed the arrays, never a file).

    Raises :class:`DanglingTensorError` when the IR reads a tensor nothing defines.
    """
    check_defined_before_use(graph)
    functions: dict[tuple[str, bytes], onnx.FunctionProto] = {}
    per_name: dict[str, int] = {}
    node_protos = []
    for node in graph.nodes:
        if node.body is None:
            node_protos.append(_make_node(node, graph.opset))
            continue
        sig = _body_signature(node, graph.opset)
        key = (node.op_type, sig)
        if key not in functions:
            count = per_name.get(node.op_type, 0)
            per_name[node.op_type] = count + 1
            fname = node.op_type if count == 0 else f"{node.op_type}__{count}"
            functions[key] = _make_function(node, fname, graph.opset)
        node_protos.append(_make_node(node, graph.opset, op_type=functions[key].name))

    referenced = set(graph.outputs)
    for n in graph.nodes:
        referenced.update(n.inputs)
    constants = [(name, v.data) for name, v in graph.values.items()
                 if v.is_const and name in referenced and name not in graph.inputs]
    consts = {name for name, _ in constants}
    produced = [o for n in graph.nodes for o in n.outputs if o and o not in graph.outputs]
    value_info = [_value_info(graph, o) for o in produced if graph.values.get(o) is not None and graph.values[o].shape is not None]
    g = helper.make_graph(
        node_protos,
        graph.name,
        [_value_info(graph, i) for i in graph.inputs],
        [_value_info(graph, o) for o in graph.outputs],
        value_info=[vi for vi in value_info if vi.name not in consts],
    )
    opsets = [helper.make_opsetid("", graph.opset)]
    if functions or any(n.domain == HBTOOL_DOMAIN for n in graph.nodes):
        opsets.append(helper.make_opsetid(HBTOOL_DOMAIN, 1))
    model = helper.make_model(g, opset_imports=opsets, producer_name=producer, producer_version=__version__, functions=list(functions.values()))
    # the weights go straight into the model's own graph: a TensorProto built apart and passed to make_graph is copied
    # into the graph (extend) and the graph into the model (make_model's CopyFrom), two more copies of every weight
    for name, data in constants:
        array = np.asarray(data)
        if in_memory is not None and in_memory(array):
            put_in_memory_reference(model.graph.initializer.add(), array, name)
        else:
            put_tensor(model.graph.initializer.add(), array, name)
    model.ir_version = min(model.ir_version, 9)
    meta = dict(graph.metadata)
    if stage:
        meta[STAGE_KEY] = stage
    for key in sorted(meta):
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=str(meta[key])))
    return model


def save_onnx(graph: Graph, path: str | os.PathLike, stage: str | None = None) -> Path:
    """Write the IR as an ONNX file atomically (temporary file, then rename)."""
    model = to_onnx(graph, stage=stage)
    path = Path(path)
    atomic_write_bytes(path, model.SerializeToString())
    return path


# --------------------------------------------------------------------------- one copy of the weights per file
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(field: int, size: int) -> bytes:
    """The key and length of a length-delimited field (wire type 2) of ``size`` bytes."""
    return _varint(field << 3 | 2) + _varint(size)


# field numbers (onnx.proto): ModelProto.graph, GraphProto.initializer, TensorProto.raw_data
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_PROTOBUF_LIMIT = 2 ** 31   # the largest message protobuf serializes (bytes)


def serialized_onnx(graph: Graph, stage: str | None = None) -> bytes:
    """``to_onnx(graph, stage=stage).SerializeToString()``, the same bytes, with each weight copied once.

    Why: that call copies every weight four times (``tobytes``, into the message, into protobuf's output buffer, into
    the ``bytes`` object): about 98,000 page faults and 0.2 CPU s for each 100 MB model file ResNet50's calibration
    writes. Here the message is built with the weights as references (:func:`put_in_memory_reference`) and its bytes are
    put together around the arrays' own memory: protobuf writes a message's fields in the order of their numbers, each
    field on its own (key, length, value), so the model is the fields before ``graph`` (7), the graph, and the fields
    after it; the graph is its ``node`` and ``name`` (1, 2), the initializers (5), and the rest (10 and above); a
    weight is its ``dims``, ``data_type`` and ``name`` (1, 2, 8), then ``raw_data`` (9), the array's bytes, last.
    ``tests/unit/ir/test_serialized_onnx.py`` compares the bytes with ``SerializeToString`` on every weight type."""
    model = to_onnx(graph, stage=stage, in_memory=_raw_data_is_the_array)
    g = model.graph
    pieces: list[Any] = []
    for tensor in g.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL and tensor.external_data[0].value == IN_MEMORY_LOCATION:
            array = np.ascontiguousarray(np.asarray(graph.values[tensor.name].data))
            head = onnx.TensorProto(dims=tensor.dims, data_type=tensor.data_type, name=tensor.name or None).SerializeToString()
            data = memoryview(array).cast("B") if array.size else b""
            body_size = len(head) + len(_length_delimited(_TENSOR_RAW_DATA, array.nbytes)) + array.nbytes
            pieces += [_length_delimited(_GRAPH_INITIALIZER, body_size), head, _length_delimited(_TENSOR_RAW_DATA, array.nbytes), data]
        else:
            whole = tensor.SerializeToString()
            pieces += [_length_delimited(_GRAPH_INITIALIZER, len(whole)), whole]
    graph_head = onnx.GraphProto(node=g.node, name=g.name).SerializeToString()
    rest = onnx.GraphProto()
    rest.CopyFrom(g)
    for name in ("node", "name", "initializer"):
        rest.ClearField(name)
    graph_tail = rest.SerializeToString()
    graph_size = len(graph_head) + sum(len(p) for p in pieces) + len(graph_tail)
    model.ClearField("graph")
    outer = model.SerializeToString()
    before = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if model.HasField(field):
            setattr(before, field, getattr(model, field))
    model_head = before.SerializeToString()
    if not outer.startswith(model_head) or len(outer) + graph_size >= _PROTOBUF_LIMIT:
        # a protobuf that orders fields otherwise, or a model over protobuf's 2 GB: what SerializeToString does with it
        return to_onnx(graph, stage=stage).SerializeToString()
    return b"".join([model_head, _length_delimited(_MODEL_GRAPH, graph_size), graph_head, *pieces, graph_tail, outer[len(model_head):]])
