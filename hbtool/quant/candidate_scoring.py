"""Score calibration candidates on one onnxruntime session: activation scales as inputs, not constants.

``calibration_type: default`` compares the plans of four methods (max, percentile, KL, MSE) by the
output cosine of their fake-quantized models against float. The plans differ only in the numbers of
their activation fake-quantizers (scale, and qmin / qmax where ``auto_int16`` promotes a tensor);
the graph, the weights and their fake-quantizers are the same. Building each candidate's calibrated
model, serializing it (every weight again: 100 MB for ResNet50) and opening a session on it (function
inlining, constant folding of every weight fake-quantizer) cost more than the few runs that score
it (ResNet50 on a loaded machine: about 1.2 s against 0.7 s per candidate). Here the calibrated graph of the first plan is built once, each linear activation fake-quantizer
written out as its body's own four nodes ``Div(x, S) -> Round -> Clip(QMIN, QMAX) -> Mul(S)`` with S,
QMIN, QMAX graph inputs, and every candidate of the same layout runs on that one session with its
own numbers fed in.

Why the scores are the very same floats: the session runs the same onnxruntime kernels on the same
float32 operands as the candidate's own model (whose ``HzCalibration`` functions onnxruntime inlines
into these same four nodes with S, QMIN, QMAX as constants); an activation fake-quantizer's input is
never constant, so constant folding touches none of them in either model, and the weight
fake-quantizers are constants: onnxruntime folds them in the candidate's model, and the scoring model
holds the folded constants already, computed in numpy with the same float32 operations
(:func:`~hbtool.quant.calibrated_model.fake_quantized`). The sessions open at the basic level (as the
per-candidate ones did); none of its fusions starts from a Div by a constant or needs a constant
Round/Clip operand, so none rewrites one form and not the other. Plans whose layout differs
(a tensor log2-coded in one and linear in another, a PTF tensor's per-channel scales against a
single one, other int4 weights) get a session each. ``tests/unit/quant/test_candidate_scoring.py``
compares the scores with the per-candidate models' bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hbtool.ir.graph import Graph, Node
from hbtool.quant.calibrated_model import (CALIBRATION_OP, activation_fake_quant, build_calibrated_graph, fake_quant_constants,
                                           fake_quantized)
from hbtool.quant.plan import QuantPlan

Layout = tuple


def scoring_streams(candidates: int, cores: int | None = None) -> int:
    """How many of ``candidates`` scorings run at once on ``cores`` cores (default: this process's).

    Why several at once: a scoring is a few runs of one sample, many of whose operators are small (each activation's
    Div, Round, Clip, Mul), and the pool threads of a run sleep much of the time (ResNet50 on 2 cores: onnxruntime's
    pool thread busy 40 % of the scoring). Candidates are independent, and one session runs calls from
    several threads at once. The session keeps onnxruntime's default thread count, as a run's numbers can depend on
    the count (tiny_cnn's float model at the basic level gave other bits in 7 tensors on 1 thread than on 2), not on
    which threads run it: the scores are the floats of one-after-another scoring
    (tests/unit/quant/test_candidates_scored_at_once.py)."""
    from hbtool.utils.workers import default_workers

    cores = default_workers() if cores is None else max(1, cores)
    return max(1, min(cores, candidates))


def plan_layout(graph: Graph, plan: QuantPlan, weights: dict[str, tuple[np.ndarray, int]]) -> Layout:
    """What a shared scoring model fixes: per tensor, log2 or the shape of its scale; the weights' scales and bits.

    Two plans with the same layout run on the same scoring model; every other number is fed."""
    tensors = []
    for name, tq in plan.tensors.items():
        args = activation_fake_quant(tq, len(graph.shape(name) or ()))
        tensors.append((name, ("log2", tq.bits) if args is None else fake_quant_constants(*args)[0].shape))
    weight_key = tuple((w, np.asarray(s).tobytes(), int(a), int(plan.weight_bits.get(w, 8))) for w, (s, a) in weights.items())
    return tuple(tensors), weight_key


class ScoringModel:
    """The calibrated graph of ``plan`` with every linear activation fake-quantizer's numbers as graph inputs."""

    def __init__(self, graph: Graph, plan: QuantPlan, weights: dict[str, tuple[np.ndarray, int]]):
        g, names = build_calibrated_graph(graph, plan, weights)
        producers = g.producer_map()
        taken = set(g.values) | {n.name for n in g.nodes}

        def fresh(hint: str) -> str:   # one pass over the graph's names, not one per new name (recogniser: 268 tensors)
            name, k = hint, 0
            while name in taken:
                k += 1
                name = f"{hint}_{k}"
            taken.add(name)
            return name

        self.rank = {t: len(graph.shape(t) or ()) for t in plan.tensors}
        self.inputs: dict[str, tuple[str, str, str]] = {}   # tensor -> (scale, qmin, qmax) input names
        replaced: dict[int, list[Node]] = {}                 # id of an HzCalibration node -> its four nodes
        for k, (name, tq) in enumerate(plan.tensors.items()):
            args = activation_fake_quant(tq, self.rank[name])
            if args is None:
                continue   # a log2 code has no numbers: its body stays as it is
            node = producers[names[name]]
            assert node.op_type == CALIBRATION_OP, node
            x, y = node.inputs[0], node.outputs[0]
            s, qmin, qmax = (fresh(f"hbtool_scoring_{k}_{what}") for what in ("scale", "qmin", "qmax"))
            for inp, shp in ((s, fake_quant_constants(*args)[0].shape), (qmin, ()), (qmax, ())):
                g.set_value(inp, shp, np.float32)
                g.inputs.append(inp)
            xs, xr, xq = (fresh(f"{y}_{what}") for what in ("xs", "xr", "xq"))
            for out in (xs, xr, xq):
                g.set_value(out, g.shape(x), np.float32)
            replaced[id(node)] = [Node(fresh(f"{node.name}_div"), "Div", [x, s], [xs]),
                                  Node(fresh(f"{node.name}_round"), "Round", [xs], [xr]),
                                  Node(fresh(f"{node.name}_clip"), "Clip", [xr, qmin, qmax], [xq]),
                                  Node(fresh(f"{node.name}_mul"), "Mul", [xq, s], [y])]
            self.inputs[name] = (s, qmin, qmax)
        # each node's four in its place: the graph stays in topological order
        g.nodes = [m for n in g.nodes for m in replaced.get(id(n), (n,))]
        _fold_weight_fake_quantizers(g)
        self.graph = g

    def feeds(self, plan: QuantPlan) -> dict[str, np.ndarray]:
        """The inputs that make this model ``plan``'s calibrated model (a plan of the same layout)."""
        out: dict[str, Any] = {}
        for name, (s, qmin, qmax) in self.inputs.items():
            out[s], out[qmin], out[qmax] = fake_quant_constants(*activation_fake_quant(plan.tensors[name], self.rank[name]))
        return out


def _fold_weight_fake_quantizers(g: Graph) -> None:
    """Replace every weight's ``HzCalibration`` node of ``g`` by the constant it computes (:func:`fake_quantized`).

    Why: onnxruntime folds these constants anyway when it opens the scoring session, inlining each body and keeping
    every step's result (three intermediate copies of the weights): on ResNet50 that open took 0.33-0.39 CPU s and
    95,000-99,000 page faults, against 0.13 s and 9,000-14,000 with the weights fake-quantized here, with the same
    scores. The same float32 operations give the same constants (``tests/unit/quant/test_weight_fake_quant_in_numpy.py``),
    so every candidate's score is the float it was (``tests/unit/quant/test_candidate_scoring.py``)."""
    kept = []
    for node in g.nodes:
        if node.op_type == CALIBRATION_OP and node.attrs.get("method") == "weight" and g.is_const(node.inputs[0]):
            body = {name: v.data for name, v in node.body.values.items() if v.data is not None}
            g.values[node.outputs[0]].data = fake_quantized(g.const(node.inputs[0]), body["scale"], body["qmin"], body["qmax"])
        else:
            kept.append(node)
    g.nodes = kept
