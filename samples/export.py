"""Export the standard sample architectures to ONNX with the TorchScript exporter.

    python -m samples.export --model swin_t --out benchmarks/_models [--opset 17] [--dynamic]
    python -m samples.export --model all --out benchmarks/_models

The files are large (25-110 MB) and are generated on demand, never committed
(``benchmarks/_models/`` is gitignored). The input is called ``input`` and the output
``logits``. ``--dynamic`` marks the batch dimension dynamic, and also height and width for the
fully convolutional models (ResNet50, EfficientNet-Lite4); the transformers have fixed token
grids (position embedding, precomputed window masks), so only their batch is dynamic. Dynamic
dimensions make the exporter keep the ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``
subgraphs that real exports are full of.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

from .architectures import BUILDERS

# models whose spatial size may vary at run time
_SPATIAL_DYNAMIC = {"resnet50", "efficientnet_lite4"}


def export_model(name: str, path: str | Path, opset: int = 17, dynamic: bool = False, seed: int = 0) -> Path:
    """Build sample architecture ``name`` (seeded random init) and export it to ``path``.

    Uses ``torch.onnx.export(..., dynamo=False)`` (the TorchScript exporter), opset 11-17.
    Returns the path written.
    """
    if name not in BUILDERS:
        raise KeyError(f"unknown sample model {name!r}; choose from {sorted(BUILDERS)}")
    if not 11 <= opset <= 17:
        raise ValueError(f"opset {opset} outside the supported range 11-17")
    builder, shape = BUILDERS[name]
    model = builder(seed=seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dynamic_axes = None
    if dynamic:
        axes = {0: "batch"}
        if name in _SPATIAL_DYNAMIC:
            axes.update({2: "height", 3: "width"})
        dynamic_axes = {"input": axes, "logits": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.randn(*shape),),
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
        )
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m samples.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, choices=sorted(BUILDERS) + ["all"])
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--dynamic", action="store_true", help="dynamic batch (and H/W where possible)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names = sorted(BUILDERS) if args.model == "all" else [args.model]
    for name in names:
        suffix = f"_op{args.opset}" + ("_dynamic" if args.dynamic else "")
        out = export_model(name, args.out / f"{name}{suffix}.onnx", args.opset, args.dynamic, args.seed)
        print(f"{name}: {out} ({out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
