"""From ``<prefix>_calibrated_model.onnx`` to the integer program.

The calibrated model is the hand-off between calibrate and compile: the float graph plus one
``HzCalibration`` node per quantized tensor (and the bias corrections in its metadata).
Compile re-imports it, takes the plan back out, places the nodes with the same rules the
checker uses, and lowers with the same function calibrate used for its quantized model; so
the artifact computes exactly the integers ``<prefix>_quantized_model.onnx`` computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hbtool.checker.placement import place_graph
from hbtool.errors import InputError
from hbtool.ir.graph import Graph
from hbtool.ir.onnx_import import STAGE_KEY, import_onnx
from hbtool.march.description import March
from hbtool.quant.calibrated_model import CALIBRATION_OP, extract_plan
from hbtool.quant.lower import LoweringReport, lower_to_integer
from hbtool.quant.plan import QuantPlan


@dataclass
class LoweredModel:
    float_graph: Graph      # optimized float graph with placement (the reference)
    plan: QuantPlan
    program: Graph          # integer program: Hz* kernel nodes, data movement, CPU float nodes
    report: LoweringReport


def load_calibrated(path: Path) -> Graph:
    """Import a calibrated model, refusing files that are not one."""
    graph = import_onnx(path)
    stage = graph.metadata.get(STAGE_KEY)
    if not any(n.op_type == CALIBRATION_OP for n in graph.nodes):
        raise InputError(
            f"{path} is not an hbtool calibrated model (stage: {stage or 'none'}; no HzCalibration nodes)",
            "give the *_calibrated_model.onnx that hbtool calibrate wrote, or run hbtool calibrate first",
        )
    return graph


def lower_calibrated(calibrated: Graph, march: March, node_info=None, rounding: str = "half_up", inputs=None) -> LoweredModel:
    """The integer program of a calibrated graph (see the module docstring); ``inputs``: the config's
    InputSpecs, for the run-time input formats (:mod:`hbtool.io.runtime_input`)."""
    graph, plan, weights = extract_plan(calibrated)
    place_graph(graph, march, node_info)
    program, report = lower_to_integer(graph, plan, weights, rounding, inputs=inputs)
    return LoweredModel(graph, plan, program, report)
