"""Serialized one-node ONNX models for the simulator's onnxruntime sessions, without importing ``onnx``.

The simulator hands its exact products (integer GEMMs, float convolutions on small integers,
see :mod:`.accel`) to onnxruntime, which takes a model as protobuf bytes. Building those with
``onnx.helper`` meant importing ``onnx``, and that import (through ``ml_dtypes``) was about a
second of every ``hbtool simulate`` process start on two cores, more than the whole run of a
small input set. The few messages the sessions need (a model holding one graph of nodes with
int/ints/float attributes, raw-data initializers and inputs/outputs of a known element type
and unknown shape) are written here directly in the protobuf wire format of ``onnx.proto``;
the tests parse them with ``onnx`` and compare them with ``onnx.helper``'s messages.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hbtool.kernels.builder import ElemType

_ELEM_OF_DTYPE = {
    np.dtype(np.float32): ElemType.FLOAT, np.dtype(np.float64): ElemType.DOUBLE, np.dtype(np.uint8): ElemType.UINT8,
    np.dtype(np.int8): ElemType.INT8, np.dtype(np.int16): ElemType.INT16, np.dtype(np.int32): ElemType.INT32,
    np.dtype(np.int64): ElemType.INT64,
}
_VARINT, _FIXED32, _BYTES = 0, 5, 2  # protobuf wire types
_ATTR_FLOAT, _ATTR_INT, _ATTR_STRING, _ATTR_INTS = 1, 2, 3, 7  # AttributeProto.AttributeType


def elem_type(dtype: Any) -> int:
    """The ONNX element type of a numpy dtype."""
    return _ELEM_OF_DTYPE[np.dtype(dtype)]


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 fields: negative values as their 64-bit two's complement (10 bytes)
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _int(number: int, value: int) -> bytes:
    return _key(number, _VARINT) + _varint(int(value))


def _bytes(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else bytes(value)
    return _key(number, _BYTES) + _varint(len(data)) + data


def _attribute(name: str, value: Any) -> bytes:
    """An ``AttributeProto``: int, float, string or a list of ints (what the sessions' ops take)."""
    if isinstance(value, (bool, int, np.integer)):
        return _bytes(1, name) + _int(3, value) + _int(20, _ATTR_INT)
    if isinstance(value, (float, np.floating)):
        return _bytes(1, name) + _key(2, _FIXED32) + struct.pack("<f", float(value)) + _int(20, _ATTR_FLOAT)
    if isinstance(value, (str, bytes)):
        return _bytes(1, name) + _bytes(4, value) + _int(20, _ATTR_STRING)
    values = list(value)
    if all(isinstance(v, (int, np.integer)) for v in values):
        return _bytes(1, name) + b"".join(_int(8, v) for v in values) + _int(20, _ATTR_INTS)
    raise TypeError(f"attribute {name!r}: {type(value).__name__} values are not written here")


@dataclass
class Node:
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return (b"".join(_bytes(1, i) for i in self.inputs) + b"".join(_bytes(2, o) for o in self.outputs)
                + _bytes(4, self.op_type) + b"".join(_bytes(5, _attribute(k, v)) for k, v in sorted(self.attrs.items())))


def node(op_type: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Node:
    """One node of the default domain (the arguments of ``onnx.helper.make_node``)."""
    return Node(op_type, list(inputs), list(outputs), dict(attrs))


def _tensor(name: str, array: np.ndarray) -> bytes:
    """A ``TensorProto`` with ``raw_data`` (little-endian, as ONNX stores it)."""
    arr = np.asarray(array)
    data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return b"".join(_int(1, d) for d in arr.shape) + _int(2, elem_type(arr.dtype)) + _bytes(8, name) + _bytes(9, data)


def _value_info(name: str, elem: int) -> bytes:
    """A ``ValueInfoProto``: a tensor of element type ``elem`` and no declared shape."""
    return _bytes(1, name) + _bytes(2, _bytes(1, _int(1, elem)))


def model(nodes: list[Node], inputs: dict[str, int], outputs: dict[str, int],
          initializers: dict[str, np.ndarray] | None = None, opset: int = 17, ir_version: int = 8) -> bytes:
    """The serialized ``ModelProto`` of one graph: ``inputs``/``outputs`` map names to element types."""
    graph = (b"".join(_bytes(1, n.encode()) for n in nodes) + _bytes(2, "accel")
             + b"".join(_bytes(5, _tensor(k, v)) for k, v in (initializers or {}).items())
             + b"".join(_bytes(11, _value_info(k, t)) for k, t in inputs.items())
             + b"".join(_bytes(12, _value_info(k, t)) for k, t in outputs.items()))
    return _int(1, ir_version) + _bytes(7, graph) + _bytes(8, _bytes(1, "") + _int(2, opset))
