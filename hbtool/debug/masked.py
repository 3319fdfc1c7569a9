"""The calibrated graph with every fake-quantizer behind a switch: one model, one session, many analyses.

Each ``HzCalibration`` node k of the calibrated model (an activation tensor or a weight) becomes
``y = x + mask[k] * (fq(x) - x)`` where ``mask`` is a float input of the model: 1 quantizes that
tensor, 0 leaves it float. "Quantize only this node", "de-quantize only this node", "every node
with float inputs" and the fully quantized model are then feeds of the same onnxruntime session,
which is built once (its build is the expensive part on a large model).

The session runs each switch as an ONNX ``If`` on its mask entry (:func:`switch_by_if`): a
quantizer that is off costs nothing (not its fake-quantization and a blend), one that is on
costs its fake-quantization only. Most analyses leave most quantizers off or all on, so this
is what makes the O(nodes) loops affordable on a Swin-T-sized model (measured 3.4x the float
model's time per run with the arithmetic switch). The IR graph keeps the arithmetic form
(the op-error shadow graph reads the raw ``*_fq`` values from it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from hbtool.ir.graph import Graph
from hbtool.quant.calibrated_model import CALIBRATION_OP
from hbtool.quant.plan import SCALE_PRESERVING

MASK = "hb_debug_mask"


@dataclass(frozen=True)
class Quantizer:
    """One fake-quantizer: which tensor, activation or weight, and the node it belongs to."""

    index: int
    kind: str          # "act" | "weight"
    owner: str         # the node that writes the activation (or reads the weight); an input's own name
    float_name: str    # the tensor in the float graph
    quant_name: str    # the (switchable) quantized value in the masked graph
    bits: int
    fq_name: str = ""  # the raw fake-quantized value (before the switch)


@dataclass
class DebugNode:
    """A quantized node of the ranking: its own quantizers (outputs, weights) and those of its inputs."""

    name: str
    op_type: str
    acts: list[int] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


class MaskedModel:
    """The switchable model and the quantizers it holds."""

    def __init__(self, calibrated: Graph, float_graph: Graph, threads: int = 0, spinning: bool = True):
        #: onnxruntime threads of the session (0: every core; a ``--workers`` process runs on one)
        self.threads = threads
        #: False where the sessions run beside worker processes (``hbtool debug --workers N``'s op error): idle
        #: onnxruntime threads then sleep instead of spinning on the cores the workers need (the same numbers)
        self.spinning = spinning
        g = calibrated.copy()
        cal_nodes = [n for n in g.nodes if n.op_type == CALIBRATION_OP]
        producers = g.producer_map()
        consumers = g.consumer_map()
        self.quantizers: list[Quantizer] = []
        masks: dict[int, str] = {}
        g.inputs.append(MASK)
        g.set_value(MASK, (max(len(cal_nodes), 1),), np.float32)
        for k, node in enumerate(cal_nodes):
            src, dst = node.inputs[0], node.outputs[0]
            weight = node.attrs.get("method") == "weight"
            if weight:
                users = consumers.get(dst, [])
                owner = users[0].name if users else dst
                float_name = src
            else:
                p = producers.get(src)
                float_name = dst if dst in g.outputs else src
                owner = p.name if p is not None else float_name
            v = g.values.get(dst)
            fq = g.unique_name(f"{dst}_fq")
            g.set_value(fq, v.shape if v else None, v.dtype if v is not None and v.dtype is not None else np.float32)
            node.outputs = [fq]
            idx = g.add_const(np.array(k, np.int64), hint="mask_index")
            m = g.add_node("Gather", [MASK, idx], 1, {"axis": 0}, name=f"{dst}_mask").outputs[0]
            g.set_value(m, (), np.float32)
            d = g.add_node("Sub", [fq, src], 1, name=f"{dst}_delta").outputs[0]
            e = g.add_node("Mul", [d, m], 1, name=f"{dst}_switched").outputs[0]
            for t in (d, e):
                g.set_value(t, v.shape if v else None, np.float32)
            g.add_node("Add", [src, e], [dst], name=f"{dst}_switch")
            self.quantizers.append(Quantizer(k, "weight" if weight else "act", owner, float_name, dst, int(node.attrs.get("bits", 8)), fq))
            masks[k] = m
        self._corrected_bias = self._switch_corrected_biases(g, float_graph, masks)
        g.toposort()
        self.graph = g
        self.size = len(cal_nodes)
        self.nodes = self._debug_nodes(float_graph)
        self._sessions: dict[tuple[str, ...], object] = {}
        self._single: MaskedModel | None = None     # the one-thread view (:meth:`single_threaded`)
        self._quant_of = {q.float_name: q.quant_name for q in self.quantizers if q.kind == "act"}

    def _switch_corrected_biases(self, g: Graph, float_graph: Graph, masks: dict[int, str]) -> dict[str, str]:
        """A layer's bias-corrected bias (calibrate folds the correction into the bias constant) switched
        with the layer's weight quantizer: ``b_float * (1 - m) + b_corrected * m``, exact at m = 0 and 1,
        so every mask 0 is the float model and every mask 1 the calibrated one. ``{switched: corrected}``."""
        fnodes = {n.name: n for n in float_graph.nodes}
        out: dict[str, str] = {}
        for q in self.quantizers:
            node, fnode = g.node(q.owner), fnodes.get(q.owner)
            if q.kind != "weight" or node is None or fnode is None or len(node.inputs) < 3 or not node.inputs[2]:
                continue
            corrected = g.const(node.inputs[2])
            if corrected is None:
                continue
            original = float_graph.const(fnode.inputs[2]) if len(fnode.inputs) > 2 and fnode.inputs[2] else None
            original = np.zeros_like(corrected) if original is None else np.asarray(original, corrected.dtype).reshape(corrected.shape)
            if np.array_equal(original, corrected):
                continue
            m = masks[q.index]
            one = g.add_const(np.array(1.0, np.float32), hint="one")
            keep = g.add_node("Sub", [one, m], 1, name=f"{node.name}_bias_keep").outputs[0]
            g.set_value(keep, (), np.float32)
            parts = []
            for value, weight, tag in ((original, keep, "float"), (corrected, m, "corrected")):
                const = g.add_const(value.astype(np.float32), hint=f"{node.name}_bias_{tag}")
                t = g.add_node("Mul", [const, weight], 1, name=f"{node.name}_bias_{tag}").outputs[0]
                g.set_value(t, corrected.shape, np.float32)
                parts.append(t)
            switched = g.add_node("Add", parts, 1, name=f"{node.name}_bias_switch").outputs[0]
            g.set_value(switched, corrected.shape, np.float32)
            out[switched] = node.inputs[2]
            node.inputs = [*node.inputs[:2], switched, *node.inputs[3:]]
        return out

    def _debug_nodes(self, float_graph: Graph) -> list[DebugNode]:
        by_owner: dict[str, list[Quantizer]] = {}
        act_of: dict[str, int] = {}
        fnodes = {n.name: n for n in float_graph.nodes}
        producers = float_graph.producer_map()
        for q in self.quantizers:
            by_owner.setdefault(self._compute_owner(q, fnodes, producers), []).append(q)
            if q.kind == "act":
                act_of[q.float_name] = q.index
        out = []
        for node in float_graph.nodes:
            if node.meta.get("on") != "BPU" or node.op_type in SCALE_PRESERVING:
                continue
            own = by_owner.get(node.name, [])
            dn = DebugNode(node.name, node.op_type, [q.index for q in own if q.kind == "act"], [q.index for q in own if q.kind == "weight"],
                           [act_of[i] for i in node.inputs if i in act_of], [o for o in node.outputs if o])
            if dn.acts or dn.weights:
                out.append(dn)
        return out

    @staticmethod
    def _compute_owner(q: Quantizer, fnodes, producers) -> str:
        """The node an activation quantizer belongs to: through Reshape/Transpose/... up to the op that computed it.

        A data-movement op keeps its input's scale, so its output is quantized again with the
        same scale; de-quantizing only the computing node's output would change nothing.
        """
        owner = q.owner
        if q.kind != "act":
            return owner
        for _ in range(64):
            node = fnodes.get(owner)
            if node is None or node.op_type not in SCALE_PRESERVING or node.op_type == "Concat":
                return owner
            data = [i for i in node.inputs if i and i in producers]
            if not data:
                return owner
            owner = producers[data[0]].name
        return owner

    def isolated_model(self) -> tuple[Graph, dict[str, tuple[str, str]]]:
        """A copy of the masked graph with a shadow of every ranked node quantized alone, and ``{node: (float, shadow)}``.

        The shadow of node n reads the raw fake-quantized values (``*_fq``) of n's inputs and
        weights, and its output goes through a copy of n's output quantizer. Run with every mask
        at 0 the main graph is the float model, so each ``*_fq`` is the quantized *float* input:
        one run gives the op error of every node (instead of one run per node).
        """
        g = self.graph.copy()
        by_name = {n.name: n for n in g.nodes}
        fq_of = {q.quant_name: q.fq_name for q in self.quantizers} | self._corrected_bias
        quantizer_of = {n.inputs[0]: n for n in g.nodes if n.op_type == CALIBRATION_OP}
        pairs: dict[str, tuple[str, str]] = {}
        for dn in self.nodes:
            node = by_name.get(dn.name)
            if node is None or not node.outputs or not node.outputs[0]:
                continue
            outs = [g.unique_name(f"{o}_alone") if o else "" for o in node.outputs]
            for o, new in zip(node.outputs, outs):
                if new:
                    v = g.values.get(o)
                    g.set_value(new, v.shape if v else None, v.dtype if v is not None and v.dtype is not None else np.float32)
            g.add_node(node.op_type, [fq_of.get(i, i) for i in node.inputs], outs, dict(node.attrs), name=f"{node.name}_alone",
                       domain=node.domain, body=node.body)
            first = node.outputs[0]
            q = quantizer_of.get(first)
            shadow = outs[0]
            if q is not None:
                shadow = g.unique_name(f"{first}_alone_q")
                v = g.values.get(first)
                g.set_value(shadow, v.shape if v else None, np.float32)
                g.add_node(q.op_type, [outs[0]], [shadow], dict(q.attrs), name=f"{q.name}_alone", domain=q.domain, body=q.body)
            float_value = self.quant_value(dn.outputs[0])  # with every mask at 0: the float value
            pairs[dn.name] = (float_value, shadow)
        g.toposort()
        return g, pairs

    def quant_value(self, tensor: str) -> str:
        """The masked graph's name for float tensor ``tensor`` (its switchable quantized value)."""
        return self._quant_of.get(tensor, tensor)

    def mask(self, on: list[int] | None = None, off: list[int] | None = None) -> np.ndarray:
        """All quantizers off except ``on``, or (with ``off``) all on except ``off``."""
        if off is not None:
            m = np.ones(max(self.size, 1), np.float32)
            m[list(off)] = 0.0
        else:
            m = np.zeros(max(self.size, 1), np.float32)
            m[list(on or [])] = 1.0
        return m

    def single_threaded(self) -> "MaskedModel":
        """This model with its sessions on one onnxruntime thread (the graph shared; the sessions built on first use).

        Why: onnxruntime's float sums differ in the last bits with the thread count (PP-OCRv5 recogniser: the gains
        pass on 1 and 2 threads differ by up to 1.5e-7), so a pass whose values must not depend on where it ran
        (``--workers 1`` here, or N worker processes of one thread each) runs on one thread everywhere."""
        if self.threads == 1:
            return self
        if self._single is None:
            single = copy.copy(self)
            single.threads, single._sessions, single._single = 1, {}, None
            self._single = single
        return self._single

    def session(self, extra: tuple[str, ...] = ()):
        if extra not in self._sessions:
            self._sessions[extra] = switched_session(self.graph, self.quantizers, list(extra), self.threads, self.spinning)
        return self._sessions[extra]

    def run(self, feeds: list[dict[str, np.ndarray]], mask: np.ndarray, names: list[str], extra: tuple[str, ...] = ()) -> list[list[np.ndarray]]:
        """``names`` for every feed with the quantizers set by ``mask``."""
        sess = self.session(extra)
        return [sess.run(names, {**f, MASK: mask}) for f in feeds]


