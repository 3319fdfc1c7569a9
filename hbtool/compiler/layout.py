"""Tensor layouts: each unit's alignment, the padded shapes it implies, and explicit reorders.

The BPU stores a tensor with its channel axis innermost (NCHW feature maps as NHWC; other
tensors with their last axis innermost) and the next axis as the "W" row. Every rank-4 tensor
counts as NCHW, as J5's compiler treats it: a transformer exported with (B, H, W, C) token
grids or (B, heads, L, L) scores pays for that (heads padded as channels, strided movement),
which is why Horizon's own J5 Swin-T keeps (B, C, H, W) throughout and runs linears as 1x1
convolutions. A usage-based layout (last axis innermost for such tensors) was tried: it moves
the cost model's Swin-T from 156 to 350 FPS, far from the 143 FPS measured on the chip, so
the model keeps the compiler's rule. Each unit wants
those two axes padded to its alignment (``march.units.<unit>.alignment``: the tensor unit
C to 8 and W to 16). A tensor is stored in the layout of the unit that writes it; where a
reader needs more alignment than that layout has, an explicit ``HzReorder`` copies it into
the reader's layout (the classic case: a 3-channel image entering the first convolution).
The padding is paid in bytes and MACs, and recorded per tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hbtool.compiler.units import CPU, DATA_MOVEMENT
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.hz_ops import HZ_REORDER
from hbtool.march.description import March
from hbtool.march.storage import element_bytes, padded_shape, storage_axes

__all__ = ["LayoutPlan", "TensorLayout", "element_bytes", "padded_shape", "plan_layout", "storage_axes", "unit_alignment"]


@dataclass
class TensorLayout:
    name: str
    shape: tuple[int, ...]
    padded: tuple[int, ...]      # logical shape with C and W padded
    c_axis: int | None
    w_axis: int | None
    element_bytes: int

    @property
    def bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.element_bytes

    @property
    def padded_bytes(self) -> int:
        return int(np.prod(self.padded, dtype=np.int64)) * self.element_bytes

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "padded": list(self.padded), "element_bytes": self.element_bytes,
                "bytes": self.bytes, "padded_bytes": self.padded_bytes}


def unit_alignment(march: March, unit: str, reading: bool) -> tuple[int, int]:
    """(C quantum, W quantum) a unit needs for the tensors it reads (or writes)."""
    if unit == CPU:
        return 1, 1
    a = march.alignment(unit)
    c = a.get("c_in" if reading else "c_out", a.get("c", 1))
    return int(c), int(a.get("w", 1))


@dataclass
class LayoutPlan:
    tensors: dict[str, TensorLayout]
    reorders: int
    padding_bytes: int

    def to_json(self) -> dict:
        return {"reorders": self.reorders, "padding_bytes": self.padding_bytes}


def plan_layout(program: Graph, march: March, tensor_bits: dict[str, int]) -> LayoutPlan:
    """Pick every tensor's layout, inserting ``HzReorder`` where a reader needs more alignment."""
    producers = program.producer_map()
    consumers = program.consumer_map()
    tensors: dict[str, TensorLayout] = {}
    quanta: dict[str, tuple[int, int]] = {}
    reorders = 0

    def layout_of(name: str, c_q: int, w_q: int) -> TensorLayout:
        shape = tuple(int(d) for d in (program.shape(name) or ()))
        c_axis, w_axis = storage_axes(shape)
        return TensorLayout(name, shape, padded_shape(shape, c_q, w_q), c_axis, w_axis, element_bytes(tensor_bits.get(name)))

    names = [i for i in program.inputs] + [o for n in program.nodes for o in n.outputs if o]
    for name in names:
        p = producers.get(name)
        unit = p.meta.get("unit", CPU) if p is not None else CPU
        c_q, w_q = unit_alignment(march, unit, reading=False)
        if unit == DATA_MOVEMENT and p is not None and p.inputs and p.inputs[0] in quanta:
            # data movement keeps its input's channel padding (it moves whole rows)
            c_q = max(c_q, quanta[p.inputs[0]][0])
        quanta[name] = (c_q, w_q)
        tensors[name] = layout_of(name, c_q, w_q)
        if unit == CPU and p is None and name not in tensor_bits:
            continue
        for reader in list(consumers.get(name, [])):
            r_unit = reader.meta.get("unit", CPU)
            if r_unit in (CPU, DATA_MOVEMENT) or reader.op_type == HZ_REORDER:
                continue
            need_c, need_w = unit_alignment(march, r_unit, reading=True)
            shape = tensors[name].shape
            if padded_shape(shape, need_c, need_w) == padded_shape(shape, c_q, w_q) or (need_c <= c_q and need_w <= w_q):
                continue
            # one reorder per tensor serves every reader that needs it
            key = f"{name}_reorder"
            if key not in program.values:
                v = program.values[name]
                program.set_value(key, v.shape, v.dtype)
                node = Node(program.unique_name(f"{name}/{HZ_REORDER}"), HZ_REORDER, [name], [key], {}, HBTOOL_DOMAIN)
                node.meta.update(on="BPU", unit=DATA_MOVEMENT, subgraph=reader.meta.get("subgraph"), in_sram=True)
                program.nodes.insert(program.nodes.index(reader), node)
                if name in tensor_bits:
                    tensor_bits[key] = tensor_bits[name]
                tensors[key] = layout_of(key, max(c_q, need_c), max(w_q, need_w))
                quanta[key] = (max(c_q, need_c), max(w_q, need_w))
                reorders += 1
            reader.inputs = [key if i == name else i for i in reader.inputs]
    program.toposort()
    padding = sum(t.padded_bytes - t.bytes for t in tensors.values())
    return LayoutPlan(tensors, reorders, padding)
