"""The layout model of data movement (hbtool/costmodel/layout.py), on small ONNX models built here.

A permute INTO the native channel-last layout at a model output (a detector head's NCHW -> NHWC, as
the RDK model zoo exports them) keeps the bytes in order: a copy, not a gather; a permute that
really reorders elements (H and W swapped between two convs) is a strided reorder, dearer per byte;
a Reshape that keeps the stored order is a view and costs nothing.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from hbtool.costmodel.cost import DATA_MOVEMENT
from hbtool.costmodel.layout import KEEPS, STRIDED_SRAM, TILED, VIEW_CASE
from hbtool.perf.run import perf_fast
from tests.helpers import make_model, tensor, vinfo

C, H, W = 64, 40, 40


def _weights(name, c_out, c_in, k=1):
    return tensor(name, np.random.default_rng(0).standard_normal((c_out, c_in, k, k)).astype(np.float32) * 0.1)


def _perf(tmp_path, model, name):
    p = tmp_path / f"{name}.onnx"
    p.write_bytes(model.SerializeToString())
    return perf_fast(p, {}, "bayes-e", None, None, False, input_type_rt="nv12").result


def _moves(res, op_type):
    return [o for o in res.ops if o.unit == DATA_MOVEMENT and o.op_type == op_type]


def _head_permute(tmp_path):
    """conv -> Transpose(0, 2, 3, 1) as the model output (the zoo's head)."""
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                    helper.make_node("Transpose", ["c"], ["y"], name="to_nhwc", perm=[0, 2, 3, 1])],
                   [vinfo("x", [1, 3, H, W])], [vinfo("y", [1, H, W, C])], [_weights("w", C, 3)])
    return _perf(tmp_path, m, "head")


def _swap_hw(tmp_path):
    """conv -> Transpose(0, 1, 3, 2) -> conv: H and W swapped inside the model; each pixel's channel
    row (C innermost) moves whole."""
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                    helper.make_node("Transpose", ["c"], ["t"], name="swap", perm=[0, 1, 3, 2]),
                    helper.make_node("Conv", ["t", "w2"], ["y"], name="conv2")],
                   [vinfo("x", [1, 3, H, W])], [vinfo("y", [1, C, W, H])], [_weights("w", C, 3), _weights("w2", C, C)])
    return _perf(tmp_path, m, "swap")


def _swap_ch(tmp_path):
    """conv -> Transpose(0, 2, 1, 3) -> conv: C and H swapped inside the model, so the innermost stored
    axis changes: every element goes its own way (a gather-like reorder)."""
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                    helper.make_node("Transpose", ["c"], ["t"], name="swap", perm=[0, 2, 1, 3]),
                    helper.make_node("Conv", ["t", "w2"], ["y"], name="conv2")],
                   [vinfo("x", [1, 3, H, W])], [vinfo("y", [1, H, C, W])], [_weights("w", C, 3), _weights("w2", H, H)])
    return _perf(tmp_path, m, "swapch")


def test_permute_into_nhwc_at_a_model_output_is_a_copy_not_a_gather(tmp_path):
    head = _head_permute(tmp_path)
    (move,) = _moves(head, "Transpose")
    assert move.layout == KEEPS and move.note.startswith(KEEPS) and "NHWC" in move.note
    nbytes = C * H * W
    assert move.sram_bytes + move.ddr_bytes <= 2 * nbytes * 1.1          # each byte read once and written once
    (rows,) = _moves(_swap_hw(tmp_path), "Transpose")
    assert rows.layout == KEEPS and "runs of 64 elements" in rows.note    # whole channel rows: a copy too


def test_gather_like_permute_pays_for_its_short_runs(tmp_path):
    (rows,) = _moves(_swap_hw(tmp_path), "Transpose")
    (swap,) = _moves(_swap_ch(tmp_path), "Transpose")
    assert swap.layout in (STRIDED_SRAM, TILED) and "runs of 1 elements" in swap.note
    assert swap.elements == rows.elements == C * H * W
    # runs of one element: the strided side moves more than the tensor's bytes through the unit
    assert swap.components[DATA_MOVEMENT] > 1.5 * rows.components[DATA_MOVEMENT]


def test_reshape_that_keeps_the_stored_order_is_free(tmp_path):
    tokens, dim = 64, 32
    m = make_model([helper.make_node("MatMul", ["x", "a"], ["t"], name="proj"),
                    helper.make_node("Reshape", ["t", "shape"], ["f"], name="flat"),
                    helper.make_node("MatMul", ["f", "b"], ["y"], name="fc")],
                   [vinfo("x", [1, tokens, dim])], [vinfo("y", [1, 16])],
                   [tensor("a", np.random.default_rng(1).standard_normal((dim, dim)).astype(np.float32) * 0.1),
                    tensor("shape", np.array([1, tokens * dim], np.int64)),
                    tensor("b", np.random.default_rng(2).standard_normal((tokens * dim, 16)).astype(np.float32) * 0.01)])
    p = tmp_path / "flat.onnx"
    p.write_bytes(m.SerializeToString())
    res = perf_fast(p, {}, "bayes-e", None, None, False).result
    moves = _moves(res, "Reshape")
    assert moves, [o.op_type for o in res.ops]
    assert all(o.layout == VIEW_CASE and o.cycles == 0 for o in moves)
