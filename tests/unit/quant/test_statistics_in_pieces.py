"""The statistics pass in pieces (hbtool.quant.pieces): same numbers, a fraction of the tensors at once.

A graph whose observed tensors exceed the byte budget runs as consecutive onnxruntime sessions.
The statistics (maximum, histogram, per-channel means) must be the very ones the one-session run
gives, bit for bit; no piece may hand out more than the budget (plus the one node output that
crossed it); and no cut may fall where an unobserved tensor crosses (onnxruntime would then see a
different graph boundary than in the one-session run).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hbtool.ir.onnx_import import import_onnx
from hbtool.quant import collect, pieces
from hbtool.quant.collect import collect_stats, observing_session
from hbtool.quant.pieces import PiecewiseSession, plan_pieces, run_order, tensor_bytes

SIDE = 96   # 8 x 96 x 96 and 12 x 96 x 96: two sizes above the histogram's subset size (their draws' order matters)
CHANNELS = (8, 12, 8, 12, 8, 12, 8, 12, 8, 12)


def _conv_chain(tmp_path, gate: bool = True, gate_at_end: bool = False):
    """Conv+Relu layers with a long skip (layer 1's output is added at the end; the model output, first in the
    one session's output list, has the larger size) and a Sigmoid gate of layer 1 (the tensor the tests
    leave unobserved) made right after layer 1 and read after layer 3 (and, ``gate_at_end``, by the last node)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    cin = 3
    for k, ch in enumerate(CHANNELS):
        w = numpy_helper.from_array(rng.normal(0, 0.4, (ch, cin, 3, 3)).astype(np.float32), f"w{k}")
        b = numpy_helper.from_array(rng.normal(0, 0.1, ch).astype(np.float32), f"b{k}")
        inits += [w, b]
        nodes.append(helper.make_node("Conv", [prev, f"w{k}", f"b{k}"], [f"c{k}"], pads=[1, 1, 1, 1], name=f"conv{k}"))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}"))
        prev, cin = f"r{k}", ch
        if k == 1 and gate:
            nodes.append(helper.make_node("Sigmoid", ["r1"], ["gate"], name="gate"))
        if k == 3 and gate:
            nodes.append(helper.make_node("Mul", ["r3", "gate"], ["g3"], name="gated"))
            prev = "g3"
    nodes.append(helper.make_node("Add", [prev, "r1"], ["sum" if gate_at_end else "y"], name="skip"))
    if gate_at_end:
        nodes.append(helper.make_node("Mul", ["sum", "gate"], ["y"], name="gated_end"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIDE, SIDE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CHANNELS[-1], SIDE, SIDE])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    return import_onnx(str(path), {"x": (1, 3, SIDE, SIDE)})


def _observed(graph) -> list[str]:
    return [o for n in graph.nodes for o in n.outputs if o != "gate"]


def _batches(n: int = 3):
    rng = np.random.default_rng(1)
    return [{"x": rng.normal(0, 1, (n, 3, SIDE, SIDE)).astype(np.float32)}]


def test_cuts_only_where_every_crossing_tensor_is_observed(tmp_path):
    graph = _conv_chain(tmp_path, gate_at_end=True)
    observed = _observed(graph)
    one = tensor_bytes(graph, "r0")
    found = plan_pieces(graph, observed, budget=2 * one)
    assert found is not None and len(found) >= 2
    maker = next(k for k, n in enumerate(graph.nodes) if "gate" in n.outputs)
    readers = [k for k, n in enumerate(graph.nodes) if "gate" in n.inputs]
    # the unobserved 'gate', read after layer 3 and at the very end, is made and read inside one piece
    holder = [p for p in found if maker in p.nodes]
    assert len(holder) == 1 and all(r in holder[0].nodes for r in readers)
    assert all("gate" not in p.inputs for p in found)
    # the pieces before it still keep to the budget (plus the node output that passed it)
    for p in found[:found.index(holder[0])]:
        assert sum(tensor_bytes(graph, t) for t in p.outputs if t in observed) <= 3 * one
    # whole graph under the budget: one session
    assert plan_pieces(graph, observed, budget=10**12) is None


