"""The three ways into ``hbtool perf``: an artifact, a config, or an ONNX model on the quick path.

Quick path (Horizon's ``makertbin --fast-perf``): ``--model M.onnx --fast`` writes a temporary
config with ``calibration_type: skip`` (random calibration data, :data:`FAST_SAMPLES` samples),
calibrates, compiles in memory at ``--optimize-level`` (default O3) and costs the result. The
calibrated model goes to a temporary folder that is removed afterwards. Speed does not depend
on the data, so random calibration is enough; accuracy numbers from it would be meaningless.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hbtool.config import HbConfig
from hbtool.errors import InputError
from hbtool.costmodel.schedule import PerfResult, estimate

FAST_SAMPLES = 2

Progress = Callable[[str, int, int], None]


@dataclass
class PerfRun:
    result: PerfResult
    levels: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)


def runtime_types(header: dict[str, Any], input_type_rt: str | None) -> dict[str, str] | None:
    """``--input-type-rt``: the run-time type of every model input (None: what the artifact says).

    nv12 is an image format: an input that is not a 4-D, 3-channel image of even height and width
    (token ids, a feature vector) cannot arrive as nv12, and costing it as if it did would be an
    option accepted and then ignored, so it is refused, as the config's ``input_type_rt`` is."""
    if not input_type_rt:
        return None
    if input_type_rt == "nv12":
        for i in header.get("inputs", []):
            shape = [int(d) for d in i.get("shape", [])]
            nhwc = i.get("layout") == "NHWC"
            c, h, w = (shape[3], shape[1], shape[2]) if nhwc and len(shape) == 4 else (shape[1:4] + [0, 0, 0])[:3]
            if len(shape) != 4 or c != 3 or h % 2 or w % 2:
                raise InputError(f"--input-type-rt nv12: input '{i['name']}' is {'x'.join(map(str, shape)) or 'a scalar'} "
                                 f"({i.get('dtype', '?')}), not a 3-channel image of even height and width",
                                 "drop --input-type-rt (the input stays a feature map), or set input_type_rt per input in the config")
    return {i["name"]: input_type_rt for i in header.get("inputs", [])}


def perf_artifact(path: Path, core_num: int | None = None, input_type_rt: str | None = None,
                  board: str | None = None, model_name: str | None = None) -> PerfRun:
    """The estimate of a compiled artifact (``model_name``: one model of a packed artifact)."""
    from hbtool.compiler.artifact import read_artifact

    art = read_artifact(path, model_name)
    return PerfRun(estimate(art.header, core_num, runtime_input_types=runtime_types(art.header, input_type_rt), board=board))


def fast_config(model: Path, shapes: dict[str, tuple[int, ...]], march: str, work_dir: Path,
                calibration: dict[str, Any] | None = None) -> HbConfig:
    """The temporary config of the quick path (random calibration, everything it can on the BPU).

    ``calibration`` adds ``calibration_parameters`` keys that decide precision, not data (``optimization:
    set_all_nodes_int16``, ``auto_int16``): an estimate of a deployed model must be of the precision it
    was built with, since int16 doubles bytes and halves unit rates."""
    from hbtool.config.loader import config_from_dict
    from hbtool.config.values import format_shape

    model = Path(model)
    if not model.is_file():
        raise InputError(f"--model {model}: file not found", "check the path of the ONNX model")
    data: dict[str, Any] = {
        "model_parameters": {"onnx_model": str(model.resolve()), "march": march, "working_dir": str(work_dir),
                             "output_model_file_prefix": model.stem},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": FAST_SAMPLES, **(calibration or {})},
        "compiler_parameters": {"optimize_level": "O3"},
    }
    inputs = model_inputs(model)
    unknown = [n for n in shapes if n not in inputs]
    if unknown:
        raise InputError(f"--input-shape {unknown[0]}: the model has no input of that name",
                         f"use one of: {', '.join(inputs) or '(none)'}")
    names, dims = [], []
    for name, shape in inputs.items():
        shape = shapes.get(name, shape)
        if shape is None or any(d is None or d < 1 for d in shape):
            raise InputError(f"input '{name}' of {model.name} has a dynamic shape", f"fix it with --input-shape {name} 1x3x224x224 (its real shape)")
        names.append(name)
        dims.append(format_shape(tuple(int(d) for d in shape)))
    if names:
        data["input_parameters"] = {"input_name": ";".join(names), "input_shape": ";".join(dims),
                                    "input_type_train": ";".join(["featuremap"] * len(names)),
                                    "input_type_rt": ";".join(["featuremap"] * len(names)),
                                    "norm_type": ";".join(["no_preprocess"] * len(names))}
    return config_from_dict(data, base_dir=work_dir)


