"""Quantization-aware training: the integer program as a trainable torch module.

* ``hbtool qat -c cfg.yaml`` (:func:`hbtool.qat.train.run_qat`): PTQ, label-free distillation
  from the float model (or cross entropy with labels), ``<prefix>_qat_model.onnx``.
* :func:`prepare` / :func:`convert`: the same module for a training loop of one's own.

See docs/qat.md; :mod:`hbtool.qat.module` says how the forward pass stays bit-exact with the
compiled artifact while gradients flow.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hbtool.qat.module import FloatGraphModule, QatModel

__all__ = ["QatModel", "FloatGraphModule", "prepare", "convert"]


def _as_samples(example_inputs: Any) -> list[list[np.ndarray]]:
    """example inputs -> samples, each a list of arrays (one per model input, batch axis first)."""
    def arr(x):
        return np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x)

    if isinstance(example_inputs, (list,)) and example_inputs and isinstance(example_inputs[0], (list, tuple)):
        return [[arr(x) for x in s] for s in example_inputs]
    if isinstance(example_inputs, tuple):
        example_inputs = [example_inputs]
        return [[arr(x) for x in s] for s in example_inputs]
    if isinstance(example_inputs, list):
        return [[arr(x)] for x in example_inputs]
    return [[arr(example_inputs)]]


def prepare(model: Any, example_inputs: Any, config: Mapping[str, Any] | None = None, work_dir: str | Path | None = None) -> QatModel:
    """A fake-quant (in fact: exact integer) torch model of ``model`` for one's own training loop.

    ``model``: an ONNX file, an ``onnx.ModelProto`` or a ``torch.nn.Module`` (exported with
    ``torch.onnx.export`` on the first example). ``example_inputs``: calibration samples, a
    tensor/array, a tuple of them (one per input), or a list of such samples (each with a
    batch axis of 1). ``config``: hbtool config groups (dict) merged over the defaults
    (featuremap inputs, no preprocessing, ``calibration_type: default``). The returned
    module takes and returns float tensors; pass it to :func:`convert` after training.
    """
    import onnx

    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration

    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="hbtool_qat_"))
    work.mkdir(parents=True, exist_ok=True)
    samples = _as_samples(example_inputs)
    path = work / "model.onnx"
    if isinstance(model, (str, Path)):
        path = Path(model)
    elif isinstance(model, onnx.ModelProto):
        onnx.save(model, path)
    else:
        import torch

        first = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in samples[0])
        model.eval()
        torch.onnx.export(model, first, str(path), opset_version=17, dynamo=False)
    proto = onnx.load(str(path), load_external_data=False)
    init = {i.name for i in proto.graph.initializer}
    input_names = [i.name for i in proto.graph.input if i.name not in init]
    shapes = ";".join("x".join(str(v) for v in samples[0][k].shape) for k in range(len(input_names)))
    raw: dict[str, Any] = {
        "model_parameters": {"onnx_model": str(path), "working_dir": str(work / "out"), "output_model_file_prefix": "model"},
        "input_parameters": {"input_name": ";".join(input_names), "input_shape": shapes,
                             "input_type_train": ";".join(["featuremap"] * len(input_names)),
                             "input_type_rt": ";".join(["featuremap"] * len(input_names)),
                             "norm_type": ";".join(["no_preprocess"] * len(input_names))},
        "calibration_parameters": {"calibration_type": "default"},
    }
    for group, values in (config or {}).items():
        raw.setdefault(group, {}).update(values)
    cfg = config_from_dict(raw, base_dir=work)
    # the caller's arrays go to calibration as they are (what hbtool.api.calibrate(cfg, data=...) does), no .npy folders
    given = None if raw["calibration_parameters"].get("cal_data_dir") else [dict(zip(input_names, s)) for s in samples]
    calibration = run_calibration(cfg, samples=given)
    from hbtool.qat.train import build_model

    qat = build_model(cfg, calibration)
    qat.hb_config = cfg
    qat.calibration = calibration
    return qat


def convert(model: QatModel, path: str | Path | None = None) -> Path:
    """Write the trained ``model`` as ``<prefix>_qat_model.onnx`` (or ``path``) for compile / ``calibration_type: load``."""
    from hbtool.qat.export import export_qat_model, qat_model_path

    cfg = getattr(model, "hb_config", None)
    if path is None:
        if cfg is None:
            raise ValueError("convert: give a path (the model was not made by prepare)")
        path = qat_model_path(cfg)
    return export_qat_model(model, Path(path), {"source": "hbtool.qat.prepare"})
