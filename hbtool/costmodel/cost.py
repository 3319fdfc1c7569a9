"""The cost of one program op, per unit, in BPU clock cycles.

Every op is costed on each resource it uses, and takes the slowest of them plus its dispatch
overhead (the units of one op work as a pipeline: the MAC array computes tile k while the
next tile streams in):

``tensor``         padded MACs / (MACs per cycle x operand-width rate). The array (march
                   ``units.tensor.array``) computes ``w`` output pixels x ``c_out`` channels x
                   ``reduce``-deep dot products per cycle, so W is padded to ``w``, C_out to
                   ``c_out`` and the reduction (kh*kw*C_in, C_in first padded to the C
                   alignment) to ``reduce``. A batched matmul not tiled by the compiler
                   (``bmm_tiled``) issues one array pass, and pays one dispatch, per batch entry.
                   A ConvTranspose runs as one stride-1 conv per stride phase (sub-pixel
                   decomposition), each with its ``ceil(k / stride)`` taps.
``vector``         elements (padded, as stored) x cycles per element of the op's class / lanes,
                   at half rate when an operand is 16-bit. A LayerNorm row longer than the
                   march's ``layernorm_max_size`` runs in two passes: one more reduction pass
                   and one more read of the input. Window ops count one element per
                   tap: max pool per window tap, bilinear resize 4 (a multiply-add per source
                   pixel of each output element), the input colour conversion one per input
                   channel (3 for nv12/yuv444 -> rgb, 1 for a channel swap or gray).
``data_movement``  bytes moved / the unit's bytes per cycle, where each side moves whole
                   granules (SRAM line, DDR burst) per contiguous run (:mod:`.access`).
``sram``/``ddr``   bytes each memory moves for the op / its bandwidth: activations where the
                   compiler placed them (a row-band buffer of a tiled chain is SRAM), weights and
                   tables streamed from DDR once per frame, or once per band where the compiler's
                   memory plan runs the op's chain in row bands without keeping its weights (kept
                   in SRAM, they are read from SRAM once per band).
``cpu``            the A55 cluster: quantize/dequantize per element, float subgraphs by FLOPs.

An input that arrives as an ``nv12`` image (``input_type_rt: nv12``, as every published RDK
model zoo bin) is not quantized on the CPU: the BPU reads the 8-bit Y plane and the half-size
interleaved UV plane and converts them to the model's colour order (:func:`image_input_cost`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from hbtool.costmodel import access, layout
from hbtool.costmodel.hardware import Hardware
from hbtool.ir.graph import Graph, Node
from hbtool.ir.hz_ops import HZ_PREPROCESS
from hbtool.kernels.movement import SELECTING_MOVES
from hbtool.kernels.quantize import Quantize
from hbtool.kernels.units import CPU, DATA_MOVEMENT, TENSOR, VECTOR
from hbtool.march.storage import align

SRAM, DDR = "sram", "ddr"
OVERHEAD, VIEW = "overhead", "view"


@dataclass
class OpCost:
    """What one op costs and why (cycles are BPU clock cycles, also for CPU ops)."""

    name: str
    op_type: str
    unit: str
    kernel: str | None = None
    calls: int = 1
    macs: int = 0
    padded_macs: int = 0
    elements: int = 0            # vector: elements processed (padded); data movement: elements moved
    vector_elements: int = 0     # vector: output elements, unpadded (the tensor:vector compute ratio)
    flops: int = 0
    bits: int = 8
    sram_bytes: int = 0
    ddr_bytes: int = 0           # bytes the DDR moves for this op, burst waste included
    ddr_useful_bytes: int = 0
    weight_bytes: int = 0
    components: dict[str, float] = field(default_factory=dict)   # cycles per resource
    overhead: float = 0.0
    exposed: float = 0.0         # cycles of the weight fetch from DDR not hidden behind the op's work
    note: str = ""
    layout: str = ""             # data movement: the layout case (hbtool/costmodel/layout.py) that sets the cost

    @property
    def busy(self) -> float:
        return max(self.components.values(), default=0.0)

    @property
    def wait(self) -> float:
        """Cycles the op waits for its weights beyond its busy time: the exposed share of the weight
        fetch (``exposed``) delays the op's compute, but an op already bound by the DDR is not delayed
        again by the same bytes: only what compute + wait exceeds the busiest resource shows."""
        if self.exposed <= 0:
            return 0.0
        compute = max((v for k, v in self.components.items() if k != DDR), default=0.0)
        return max(0.0, compute + self.exposed - self.busy)

    @property
    def cycles(self) -> float:
        return self.busy + self.overhead + self.wait

    @property
    def cost_class(self) -> str:
        """The class whose rule sets this op's number: the unit's kernel, with the layout case of a
        move (``Transpose / keeps layout``) or the vector class (``Lut (lut)``); the key of the
        per-class residual analysis of ``benchmarks/perf_published.py``."""
        if self.unit == DATA_MOVEMENT:
            return f"{self.op_type} / {self.layout or 'copy'}"
        if self.unit == VECTOR:
            return f"{self.kernel or self.op_type} ({self.note.split(':', 1)[0]})" if ":" in self.note else str(self.kernel or self.op_type)
        if self.unit == TENSOR:
            return f"{self.kernel or self.op_type}{' int16' if self.bits > 8 else ''}"
        return f"cpu {self.op_type}"

    @property
    def bound_by(self) -> str:
        if self.cycles <= 0:
            return VIEW
        key = max(self.components, key=lambda k: self.components[k]) if self.components else OVERHEAD
        if self.overhead >= self.busy:
            return OVERHEAD
        return key


#: run-time input types the BPU takes as 8-bit images, converting colour inside the model
IMAGE_INPUT_TYPES = ("nv12",)


@dataclass
class CostContext:
    program: Graph
    tensors: dict[str, dict[str, Any]]
    hw: Hardware
    split: int = 1               # core_num 2: each op's work is shared by both cores
    image_inputs: dict[str, str] = field(default_factory=dict)   # graph input -> its run-time image type

    @cached_property
    def consumers(self) -> dict[str, list[Node]]:
        """Tensor -> the nodes that read it (built once per costing)."""
        return self.program.consumer_map()

    @cached_property
    def producers(self) -> dict[str, Node]:
        """Tensor -> the node that writes it (built once per costing)."""
        return self.program.producer_map()

    def location(self, name: str) -> str:
        t = self.tensors.get(name) or {}
        return (t.get("memory") or {}).get("location", DDR)

    def padded_bytes(self, name: str) -> int:
        t = self.tensors.get(name)
        if t is None:
            shape = self.program.shape(name) or ()
            return int(np.prod(shape, dtype=np.int64)) * 4
        return int(t.get("padded_bytes", t.get("bytes", 0)))

    def element_bytes(self, name: str) -> int:
        t = self.tensors.get(name) or {}
        return int(t.get("element_bytes", 1))

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in (self.program.shape(name) or ()))

    def padded(self, name: str) -> tuple[int, ...]:
        t = self.tensors.get(name) or {}
        return tuple(int(d) for d in (t.get("padded") or self.shape(name)))

    def activations(self, names) -> list[str]:
        return [n for n in names if n and not self.program.is_const(n)]


# --------------------------------------------------------------------------- memory traffic


#: how the compiler's memory plan runs an op: ``{"group", "bands", "weight_reads"}`` (None: whole, untiled)
Tile = dict[str, Any] | None


def bands(tile: Tile) -> int:
    """Row bands the compiler's memory plan runs the op in: one dispatch per band."""
    return int((tile or {}).get("bands", 1))


