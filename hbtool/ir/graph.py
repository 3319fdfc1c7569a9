"""The one in-memory graph every stage works on.

Why our own small graph instead of passing ``onnx.ModelProto`` around: passes need cheap
producer/consumer look-ups, in-place rewrites, and room for per-node annotations (placement,
quantization parameters, lowering results) that ONNX protos cannot carry. Everything else
(shape inference, constant folding, running a graph) stays with onnx and onnxruntime, reached
through ``hbtool.ir.onnx_import`` / ``hbtool.ir.onnx_export``.

Conventions
-----------
* Tensors are named by strings, as in ONNX. ``Graph.values`` maps every tensor name to a
  :class:`Value` holding its static shape and numpy dtype; constants (ONNX initializers) carry
  their data in ``Value.data``.
* ``Graph.nodes`` is kept in topological order by the passes (``Graph.toposort`` restores it).
* Ops keep their ONNX ``op_type`` and ``domain``. Ops that hbtool fuses and that have no
  standard ONNX form live in the ``hbtool`` domain and carry a ``body``: a small graph in
  standard ops that computes the same thing, exported as an ONNX model-local function so that
  onnxruntime can still run every model we write.
* ``Node.meta`` holds stage annotations (``placement``, ``bpu_type``, ``reason``, quant info);
  it is not exported as ONNX attributes.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

HBTOOL_DOMAIN = "hbtool"


@dataclass
class Value:
    """A tensor: its name, static shape (``None`` when unknown), numpy dtype, and data if constant."""

    name: str
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    data: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def numel(self) -> int | None:
        return None if self.shape is None else int(np.prod(self.shape, dtype=np.int64))


@dataclass
class Node:
    """One operation. ``inputs`` may contain ``""`` for an omitted optional input, as in ONNX."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    body: "Graph | None" = None
    meta: dict[str, Any] = field(default_factory=dict)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def attr_text(self, key: str, default: str = "") -> str:
        """A string attribute as ``str`` (ONNX import keeps them as ``bytes``)."""
        value = self.attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else str(value)

    def __repr__(self) -> str:  # short, for logs and assertion messages
        return f"Node({self.name!r}, {self.op_type}, {self.inputs} -> {self.outputs})"


