"""How a data-movement op walks memory: contiguous runs, and the bytes each side really moves.

Memory is read and written in granules: a DDR burst (``memory.ddr_burst_bytes``) or an SRAM
line (``memory.sram_access_bytes``). A transpose whose innermost output axis is not the
innermost input axis touches one element per granule on one side, so that side moves a whole
granule for every element. To find the runs, the op is applied to an array holding, for every
element, its byte address in the input's stored layout (:mod:`hbtool.march.storage`: rank-4 tensors
channel-innermost with C and W padded, other tensors row-major with their last two axes
padded); the same numpy code ``simulate`` runs moves the addresses. Walking the output in
stored order, a run ends where the source address jumps.

The unit may walk either side in order: gather (write the output in order, read the input in
runs) or scatter (read the input in order, write the output in runs). The cost model takes the
cheaper.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.kernels.movement import MOVEMENT
from hbtool.march.storage import stored_order

_TAG = 40  # input k's addresses are offset by k << _TAG (Concat), so they never look contiguous


def addresses(shape: Sequence[int], padded: Sequence[int]) -> np.ndarray:
    """Array of the logical ``shape`` holding each element's element offset in the stored layout."""
    shape, padded = [int(d) for d in shape], [int(d) for d in padded]
    if not shape:
        return np.zeros((), np.int64)
    order = stored_order(len(shape))
    stored = np.arange(int(np.prod(padded, dtype=np.int64)), dtype=np.int64).reshape([padded[a] for a in order])
    logical = np.transpose(stored, np.argsort(order))
    return np.ascontiguousarray(logical[tuple(slice(0, s) for s in shape)])


def row_major_addresses(shape: Sequence[int], padded: Sequence[int]) -> np.ndarray:
    """Like :func:`addresses`, for a tensor stored in its logical (row-major) order: a model output
    handed to the user in the layout its shape says (a rank-4 ``N,H,W,C`` output is NHWC bytes)."""
    shape, padded = [int(d) for d in shape], [int(d) for d in padded]
    if not shape:
        return np.zeros((), np.int64)
    full = np.arange(int(np.prod(padded, dtype=np.int64)), dtype=np.int64).reshape(padded)
    return np.ascontiguousarray(full[tuple(slice(0, s) for s in shape)])


def in_stored_order(a: np.ndarray) -> np.ndarray:
    return np.transpose(a, stored_order(a.ndim)).reshape(-1) if a.ndim else a.reshape(-1)


