"""The estimate as a JSON document: ``perf --json`` and the compiler's ``*_layer_details.json``.

Both the ``hbtool perf`` report (above the compiler) and ``compile`` with
``compiler_parameters.debug`` (the compiler) write this document, so it sits in the cost model
below both. The keys are stable: CI jobs read them.
"""

from __future__ import annotations

from typing import Any

from hbtool.costmodel.classes import measurement_class
from hbtool.costmodel.cost import CPU, OpCost
from hbtool.costmodel.hardware import parameter_table
from hbtool.costmodel.schedule import PerfResult


def microseconds(r: PerfResult, cycles: float) -> float:
    return cycles / r.hw.clock_hz * 1e6


def op_json(r: PerfResult, op: OpCost, start: float) -> dict[str, Any]:
    return {
        "name": op.name, "op_type": op.op_type, "unit": op.unit, "kernel": op.kernel,
        "cycles": round(op.cycles, 1), "time_us": round(microseconds(r, op.cycles), 3), "start_us": round(microseconds(r, start), 3),
        "bound_by": op.bound_by, "components": {k: round(v, 1) for k, v in op.components.items()},
        "overhead_cycles": round(op.overhead, 1), "weight_wait_cycles": round(op.wait, 1), "calls": op.calls, "bits": op.bits,
        "macs": op.macs, "padded_macs": op.padded_macs, "elements": op.elements,
        "ddr_bytes": op.ddr_bytes, "ddr_useful_bytes": op.ddr_useful_bytes, "sram_bytes": op.sram_bytes, "weight_bytes": op.weight_bytes, "note": op.note,
        "layout": op.layout, "cost_class": op.cost_class,
    }


def to_json(r: PerfResult, levels: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``--json`` document (keys are stable: CI jobs read them)."""
    ddr = r.ddr_bytes_per_frame
    cpu_ops = [o for o in r.ops if o.unit == CPU]
    doc: dict[str, Any] = {
        "model": r.model, "march": r.march, "board": r.hw.board, "optimize_level": r.optimize_level, "core_num": r.core_num,
        "latency_ms": round(r.latency_ms, 4),
        "fps": round(r.fps, 2),
        "fps_1core": round(r.fps_1core, 2),
        "fps_bound": r.fps_bound,
        "fps_limits": {k: round(v, 2) for k, v in r.fps_limits.items()},
        "ddr_bytes_per_frame": int(ddr),
        "ddr_gb_per_s": round(ddr * r.fps / 1e9, 3),
        "gops_per_frame": round(r.gops_per_frame, 4),
        "macs": int(r.macs), "padded_macs": int(r.padded_macs),
        "padding_efficiency": round(r.padding_efficiency, 4),
        "utilisation": round(r.utilisation, 5),
        "mac_array_busy": round(r.tensor_busy_share, 5),
        "tensor_vector_ratio": None if r.tensor_vector_ratio is None else round(r.tensor_vector_ratio, 2),
        "vector_elements": int(r.vector_elements),
        "time_share": {k: round(v, 5) for k, v in r.time_share.items()},
        "bound_share": {k: round(v, 5) for k, v in r.bound_share.items()},
        "bound_by": r.bound_by,
        "cpu": {"ms": round(sum(o.cycles for o in cpu_ops) / r.hw.clock_hz * 1e3, 4),
                "ops": [{"name": o.name, "op_type": o.op_type, "time_us": round(microseconds(r, o.cycles), 3),
                         "flops": o.flops, "elements": o.elements} for o in cpu_ops]},
        "op_types": [{**row, "cycles": round(row["cycles"], 1), "share": round(row["share"], 5),
                      "time_ms": round(row["cycles"] / r.hw.clock_hz * 1e3, 4)} for row in r.by_op_type()],
        "ops": [op_json(r, op, start) for op, start, _ in r.timeline()],
        "passes": r.passes,
        "parameters": parameter_table(r.march, r.hw.board or None),
        "fps_threads": {str(n): round(r.fps_threads(n), 2) for n in THREAD_COUNTS},
        "measurement_class": class_json(r),
    }
    if levels is not None:
        doc["levels"] = levels
    return doc


#: thread counts of the published board measurements (``hrt_model_exec perf --thread_num``)
THREAD_COUNTS = (1, 2, 4, 8)


def class_json(r: PerfResult) -> dict[str, Any]:
    """The published measurement class the model resembles, with hbtool's error on that class where known."""
    name, err = measurement_class(r)
    out: dict[str, Any] = {"class": name}
    if err is not None:
        out.update(published_rows=err[0], median_abs_latency_error=err[1], median_abs_fps_error=err[2])
    return out
