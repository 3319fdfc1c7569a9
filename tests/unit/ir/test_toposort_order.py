"""``Graph.toposort`` gives the order of its definition (repeated passes) without making the passes.

The order of the nodes is the order of every exported model's nodes, so of the bytes of the files calibrate
writes: the one-scan sort must give exactly the passes' order, on graphs in any order, with constants, graph
inputs, unproduced tensors, multi-output nodes and nodes read by many; a cycle still names its node.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hbtool.ir.graph import Graph


def _random_graph(seed: int) -> Graph:
    rnd = random.Random(seed)
    g = Graph()
    g.inputs = ["x0", "x1"]
    g.set_value("w", (1,), np.float32).data = np.ones(1, np.float32)
    made = ["x0", "x1", "w", "missing"]   # 'missing': read, produced by nobody
    nodes = []
    for k in range(rnd.randint(1, 60)):
        ins = [rnd.choice(made) for _ in range(rnd.randint(0, 3))]
        outs = [f"t{k}_{j}" for j in range(rnd.randint(1, 2))]
        nodes.append((f"n{k}", ins, outs))
        made += outs
    if rnd.random() < 0.3:   # a constant that a node also writes: available from the start either way
        nodes.append(("writes_w", ["x0"], ["w"]))
    rnd.shuffle(nodes)
    for name, ins, outs in nodes:
        g.add_node("Add", ins, outs, name=name)
    g.outputs = [made[-1]]
    return g


@pytest.mark.parametrize("seed", range(300))
def test_one_scan_gives_the_order_of_the_passes(seed):
    g = _random_graph(seed)
    reference = Graph()
    reference.__dict__.update(g.__dict__)
    reference.nodes = list(g.nodes)
    reference._toposort_by_passes()
    g.toposort()
    assert [n.name for n in g.nodes] == [n.name for n in reference.nodes]


def test_calibration_nodes_appended_at_the_end_go_after_their_tensor():
    """The case it was made for: a chain, then one node per tensor appended that its consumer now reads."""
    g = Graph()
    g.inputs = ["x"]
    prev = "x"
    for k in range(5):
        g.add_node("Relu", [prev], [f"r{k}"], name=f"relu{k}")
        prev = f"r{k}"
    for k in range(5):
        g.add_node("Cal", [f"r{k}"], [f"c{k}"], name=f"cal{k}")
        if k + 1 < 5:
            g.nodes[k + 1].inputs = [f"c{k}"]
    g.toposort()
    assert [n.name for n in g.nodes] == [x for k in range(5) for x in (f"relu{k}", f"cal{k}")]


def test_a_cycle_is_named():
    g = Graph()
    g.inputs = ["x"]
    g.add_node("Add", ["x", "b"], ["a"], name="first")
    g.add_node("Relu", ["a"], ["b"], name="second")
    with pytest.raises(ValueError, match="cycle through first"):
        g.toposort()


def test_two_producers_of_one_name_keep_the_passes_order():
    g = Graph()
    g.inputs = ["x"]
    g.add_node("Relu", ["y"], ["z"], name="reader")
    g.add_node("Relu", ["x"], ["y"], name="one")
    g.add_node("Neg", ["x"], ["y"], name="other")
    g.toposort()
    assert [n.name for n in g.nodes] == ["one", "other", "reader"]
