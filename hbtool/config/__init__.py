"""The YAML config: key table (schema), defaults, validation and typed values.

    from hbtool.config import load_config
    cfg = load_config("cfg.yaml")      # HbConfig; ConfigError naming the key path on any problem
    cfg.model.onnx_model, cfg.inputs[0].shape, cfg.calibration.calibration_type, cfg.raw
"""

from hbtool.config.loader import config_from_dict, load_config, to_raw
from hbtool.config.schema import GROUPS, Key, all_keys
from hbtool.config.types import (CalibrationParams, CompilerParams, DebugParams, HbConfig,
                                 InputSpec, ModelParams, QatParams)
from hbtool.config.values import format_shape, parse_floats, parse_shape

__all__ = [
    "load_config", "config_from_dict", "to_raw",
    "HbConfig", "InputSpec", "ModelParams", "CalibrationParams", "CompilerParams", "QatParams",
    "DebugParams",
    "GROUPS", "Key", "all_keys",
    "parse_shape", "format_shape", "parse_floats",
]
