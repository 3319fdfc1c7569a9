"""``hbtool compile``: calibrated model -> integer program -> passes -> layout -> memory -> ``.hbm``."""

from __future__ import annotations

import hashlib
import os
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hbtool import __version__
from hbtool.compiler.artifact import to_bytes
from hbtool.compiler.cpu import CpuSubgraph, extract_cpu_subgraphs
from hbtool.compiler.layout import LayoutPlan, plan_layout
from hbtool.compiler.memory import MemoryPlan, plan_memory
from hbtool.compiler.passes import run_passes
from hbtool.compiler.source import load_calibrated, lower_calibrated
from hbtool.compiler.units import CPU, assign_units
from hbtool.config import HbConfig
from hbtool.costmodel.document import to_json
from hbtool.costmodel.schedule import estimate
from hbtool.ir.graph import Graph
from hbtool.ir.program_io import program_section
from hbtool.march.description import load_march

log = logging.getLogger(__name__)


@dataclass
class CompiledModel:
    program: Graph
    header: dict[str, Any]
    data: bytes
    passes: dict[str, int]
    cpu_subgraphs: list[CpuSubgraph]
    layout: LayoutPlan
    memory: MemoryPlan
    fallbacks: list[tuple[str, str, str]] = field(default_factory=list)
    seconds: float = 0.0
    path: Path | None = None


def calibrated_path(cfg: HbConfig) -> Path:
    return Path(cfg.model.working_dir) / f"{cfg.model.output_model_file_prefix}_calibrated_model.onnx"


# The file name hb_mapper users expect for each march: ``<prefix>.bin`` on J5 (bayes), RDK X5
# (bayes-e) and RDK X3 (bernoulli2). The content is hbtool's artifact whatever the name, and
# every reader takes any name, so ``.hbm`` files from earlier versions stay readable.
ARTIFACT_SUFFIX = {"bayes": ".bin", "bayes-e": ".bin", "bernoulli2": ".bin"}


def artifact_path(cfg: HbConfig) -> Path:
    suffix = ARTIFACT_SUFFIX.get(cfg.model.march, ".bin")
    return Path(cfg.model.working_dir) / f"{cfg.model.output_model_file_prefix}{suffix}"


def bpu_weight_bytes(program: Any) -> int:
    """Bytes of the constants every BPU kernel of ``program`` streams per frame (the memory plan's weights)."""
    return sum(n.meta["kernel"].param_bytes() for n in program.nodes if "kernel" in n.meta and n.meta.get("unit") != CPU)