def switch_by_if(model: onnx.ModelProto, quantizers: list[Quantizer]) -> onnx.ModelProto:
    """``model`` with every arithmetic switch ``x + mask[k] * (fq(x) - x)`` replaced by ``If(mask[k]) fq(x) else x``.

    Bit for bit the same values at masks 0 and 1 (the blend adds and removes ``x`` in float, the
    ``If`` does not: at 1 it is exactly the fake-quantized value, as in the calibrated model).
    """
    producer = {o: n for n in model.graph.node for o in n.output}
    drop: set[int] = set()
    replace: dict[int, list[onnx.NodeProto]] = {}
    for q in quantizers:
        add = producer.get(q.quant_name)
        if add is None or add.op_type != "Add":
            continue
        src, switched = add.input
        mul = producer[switched]
        delta, m = mul.input
        fq_node = producer[delta].input[0]
        fq = producer[fq_node]
        then_node = onnx.NodeProto()
        then_node.CopyFrom(fq)
        then_node.ClearField("output")
        then_node.output.append(f"{q.quant_name}_then")
        then_g = helper.make_graph([then_node], f"{q.quant_name}_on", [], [helper.make_tensor_value_info(f"{q.quant_name}_then", TensorProto.FLOAT, None)])
        else_g = helper.make_graph([helper.make_node("Identity", [src], [f"{q.quant_name}_else"])], f"{q.quant_name}_off", [],
                                   [helper.make_tensor_value_info(f"{q.quant_name}_else", TensorProto.FLOAT, None)])
        cond = f"{q.quant_name}_on"
        replace[id(add)] = [helper.make_node("Cast", [m], [cond], to=TensorProto.BOOL, name=f"{q.quant_name}_cond"),
                            helper.make_node("If", [cond], [q.quant_name], then_branch=then_g, else_branch=else_g, name=f"{q.quant_name}_if")]
        drop.update({id(mul), id(producer[delta]), id(fq)})
    nodes = []
    for n in model.graph.node:
        if id(n) in replace:
            nodes += replace[id(n)]
        elif id(n) not in drop:
            nodes.append(n)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def switched_session(graph: Graph, quantizers: list[Quantizer], extra_outputs: list[str], threads: int = 0,
                     spinning: bool = True):
    """An onnxruntime session of the masked graph with ``If`` switches that also returns ``extra_outputs``
    (``spinning=False``: idle pool threads sleep, for a session run beside other processes; the same numbers)."""
    import onnxruntime as ort

    from hbtool.ir.onnx_export import to_onnx

    model = switch_by_if(to_onnx(graph), quantizers)
    have = {o.name for o in model.graph.output}
    for name in extra_outputs:
        if name not in have:
            model.graph.output.append(helper.make_empty_tensor_value_info(name))
            have.add(name)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
