"""Run the float graph in consecutive pieces, so that only one piece's observed tensors are in memory.

The statistics pass observes every activation the BPU will quantize. Asked for all of them as
outputs of one onnxruntime run, the runtime must hold every one of them until the run returns:
on a 640x640 detector that is 1.4 GB per sample (YOLO11x) and far more with attention (YOLO12x),
on top of the model's weights, and ``hbtool perf --fast`` on YOLO12x was killed for memory.

So the node list (the IR keeps it in topological order) is cut into pieces whose observed tensors
add up to at most a byte budget, and each piece is its own onnxruntime session: a sample runs
through the pieces in order, every observed tensor is handed to the caller as its piece finishes
and dropped once the caller is done with it, and a tensor that a later piece reads is kept only
until that piece has run. A cut is made only where every tensor that crosses it (made before,
read after) is an observed tensor or a model input, i.e. already an output of the one-session run:
onnxruntime then sees the same fusion boundaries, every piece computes what the one session
computed, bit for bit, and the statistics, thresholds and scales do not change.

After each piece the freed heap pages go back to the system (:func:`release_freed_memory`). The
pieces' sessions run without onnxruntime's memory arena (an arena keeps the high-water mark of
every session for the session's lifetime, which would add the pieces' peaks back together) and
without spinning worker threads (the idle pieces' thread pools would spin against the working one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import numpy as np
import onnx
from onnx import helper

from hbtool.ir.graph import Graph

#: observed bytes (per run of the model's own batch) one piece may expose at once
PIECE_BUDGET_BYTES = 256 << 20


@dataclass
class Piece:
    """Some consecutive nodes of the run order, as one session: what it reads and what it hands out."""

    nodes: list[int]        # indices into ``graph.nodes``, in the order the piece runs them
    inputs: list[str]       # model inputs and tensors of earlier pieces it reads
    outputs: list[str]      # its observed tensors (in the caller's order), then tensors later pieces read


def tensor_bytes(graph: Graph, name: str) -> int | None:
    """Bytes of one tensor from the IR's static shape and dtype (None: not known before running)."""
    v = graph.values.get(name)
    if v is None or v.shape is None or v.dtype is None or any(not isinstance(d, (int, np.integer)) or d < 0 for d in v.shape):
        return None
    return int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


def run_order(graph: Graph, exposed: set[str]) -> list[int]:
    """The graph's node order with every node whose outputs are all unexposed moved down to just before
    its first reader.

    The IR's order is topological but may make a tensor long before it is read (YOLOv9e's CBFuse
    unsqueezes a map near the start and reads it 230 nodes later); such a tensor, unobserved (a
    Reshape shares its input's statistics), would forbid every cut in between. Which order the nodes
    of a piece run in changes no value (onnxruntime sorts them itself; each kernel reads only its inputs).
    """
    nodes = graph.nodes
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs if o}
    readers: set[str] = set(graph.outputs)
    for n in nodes:
        readers.update(t for t in n.inputs if t)
    lazy = {k for k, n in enumerate(nodes)
            if n.outputs and not any(o in exposed for o in n.outputs if o) and any(o in readers for o in n.outputs if o)}
    done: set[int] = set()
    order: list[int] = []

    def emit(k: int) -> None:
        stack = [(k, False)]
        while stack:
            j, ready = stack.pop()
            if j in done:
                continue
            if ready:
                done.add(j)
                order.append(j)
                continue
            stack.append((j, True))
            for t in reversed(nodes[j].inputs):
                p = producer.get(t) if t else None
                if p is not None and p not in done:
                    stack.append((p, False))

    for k in range(len(nodes)):
        if k not in lazy:
            emit(k)
    for k in sorted(lazy):   # read only by model outputs that nothing else reads: at the end
        emit(k)
    return order


def plan_pieces(graph: Graph, observed: list[str], budget: int = PIECE_BUDGET_BYTES) -> list[Piece] | None:
    """The pieces for ``observed`` (every one a node output or model input), or None when one session must do.

    None when the graph fits the budget whole, when an observed tensor's size is not known
    statically, or when a node carries a subgraph attribute (it may read outer-scope tensors the
    cut cannot see).
    """
    sizes = {t: tensor_bytes(graph, t) for t in observed}
    if any(s is None for s in sizes.values()) or sum(sizes.values()) <= budget:  # type: ignore[arg-type]
        return None
    nodes = graph.nodes
    if any(isinstance(v, (onnx.GraphProto, Graph)) or (isinstance(v, list) and v and isinstance(v[0], (onnx.GraphProto, Graph)))
           for n in nodes for v in n.attrs.values()):
        return None
    exposed = set(observed) | set(graph.outputs)
    order = run_order(graph, exposed)
    steps = [nodes[k] for k in order]
    last_read: dict[str, int] = {}
    for k, n in enumerate(steps):
        for t in n.inputs:
            if t:
                last_read[t] = k
    for t in graph.outputs:
        last_read[t] = len(steps)
    # cut_ok[k]: a piece may end after step k (every tensor alive across the cut is exposed or a model input)
    alive: set[str] = set()
    cut_ok = []
    for k, n in enumerate(steps):
        alive.update(o for o in n.outputs if o and last_read.get(o, -1) > k)
        alive = {t for t in alive if last_read.get(t, -1) > k}
        cut_ok.append(all(t in exposed for t in alive))
    bounds = []
    start, used = 0, 0
    for k, n in enumerate(steps):
        used += sum(sizes.get(o) or 0 for o in n.outputs if o in sizes)
        if used >= budget and cut_ok[k] and k + 1 < len(steps):
            bounds.append((start, k + 1))
            start, used = k + 1, 0
    bounds.append((start, len(steps)))
    if len(bounds) == 1:
        return None
    rank = {t: i for i, t in enumerate(observed)}
    pieces = []
    for a, b in bounds:
        made = [o for n in steps[a:b] for o in n.outputs if o]
        made_set = set(made)
        reads = []
        for n in steps[a:b]:
            for t in n.inputs:
                if t and t not in made_set and not graph.is_const(t) and t not in reads:
                    reads.append(t)
        handed = sorted((t for t in made if t in rank), key=rank.__getitem__)
        # a model output that is not observed still leaves its piece (the caller may ask for it)
        later = [t for t in made if t not in rank and (last_read.get(t, -1) >= b)]
        pieces.append(Piece(order[a:b], reads, handed + later))
    return pieces