def test_unobserved_tensor_is_made_just_before_its_reader(tmp_path):
    """The gate is written right after layer 1 but read after layer 3: run in the written order it would
    forbid the cuts between; moved down to its reader (run_order), every piece keeps to the budget."""
    graph = _conv_chain(tmp_path)
    observed = _observed(graph)
    one = tensor_bytes(graph, "r0")
    names = [graph.nodes[k].name for k in run_order(graph, set(observed) | set(graph.outputs))]
    assert names.index("gate") + 1 == names.index("gated")
    assert sorted(names) == sorted(n.name for n in graph.nodes)
    found = plan_pieces(graph, observed, budget=2 * one)
    assert found is not None and len(found) >= 3
    for p in found:
        assert sum(tensor_bytes(graph, t) for t in p.outputs if t in observed) <= 3 * one
    # the long skip r1 crosses every cut between its maker and the Add: it is handed on, not recomputed
    assert any("r1" in p.inputs for p in found[1:])


def test_pieces_give_the_one_session_statistics_bit_for_bit(tmp_path, monkeypatch):
    graph = _conv_chain(tmp_path)
    observed = _observed(graph)
    means = {"r3": 1, "r0": 1}
    monkeypatch.setattr(pieces, "PIECE_BUDGET_BYTES", 10**12)
    whole = collect_stats(graph, observed, _batches(), None, means)
    monkeypatch.setattr(pieces, "PIECE_BUDGET_BYTES", 2 * tensor_bytes(graph, "r0"))
    sess, _ = observing_session(graph, observed)
    assert isinstance(sess, PiecewiseSession) and len(sess.pieces) >= 3
    cut = collect_stats(graph, observed, _batches(), None, means)
    assert whole.keys() == cut.keys() == set(observed)
    for t in observed:
        a, b = whole[t], cut[t]
        assert (a.absmax, a.minimum, a.maximum, a.count, a.hist_range) == (b.absmax, b.minimum, b.maximum, b.count, b.hist_range), t
        assert np.array_equal(a.hist, b.hist), t
    for t in means:
        assert np.array_equal(whole[t].channel_mean, cut[t].channel_mean)


def test_no_piece_hands_out_more_than_its_share(tmp_path, monkeypatch):
    """Every run of a piece returns at most the budget plus one tensor, although all observed tensors
    together are several times the budget (what the one session would return at once)."""
    graph = _conv_chain(tmp_path, gate=False)
    observed = _observed(graph)
    one = tensor_bytes(graph, "r0")
    monkeypatch.setattr(pieces, "PIECE_BUDGET_BYTES", 2 * one)
    sess, names = observing_session(graph, observed)
    returned = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def run(self, names, feeds):
            outs = self.inner.run(names, feeds)
            returned.append(sum(o.nbytes for o in outs))
            return outs

    sess.sessions = [Counting(s) for s in sess.sessions]
    seen = [name for name, _ in pieces.run_each(sess, names, _batches(1)[0])]
    assert set(observed) <= set(seen)
    assert sum(tensor_bytes(graph, t) for t in observed) > 4 * max(returned)
    assert max(returned) <= 3 * one


def test_observed_model_input_is_handed_out(tmp_path, monkeypatch):
    graph = _conv_chain(tmp_path)
    observed = ["x"] + _observed(graph)
    monkeypatch.setattr(pieces, "PIECE_BUDGET_BYTES", 2 * tensor_bytes(graph, "r0"))
    stats = collect_stats(graph, observed, _batches(), None)
    assert stats["x"].count == 3 * 3 * SIDE * SIDE


def test_session_options_of_pieces():
    """Pieces run without an arena and without spinning threads (see hbtool.quant.collect._options)."""
    so = collect._options(pieces=True)
    assert so.enable_cpu_mem_arena is False
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
