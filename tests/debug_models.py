"""Small models for the hbtool debug tests, exported with torch (outlier channels on purpose)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def tiny_transformer(path: Path, tokens: int = 16, dim: int = 32, blocks: int = 2, seed: int = 0) -> Path:
    """Pre-norm transformer blocks on a (1, tokens, dim) input whose residual stream has two huge channels.

    The outlier channels (the FQ-ViT case) make one int8 scale per LayerNorm input useless for
    the other channels, and sharp attention logits make an int8 Softmax input coarse: with
    ``auto_int16: false`` the output cosine drops well below 0.9.
    """
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, 2 * dim)
            self.fc2 = nn.Linear(2 * dim, dim)
            with torch.no_grad():
                self.qkv.weight[: 2 * dim] *= 12.0

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            a = torch.softmax(q @ k.transpose(-1, -2) / dim**0.5, dim=-1)
            x = x + self.proj(a @ v)
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(dim, dim)
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.ln = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, 10)
            gain = torch.ones(dim)
            gain[3], gain[17] = 50.0, 30.0
            self.register_buffer("gain", gain)
            with torch.no_grad():  # the task reads the ordinary channels only
                self.head.weight[:, [3, 17]] = 0.0
                self.head.bias.zero_()

        def forward(self, x):
            h = self.inp(x) * self.gain
            h = self.blocks(h)
            return self.head(self.ln(h))

    net = Net().eval()
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((1, tokens, dim)).astype(np.float32))
    torch.onnx.export(net, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    return Path(path)


def write_config(tmp: Path, model: Path, shape: str, extra_cal: dict | None = None, debug: dict | None = None,
                 node_info: dict | None = None, samples: int = 16) -> Path:
    import yaml

    cfg = {
        "model_parameters": {"onnx_model": str(model), "working_dir": str(tmp / "wd"), "output_model_file_prefix": "m",
                             **({"node_info": node_info} if node_info else {})},
        "input_parameters": {"input_name": "x", "input_shape": shape, "input_type_train": "featuremap",
                             "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": samples, **(extra_cal or {})},
        "compiler_parameters": {"optimize_level": "O1"},
        **({"debug_parameters": debug} if debug else {}),
    }
    path = tmp / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def all_int8_session(tmp: Path, samples: int = 8):
    """The tests' transformer calibrated all-int8 (``auto_int16: false``) as a debug session ranked by cosine on
    ``samples`` samples: the model the search, pricing and ranking tests share."""
    from hbtool.config import load_config
    from hbtool.debug.metrics_hook import resolve_metric
    from hbtool.debug.session import open_session

    cfg = load_config(write_config(tmp, tiny_transformer(tmp / "m.onnx"), "1x16x32", {"auto_int16": False}))
    return open_session(cfg, resolve_metric("cosine", None), samples)