def _value_info(graph: Graph, name: str) -> onnx.ValueInfoProto:
    from hbtool.ir.onnx_export import _value_info as ir_value_info

    return ir_value_info(graph, name)


class PiecewiseSession:
    """The float graph as consecutive onnxruntime sessions (:func:`plan_pieces`); :meth:`run` yields
    ``(name, array)`` for every observed tensor, each only until the caller moves on."""

    def __init__(self, graph: Graph, pieces: list[Piece], observed: list[str], model: onnx.ModelProto, options):
        import onnxruntime as ort

        self.pieces = pieces
        self.graph_outputs = list(graph.outputs)
        self.observed_inputs = [t for t in observed if t in graph.inputs]
        self.sessions = []
        consts = {i.name: i for i in model.graph.initializer}
        last_piece: dict[str, int] = {}
        for p_index, p in enumerate(pieces):
            for t in p.inputs:
                last_piece[t] = p_index
        self.last_piece = last_piece
        for p in pieces:
            nodes = [model.graph.node[k] for k in p.nodes]
            needed = []
            seen: set[str] = set()
            for n in nodes:
                for t in n.input:
                    if t in consts and t not in seen:
                        seen.add(t)
                        needed.append(consts[t])
            g = helper.make_graph(list(nodes), f"{model.graph.name}_piece{p.nodes[0]}",
                                  [_value_info(graph, t) for t in p.inputs],
                                  [_value_info(graph, t) for t in p.outputs], initializer=needed)
            piece_model = helper.make_model(g, opset_imports=list(model.opset_import), functions=list(model.functions))
            piece_model.ir_version = model.ir_version
            data = piece_model.SerializeToString()
            del piece_model, g
            self.sessions.append(ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]))
            del data

    def run(self, feeds: Mapping[str, np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
        live: dict[str, np.ndarray] = dict(feeds)
        for name in self.observed_inputs:   # an observed model input is handed out as it came
            yield name, live[name]
        for k, (p, sess) in enumerate(zip(self.pieces, self.sessions)):
            outs = sess.run(p.outputs, {t: live[t] for t in p.inputs})
            for t in p.inputs:   # what no later piece reads is dropped before the caller sees this piece's tensors
                if self.last_piece.get(t) == k and t not in self.graph_outputs:
                    live.pop(t, None)
            for i, name in enumerate(p.outputs):
                arr = outs[i]
                outs[i] = None
                if self.last_piece.get(name, -1) > k:
                    live[name] = arr
                yield name, arr
                del arr
            del outs
            release_freed_memory()


def _libc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):   # not glibc (macOS, musl): nothing to hand back this way
        return None


_MALLOC_TRIM = _libc_trim()


def release_freed_memory() -> None:
    """Hand the heap pages freed by the last piece back to the system (glibc ``malloc_trim``).

    glibc serves blocks under its dynamic mmap threshold (up to 32 MB, which a 26 MB feature map
    is after the first one was freed) from its heaps and keeps what is freed there: without this a
    piecewise run still grows to what the one-session run held (1.45 GB instead of 0.66 GB on a
    model with 2 GB of observed tensors). Costs a fraction of a millisecond."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def run_each(sess, names: list[str], feeds: Mapping[str, np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, array)`` of one session's run, each array released once the caller moves on."""
    if isinstance(sess, PiecewiseSession):
        wanted = set(names)
        yield from ((n, a) for n, a in sess.run(feeds) if n in wanted)
        return
    outs = sess.run(names, dict(feeds))
    for i, name in enumerate(names):
        arr = outs[i]
        outs[i] = None
        yield name, arr
        del arr
    del outs
    release_freed_memory()


def static_sizes(graph: Graph, names: Iterable[str]) -> dict[str, int] | None:
    """Element counts of ``names`` from the IR's static shapes (None when one is unknown)."""
    out = {}
    for n in names:
        v = graph.values.get(n)
        if v is None or v.shape is None or any(not isinstance(d, (int, np.integer)) or d < 0 for d in v.shape):
            return None
        out[n] = int(np.prod(v.shape, dtype=np.int64))
    return out
