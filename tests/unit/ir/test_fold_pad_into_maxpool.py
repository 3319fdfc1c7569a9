"""A ``-inf`` Pad before a MaxPool (timm's "same" max pooling, NesT) becomes the MaxPool's own pads.

Found by running timm's ``nest_tiny_jx`` through ``hbtool perf --fast``: the ``-inf`` border was a
tensor of its own, calibration saw it as NaN/Inf and refused a valid model (and, before the
observer fix below, crashed with exit 3 indexing its histogram sample).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hbtool.ir import import_onnx
from hbtool.ir.passes import fold_pad_into_maxpool, optimize_float
from hbtool.quant.observers import TensorStats
from tests.helpers import assert_graph_matches, cosine, make_model, run_pipeline, tensor, vinfo

NEG_INF = np.array(-np.inf, np.float32)


def pad_pool_model(pads, value=NEG_INF, transpose=False, second_reader=False, kernel=3, stride=2):
    """x -> Conv 1x1 -> [Transpose NCHW->NHWC ->] Pad(value) [-> Transpose back] -> MaxPool -> y."""
    c, h, w = 4, 9, 9
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")]
    src = "c"
    if transpose:
        nodes.append(helper.make_node("Transpose", ["c"], ["c_nhwc"], name="to_nhwc", perm=[0, 2, 3, 1]))
        src = "c_nhwc"
    nodes.append(helper.make_node("Pad", [src, "pads", "value"], ["padded"], name="pad", mode="constant"))
    pooled_in = "padded"
    if transpose:
        nodes.append(helper.make_node("Transpose", ["padded"], ["padded_nchw"], name="to_nchw", perm=[0, 3, 1, 2]))
        pooled_in = "padded_nchw"
    nodes.append(helper.make_node("MaxPool", [pooled_in], ["y"], name="pool", kernel_shape=[kernel, kernel], strides=[stride, stride]))
    dims = [1, c, h, w] if not transpose else [1, h, w, c]
    padded = [d + pads[i] + pads[4 + i] for i, d in enumerate(dims)]
    nchw = padded if not transpose else [padded[0], padded[3], padded[1], padded[2]]
    outputs = [vinfo("y", nchw[:2] + [(d - kernel) // stride + 1 for d in nchw[2:]])]
    if second_reader:
        nodes.append(helper.make_node("Relu", ["padded"], ["z"], name="other_reader"))
        outputs.append(vinfo("z", padded))
    inits = [tensor("w", rng.standard_normal((c, 3, 1, 1)).astype(np.float32)), tensor("pads", np.array(pads, np.int64)),
             tensor("value", value)]
    return make_model(nodes, [vinfo("x", [1, 3, h, w])], outputs, inits)


def _feeds():
    return {"x": np.random.default_rng(1).standard_normal((1, 3, 9, 9)).astype(np.float32)}


@pytest.mark.parametrize("transpose, pads", [
    (False, [0, 0, 0, 0, 0, 0, 1, 1]),            # NCHW: bottom/right, the odd "same" element
    (False, [0, 0, 1, 1, 0, 0, 1, 1]),            # all four sides
    (True, [0, 0, 0, 0, 0, 1, 1, 0]),             # NHWC Pad behind a Transpose (what onnxruntime's folding leaves in NesT)
])
def test_minus_infinity_border_becomes_the_pool_pads(transpose, pads):
    model = pad_pool_model(pads, transpose=transpose)
    graph = import_onnx(model)
    assert fold_pad_into_maxpool(graph) == 1
    assert not [n for n in graph.nodes if n.op_type == "Pad"]
    pool = next(n for n in graph.nodes if n.op_type == "MaxPool")
    nchw = [pads[i] for i in (2, 3, 6, 7)] if not transpose else [pads[1], pads[2], pads[5], pads[6]]
    assert list(pool.attr("pads")) == nchw
    assert_graph_matches(model, graph, _feeds(), tol=0.0)


@pytest.mark.parametrize("case", ["zero_border", "finite_border", "channel_axis", "second_reader", "crop", "window_in_border"])
def test_other_borders_and_shared_pads_stay(case):
    kw = {"pads": [0, 0, 0, 0, 0, 0, 1, 1]}
    if case == "zero_border":
        kw["value"] = np.array(0.0, np.float32)        # 0 can win a max: the border is data
    elif case == "finite_border":
        kw["value"] = np.array(-1e4, np.float32)       # a large but finite value is still data
    elif case == "channel_axis":
        kw["pads"] = [0, 1, 0, 0, 0, 0, 1, 1]          # a whole -inf plane is not a pool pad
    elif case == "second_reader":
        kw["second_reader"] = True
    elif case == "crop":
        kw["pads"] = [0, 0, 0, 0, 0, 0, -1, 1]
    elif case == "window_in_border":
        kw["pads"] = [0, 0, 3, 0, 0, 0, 0, 0]          # 3 rows of -inf before a 3x3 window: ONNX refuses pads >= kernel
    graph = import_onnx(pad_pool_model(**kw))
    assert fold_pad_into_maxpool(graph) == 0
    assert [n.op_type for n in graph.nodes].count("Pad") == 1


def test_the_pass_runs_in_the_float_optimizations():
    graph = import_onnx(pad_pool_model([0, 0, 0, 0, 0, 0, 1, 1]))
    done = {r.name: r.rewrites for r in optimize_float(graph)}
    assert done["fold_pad_into_maxpool"] == 1


def test_a_minus_infinity_border_model_goes_end_to_end(tmp_path):
    """Refused before ("tensor 'padded' became NaN/Inf"); now integer on the BPU, simulated bit-exactly."""
    model = pad_pool_model([0, 0, 0, 0, 0, 0, 1, 1])
    calibration, compiled, _, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 3, 9, 9))
    assert compiled.fallbacks == []
    assert [n for n in compiled.program.nodes if n.op_type == "Pad"] == []
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.99


def test_histogram_sample_after_dropping_nonfinite_values():
    """The shared sample index is drawn for the whole tensor; with non-finite values dropped it would
    point past the end (exit 3 on NesT). The counts stay right and the infinities are counted."""
    x = np.arange(1000, dtype=np.float32)
    x[::10] = -np.inf
    st = TensorStats("t")
    st.update(x, np.sort(np.random.default_rng(0).choice(x.size, 100, replace=False)))
    assert st.nonfinite == 100 and st.count == 900 and st.maximum == 999.0


def test_the_folded_border_never_wins_a_max_on_negative_maps(tmp_path):
    """Every value is negative (conv bias -20): a border of 0 would give 0 on the edges, 16+ off.
    The integer MaxPool pads below every int8 value, so the simulated edges stay within one step."""
    model = pad_pool_model([0, 0, 1, 1, 0, 0, 1, 1])
    model.graph.node[0].input.append("b")
    model.graph.initializer.append(tensor("b", np.full(4, -20.0, np.float32)))
    _, compiled, _, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 3, 9, 9))
    assert compiled.fallbacks == []
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert f[0].max() < -10
        step = np.abs(f[0]).max() / 127
        assert np.abs(sim[0] - f[0]).max() <= step
