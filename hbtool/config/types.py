"""Typed config objects returned by ``load_config`` / ``config_from_dict``.

Field names equal the YAML key names (see ``schema.py``) except in ``InputSpec``, which gathers
one input's entries from the ``;``-separated lists under short names. ``loader.py`` checks at
import time that every group's fields and its key table agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hbtool.errors import ConfigError


@dataclass
class InputSpec:
    """One model input, gathered from the per-input lists."""

    name: str | None                      # None: the model's only input, name not given
    shape: tuple[int, ...] | None         # None: take the model's shape
    type_train: str                       # rgb | bgr | yuv444 | gray | featuremap
    type_rt: str                          # rgb | bgr | yuv444 | nv12 | gray | featuremap
    layout_train: str | None              # NCHW | NHWC | None (featuremap without layout)
    layout_rt: str | None                 # NCHW | NHWC | None (nv12, or featuremap without layout)
    norm_type: str                        # no_preprocess | data_mean | data_scale | data_mean_and_scale
    mean: tuple[float, ...] | None        # 1 value or one per channel
    scale: tuple[float, ...] | None
    cal_data_dir: Path | None
    cal_data_type: str                    # float32 | uint8 | int8 | int16 | int32 | int64
    space_and_range: str = "regular"      # regular | bt601_video
    source: str = "ddr"                   # ddr | pyramid | resizer (compiler input_source)

    @property
    def is_image(self) -> bool:
        return self.type_train != "featuremap"

    @property
    def channel_axis(self) -> int | None:
        """Axis of the channel dimension in the training layout, or None when unknown."""
        if self.layout_train == "NCHW":
            return 1
        if self.layout_train == "NHWC":
            return 3
        return None

    @property
    def label(self) -> str:
        return repr(self.name) if self.name is not None else "the input"


@dataclass
class ModelParams:
    onnx_model: Path | None
    march: str
    working_dir: Path
    output_model_file_prefix: str
    layer_out_dump: bool
    log_level: str
    output_nodes: list[str]
    remove_node_type: list[str]
    remove_node_name: list[str]
    # node -> {"ON": "BPU"|"CPU"|None, "InputType": "int8"|"int16"|None,
    #          "OutputType": ...|None, and "InputType<i>" when given}.
    # run_on_cpu, run_on_bpu and set_node_data_type are merged in.
    node_info: dict[str, dict[str, str | None]]
    set_node_data_type: dict[str, dict[str, str | None]]
    debug_mode: list[str]


@dataclass
class CalibrationParams:
    cal_data_dir: list[Path | None]       # per input (empty when no input has one)
    cal_data_type: list[str]              # per input, resolved
    preprocess_on: bool | None
    calibration_type: str
    max_percentile: float
    per_channel: bool
    run_on_cpu: list[str]
    run_on_bpu: list[str]
    enable_int16: bool
    optimization: list[str]
    auto_int16: bool
    num_samples: int | None
    batch_size: int
    weight_clip: str
    bias_correction: bool
    adaround: bool
    ptf: bool = False
    softmax_log2: bool = False
    smooth_quant: bool = False
    smooth_alpha: float = 0.5
    default_precision: str = "int8"

    @property
    def needs_data(self) -> bool:
        return self.calibration_type not in ("load", "skip")


@dataclass
class CompilerParams:
    compile_mode: str
    balance_factor: int
    debug: bool
    core_num: int
    optimize_level: str
    input_source: dict[str, str]          # resolved: input name (or "_default_value") -> source
    max_time_per_fc: int
    jobs: int | None
    advice: int
    abort_on_fail: bool
    rounding: str = "half_up"


@dataclass
class QatParams:
    epochs: int
    steps: int | None
    lr: float
    batch_size: int
    optimizer: str
    weight_decay: float
    train_data_dir: Path | None
    labels: Path | None
    loss: str
    distill_tensors: list[str]
    train_scales: bool
    augment: list[str]
    val_samples: int
    checkpoint_every: int
    seed: int
    device: str
    temperature: float = 1.0
    lr_schedule: str = "constant"


@dataclass
class DebugParams:
    metric: str
    report_dir: Path
    top_k: int
    num_samples: int
    data_dir: Path | None = None


@dataclass
class GateParams:
    """``gate_parameters``: None means the gate is not asked for."""

    data_dir: Path | None = None
    min_output_cosine: float | None = None
    min_metric: float | None = None
    max_metric_drop: float | None = None
    min_fps: float | None = None
    max_latency_ms: float | None = None
    max_cpu_nodes: int | None = None
    max_artifact_mb: float | None = None
    bit_exact_samples: int | None = None


@dataclass
class HbConfig:
    model: ModelParams
    inputs: list[InputSpec]
    calibration: CalibrationParams
    compiler: CompilerParams
    qat: QatParams
    debug: DebugParams
    gates: GateParams = field(default_factory=GateParams)
    input_batch: int = 1
    separate_batch: bool = False
    raw: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None            # the YAML file, when loaded from one
    base_dir: Path = field(default_factory=Path.cwd)

    @property
    def input_names(self) -> list[str | None]:
        return [spec.name for spec in self.inputs]

    def input_by_name(self, name: str) -> InputSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        known = ", ".join(repr(n) for n in self.input_names if n) or "none named"
        raise ConfigError(f"input_parameters.input_name: no input named {name!r} (inputs: {known})",
                          "use one of the names listed in input_parameters.input_name")

    def require_model(self) -> Path:
        """The model path; ConfigError when it is not set or the file does not exist."""
        path = self.model.onnx_model
        if path is None:
            raise ConfigError("model_parameters.onnx_model: no model given",
                              "set model_parameters.onnx_model in the YAML or pass --model")
        if not path.is_file():
            raise ConfigError(f"model_parameters.onnx_model: file not found: {path}",
                              "check the path; relative paths are taken from the YAML file's "
                              "folder")
        return path

    def require_calibration_data(self) -> list[Path]:
        """One existing calibration folder per input; ConfigError otherwise.

        Call it from stages that read calibration data (the loader does not require the
        folders, so that a config without them still works for checker or perf).
        """
        key = "calibration_parameters.cal_data_dir"
        if not self.inputs or any(spec.cal_data_dir is None for spec in self.inputs):
            missing = [spec.label for spec in self.inputs if spec.cal_data_dir is None]
            which = f" for {', '.join(missing)}" if missing else ""
            raise ConfigError(
                f"{key}: calibration_type {self.calibration.calibration_type} needs a calibration "
                f"data folder per input; none given{which}",
                "set cal_data_dir (';'-separated, one folder per input), or use calibration_type "
                "skip for a speed-only run")
        dirs: list[Path] = []
        for spec in self.inputs:
            assert spec.cal_data_dir is not None
            if not spec.cal_data_dir.is_dir():
                raise ConfigError(f"{key}: folder not found for {spec.label}: {spec.cal_data_dir}",
                                  "check the path; relative paths are taken from the YAML file's "
                                  "folder")
            dirs.append(spec.cal_data_dir)
        return dirs