class Graph:
    """A dataflow graph of :class:`Node` over named :class:`Value` tensors."""

    def __init__(self, name: str = "main_graph", opset: int = 17):
        self.name = name
        self.opset = opset
        self.nodes: list[Node] = []
        self.values: dict[str, Value] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.metadata: dict[str, str] = {}
        # what an already-quantized model fixed (hbtool.ir.prequantized.Prequantized), set by the import
        self.prequantized: Any = None
        self._name_counter = itertools.count()

    # ----------------------------------------------------------------- values
    def value(self, name: str) -> Value:
        """The value called ``name``, created (shape unknown) on first use."""
        v = self.values.get(name)
        if v is None:
            v = Value(name)
            self.values[name] = v
        return v

    def shape(self, name: str) -> tuple[int, ...] | None:
        v = self.values.get(name)
        return None if v is None else v.shape

    def dtype(self, name: str) -> np.dtype | None:
        v = self.values.get(name)
        return None if v is None else v.dtype

    def const(self, name: str) -> np.ndarray | None:
        """The constant data of ``name``, or ``None`` when it is computed at run time."""
        if not name:
            return None
        v = self.values.get(name)
        return None if v is None else v.data

    def is_const(self, name: str) -> bool:
        return self.const(name) is not None

    def add_const(self, data: np.ndarray, name: str | None = None, hint: str = "const") -> str:
        """Register constant data under a fresh (or the given) name and return the name."""
        data = np.asarray(data)
        if name is None or name in self.values:
            name = self.unique_name(hint)
        self.values[name] = Value(name, tuple(int(d) for d in data.shape), data.dtype, data)
        return name

    def set_value(self, name: str, shape: Iterable[int] | None, dtype: Any) -> Value:
        v = self.value(name)
        v.shape = None if shape is None else tuple(int(d) for d in shape)
        v.dtype = None if dtype is None else np.dtype(dtype)
        return v

    def unique_name(self, hint: str) -> str:
        """A tensor or node name not used anywhere in the graph."""
        taken = self.values.keys() | {n.name for n in self.nodes}
        while True:
            cand = f"{hint}_{next(self._name_counter)}"
            if cand not in taken:
                return cand

    # ------------------------------------------------------------------ nodes
    def producer(self, name: str) -> Node | None:
        return self._producers().get(name)

    def consumers(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.inputs]

    def node(self, name: str) -> Node | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    def _producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def producer_map(self) -> dict[str, Node]:
        """``{tensor: producing node}`` for bulk look-ups in passes."""
        return self._producers()

    def consumer_map(self) -> dict[str, list[Node]]:
        """``{tensor: [consuming nodes]}`` for bulk look-ups in passes."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def add_node(
        self,
        op_type: str,
        inputs: list[str],
        outputs: list[str] | int = 1,
        attrs: dict[str, Any] | None = None,
        name: str | None = None,
        domain: str = "",
        body: "Graph | None" = None,
        index: int | None = None,
    ) -> Node:
        """Create a node (fresh output names when ``outputs`` is a count) and insert it.

        It is appended, or inserted at ``index``; callers that insert out of order call
        :meth:`toposort` afterwards.
        """
        if name is None or self.node(name) is not None:
            name = self.unique_name(name or op_type)
        if isinstance(outputs, int):
            outputs = [self.unique_name(f"{name}_out") for _ in range(outputs)]
        for o in outputs:
            self.value(o)
        node = Node(name, op_type, list(inputs), list(outputs), dict(attrs or {}), domain, body)
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        return node

    def remove_node(self, node: Node) -> None:
        self.nodes.remove(node)

    def replace_uses(self, old: str, new: str) -> None:
        """Make every consumer (and the graph outputs) read ``new`` instead of ``old``."""
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def bypass(self, node: Node, keep_output_name: bool = True) -> None:
        """Remove a single-input pass-through node (Identity, Dropout) and reconnect around it.

        When the node's output is a graph output, its name is kept (the input is renamed
        instead) so that the user's output names survive.
        """
        src, dst = node.inputs[0], node.outputs[0]
        self.nodes.remove(node)
        if keep_output_name and dst in self.outputs and src not in self.inputs and not self.is_const(src):
            prod = self.producer(src)
            if prod is not None and src not in self.outputs:
                prod.outputs = [dst if o == src else o for o in prod.outputs]
                for n in self.nodes:
                    n.inputs = [dst if i == src else i for i in n.inputs]
                return
        self.replace_uses(dst, src)

    def remove_unused(self) -> None:
        """Drop nodes whose outputs nobody reads and values nobody refers to."""
        changed = True
        while changed:
            changed = False
            used = set(self.outputs)
            for n in self.nodes:
                used.update(i for i in n.inputs if i)
                used.update(outer_reads(n))
            keep = []
            for n in self.nodes:
                if any(o in used for o in n.outputs if o):
                    keep.append(n)
                else:
                    changed = True
            self.nodes = keep
        referenced = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            referenced.update(n.inputs)
            referenced.update(outer_reads(n))
            referenced.update(n.outputs)
        self.values = {k: v for k, v in self.values.items() if k in referenced}

    def toposort(self) -> None:
        """Order nodes so every input is produced before it is read (stable otherwise).

        The order is the one of repeated passes over the nodes left, each pass taking in turn every node whose
        inputs are available (:meth:`_toposort_by_passes`), computed without the passes: a node is taken in pass
        ``max(1, P(m) + [m comes after it])`` over its producers m, and the passes' order is the nodes sorted by
        (pass, position). The passes cost one scan of the graph per level of depth (0.6 s per call on a
        recogniser with its calibration nodes appended at the end, profiled); this is one scan and a sort.
        ``tests/unit/ir/test_toposort_order.py`` compares the two orders on random graphs."""
        available = set(self.inputs) | {k for k, v in self.values.items() if v.is_const} | {""}
        position = {id(n): k for k, n in enumerate(self.nodes)}
        producers: dict[str, Node] = {}
        for n in self.nodes:
            for o in n.outputs:
                if o:
                    if o in producers:   # two producers of one name: only the passes say which one counts
                        return self._toposort_by_passes()
                    producers[o] = n
        preds: dict[int, list[Node]] = {}
        users: dict[int, list[Node]] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            ps = {id(m): m for i in (*n.inputs, *outer_reads(n)) if i not in available and (m := producers.get(i)) is not None}
            preds[id(n)] = list(ps.values())
            for m in ps.values():
                users[id(m)].append(n)
        waiting = {id(n): len(preds[id(n)]) for n in self.nodes}
        ready = [n for n in self.nodes if not waiting[id(n)]]
        taken_in: dict[int, int] = {}
        while ready:
            n = ready.pop()
            k = position[id(n)]
            taken_in[id(n)] = max([1] + [taken_in[id(m)] + (position[id(m)] > k) for m in preds[id(n)]])
            for u in users[id(n)]:
                waiting[id(u)] -= 1
                if not waiting[id(u)]:
                    ready.append(u)
        if len(taken_in) != len(self.nodes):   # a cycle: the passes name the node it runs through
            return self._toposort_by_passes()
        self.nodes = sorted(self.nodes, key=lambda n: (taken_in[id(n)], position[id(n)]))

    def _toposort_by_passes(self) -> None:
        """:meth:`toposort` as repeated passes: the definition of its order, and the cycle's error."""
        available = set(self.inputs) | {k for k, v in self.values.items() if v.is_const} | {""}
        pending = list(self.nodes)
        ordered: list[Node] = []
        producers = self._producers()
        while pending:
            progressed = False
            rest = []
            for n in pending:
                if all(i in available or i not in producers for i in (*n.inputs, *outer_reads(n))):
                    ordered.append(n)
                    available.update(n.outputs)
                    progressed = True
                else:
                    rest.append(n)
            if not progressed:
                raise ValueError(f"graph has a cycle through {rest[0].name}")
            pending = rest
        self.nodes = ordered

    def fuse(
        self,
        nodes: list[Node],
        op_type: str,
        inputs: list[str],
        outputs: list[str],
        attrs: dict[str, Any] | None = None,
        domain: str = HBTOOL_DOMAIN,
        name: str | None = None,
        keep_body: bool = True,
    ) -> Node:
        """Replace ``nodes`` by one node computing ``outputs`` from ``inputs``.

        With ``keep_body`` (the default for hbtool-domain ops) the replaced nodes become the
        fused node's body, so the exported model still runs in onnxruntime; constants the
        body reads that are not among ``inputs`` move into the body. The fused node is named
        after the last replaced node unless ``name`` is given, so user-visible names stay
        recognisable. Callers make sure no intermediate tensor is read outside ``nodes``.
        """
        body = None
        if keep_body:
            body = Graph(f"{op_type}_body", self.opset)
            body.inputs = list(inputs)
            body.outputs = list(outputs)
            for n in nodes:
                body.nodes.append(Node(n.name, n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs), n.domain, n.body))
                for t in n.inputs + n.outputs:
                    if not t:
                        continue
                    v = self.values.get(t)
                    if t not in inputs and v is not None and v.is_const:
                        body.values[t] = Value(t, v.shape, v.dtype, v.data)
                    elif t not in body.values:
                        body.values[t] = Value(t, v.shape if v else None, v.dtype if v else None)
        index = max(self.nodes.index(n) for n in nodes)
        fused_name = name or nodes[-1].name
        for n in nodes:
            self.nodes.remove(n)
        index -= len(nodes) - 1
        node = Node(fused_name, op_type, list(inputs), list(outputs), dict(attrs or {}), domain, body)
        self.nodes.insert(max(index, 0), node)
        self.toposort()
        return node

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self.nodes))

    def __len__(self) -> int:
        return len(self.nodes)

    def copy(self) -> "Graph":
        """A deep copy; constant arrays are shared (passes replace them, never mutate them)."""
        memo = {id(v.data): v.data for v in self.values.values() if v.data is not None}
        return copy.deepcopy(self, memo)

    def op_types(self) -> dict[str, int]:
        """``{op_type: count}``, handy in tests and logs."""
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.op_type] = out.get(n.op_type, 0) + 1
        return out


def outer_reads(node: Node) -> set[str]:
    """The tensors a node's subgraph attributes (If branches, Loop and Scan bodies) read from the graph around it.

    They are inputs of the node that ONNX does not list: a torch_geometric GAT's ``If`` branches read
    a ScatterElements output this way, and a reordering that saw only the listed inputs put the If
    before that ScatterElements (onnxruntime: "nodes must be topologically sorted", exit 3)."""
    reads: set[str] = set()
    for value in node.attrs.values():
        for sub in value if isinstance(value, list) else [value]:
            if hasattr(sub, "node") and hasattr(sub, "initializer"):   # an onnx.GraphProto
                reads |= _graph_proto_reads(sub)
    return reads


def _graph_proto_reads(graph: Any) -> set[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for n in graph.node:
        reads.update(name for name in n.input if name and name not in local)
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                reads |= _graph_proto_reads(sub) - local
        local.update(n.output)
    return reads
