"""The one config writer of the benchmarks: a YAML config from a dict, and the corpus models' config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_config(path: Path, cfg: dict[str, Any]) -> Path:
    """``cfg`` as YAML at ``path`` (keys in the order given, as a user would write them); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def corpus_config(spec, case: Path, cal_dirs: list[Path], calibration_type: str, cal_samples: int,
                  march: str = "bayes") -> dict[str, Any]:
    """The hbtool config of a corpus model (:class:`benchmarks.zoo.corpus.ModelSpec`): its input as the
    exporter left it, calibration from ``cal_dirs`` (one ``.npy`` folder per input), work folder in ``case``."""
    if spec.inputs == "text":
        inputs = {"input_name": "input_ids;attention_mask", "input_shape": f"1x{spec.shape[1]};1x{spec.shape[1]}",
                  "input_type_train": "featuremap;featuremap", "input_type_rt": "featuremap;featuremap",
                  "norm_type": "no_preprocess;no_preprocess"}
        cal_type = "int64;int64"
    elif spec.inputs == "features":     # audio, graphs, recurrent state: each input as the model takes it
        features = spec.features
        inputs = {"input_name": ";".join(f.name for f in features),
                  "input_shape": ";".join("x".join(map(str, f.shape)) if f.shape else "scalar" for f in features),
                  "input_type_train": ";".join("featuremap" for _ in features),
                  "input_type_rt": ";".join("featuremap" for _ in features),
                  "norm_type": ";".join("no_preprocess" for _ in features)}
        cal_type = ";".join(f.dtype for f in features)
    elif spec.inputs == "tokens":
        inputs = {"input_name": spec.input_name, "input_shape": "x".join(map(str, spec.shape)),
                  "input_type_train": "featuremap", "input_type_rt": "featuremap", "norm_type": "no_preprocess"}
        cal_type = "int64"
    else:
        identity = all(m == 0 for m in spec.mean) and all(s == 1 for s in spec.scale)
        shape = (spec.shape[0], *spec.shape[2:], spec.shape[1]) if spec.layout == "NHWC" else spec.shape
        inputs = {"input_name": spec.input_name, "input_shape": "x".join(map(str, shape)),
                  "input_type_train": spec.color, "input_type_rt": spec.color, "input_layout_train": spec.layout,
                  "norm_type": "no_preprocess" if identity else "data_mean_and_scale"}
        if not identity:
            inputs["mean_value"] = " ".join(f"{m:.6g}" for m in spec.mean)
            inputs["scale_value"] = " ".join(f"{s:.8g}" for s in spec.scale)
        cal_type = spec.dtype
    return {
        "model_parameters": {"onnx_model": str(spec.onnx_path), "march": march, "working_dir": str(case / "model_output"),
                             "output_model_file_prefix": spec.name},
        "input_parameters": inputs,
        "calibration_parameters": {"cal_data_dir": ";".join(map(str, cal_dirs)), "cal_data_type": cal_type,
                                   "preprocess_on": False, "calibration_type": calibration_type, "num_samples": cal_samples},
        "compiler_parameters": {"optimize_level": "O3", "compile_mode": "latency", "core_num": 1},
    }