def is_4bit_tensor(ctx: CostContext, name: str) -> bool:
    """A uint4/int4 activation (artifact tensor ``dtype``), stored at the march's 4-bit bytes per element."""
    return ctx.hw.int4_supported and (ctx.tensors.get(name) or {}).get("dtype") in ("uint4", "int4")


def _memory_traffic(op: OpCost, node: Node, ctx: CostContext, tile: Tile, as_int8: bool = False) -> None:
    """Activations read and written where they live; kernel constants streamed from DDR.

    4-bit tensors move ``int4.activation_bytes_per_element`` per element (``as_int8``: one byte, the
    int8 alternative perf compares a 4-bit layer with); int4 weights are counted packed.
    """
    hw = ctx.hw
    sram = ddr = 0
    for name in ctx.activations(list(node.inputs) + list(node.outputs)):
        b = ctx.padded_bytes(name)
        if is_4bit_tensor(ctx, name) and not as_int8:
            b = int(np.ceil(b * hw.int4_activation_bytes))
        if ctx.location(name) == DDR:
            ddr += access.sequential_bytes(b, hw.ddr_burst_bytes)
        else:
            sram += b
    kernel = node.meta.get("kernel")
    if kernel is not None:
        op.weight_bytes = int(kernel.param_bytes())
        if as_int8 and getattr(kernel, "weight_bits", 8) == 4:
            op.weight_bytes += int(kernel.weight.size) - (int(kernel.weight.size) + 1) // 2
        # an op of a chain the compiler runs in row bands (memory plan, ``tile``) needs its
        # weights for every band: streamed again from DDR each band, or, kept in SRAM, read from there
        reads, n_bands = int((tile or {}).get("weight_reads", 1)), bands(tile)
        weight_ddr = reads * access.sequential_bytes(op.weight_bytes, hw.ddr_burst_bytes) if op.weight_bytes else 0
        ddr += weight_ddr
        # the share of the weight fetch the op waits for (memory.weight_fetch_exposed): the rest
        # streams while the array works on weights already fetched
        op.exposed = hw.weight_fetch_exposed * weight_ddr / hw.ddr_bytes_per_cycle
        if n_bands > 1 and reads == 1:
            sram += n_bands * op.weight_bytes
    op.sram_bytes, op.ddr_bytes, op.ddr_useful_bytes = sram, ddr, ddr
    op.components[SRAM] = sram / hw.sram_bytes_per_cycle / ctx.split
    op.components[DDR] = ddr / hw.ddr_bytes_per_cycle