def _input_descriptions(cfg: HbConfig, program: Graph, removed: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    consumers = program.consumer_map()
    specs = {s.name: s for s in cfg.inputs if s.name}
    cut = {r["new_tensor"]: r for r in removed or [] if r["at"] == "input"}
    out = []
    for k, name in enumerate(program.inputs):
        v = program.values[name]
        first = name
        while first in cut:  # the model input this one replaced (remove_node_type)
            first = cut[first]["tensor"]
        spec = specs.get(first) or (cfg.inputs[k] if k < len(cfg.inputs) and not cfg.inputs[k].name else None)
        quant = None
        for c in consumers.get(name, []):
            kern = c.meta.get("kernel")
            if kern is not None and type(kern).__name__ == "Quantize":
                quant = {"scale": float(np.asarray(kern.scale).reshape(-1)[0]), "bits": int(kern.bits)}
        d: dict[str, Any] = {"name": name, "shape": [int(x) for x in v.shape], "dtype": np.dtype(v.dtype).name,
                             "quantize": quant}
        if first != name:
            d["removed"] = [r for r in removed or [] if r["at"] == "input" and r["new_tensor"] in _chain(cut, name)]
        if spec is not None:
            d.update(layout=spec.layout_train, type=spec.type_train, type_rt=spec.type_rt, layout_rt=spec.layout_rt,
                     norm_type=spec.norm_type, cal_data_type=spec.cal_data_type,
                     mean=list(spec.mean) if spec.mean else None, scale=list(spec.scale) if spec.scale else None,
                     source=spec.source)
            convert = [c for c in consumers.get(name, []) if type(c.meta.get("kernel")).__name__ == "InputConvert"]
            if convert:  # the chip's buffer: what simulate reads and the quantized model takes
                kern = convert[0].meta["kernel"]
                d["runtime"] = {"format": kern.fmt, "offset": kern.offset, "layout": kern.layout_in,
                                "height": kern.height, "width": kern.width, "space_and_range": spec.space_and_range,
                                "train_shape": [int(x) for x in program.values[convert[0].outputs[0]].shape]}
        out.append(d)
    return out


def _chain(cut: dict[str, dict[str, Any]], name: str) -> set[str]:
    names = set()
    while name in cut:
        names.add(name)
        name = cut[name]["tensor"]
    return names


def _output_descriptions(program: Graph, removed: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    producers = program.producer_map()
    cut = {r["new_tensor"]: r for r in removed or [] if r["at"] == "output"}
    out = []
    for name in program.outputs:
        v = program.values[name]
        p = producers.get(name)
        kern = p.meta.get("kernel") if p is not None else None
        deq = _dequantize_description(kern) if kern is not None and type(kern).__name__ == "Dequantize" else None
        d = {"name": name, "shape": [int(x) for x in v.shape], "dtype": "float32", "dequantize": deq}
        if name in cut:  # remove_node_type cut the nodes after it: the integer codes come out
            d["dtype"] = "int64"
            d["removed"] = [r for r in removed or [] if r["at"] == "output" and r["new_tensor"] in _chain(cut, name)]
        out.append(d)
    return out


def _dequantize_description(kern: Any) -> dict[str, Any]:
    """``{"scale": s}``, or for an output whose channels have their own scales (a segmented Concat,
    hbtool.quant.output_channels) also ``scales`` (one per channel) and ``axis`` (negative): ``scale``
    is then the largest, what a reader that knows one scale must not use alone."""
    s = np.asarray(kern.scale, np.float64)
    if s.size <= 1:
        return {"scale": float(s.reshape(-1)[0])}
    axis = next(k for k, n in enumerate(s.shape) if n > 1) - s.ndim
    return {"scale": float(s.max()), "scales": [float(v) for v in s.reshape(-1)], "axis": axis}


def compile_model(cfg: HbConfig, optimize_level: str | None = None, disabled_passes: set[str] | None = None,
                  progress: Callable[[str, int, int], None] | None = None,
                  calibrated: Path | None = None, serialize: bool = True) -> CompiledModel:
    """Compile the calibrated model of ``cfg`` (in memory; nothing is written).

    ``serialize=False`` leaves ``data`` empty: a caller that only reads ``header`` and ``program``
    (``hbtool perf``) skips encoding the artifact (YOLOv9e's perf --fast peak: 3.61 -> 3.46 GB)."""
    t0 = time.perf_counter()
    level = optimize_level or cfg.compiler.optimize_level
    march = load_march(cfg.model.march)
    src = Path(calibrated) if calibrated is not None else calibrated_path(cfg)
    steps = 6
    tick = (lambda k, what: progress(what, k, steps)) if progress else (lambda k, what: None)
    tick(0, "lowering")
    from hbtool.checker.node_names import resolve_node_info

    calibrated_graph = load_calibrated(src)
    node_info = resolve_node_info(cfg.model.node_info, calibrated_graph, (), cfg.model.onnx_model, strict=False)
    lowered = lower_calibrated(calibrated_graph, march, node_info, cfg.compiler.rounding, cfg.inputs)
    program = lowered.program
    if cfg.compiler.abort_on_fail and lowered.report.fallbacks:
        from hbtool.errors import NotDeployableError

        node, op, why = lowered.report.fallbacks[0]
        raise NotDeployableError(
            f"compiler_parameters.abort_on_fail: {len(lowered.report.fallbacks)} BPU node(s) cannot be compiled "
            f"for the BPU; first: '{node}' ({op}): {why}",
            "put the node on the CPU with node_info {ON: CPU}, or set abort_on_fail: false to let it fall back")
    removed = []
    if cfg.model.remove_node_type or cfg.model.remove_node_name:
        from hbtool.compiler.edge_removal import remove_edge_nodes

        removed = remove_edge_nodes(program, list(cfg.model.remove_node_type), list(cfg.model.remove_node_name))
    dumped: list[str] = []
    if cfg.model.layer_out_dump or "dump_all_layers_output" in cfg.model.debug_mode:
        from hbtool.compiler.layer_dump import add_layer_outputs

        dumped = add_layer_outputs(program, lowered.report.tensors)
        log.info("layer_out_dump: %d layer outputs added as model outputs", len(dumped))
    assign_units(program)
    tick(1, "passes")
    applied = run_passes(program, level, disabled_passes or set())
    assign_units(program)
    tick(2, "cpu subgraphs")
    subgraphs = extract_cpu_subgraphs(program)
    tensor_bits = {name: bits for name, (_, bits) in lowered.report.tensors.items()}
    tick(3, "layout")
    layout = plan_layout(program, march, tensor_bits)
    tick(4, "memory")
    memory = plan_memory(program, layout, march, bpu_weight_bytes(program), compile_mode=cfg.compiler.compile_mode,
                         balance_factor=cfg.compiler.balance_factor)
    for n in program.nodes:
        if "kernel" in n.meta and n.meta.get("unit") != CPU:
            n.meta["macs"] = kernel_macs(n, program)
    scales = {name: s for name, (s, _) in lowered.report.tensors.items()}
    tensors = {}
    for name, lay in sorted(layout.tensors.items()):
        t = lay.to_json()
        if name in tensor_bits:
            t.update(bits=tensor_bits[name], scale=scales.get(name, scales.get(name.removesuffix("_reorder"))))
            codes = lowered.report.codes.get(name)
            if codes:  # a 4-bit tensor in the int8 container: the cost model stores it at half a byte per element
                t["dtype"] = "uint4" if codes[0] == 0 else "int4"
        p = memory.tensors.get(name)
        if p is not None:
            t["memory"] = p.to_json()
        tensors[name] = t
    tick(5, "artifact")
    header = {
        "tool": {"name": "hbtool", "version": __version__},
        "march": march.name,
        "model": {"name": cfg.model.output_model_file_prefix,
                  "calibrated_sha256": hashlib.sha256(src.read_bytes()).hexdigest()},
        "options": {"optimize_level": level, "compile_mode": cfg.compiler.compile_mode,
                    "balance_factor": cfg.compiler.balance_factor, "core_num": cfg.compiler.core_num,
                    "rounding": cfg.compiler.rounding, "disabled_passes": sorted(disabled_passes or []),
                    "debug": cfg.compiler.debug, "jobs": cfg.compiler.jobs, "layer_out_dump": len(dumped)},
        "passes": applied,
        "inputs": _input_descriptions(cfg, program, removed),
        "outputs": _output_descriptions(program, removed),
        "removed_nodes": removed,
        "program": program_section(program),
        "tensors": tensors,
        "cpu_subgraphs": [{"name": s.name, "inputs": s.inputs, "outputs": s.outputs, "onnx": s.onnx_bytes,
                           "nodes": s.nodes, "flops": s.flops} for s in subgraphs],
        "layout": layout.to_json(),
        "memory": memory.to_json(),
        "fallbacks": [list(f) for f in lowered.report.fallbacks],
    }
    data = to_bytes(header) if serialize else b""
    tick(6, "artifact")
    result = CompiledModel(program, header, data, applied, subgraphs, layout, memory, list(lowered.report.fallbacks))
    result.seconds = time.perf_counter() - t0
    return result


def kernel_macs(node, program: Graph) -> int:
    """Multiply-accumulates of a tensor-unit kernel node, from its integer weights and output shape."""
    out = program.shape(node.outputs[0])
    if out is None:
        return 0
    return int(node.meta["kernel"].macs(program.shape(node.inputs[0]), out))


def compile_log(result: CompiledModel) -> str:
    """The text of ``hb_compile.log``: what ``hbtool info`` prints, plus the compile time."""
    from rich.console import Console

    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.info import print_info

    console = Console(record=True, width=120, file=open(os.devnull, "w"))
    print_info(from_bytes(result.data), console)
    return console.export_text() + f"compiled in {result.seconds:.2f} s\n"


def write_compile_outputs(cfg: HbConfig, result: CompiledModel, path: Path, log_text: str = "") -> list[Path]:
    """Write the artifact and ``hb_compile.log`` (all or nothing; ``log_text`` appended); prints nothing
    (the CLI prints :func:`print_compile_summary`)."""
    from hbtool.utils.atomic import atomic_write_files

    path = Path(path)
    log_path = path.parent / "hb_compile.log"
    text = compile_log(result) + log_text
    files = {path: result.data, log_path: text.encode("utf-8")}
    if cfg.compiler.debug:  # Horizon's debug: per-layer perf information (hb_perf's "Layer Details")
        files[layer_details_path(path)] = layer_details(result)
    atomic_write_files(files)
    result.path = path
    return list(files)


def print_compile_summary(cfg: HbConfig, result: CompiledModel) -> None:
    """The artifact's description, the compiler's advice and the time taken, on stdout (``hbtool compile``)."""
    from rich.console import Console

    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.info import print_info

    print_info(from_bytes(result.data), Console())
    for line in advice_lines(result, cfg.compiler.advice):
        print(line)
    print(f"compiled in {result.seconds:.2f} s")


def advice_lines(result: CompiledModel, threshold_us: int) -> list[str]:
    """``compiler_parameters.advice``: ops estimated above ``threshold_us`` microseconds, with what binds them."""
    if threshold_us <= 0:
        return []
    from hbtool.compiler.artifact import from_bytes

    est = estimate(from_bytes(result.data).header)
    lines = []
    for op in sorted(est.ops, key=lambda o: -o.cycles):
        us = op.cycles / est.hw.clock_hz * 1e6
        if us <= threshold_us:
            break
        lines.append(f"advice: {op.name} ({op.op_type}, {op.unit}) takes about {us:.0f} us, bound by {op.bound_by}; "
                     "see hbtool perf for the breakdown")
    if not lines:
        lines.append(f"advice: no op above {threshold_us} us")
    return lines


def layer_details_path(artifact: Path) -> Path:
    return Path(artifact).with_name(Path(artifact).stem + "_layer_details.json")


def layer_details(result: CompiledModel) -> bytes:
    """``compiler_parameters.debug: true``: the perf estimate of every layer, as JSON."""
    import json

    from hbtool.compiler.artifact import from_bytes

    return (json.dumps(to_json(estimate(from_bytes(result.data).header)), indent=1) + "\n").encode("utf-8")
