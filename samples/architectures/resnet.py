"""ResNet-50 (He et al., 2015), the "v1.5" variant used by most frameworks.

Bottleneck blocks (1x1 -> 3x3 -> 1x1, expansion 4) with the stride on the 3x3 convolution,
stages of 3-4-6-3 blocks, 224x224 input, 1000 classes: 25,557,032 parameters, ~4.1 GMACs.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1) -> None:
        super().__init__()
        cout = width * self.expansion
        self.reduce = _conv_bn(cin, width, 1)
        self.spatial = _conv_bn(width, width, 3, stride=stride)
        self.expand = _conv_bn(width, cout, 1, relu=False)
        if stride != 1 or cin != cout:
            self.shortcut: nn.Module = _conv_bn(cin, cout, 1, stride=stride, relu=False)
        else:
            self.shortcut = nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(self.spatial(self.reduce(x)))
        return self.act(y + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, depths: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            _conv_bn(3, 64, 7, stride=2),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages = []
        cin = 64
        for i, depth in enumerate(depths):
            width = 64 * 2**i
            blocks = []
            for j in range(depth):
                stride = 2 if (j == 0 and i > 0) else 1
                blocks.append(Bottleneck(cin, width, stride))
                cin = width * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        self._init()

    def _init(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)
        # Random weights with eval-mode BN (identity statistics): damp each residual branch so
        # activations stay in a trained-network-like range through the 16 residual additions.
        for m in self.modules():
            if isinstance(m, Bottleneck):
                nn.init.constant_(m.expand[1].weight, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


INPUT_SHAPE = (1, 3, 224, 224)


def resnet50(num_classes: int = 1000, seed: int = 0) -> ResNet:
    """ResNet-50 with seeded random initialisation, in eval mode."""
    torch.manual_seed(seed)
    return ResNet((3, 4, 6, 3), num_classes).eval()