def _run_starts(addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first address, length) of the maximal stretches of consecutive addresses, in walk order."""
    if addr.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(addr) != 1) + 1
    edges = np.concatenate(([0], breaks, [addr.size]))
    return addr[edges[:-1]], np.diff(edges)


def run_blocks(starts: np.ndarray, lengths: np.ndarray, element_bytes: int, granule: int) -> int:
    """Granules touched when each run is fetched on its own (a run may straddle granule edges)."""
    if starts.size == 0:
        return 0
    first = (starts * element_bytes) // granule
    last = ((starts + lengths) * element_bytes - 1) // granule
    return int((last - first + 1).sum())


def distinct_blocks(addr_sorted: np.ndarray, element_bytes: int, granule: int) -> int:
    """Granules touched by one pass in address order (neighbouring elements share a granule)."""
    if addr_sorted.size == 0:
        return 0
    blocks = (addr_sorted * element_bytes) // granule
    return int(1 + np.count_nonzero(np.diff(blocks)))


def sequential_bytes(n_bytes: int, granule: int) -> int:
    return -(-int(n_bytes) // granule) * granule


@dataclass(frozen=True)
class Walk:
    """What one data-movement op touches; bytes per granule size for the two ways to walk it.

    ``gather_read[g]``: bytes read when the output is written in order and the input is read
    run by run; ``seq_read[g]``: bytes read in one pass in address order; ``scatter_write[g]``:
    bytes written run by run when the input is read in order. The in-order output write is
    ``out_elements_padded`` elements (padding written too).
    """

    elements: int
    in_elements: int
    out_elements_padded: int
    runs: int
    gather_read: dict[int, int]
    seq_read: dict[int, int]
    scatter_write: dict[int, int]

    @property
    def mean_run(self) -> float:
        return float(self.elements) / max(1, self.runs)


_CACHE: dict[str, Walk] = {}


def _key(node: Node, program: Graph, tensors: dict[str, dict], element_bytes: int, granules: tuple[int, ...],
         row_major: frozenset[str] = frozenset()) -> str:
    parts: list[Any] = [node.op_type, sorted((k, repr(v)) for k, v in node.attrs.items()), element_bytes, list(granules),
                        sorted(o for o in node.outputs if o in row_major)]
    for name in list(node.inputs) + list(node.outputs):
        if not name:
            parts.append(None)
        elif program.is_const(name):
            data = np.ascontiguousarray(program.const(name))
            parts.append(("const", data.dtype.str, data.shape, hashlib.sha1(data.tobytes()).hexdigest()))
        else:
            t = tensors.get(name, {})
            parts.append((list(program.shape(name) or ()), t.get("padded")))
    return json.dumps(parts, default=str)


def walk(node: Node, program: Graph, tensors: dict[str, dict], element_bytes: int, granules: Sequence[int],
         movement: dict | None = None, row_major_outputs: Sequence[str] = ()) -> Walk | None:
    """How a data-movement node walks memory, or None when its semantics are unknown (then: a copy).

    ``row_major_outputs``: outputs written in their logical row-major order instead of the BPU's
    stored order (a model output, handed to the user as its shape says: see
    :func:`hbtool.costmodel.layout.row_major_outputs`)."""
    row_major = frozenset(row_major_outputs)
    fn = (MOVEMENT if movement is None else movement).get(node.op_type)  # the simulator's exact semantics
    if fn is None:
        return None
    granules = tuple(sorted({int(g) for g in granules}))
    key = _key(node, program, tensors, element_bytes, granules, row_major)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    xs: list[Any] = []
    k = 0
    for name in node.inputs:
        if not name:
            xs.append(None)
        elif program.is_const(name):
            xs.append(program.const(name))
        else:
            shape = program.shape(name) or ()
            padded = tensors.get(name, {}).get("padded") or list(shape)
            xs.append(addresses(shape, padded) + (np.int64(k) << _TAG))
            k += 1
    try:
        ys = fn(node, program, *xs)
    except Exception:  # an op form the address walk cannot replay: cost it as a sequential copy
        return None
    eb = int(element_bytes)
    gather = {g: 0 for g in granules}
    scatter = {g: 0 for g in granules}
    elements = runs = out_padded = 0
    sources: list[np.ndarray] = []
    for y, name in zip(ys, node.outputs):
        y = np.asarray(y)
        shape = tuple(int(d) for d in y.shape)
        padded = tensors.get(name, {}).get("padded") or list(shape)
        if name in row_major:
            src, dst = y.reshape(-1), row_major_addresses(shape, padded).reshape(-1)
        else:
            src = in_stored_order(y)
            dst = in_stored_order(addresses(shape, padded))
        elements += int(src.size)
        out_padded += int(np.prod(padded, dtype=np.int64)) if padded else 1
        starts, lengths = _run_starts(src)
        runs += int(starts.size)
        order = np.argsort(src, kind="stable")
        w_starts, w_lengths = _run_starts(dst[order])
        for g in granules:
            gather[g] += run_blocks(starts, lengths, eb, g) * g
            scatter[g] += run_blocks(w_starts, w_lengths, eb, g) * g
        sources.append(src[order])
    read = np.sort(np.concatenate(sources)) if len(sources) > 1 else (sources[0] if sources else np.zeros(0, np.int64))
    if read.size:
        read = read[np.concatenate(([True], np.diff(read) != 0))]
    seq = {g: distinct_blocks(read, eb, g) * g for g in granules}
    result = Walk(elements, int(read.size), out_padded, runs, gather, seq, scatter)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = result
    return result