# --------------------------------------------------------------------------- tensor unit


def tensor_padding(kind: str, kernel: Any, node: Node, ctx: CostContext, c_in_quantum: int | None = None) -> tuple[int, int, int, str]:
    """(MACs, padded MACs, array passes issued, note) of a tensor-unit op (``c_in_quantum``: the 4-bit path's)."""
    hw = ctx.hw
    aw, aco, ar, cq = hw.array_w, hw.array_c_out, hw.array_reduce, c_in_quantum or hw.c_in_quantum
    out = ctx.shape(node.outputs[0])
    elems = int(np.prod(out, dtype=np.int64)) if out else 0
    if kind == "Conv":
        w = kernel.weight.shape
        cout, cin_g, taps = int(w[0]), int(w[1]), int(np.prod(w[2:], dtype=np.int64))
        group = int(kernel.group)
        spatial = out[2:]
        width = int(spatial[-1]) if spatial else 1
        rows = int(out[0]) * int(np.prod(spatial[:-1], dtype=np.int64)) if spatial else int(out[0])
        reduction = taps * (align(cin_g, cq) if group == 1 else cin_g)
        macs = kernel.macs(None, out)
        if group == 1 or hw.groups_share_lanes:
            padded = rows * align(width, aw) * align(cout, aco) * align(reduction, ar)
            note = f"W {width}->{align(width, aw)}, Cout {cout}->{align(cout, aco)}, reduction {taps * cin_g}->{align(reduction, ar)}"
        else:
            # the array's c_out lanes share one input window: only one group's output channels fill
            # them (a depthwise conv: one of c_out lanes), so each group is its own pass, unless the
            # march packs groups side by side into the lanes (units.tensor.groups_share_lanes)
            cout_g = cout // group
            padded = rows * align(width, aw) * group * align(cout_g, aco) * align(reduction, ar)
            note = (f"{group} groups of {cout_g} output channels ({'depthwise' if cout_g == 1 and cin_g == 1 else 'grouped'}: "
                    f"{cout_g}->{align(cout_g, aco)} lanes each), W {width}->{align(width, aw)}, reduction {taps * cin_g}->{align(reduction, ar)}")
        return macs, padded, 1, note
    if kind == "ConvTranspose":
        return _conv_transpose_padding(kernel, node, ctx, out)
    if kind == "Linear":
        k, n = (int(d) for d in kernel.weight.shape)
        m = elems // max(n, 1)
        padded = align(m, aw) * align(n, aco) * align(align(k, cq), ar)
        return kernel.macs(None, out), padded, 1, f"M {m}->{align(m, aw)}, N {n}->{align(n, aco)}, K {k}->{align(align(k, cq), ar)}"
    if kind in ("MatMul", "Log2MatMul"):
        k = int(kernel.k)
        m, n = (int(out[-2]), int(out[-1])) if len(out) >= 2 else (1, int(out[-1]) if out else 1)
        batch = int(np.prod(out[:-2], dtype=np.int64)) if len(out) > 2 else 1
        kp = align(align(k, cq), ar)
        if batch == 1 or node.meta.get("bmm_tiled"):
            padded = align(batch * m, aw) * align(n, aco) * kp
            calls, how = 1, "tiled" if batch > 1 else "single"
        else:
            padded = batch * align(m, aw) * align(n, aco) * kp
            calls, how = batch, "one pass per batch entry"
        return kernel.macs(None, out), padded, calls, f"batch {batch} ({how}), M {m}, N {n}, K {k}->{kp}"
    if kernel is not None and kernel.reduction is not None:  # run as a convolution with a ones kernel (reduce_as_conv)
        count = int(kernel.count)
        padded = align(elems, aco) * aw * align(count, ar)
        return elems * count, padded, 1, f"{kernel.reduction} of {count} as a ones-kernel conv"
    macs = int(node.meta.get("macs", 0))
    return macs, macs, 1, ""


