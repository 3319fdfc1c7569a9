"""Integer index inputs get generated data in their valid range, or a one-line error asking for data.

Issue 30: ``hbtool perf --fast`` on a graph network with an int64 ``edge_index`` (2 x E) died with
exit 3: the random samples were stacked on an axis that is not a batch axis, and their values were
not read from the ScatterElements / Gather that use them, so onnxruntime refused them.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from hbtool.cli import main
from hbtool.ir.onnx_import import import_onnx
from hbtool.quant.index_ranges import UnknownIndexRange, index_bound
from tests.helpers import make_model, tensor, vinfo

N, F, E = 10, 8, 30


def graph_network(tmp_path, arithmetic: bool = False):
    """x (N, F), edge_index (2, E) int64 -> gather sources -> MatMul -> ScatterElements(add) into N rows -> Relu."""
    w = np.random.default_rng(0).standard_normal((F, F)).astype(np.float32)
    dst = "dst"
    nodes = [helper.make_node("Gather", ["edge_index", "zero"], ["src"], axis=0),
             helper.make_node("Gather", ["edge_index", "one"], ["dst"], axis=0)]
    if arithmetic:   # the index is computed: its range cannot be read
        nodes.append(helper.make_node("Add", ["dst", "one"], ["dst_plus"]))
        dst = "dst_plus"
    nodes += [helper.make_node("Gather", ["x", "src"], ["msg0"], axis=0),
              helper.make_node("MatMul", ["msg0", "w"], ["msg"]),
              helper.make_node("Unsqueeze", [dst, "ax1"], ["dst1"]),
              helper.make_node("Expand", ["dst1", "shp"], ["idx"]),
              helper.make_node("ScatterElements", ["base", "idx", "msg"], ["agg"], axis=0, reduction="add"),
              helper.make_node("Relu", ["agg"], ["y"])]
    inits = [tensor("zero", np.array(0, np.int64)), tensor("one", np.array(1, np.int64)), tensor("w", w),
             tensor("ax1", np.array([1], np.int64)), tensor("shp", np.array([E, F], np.int64)),
             tensor("base", np.zeros((N, F), np.float32))]
    model = make_model(nodes, [vinfo("x", [N, F]), vinfo("edge_index", [2, E], TensorProto.INT64)], [vinfo("y", [N, F])], inits)
    path = tmp_path / "gnn.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_the_bound_is_read_through_gather_unsqueeze_expand_to_scatter_elements(tmp_path):
    g = import_onnx(str(graph_network(tmp_path)))
    assert index_bound(g, "edge_index") == N
    assert index_bound(g, "x") is None


def test_an_index_computed_by_arithmetic_has_no_readable_range(tmp_path):
    g = import_onnx(str(graph_network(tmp_path, arithmetic=True)))
    with pytest.raises(UnknownIndexRange) as exc:
        index_bound(g, "edge_index")
    assert exc.value.op_type == "Add"


def test_perf_fast_on_a_graph_network_runs(tmp_path):
    res = CliRunner().invoke(main, ["perf", "--model", str(graph_network(tmp_path)), "--fast", "--json", "-"])
    assert res.exit_code == 0, res.output


def test_perf_fast_asks_for_data_when_the_range_is_unreadable(tmp_path):
    res = CliRunner().invoke(main, ["perf", "--model", str(graph_network(tmp_path, arithmetic=True)), "--fast"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("hbtool: error:")]
    assert len(lines) == 1 and "edge_index" in lines[0] and "cal_data_dir" in lines[0] and "Traceback" not in res.output
