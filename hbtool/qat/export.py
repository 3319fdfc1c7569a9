"""``<prefix>_qat_model.onnx``: the trained model in the calibrated-model format.

The file is what ``calibrate`` writes as ``*_calibrated_model.onnx``: the float graph (with
the trained weights and biases, bias correction folded in) and one ``HzCalibration`` node per
quantized tensor (the trained or PTQ activation scales) and per weight (its per-channel
scales, max-based, as QAT used them). So both consumers read it unchanged:

* ``compile`` (copy it to ``<prefix>_calibrated_model.onnx``, or call
  :func:`hbtool.compiler.source.lower_calibrated` on it) lowers it with the same function the
  QAT module executes, so the artifact computes the module's integers;
* ``calibration_type: load`` with ``onnx_model: <prefix>_qat_model.onnx`` takes the activation
  scales from it and re-derives the max-based weight scales, the same ones.
"""

from __future__ import annotations

import json
from pathlib import Path

from hbtool.ir.onnx_export import to_onnx
from hbtool.qat.module import QatModel
from hbtool.quant.calibrated_model import build_calibrated_graph
from hbtool.utils.atomic import atomic_write_bytes

QAT_METADATA_KEY = "hbtool.qat"


def qat_model_path(cfg) -> Path:
    return Path(cfg.model.working_dir) / f"{cfg.model.output_model_file_prefix}_qat_model.onnx"


def export_qat_model(model: QatModel, path: Path, info: dict | None = None) -> Path:
    """Write the trained model (see the module docstring); ``info`` goes to the metadata."""
    graph, plan, weight_scales = model.trained_graph()
    calibrated, _ = build_calibrated_graph(graph, plan, weight_scales)
    calibrated.metadata[QAT_METADATA_KEY] = json.dumps(info or {}, sort_keys=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, to_onnx(calibrated, stage="calibrated").SerializeToString())
    return path