def model_inputs(model: Path) -> dict[str, tuple[int | None, ...] | None]:
    """The graph inputs of an ONNX file (initializers excluded): name -> shape (None for a dynamic dim)."""
    import onnx

    try:
        m = onnx.load(str(model), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise InputError(f"--model {model}: not a readable ONNX model ({type(exc).__name__})", "give an .onnx file") from None
    inits = {t.name for t in m.graph.initializer}
    out: dict[str, tuple[int | None, ...] | None] = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        out[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim) if t.HasField("shape") else None
    return out


def calibrate_to(cfg: HbConfig, path: Path, progress: Progress | None = None) -> Path:
    """Calibrate ``cfg`` and write only its calibrated model (what compile reads) to ``path``."""
    from hbtool.ir.onnx_export import to_onnx
    from hbtool.quant.calibrate import run_calibration
    from hbtool.utils.atomic import atomic_write_bytes

    # only the calibrated model is used: the errors of the integer model against float (an evaluation that
    # runs two models with every tensor exposed, the largest memory of a calibration) would be thrown away
    result = run_calibration(cfg, progress=progress, evaluate=False)
    atomic_write_bytes(path, to_onnx(result.calibrated, stage="calibrated").SerializeToString())
    return path


def perf_compiled(cfg: HbConfig, calibrated: Path, optimize_level: str | None, core_num: int | None,
                  compare: bool, progress: Progress | None = None, input_type_rt: str | None = None,
                  board: str | None = None) -> PerfRun:
    """Compile in memory, estimate; with ``compare`` also the level ablation."""
    from hbtool.compiler.compile import compile_model

    compiled = compile_model(cfg, optimize_level=optimize_level, calibrated=calibrated, progress=progress, serialize=False)
    cores = core_num if core_num is not None else cfg.compiler.core_num
    run = PerfRun(estimate(compiled.header, cores, program=compiled.program,
                           runtime_input_types=runtime_types(compiled.header, input_type_rt), board=board))
    if compare:
        from hbtool.perf.levels import compare_levels

        run.levels, _ = compare_levels(cfg, calibrated, cores, progress=progress, board=board)
    return run


def perf_fast(model: Path, shapes: dict[str, tuple[int, ...]], march: str, optimize_level: str | None,
              core_num: int | None, compare: bool, progress: Progress | None = None,
              input_type_rt: str | None = None, board: str | None = None) -> PerfRun:
    """The quick path (see the module docstring)."""
    from hbtool.march import load_march

    load_march(march, board)  # an unknown march or board is an error before minutes of calibration
    work = Path(tempfile.mkdtemp(prefix="hbtool_perf_"))
    try:
        cfg = fast_config(model, shapes, march, work)
        calibrated = calibrate_to(cfg, work / f"{cfg.model.output_model_file_prefix}_calibrated_model.onnx", progress)
        run = perf_compiled(cfg, calibrated, optimize_level or "O3", core_num, compare, progress, input_type_rt, board)
        run.notes.append(f"quick path: calibrated on {FAST_SAMPLES} random samples (calibration_type skip); "
                         "speed only, the accuracy of this calibration means nothing")
        return run
    finally:
        shutil.rmtree(work, ignore_errors=True)


def perf_config(cfg: HbConfig, optimize_level: str | None, core_num: int | None, compare: bool,
                progress: Progress | None = None, input_type_rt: str | None = None, board: str | None = None) -> PerfRun:
    """The config's calibrated model, compiled in memory (nothing is written)."""
    from hbtool.compiler.compile import calibrated_path
    from hbtool.march import load_march

    load_march(cfg.model.march, board)

    calibrated = calibrated_path(cfg)
    if not calibrated.exists():
        raise InputError(f"{calibrated} not found: the config's model is not calibrated yet",
                         "run hbtool calibrate -c cfg.yaml first, or use hbtool perf --model M.onnx --fast")
    return perf_compiled(cfg, calibrated, optimize_level, core_num, compare, progress, input_type_rt, board)
