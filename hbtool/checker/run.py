"""``hbtool checker``: import, optimize, place, and report what runs where.

The library entry point is :func:`run_checker`; the CLI only parses flags and prints.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from hbtool.checker.placement import place_graph
from hbtool.errors import InputError, NotDeployableError
from hbtool.ir.graph import Graph
from hbtool.ir.macs import node_macs
from hbtool.ir.onnx_export import to_onnx
from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.pass_manager import PassResult
from hbtool.march.description import load_march
from hbtool.utils.atomic import atomic_write_files

log = logging.getLogger(__name__)


@dataclass
class CheckerResult:
    model: str
    march: str
    graph: Graph
    passes: list[PassResult]
    summary: dict[str, Any]
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def deployable(self) -> bool:
        return self.summary["bpu_nodes"] > 0

    def require_deployable(self) -> None:
        """Raise :class:`NotDeployableError` (exit 1) when no node can run on the BPU."""
        if not self.deployable:
            raise NotDeployableError(
                "no node of the model can run on the BPU",
                "the model needs at least one supported op (Conv, MatMul, ...); see the reasons in the checker table",
            )

    def to_json(self) -> dict[str, Any]:
        """The checker.json document (its shape is a contract with CI users: keep it stable)."""
        return {
            "model": self.model,
            "march": self.march,
            "nodes": [
                {
                    "name": n.name,
                    "op_type": n.op_type,
                    "on": n.meta.get("on"),
                    "subgraph": n.meta.get("subgraph"),
                    "bpu_type": n.meta.get("bpu_type"),
                    "reason": n.meta.get("reason"),
                }
                for n in self.graph.nodes
            ],
            "summary": self.summary,
            **({"prequantized": self.graph.prequantized.to_json()} if self.graph.prequantized is not None else {}),
        }


def prepare_graph(
    model: str | Path,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    march: str = "bayes",
    node_info: Mapping[str, Mapping[str, Any]] | None = None,
    output_nodes: Sequence[str] | None = None,
) -> tuple[Graph, list[PassResult]]:
    """Import, run the float optimizations and place every node: the graph all later stages start from."""
    from hbtool.checker.node_names import apply_output_nodes, resolve_node_info
    from hbtool.ir.passes import optimize_float

    graph = import_onnx(model, input_shapes)
    apply_output_nodes(graph, list(output_nodes or []), model)
    imported = graph.copy()
    passes = optimize_float(graph)
    place_graph(graph, load_march(march), resolve_node_info(node_info, graph, [imported], model))
    return graph, passes


def summarize(graph: Graph) -> dict[str, Any]:
    bpu = [n for n in graph.nodes if n.meta.get("on") == "BPU"]
    cpu = [n for n in graph.nodes if n.meta.get("on") != "BPU"]
    macs_total = sum(node_macs(n, graph) for n in graph.nodes)
    macs_bpu = sum(node_macs(n, graph) for n in bpu)
    subgraphs = {n.meta.get("subgraph") for n in bpu}
    return {
        "bpu_nodes": len(bpu),
        "cpu_nodes": len(cpu),
        "subgraphs": len(subgraphs),
        "bpu_mac_fraction": round(macs_bpu / macs_total, 6) if macs_total else (1.0 if bpu else 0.0),
        "total_macs": int(macs_total),
    }


def run_checker(
    model: str | Path,
    march: str = "bayes",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    output_dir: str | Path = ".hb_check",
    node_info: Mapping[str, Mapping[str, Any]] | None = None,
    write_files: bool = True,
    output_nodes: Sequence[str] | None = None,
) -> CheckerResult:
    """Check a model for the march and write ``checker.json`` and the optimized float model.

    The report is written even for an undeployable model (``result.require_deployable()``
    raises then); bad input raises an :class:`~hbtool.errors.InputError` (exit 2) before
    anything is written.
    """
    model = Path(model)
    graph, passes = prepare_graph(model, input_shapes, march, node_info, output_nodes)
    result = CheckerResult(str(model), march, graph, passes, summarize(graph))
    if write_files:
        out = Path(output_dir)
        stem = model.stem
        opt_path = out / f"{stem}_optimized_float_model.onnx"
        json_path = out / "checker.json"
        # both files or neither: a full disk or Ctrl-C leaves the earlier report as it was
        atomic_write_files({
            opt_path: to_onnx(graph, stage="optimized_float").SerializeToString(),
            json_path: (json.dumps(result.to_json(), indent=2) + "\n").encode(),
        })
        result.files = {"checker_json": json_path, "optimized_float_model": opt_path}
    return result