def _reduction_transpose(op: OpCost, node: Node, ctx: CostContext) -> None:
    """A reduction over axes that are not one contiguous run (size-1 dims aside) reads its input
    through a transpose that brings them together: the data-movement unit moves the input once."""
    from hbtool.ir.patterns import reduction_needs_transpose

    kernel = node.meta.get("kernel")
    acts = ctx.activations(node.inputs)
    if kernel is None or kernel.reduction is None or not acts or not reduction_needs_transpose(ctx.shape(acts[0]), kernel.axes):
        return
    op.components[DATA_MOVEMENT] = ctx.padded_bytes(acts[0]) / ctx.hw.dm_bytes_per_cycle / ctx.split
    op.note += "; axes brought together by a transpose"


def _conv_transpose_padding(kernel: Any, node: Node, ctx: CostContext, out: Any) -> tuple[int, int, int, str]:
    """A transposed conv on the array: one pass per stride phase (sub-pixel decomposition).

    Output pixels of one phase ``(o mod stride)`` meet only the taps ``t`` with
    ``t * dilation = o + pad (mod stride)``: ``ceil(k / stride)`` taps per dimension, a plain
    stride-1 conv of the input with that sub-kernel. MACs are the real ones (each input sample
    times ``Cout/group x prod(k)`` weights); padding is that of every phase conv on the array.
    """
    hw = ctx.hw
    aw, aco, ar, cq = hw.array_w, hw.array_c_out, hw.array_reduce, hw.c_in_quantum
    w = kernel.weight.shape
    cin, og, kshape = int(w[0]), int(w[1]), [int(k) for k in w[2:]]
    group = int(kernel.group)
    cin_g, cout = cin // group, og * group
    x = ctx.shape(node.inputs[0])
    macs = kernel.macs(x, out) if x else 0
    spatial = list(out[2:]) if out else []
    strides = [int(s) for s in kernel.strides]
    phases = int(np.prod(strides, dtype=np.int64))
    sub_taps = int(np.prod([-(-k // s) for k, s in zip(kshape, strides)], dtype=np.int64))
    width = -(-int(spatial[-1]) // strides[-1]) if spatial else 1
    rows = (int(out[0]) * int(np.prod([-(-o // s) for o, s in zip(spatial[:-1], strides[:-1])], dtype=np.int64))) if spatial else 1
    reduction = sub_taps * (align(cin_g, cq) if group == 1 else cin_g)
    padded = phases * rows * align(width, aw) * align(cout, aco) * align(reduction, ar)
    note = (f"{phases} stride phases of {sub_taps} taps, W {width}->{align(width, aw)}, Cout {cout}->{align(cout, aco)}, "
            f"reduction {sub_taps * cin_g}->{align(reduction, ar)}")
    return macs, max(padded, macs), phases, note


def _operand_bits(kind: str, kernel: Any, as_int8: bool = False) -> tuple[int, ...]:
    if kind in ("MatMul",):
        return int(kernel.a_bits), int(kernel.b_bits)
    if kind == "Log2MatMul":
        return 8, int(kernel.b_bits)
    if as_int8:
        return int(getattr(kernel, "in_bits", 8)), 8
    x_bits = 4 if getattr(kernel, "input_range", None) is not None else int(getattr(kernel, "in_bits", 8))
    return x_bits, int(getattr(kernel, "weight_bits", 8))


def tensor_cost(node: Node, ctx: CostContext, tile: Tile = None, as_int8: bool = False) -> OpCost:
    """The op's cost; for a 4-bit op the note says whether 4 bits pay (against ``as_int8``, its int8 form)."""
    hw = ctx.hw
    kernel = node.meta.get("kernel")
    kind = type(kernel).__name__
    op = OpCost(node.name, node.op_type, TENSOR, kind)
    bits = _operand_bits(kind, kernel, as_int8)
    four = hw.int4_supported and not as_int8 and max(bits) <= 4
    op.macs, op.padded_macs, op.calls, op.note = tensor_padding(kind, kernel, node, ctx, hw.int4_c_in_quantum if four else None)
    op.bits = max(bits)
    rate = hw.tensor_rate(*bits)
    op.components[TENSOR] = op.padded_macs / (hw.macs_per_cycle * rate) / ctx.split
    if rate < 1:
        op.note += f"; int{op.bits} operands at {rate:g}x rate"
    _memory_traffic(op, node, ctx, tile, as_int8)
    _reduction_transpose(op, node, ctx)
    op.overhead = (hw.per_op_cycles + (hw.dual_core_sync_cycles if ctx.split > 1 else 0)) * op.calls * bands(tile)
    if not as_int8 and hw.int4_supported and (getattr(kernel, "weight_bits", 8) == 4 or getattr(kernel, "input_range", None) is not None):
        rng = getattr(kernel, "input_range", None)
        label = f"{'int8' if rng is None else 'uint4' if rng[0] == 0 else 'int4'} x int{bits[1]}"
        op.note += "; " + int4_note(op, tensor_cost(node, ctx, tile, as_int8=True), label)
    return op


def int4_note(op: OpCost, int8: OpCost, kinds: str) -> str:
    """Where 4 bits pay: the layer's cycles against its int8 form, and what bounds each."""
    gain = int8.cycles / op.cycles if op.cycles > 0 else 1.0
    if gain > 1.01:
        return f"{kinds}: {gain:.2f}x faster than int8 ({int8.bound_by}-bound at int8, {op.bound_by}-bound now)"
    return f"{kinds}: no gain over int8 ({op.bound_by}-bound either way; the 4-bit saving is in bytes only)"


# --------------------------------------------------------------------------- vector unit


#: multiply-adds per output element of a bilinear resize (two rows x two columns)
BILINEAR_TAPS = 4


@lru_cache(maxsize=None)
def layernorm_one_pass_size(march: str) -> int:
    """The longest LayerNorm row the vector unit normalises in one pass (the march's ``layernorm_max_size``)."""
    from hbtool.march.description import load_march

    return load_march(march).limit("layernorm_max_size")


def vector_cost(node: Node, ctx: CostContext, tile: Tile = None) -> OpCost:
    hw = ctx.hw
    kernel = node.meta.get("kernel")
    kind = type(kernel).__name__ if kernel is not None else node.op_type
    op = OpCost(node.name, node.op_type, VECTOR, kind)
    acts = ctx.activations(node.inputs)
    out = node.outputs[0]
    out_padded = int(np.prod(ctx.padded(out), dtype=np.int64))
    cls = kernel.vector_class if kernel is not None else "elementwise"
    if (kind == "AvgPool" or (kernel is not None and kernel.reduction is not None)) and acts:
        elements = int(np.prod(ctx.padded(acts[0]), dtype=np.int64))
    elif kind == "MaxPool":
        elements = out_padded * int(np.prod(getattr(kernel, "kernel_shape", (1,)), dtype=np.int64))
    elif kind == "BilinearResize":
        elements = out_padded * BILINEAR_TAPS
    elif kind == "InputConvert":  # one multiply-add per input channel of each output element, then the requantize
        elements = out_padded * kernel.multiply_adds_per_element
    else:
        elements = out_padded
    op.elements = elements
    op.vector_elements = int(np.prod(ctx.shape(out), dtype=np.int64))
    wide = any(ctx.element_bytes(n) > 1 for n in acts + [out])
    op.bits = 16 if wide else 8
    rate = hw.vector_int16_rate if wide else 1.0
    cpe = float(getattr(hw, f"cpe_{cls}"))
    op.components[VECTOR] = elements * cpe / hw.vector_lanes / rate / ctx.split
    op.note = f"{cls}: {cpe:g} cycles/element" + (f", int16 at {rate:g}x" if wide else "")
    over = tuple(getattr(kernel, "axes", (getattr(kernel, "axis", -1),)))
    if cls in ("layernorm", "softmax") and over != (-1,):
        # the reduction walks a non-last axis with a stride in place: same element count, no transpose
        op.note += f", over axes {list(over)} (strided, no transpose)"
    if kind == "BilinearResize":
        op.note += f", {BILINEAR_TAPS} taps per output element"
    if kind == "InputConvert":
        op.note += (f", input conversion {kernel.fmt}{'_128' if kernel.offset else ''} -> {kernel.train}: "
                    f"{kernel.multiply_adds_per_element} multiply-adds per output element")
    one_pass = layernorm_one_pass_size(hw.march)
    two_pass = cls == "layernorm" and int(getattr(kernel, "n", 0)) > one_pass
    if two_pass:
        # a row longer than the unit holds streams twice: its sums (a reduction pass), then the normalisation
        op.components[VECTOR] += elements * hw.cpe_pool / hw.vector_lanes / rate / ctx.split
        op.note += f", two passes (row of {kernel.n} > {one_pass})"
    _memory_traffic(op, node, ctx, tile)
    if two_pass:  # the input is read once per pass
        for name in acts:
            b = ctx.padded_bytes(name)
            if ctx.location(name) == DDR:
                extra = access.sequential_bytes(b, hw.ddr_burst_bytes)
                op.ddr_bytes += extra
                op.ddr_useful_bytes += extra
                op.components[DDR] += extra / hw.ddr_bytes_per_cycle
            else:
                op.sram_bytes += b
                op.components[SRAM] += b / hw.sram_bytes_per_cycle / ctx.split
    _reduction_transpose(op, node, ctx)
    op.overhead = (hw.per_op_cycles + (hw.dual_core_sync_cycles if ctx.split > 1 else 0)) * bands(tile)
    return op


# --------------------------------------------------------------------------- data movement


def _buffered(strided: int, in_order: int, location: str, hw: Hardware) -> int:
    """Bytes the strided side of a walk moves when the unit has a transpose buffer (``transpose_lines``).

    The buffer holds that many SRAM lines, so a tiled walk fetches each line once per tile instead of once
    per run: the line waste shrinks by that factor, down to the bytes of one pass in order. DDR-side walks
    get no such help: bursts go through the controller one by one."""
    lines = max(1, int(hw.dm_transpose_lines))
    if location != SRAM or lines == 1:
        return strided
    return max(int(in_order), -(-int(strided) // lines))


def _side(strided: dict[int, int], in_order: dict[int, int], location: str, hw: Hardware,
          staged: bool = True) -> tuple[int, int, int, str]:
    """(unit bytes, SRAM bytes, DDR bytes, layout case) of the strided side of a walk, where it lives.

    In SRAM the unit walks it through its transpose buffer. In DDR, on a march that stages reorders
    in SRAM tiles (``ddr_tiled``) and where the compiler let the move use SRAM (``staged``: the O3
    pass ``data_movement_in_sram``; below O3 every move works in DDR), DDR moves the side's bursts in
    address order and the unit walks the staged tile in SRAM (one more SRAM pass: the tile written in
    order); otherwise a burst per run."""
    gs, gd = hw.sram_access_bytes, hw.ddr_burst_bytes
    if location == SRAM:
        b = _buffered(strided[gs], in_order[gs], SRAM, hw)
        return b, b, 0, layout.STRIDED_SRAM
    if hw.dm_ddr_tiled and staged:
        b = _buffered(strided[gs], in_order[gs], SRAM, hw)
        return b, b + in_order[gs], in_order[gd], layout.TILED
    return strided[gd], 0, strided[gd], layout.GATHER_DDR


def movement_cost(node: Node, ctx: CostContext, tile: Tile = None) -> OpCost:
    """A data-movement op by its layout case (:mod:`.layout`): view, a copy that keeps the layout,
    a strided reorder in SRAM, a reorder staged through SRAM tiles, or a burst per run in DDR."""
    hw = ctx.hw
    op = OpCost(node.name, node.op_type, DATA_MOVEMENT)
    if node.meta.get("view"):
        op.note = "view: no data moves"
        op.layout = layout.VIEW_CASE
        return op
    acts_in = ctx.activations(node.inputs)
    outs = [o for o in node.outputs if o]
    eb = ctx.element_bytes(acts_in[0] if acts_in else outs[0])
    op.bits = 8 * eb
    g = {SRAM: hw.sram_access_bytes, DDR: hw.ddr_burst_bytes}
    loc_in = ctx.location(acts_in[0]) if acts_in else SRAM
    loc_out = ctx.location(outs[0])
    final = layout.row_major_outputs(ctx.program, outs, lambda n: len(ctx.shape(n)), ctx.consumers)
    # a selecting move (ReduceMax / ReduceMin / GlobalMaxPool) reads every input element to pick one per output:
    # its address walk replays only the picked addresses, so it is costed as a whole read of the input
    selecting = node.op_type in SELECTING_MOVES
    w = None if selecting else access.walk(node, ctx.program, ctx.tensors, eb, (g[SRAM], g[DDR]), row_major_outputs=final)
    # (unit bytes, SRAM bytes, DDR bytes, case) per way to walk the op
    strategies: dict[str, tuple[int, int, int, str]] = {}
    if w is None:
        in_bytes = sum(ctx.padded_bytes(n) for n in acts_in)
        out_bytes = sum(ctx.padded_bytes(n) for n in outs)
        rd, wr = access.sequential_bytes(in_bytes, g[loc_in]), access.sequential_bytes(out_bytes, g[loc_out])
        strategies["copy"] = (max(rd, wr), (rd if loc_in == SRAM else 0) + (wr if loc_out == SRAM else 0),
                              (rd if loc_in == DDR else 0) + (wr if loc_out == DDR else 0), layout.COPY)
        op.elements = (in_bytes if selecting else out_bytes) // max(eb, 1)
        useful = in_bytes + out_bytes
        note = "reads every input element, writes the selected ones" if selecting else "sequential copy"
    else:
        op.elements = w.elements
        out_seq = {k: access.sequential_bytes(w.out_elements_padded * eb, k) for k in g.values()}
        useful = (w.in_elements + w.elements) * eb
        mean_run_bytes = w.mean_run * eb
        if mean_run_bytes >= g[SRAM]:
            # runs of a line or more: the output keeps the input's byte order up to padding; both sides in order
            rd, wr = w.seq_read[g[loc_in]], out_seq[g[loc_out]]
            strategies["copy"] = (max(rd, wr), (rd if loc_in == SRAM else 0) + (wr if loc_out == SRAM else 0),
                                  (rd if loc_in == DDR else 0) + (wr if loc_out == DDR else 0), layout.KEEPS)
        else:
            staged = bool(node.meta.get("in_sram"))
            unit, sram, ddr, case = _side(w.gather_read, w.seq_read, loc_in, hw, staged)        # read strided, write in order
            wr = out_seq[g[loc_out]]
            strategies["gather"] = (max(unit, wr), sram + (wr if loc_out == SRAM else 0), ddr + (wr if loc_out == DDR else 0), case)
            unit, sram, ddr, case = _side(w.scatter_write, out_seq, loc_out, hw, staged)         # read in order, write strided
            rd = w.seq_read[g[loc_in]]
            strategies["scatter"] = (max(unit, rd), sram + (rd if loc_in == SRAM else 0), ddr + (rd if loc_in == DDR else 0), case)
        note = f"runs of {w.mean_run:.0f} elements"

    def timed(unit: int, sram: int, ddr: int, case: str) -> dict[str, float]:
        return {DATA_MOVEMENT: unit / hw.dm_bytes_per_cycle / ctx.split,
                SRAM: sram / hw.sram_bytes_per_cycle / ctx.split, DDR: ddr / hw.ddr_bytes_per_cycle}

    best = min(strategies, key=lambda k: max(timed(*strategies[k]).values()))
    unit, sram, ddr, case = strategies[best]
    op.components = timed(unit, sram, ddr, case)
    op.sram_bytes, op.ddr_bytes = sram, ddr
    op.ddr_useful_bytes = min(op.ddr_bytes, useful) if op.ddr_bytes else 0
    op.layout = case
    where = loc_in if loc_in == loc_out else f"{loc_in}->{loc_out}"
    op.note = f"{case}: {note}, {best} in {where}" + (", written as the model output's NHWC" if final else "")
    op.overhead = (hw.per_op_cycles + (hw.dual_core_sync_cycles if ctx.split > 1 else 0)) * bands(tile)
    return op


# --------------------------------------------------------------------------- CPU


def image_input_cost(name: str, input_type: str, shape: tuple[int, ...], out_location: str, hw: Hardware,
                     split: int = 1, out_bytes: int | None = None) -> OpCost:
    """The BPU's colour conversion of an image input (``nv12``), in place of the CPU quantize.

    NV12 holds a full-size 8-bit Y plane and a half-height interleaved UV plane: 1.5 bytes per
    pixel, read in bursts from DDR where the camera or decoder left it. The vector unit
    upsamples the chroma and computes each of the C output channels as a weighted sum of Y, U
    and V plus the mean/scale of the model's preprocessing (``colour_convert`` cycles per output
    element); the converted int8 tensor is written where the compiler placed the input
    (``out_bytes``: in the padded layout of its reader, see :func:`absorb_image_reorders`).
    """
    op = OpCost(f"{name}_{input_type}", HZ_PREPROCESS, VECTOR, "ColourConvert")
    n, c, h, w = (list(shape) + [1, 1, 1, 1])[:4] if len(shape) >= 4 else (1, 3, 1, int(np.prod(shape)))
    pixels = int(n) * int(h) * int(w)
    nv12_bytes = access.sequential_bytes(pixels + pixels // 2, hw.ddr_burst_bytes)
    out_elements = pixels * int(c)
    op.elements = op.vector_elements = out_elements
    written = out_elements if out_bytes is None else int(out_bytes)
    op.ddr_bytes = op.ddr_useful_bytes = nv12_bytes + (access.sequential_bytes(written, hw.ddr_burst_bytes) if out_location == DDR else 0)
    op.sram_bytes = written if out_location != DDR else 0
    op.components[VECTOR] = out_elements * hw.cpe_colour_convert / hw.vector_lanes / split
    op.components[DDR] = op.ddr_bytes / hw.ddr_bytes_per_cycle
    op.components[SRAM] = op.sram_bytes / hw.sram_bytes_per_cycle / split
    op.overhead = hw.per_op_cycles
    op.note = f"{input_type} {h}x{w} -> {c} channels on the vector unit ({hw.cpe_colour_convert:g} cycles/element)"
    return op


def crosses_cpu_boundary(name: str, ctx: CostContext) -> bool:
    """Does ``name`` count against the DDR the BPU shares: written or read by a BPU op, or a model input/output?

    A float tensor that one CPU operator writes and the next reads (a dequantize -> float subgraph ->
    quantize chain) is traffic of the A53/A55 cluster alone; what it costs the CPU is its per-element
    time and, with several threads, the cores' contention for the cluster's memory port
    (``cpu.concurrency_slowdown``, :meth:`~hbtool.costmodel.schedule.PerfResult.fps_threads`). Why it is
    not counted against the shared DDR as well: the RDK X3 runs YOLOv8n at 34.1 FPS with 8 threads,
    and with those float chains counted (295 MB a frame) that would take 10 GB/s, more than the X3's
    LPDDR4 sustains; the 8-thread rows bound the CPU side, not the DDR (docs/perf.md, costmodel3)."""
    if name in ctx.program.inputs or name in ctx.program.outputs:
        return True
    producer = ctx.producers.get(name)
    if producer is not None and producer.meta.get("unit", CPU) != CPU:
        return True
    return any(c.meta.get("unit", CPU) != CPU for c in ctx.consumers.get(name, []))


def cpu_cost(node: Node, ctx: CostContext) -> OpCost:
    hw = ctx.hw
    kernel = node.meta.get("kernel")
    if isinstance(kernel, Quantize) and node.inputs and node.inputs[0] in ctx.image_inputs:
        return image_input_cost(node.inputs[0], ctx.image_inputs[node.inputs[0]], ctx.shape(node.inputs[0]),
                                ctx.location(node.outputs[0]), hw, ctx.split)
    op = OpCost(node.name, node.op_type, CPU, type(kernel).__name__ if kernel is not None else None)
    names = ctx.activations(list(node.inputs) + [o for o in node.outputs if o])
    op.ddr_useful_bytes = op.ddr_bytes = sum(ctx.padded_bytes(n) for n in names
                                             if ctx.location(n) == DDR and crosses_cpu_boundary(n, ctx))
    elements = max((int(np.prod(ctx.shape(n), dtype=np.int64)) for n in names), default=0)
    op.elements = elements
    if "flops" in node.meta:
        op.flops = int(node.meta["flops"])
        seconds = op.flops / (hw.cpu_gflops * 1e9)
        op.note = f"{op.flops / 1e6:.2f} MFLOP on one A55 core"
    else:
        seconds = elements * hw.cpu_quantize_cpe / hw.cpu_clock_hz
        op.note = f"{elements} elements on one A55 core"
    op.components[CPU] = seconds * hw.clock_hz
    op.overhead = hw.cpu_per_op_us * 1e-6 * hw.clock_hz
    return op


def cost_op(node: Node, ctx: CostContext, tile: Tile = None) -> OpCost:
    """The cost of ``node`` on its unit, run as ``tile`` says (the memory plan's row bands; None: whole).

    The tile is an argument, not read from the node: the compiler prices candidate tilings
    before it decides one, and the schedule passes the one the compiled program records
    (``meta["tile"]``)."""
    unit = node.meta.get("unit", CPU)
    if unit == TENSOR:
        op = tensor_cost(node, ctx, tile)
    elif unit == VECTOR:
        op = vector_cost(node, ctx, tile)
    elif unit == DATA_MOVEMENT:
        op = movement_cost(node, ctx, tile)
    else:
        return cpu_cost(node, ctx)
    if tile and op.cycles > 0:
        weights = "" if not op.weight_bytes else ", weights re-read per band" if int(tile.get("weight_reads", 1)) > 1 else ", weights kept in SRAM"
        op.note += f"; chain {tile.get('group', '?')} in {bands(tile)} row bands{weights}"
    hw = ctx.hw
    if op.wait >= 1e-6 * hw.clock_hz:    # name waits of a microsecond or more
        op.note += f"; waits {op.wait / hw.clock_hz * 1e6:.1f} us for {hw.weight_fetch_exposed:.0%} of its weight fetch"
    return op
