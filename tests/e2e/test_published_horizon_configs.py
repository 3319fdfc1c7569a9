"""Three of the RDK model zoo's published configs, unchanged but for the three paths, on tiny models.

The full table (21 configs, the architectures at their published sizes) is
benchmarks/horizon_configs.py; this default-run check keeps three of them green: UNet on the
RDK X3 (``mean_value: 0`` with ``data_scale``, ``preprocess_on`` images, ``jobs``), FasterNet on
the X5 (``remove_node_type`` of all five types, ``node_info`` naming a node inside the GELU the
import fuses) and EfficientFormer-L1 (``set_all_nodes_int16``, a Softmax ``node_info``).
"""

from __future__ import annotations


import numpy as np
import pytest
from click.testing import CliRunner

from hbtool.cli import main

from benchmarks import horizon_configs as hc
from benchmarks import horizon_models as hm

CASES = {
    "unet_resnet50_bernoulli2_512x512_nv12.yaml": (hm.unet, (1, 3, 64, 64)),
    "FasterNet_T0_config.yaml": (hm.fasternet, (1, 3, 64, 64)),
    "EfficientFormer_l1_config.yaml": (hm.efficientformer, (1, 3, 64, 64)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_published_config_runs_end_to_end_unchanged(tmp_path, name):
    import torch

    builder, shape = CASES[name]
    torch.manual_seed(0)
    model = hm.export(builder(), shape, tmp_path / "model.onnx")
    text = (hc.CONFIGS / name).read_text()
    cfg_text = hc.rewrite_paths(text, {"onnx_model": str(model), "cal_data_dir": str(tmp_path / "cal"),
                                       "working_dir": str(tmp_path / "work")})
    changed = [(a, b) for a, b in zip(text.splitlines(), cfg_text.splitlines()) if a != b]
    assert len(changed) == 3 and all(any(k in a for k in hc.PATH_KEYS) for a, _ in changed)
    hc.write_calibration(tmp_path / "cal", cfg_text, shape, 3)
    (tmp_path / name).write_text(cfg_text)
    r = CliRunner().invoke(main, ["makertbin", "-c", str(tmp_path / name)])
    assert r.exit_code == 0, r.output
    import yaml

    prefix = yaml.safe_load(text)["model_parameters"]["output_model_file_prefix"]
    sample = hm.calibration_images(1, shape, seed=7).astype(np.float32)
    res = hc._compare(tmp_path, tmp_path / "work", prefix, sample)
    assert res["artifact"].endswith(".bin")
    assert res["exact"] is True                      # the artifact's program == the quantized ONNX, bit for bit
    assert res["cosine"] > 0.99                      # and close to the float model
    import json

    info = json.loads((tmp_path / "work" / f"{prefix}_quant_info.json").read_text())
    assert info["float_fallbacks"] == []             # every BPU node has its integer kernel
