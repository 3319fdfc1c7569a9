"""EfficientNet-Lite4 (the TF-Lite friendly EfficientNet variant, Google 2020).

Differences from EfficientNet-B*: no squeeze-and-excitation, ReLU6 instead of Swish, the stem
(32 channels) and head (1280 channels) are not scaled, and the repeats of the first and last
stage are not scaled. Lite4 uses width 1.4, depth 1.8, resolution 300, dropout 0.3:
about 13.0 M parameters and ~1.35 GMACs at 300x300.

Padding is symmetric ``k // 2`` (the PyTorch convention); the TF original uses "SAME" padding,
which only differs for the stride-2 convolutions and does not change any parameter count.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# (block, repeats, kernel, stride, expand ratio, out channels) for the B0 baseline
_BASE_STAGES = (
    ("ds", 1, 3, 1, 1, 16),
    ("ir", 2, 3, 2, 6, 24),
    ("ir", 2, 5, 2, 6, 40),
    ("ir", 3, 3, 2, 6, 80),
    ("ir", 3, 5, 1, 6, 112),
    ("ir", 4, 5, 2, 6, 192),
    ("ir", 1, 3, 1, 6, 320),
)


def round_channels(c: float, multiplier: float, divisor: int = 8) -> int:
    """Scale a channel count and round it to a multiple of ``divisor`` (never down by >10%)."""
    c = c * multiplier
    rounded = max(divisor, int(c + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * c:
        rounded += divisor
    return rounded


def _conv_bn_act(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class DepthwiseSeparable(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int) -> None:
        super().__init__()
        self.dw = _conv_bn_act(cin, cin, k, stride, groups=cin)
        self.pw = _conv_bn_act(cin, cout, 1, act=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pw(self.dw(x))
        return x + y if self.residual else y


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.expand = _conv_bn_act(cin, mid, 1)
        self.dw = _conv_bn_act(mid, mid, k, stride, groups=mid)
        self.project = _conv_bn_act(mid, cout, 1, act=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.dw(self.expand(x)))
        return x + y if self.residual else y


class EfficientNetLite(nn.Module):
    def __init__(
        self,
        width: float,
        depth: float,
        dropout: float = 0.2,
        num_classes: int = 1000,
        stem: int = 32,
        head: int = 1280,
    ) -> None:
        super().__init__()
        self.stem = _conv_bn_act(3, stem, 3, stride=2)
        blocks: list[nn.Module] = []
        cin = stem
        last = len(_BASE_STAGES) - 1
        for i, (kind, repeats, k, stride, expand, cout) in enumerate(_BASE_STAGES):
            cout = round_channels(cout, width)
            if 0 < i < last:  # Lite: first and last stage keep their repeats
                repeats = int(math.ceil(repeats * depth))
            for j in range(repeats):
                s = stride if j == 0 else 1
                if kind == "ds":
                    blocks.append(DepthwiseSeparable(cin, cout, k, s))
                else:
                    blocks.append(InvertedResidual(cin, cout, k, s, expand))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = _conv_bn_act(cin, head, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(head, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.uniform_(m.weight, -1.0 / math.sqrt(head), 1.0 / math.sqrt(head))
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        x = torch.flatten(self.pool(x), 1)
        return self.classifier(self.dropout(x))


INPUT_SHAPE = (1, 3, 300, 300)


def efficientnet_lite4(num_classes: int = 1000, seed: int = 0) -> EfficientNetLite:
    """EfficientNet-Lite4 (width 1.4, depth 1.8, 300x300) with seeded random init, eval mode."""
    torch.manual_seed(seed)
    return EfficientNetLite(width=1.4, depth=1.8, dropout=0.3, num_classes=num_classes).eval()
