"""Which node of the optimized graph a ``node_info`` name means.

Users copy node names from their ONNX file (Netron) or from Horizon's logs. Both can name a node
the optimized graph no longer has:

* hbtool's import fuses nodes: ``.../fc1/MatMul`` becomes part of a ``Linear``, ``.../norm/Pow``
  part of a ``LayerNormalization``, a BatchNormalization folds into its Conv. The setting then
  belongs to the node that absorbed it, found through the fused node's body (hbtool-domain
  fusions keep the replaced nodes there) or by following the named node's output tensors
  forward, in the model as the user wrote it, to the first tensor the optimized graph still
  computes.
* Horizon's optimizer renames what it rewrites: a ``Div`` by a constant becomes a ``Mul`` named
  ``<Div>_mul``. A name that resolves only after dropping such a ``_<word>`` suffix means the
  node it was generated from.

* paddle2onnx before 1.0 named the nodes it generated ``p2o.<Op>.<k>``; later versions write
  ``<Op>.<k>``. A ``p2o.`` name that is not in the model means the same node without the prefix.

Each name that resolves to another node is logged (a warning, so the user sees it); a name
that resolves to nothing is an InputError naming it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from hbtool.errors import InputError
from hbtool.ir.graph import Graph
from hbtool.kernels.movement import RESHAPE_LIKE

log = logging.getLogger(__name__)

# Horizon's generated names: the rewritten node's name plus the op it became (``_mul``), and
# an index when it made several (``_reshape_0``); only op words, so a typo never resolves
_GENERATED_OPS = ("mul", "add", "sub", "div", "reshape", "transpose", "squeeze", "unsqueeze",
                  "concat", "split", "slice", "conv", "matmul", "gemm", "pow", "sqrt",
                  "reciprocal", "cast", "expand", "flatten", "pad", "resize", "relu", "clip",
                  "lut", "requantize", "quantize", "dequantize", "reducemean", "reducesum",
                  "softmax", "sigmoid", "mean", "sum", "neg", "abs", "exp", "log")
_GENERATED_SUFFIX = re.compile(r"^(?P<base>.+)_(?P<what>" + "|".join(_GENERATED_OPS) + r")(_\d+)?$",
                               re.IGNORECASE)
_MAX_WALK = 64
_MOVEMENT = RESHAPE_LIKE | {"Transpose"}
_LOGGED: set[tuple[str, str]] = set()  # each resolution is said once per process, not once per stage
_PADDLE_PREFIX = "p2o."


def _body_names(graph: Graph | None) -> set[str]:
    out: set[str] = set()
    if graph is None:
        return out
    for n in graph.nodes:
        out.add(n.name)
        out |= _body_names(n.body)
    return out


class _Source:
    """A node list as the user wrote it: name -> outputs, tensor -> consumers' outputs."""

    def __init__(self, nodes: Iterable[tuple[str, list[str], list[str]]]):
        self.outputs: dict[str, list[str]] = {}
        self.readers: dict[str, list[list[str]]] = {}
        for name, inputs, outputs in nodes:
            if name:
                self.outputs.setdefault(name, list(outputs))
            for t in inputs:
                if t:
                    self.readers.setdefault(t, []).append(list(outputs))


def _onnx_source(path: Path) -> _Source | None:
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # an unreadable model was already reported by the import
        return None
    return _Source((n.name, list(n.input), list(n.output)) for n in model.graph.node)


