"""Reordering sees what an If's branches read from the graph around it (issue 30, torch_geometric GAT).

An ``If`` branch may read an outer tensor that the node does not list as an input. The IR's
``toposort`` looked only at listed inputs, so after a pass reordered GAT's graph the ``If`` came
before the ScatterElements its branch reads, and onnxruntime refused the calibration model ("nodes
must be topologically sorted", exit 3); ``remove_unused`` likewise saw nobody reading such a tensor.
"""

from __future__ import annotations

from onnx import TensorProto, helper

from hbtool.ir.graph import Graph, outer_reads


def _if_reading(outer: str):
    then = helper.make_graph([helper.make_node("Identity", [outer], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", [outer], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    return {"then_branch": then, "else_branch": other}


def test_toposort_puts_an_if_after_what_its_branches_read():
    g = Graph()
    g.inputs = ["x", "cond"]
    g.add_node("If", ["cond"], ["y"], _if_reading("r"), name="branch")    # listed first: read before written
    g.add_node("Relu", ["x"], ["r"], name="relu")
    g.outputs = ["y"]
    g.toposort()
    assert [n.name for n in g.nodes] == ["relu", "branch"]
    assert outer_reads(g.nodes[1]) == {"r"}
    g.remove_unused()
    assert [n.name for n in g.nodes] == ["relu", "branch"]   # 'r' is read, inside the branches
