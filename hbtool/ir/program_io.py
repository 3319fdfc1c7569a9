"""The integer program <-> the artifact header's ``program`` section.

The program is the IR graph every stage shares; in the artifact it is stored as plain data:
nodes (op type, inputs, outputs, attributes, the integer kernel, and the compiler's
annotations), tensor shapes/dtypes and constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hbtool.ir.graph import Graph, Node, Value

# node annotations the runtime, ``simulate`` and ``perf`` need
KEPT_META = ("on", "unit", "subgraph", "kernel", "in_perms", "out_perm", "view", "as_conv", "bmm_tiled", "in_sram",
             "source_op", "boundary", "expanded_from", "flops", "fallback", "macs", "tile")


def program_section(program: Graph) -> dict[str, Any]:
    nodes = []
    for n in program.nodes:
        meta = {k: n.meta[k] for k in KEPT_META if k in n.meta and n.meta[k] is not None}
        if "in_perms" in meta:
            meta["in_perms"] = [[int(k), [int(p) for p in v]] for k, v in sorted(meta["in_perms"].items())]
        nodes.append({"name": n.name, "op_type": n.op_type, "domain": n.domain, "inputs": list(n.inputs),
                      "outputs": list(n.outputs), "attrs": dict(n.attrs), "meta": meta})
    values = {}
    consts = {}
    for name, v in sorted(program.values.items()):
        if v.data is not None:
            consts[name] = np.asarray(v.data)
        else:
            values[name] = {"shape": None if v.shape is None else [int(d) for d in v.shape],
                            "dtype": None if v.dtype is None else np.dtype(v.dtype).str}
    return {"name": program.name, "opset": program.opset, "inputs": list(program.inputs), "outputs": list(program.outputs),
            "nodes": nodes, "values": values, "consts": consts}


def program_from_section(section: dict[str, Any]) -> Graph:
    g = Graph(section["name"], int(section["opset"]))
    for name, v in section["values"].items():
        g.values[name] = Value(name, None if v["shape"] is None else tuple(v["shape"]),
                               None if v["dtype"] is None else np.dtype(v["dtype"]))
    for name, data in section["consts"].items():
        data = np.asarray(data)
        g.values[name] = Value(name, tuple(data.shape), data.dtype, data)
    for d in section["nodes"]:
        meta = dict(d["meta"])
        if "in_perms" in meta:
            meta["in_perms"] = {int(k): list(p) for k, p in meta["in_perms"]}
        attrs = {k: (list(v) if isinstance(v, tuple) else v) for k, v in d["attrs"].items()}
        g.nodes.append(Node(d["name"], d["op_type"], list(d["inputs"]), list(d["outputs"]), attrs, d["domain"], None, meta))
    g.inputs, g.outputs = list(section["inputs"]), list(section["outputs"])
    return g
