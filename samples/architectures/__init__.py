"""Standard architectures in plain torch, with the papers' definitions and parameter counts.

``BUILDERS`` maps a model name to ``(builder, input_shape)``; every builder returns a
randomly initialised (seeded) model in eval mode.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from .efficientnet_lite import efficientnet_lite4
from .resnet import resnet50
from .swin import swin_t
from .vit import deit_tiny

BUILDERS: dict[str, tuple[Callable[..., nn.Module], tuple[int, int, int, int]]] = {
    "resnet50": (resnet50, (1, 3, 224, 224)),
    "efficientnet_lite4": (efficientnet_lite4, (1, 3, 300, 300)),
    "swin_t": (swin_t, (1, 3, 224, 224)),
    "deit_tiny": (deit_tiny, (1, 3, 224, 224)),
}

# parameter counts of the reference definitions (for checks)
PARAM_COUNTS = {
    "resnet50": 25_557_032,
    "efficientnet_lite4": 13_006_568,
    "swin_t": 28_288_354,
    "deit_tiny": 5_717_416,
}

__all__ = ["BUILDERS", "PARAM_COUNTS", "resnet50", "efficientnet_lite4", "swin_t", "deit_tiny"]
