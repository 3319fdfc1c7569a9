"""Op error and model error of every quantized node, in two passes over the samples.

* isolated (op error): the node quantized alone -- its inputs, weights and outputs -- with the
  float model's values as its inputs; what the node's own quantization costs (every node at
  once, in one run of a graph holding a quantized shadow of each node);
* accumulated (model error): the node's output along the fully quantized model, errors of
  everything before it included.
A node where the accumulated error jumps (its output much worse than its worst input) is
where accuracy is lost; a jump with a small isolated error is error amplified downstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hbtool.debug.masked import MASK, MaskedModel
from hbtool.debug.metrics import Accumulator
from hbtool.ir.graph import Graph
from hbtool.quant.collect import float_session

#: a node is marked where 1 - cosine of its output exceeds its inputs' by this much
JUMP = 0.005


@dataclass
class NodeErrors:
    name: str
    op_type: str
    isolated: dict[str, float]
    accumulated: dict[str, float]
    jump: float = 0.0
    marked: bool = False
    inputs: list[str] = field(default_factory=list)


def graph_errors(model: MaskedModel, float_graph: Graph, samples: list[dict[str, np.ndarray]], isolated_samples: int,
                 progress: Callable[[str, int, int], None] | None = None,
                 observe: Callable[[dict[str, np.ndarray]], None] | None = None) -> list[NodeErrors]:
    """Isolated and accumulated errors of the first output of every node of ``model.nodes``.

    ``observe`` sees the float values of every sample (the range analysis reads them there).
    """
    nodes = model.nodes
    watched = [n.outputs[0] for n in nodes]
    producers = float_graph.producer_map()
    extra = sorted(set(watched) | set(_range_tensors(float_graph)))
    f_sess = float_session(float_graph, extra, basic=True)
    q_names = [model.quant_value(t) for t in watched]
    acc = {t: Accumulator() for t in watched}
    iso = {t: Accumulator() for t in watched}
    full = model.mask(off=[])
    shadow_graph, pairs = model.isolated_model()
    shadow_names = [pairs[n.name][1] for n in nodes if n.name in pairs]
    shadow_sess = float_session(shadow_graph, shadow_names, basic=True)
    total = len(samples) + min(isolated_samples, len(samples))
    done = 0
    for s, feeds in enumerate(samples):
        f_vals = dict(zip(extra, f_sess.run(extra, feeds)))
        if observe is not None:
            observe(f_vals)
        q_vals = model.run([feeds], full, q_names, tuple(q_names))[0]
        for t, q in zip(watched, q_vals):
            acc[t].update(f_vals[t], q)
        done += 1
        if s < isolated_samples:   # every node quantized alone, all in one run of the shadow graph
            alone = dict(zip(shadow_names, shadow_sess.run(shadow_names, {**feeds, MASK: model.mask(on=[])})))
            for n, t in zip(nodes, watched):
                if n.name in pairs:
                    iso[t].update(f_vals[t], alone[pairs[n.name][1]])
            done += 1
        if progress:
            progress("op error", done, total)
    out = []
    by_tensor = {n.outputs[0]: n for n in nodes}
    acc_res = {t: a.result() for t, a in acc.items()}
    for n, t in zip(nodes, watched):
        fnode = float_graph.node(n.name)
        ins = []
        for i in (fnode.inputs if fnode is not None else []):
            p = producers.get(i)
            if p is not None and i in by_tensor:
                ins.append(i)
        before = max((1 - acc_res[i]["cosine"] for i in ins), default=0.0)
        jump = (1 - acc_res[t]["cosine"]) - before
        out.append(NodeErrors(n.name, n.op_type, iso[t].result(), acc_res[t], float(jump), bool(jump > JUMP), ins))
    return out


def _range_tensors(graph: Graph) -> list[str]:
    """The inputs of LayerNorms (FQ-ViT's inter-channel variation lives there)."""
    return [n.inputs[0] for n in graph.nodes if n.op_type in ("LayerNormalization", "ChannelLayerNorm") and not graph.is_const(n.inputs[0])]