class NodeResolver:
    """Resolves user node names against ``graph`` (the optimized, placed graph)."""

    def __init__(self, graph: Graph, originals: Iterable[Graph] = (), model_path: str | Path | None = None):
        self.graph = graph
        self.names = {n.name for n in graph.nodes}
        self.producer = {o: n.name for n in graph.nodes for o in n.outputs if o}
        self.bodies = {n.name: _body_names(n.body) for n in graph.nodes if n.body is not None}
        self.sources = [_Source((n.name, n.inputs, n.outputs) for n in g.nodes) for g in originals]
        self._model_path = Path(model_path) if model_path is not None else None
        self._onnx: _Source | None = None
        self._onnx_loaded = False

    def _all_sources(self) -> list[_Source]:
        if not self._onnx_loaded and self._model_path is not None:
            self._onnx = _onnx_source(self._model_path)
            self._onnx_loaded = True
        return self.sources + ([self._onnx] if self._onnx is not None else [])

    def _computing(self, node_name: str, src: _Source) -> str:
        """Step back from a Reshape/Transpose the optimizer added (its input is no tensor of the
        user's model) to the node that computes: a 3-D MatMul + Add folded into Reshape, Gemm,
        Reshape belongs to the Gemm."""
        user_tensors = set(src.readers) | {t for outs in src.outputs.values() for t in outs}
        by_name = {n.name: n for n in self.graph.nodes}
        node = by_name[node_name]
        for _ in range(_MAX_WALK):
            data = [i for i in node.inputs if i and not self.graph.is_const(i)]
            if node.op_type not in _MOVEMENT or len(data) != 1 or data[0] in user_tensors or data[0] not in self.producer:
                return node.name
            node = by_name[self.producer[data[0]]]
        return node.name

    def _direct(self, name: str) -> tuple[str, str] | None:
        """(node, how) without suffix stripping."""
        if name in self.names:
            return name, ""
        for fused, inner in self.bodies.items():
            if name in inner:
                return fused, "fused into"
        for src in self._all_sources():
            if name not in src.outputs:
                continue
            frontier, seen = list(src.outputs[name]), set()
            for _ in range(_MAX_WALK):
                nxt: list[str] = []
                for t in frontier:
                    if t in seen:
                        continue
                    seen.add(t)
                    if t in self.producer:
                        return self._computing(self.producer[t], src), "fused into"
                    for outs in src.readers.get(t, []):
                        nxt.extend(outs)
                if not nxt:
                    break
                frontier = nxt
        return None

    def resolve(self, name: str) -> tuple[str, str] | None:
        """``(node name in the graph, how)``; ``how`` is '' for an exact match, None if unknown."""
        hit = self._direct(name)
        if hit is not None:
            return hit
        if name.startswith(_PADDLE_PREFIX) and len(name) > len(_PADDLE_PREFIX):
            hit = self.resolve(name[len(_PADDLE_PREFIX):])
            if hit is not None:
                return hit[0], "an older paddle2onnx name of" + (f" a node {hit[1]}" if hit[1] else "")
        m = _GENERATED_SUFFIX.match(name)
        while m is not None:
            hit = self._direct(m.group("base"))
            if hit is not None:
                base = m.group("base")
                if hit[1]:
                    return hit[0], f"Horizon's generated name for '{base}', which is {hit[1]}"
                return hit[0], "Horizon's generated name for"

            m = _GENERATED_SUFFIX.match(m.group("base"))
        return None


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for k, v in extra.items():
        if v is not None or k not in into:
            into[k] = v if v is not None else into.get(k)


def resolve_node_info(node_info: Mapping[str, Mapping[str, Any]] | None, graph: Graph,
                      originals: Iterable[Graph] = (), model_path: str | Path | None = None,
                      strict: bool = True) -> dict[str, dict[str, Any]]:
    """``node_info`` keyed by the names of ``graph``'s nodes (see the module docstring).

    ``strict``: a name that resolves to nothing is an InputError; otherwise it is dropped with
    a warning (the compile stage, whose graph has lost the model's own names).
    """
    if not node_info:
        return {}
    resolver = NodeResolver(graph, originals, model_path)
    out: dict[str, dict[str, Any]] = {}
    for name, entry in node_info.items():
        hit = resolver.resolve(name)
        if hit is None:
            if strict:
                raise InputError(
                    f"model_parameters.node_info names node '{name}', which is not in the model",
                    "use a node name from the checker table (hbtool checker -c cfg.yaml) or from "
                    "the ONNX file")
            log.warning("node_info: '%s' is not in the compiled graph; its setting was applied at calibration", name)
            continue
        target, how = hit
        if target != name and (name, target) not in _LOGGED:
            _LOGGED.add((name, target))
            node = next(n for n in graph.nodes if n.name == target)
            log.warning("node_info: '%s' is %s '%s' (%s); the setting applies to '%s'",
                        name, how or "the same node as", target, node.op_type, target)
        _merge(out.setdefault(target, {}), dict(entry))
    return out


def apply_output_nodes(graph: Graph, names: list[str] | None, model_path: str | Path | None = None) -> None:
    """``output_nodes``: these nodes' outputs become the model outputs; what only fed others goes.

    Names resolve as node_info names do (Horizon's generated names included). A model input
    that no longer reaches an output stays an input (the model keeps its signature).
    """
    if not names:
        return
    resolver = NodeResolver(graph, (), model_path)
    outputs: list[str] = []
    for name in names:
        hit = resolver.resolve(name)
        if hit is None:
            raise InputError(f"model_parameters.output_nodes names node '{name}', which is not in the model",
                             "use node names from the ONNX file or the checker table")
        node = next(n for n in graph.nodes if n.name == hit[0])
        if hit[0] != name:
            log.warning("output_nodes: '%s' is %s '%s'; its outputs become model outputs", name,
                        hit[1] or "the same node as", hit[0])
        outputs.extend(o for o in node.outputs if o and o not in outputs)
    graph.outputs = outputs
    graph.remove_unused()
