"""The three tiny digits classifiers (they take normalised 1x3x32x32 input, 10 logits out)."""

from __future__ import annotations

import torch
from torch import nn

from ..architectures.swin import SwinTransformer
from ..architectures.vit import VisionTransformer


def _conv_bn_relu(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class TinyCNN(nn.Module):
    """Conv-BN-ReLU x5 with two max-pools, global average pooling, a linear head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            *_conv_bn_relu(3, 16),
            *_conv_bn_relu(16, 16),
            nn.MaxPool2d(2),  # 16x16
            *_conv_bn_relu(16, 32),
            *_conv_bn_relu(32, 32),
            nn.MaxPool2d(2),  # 8x8
            *_conv_bn_relu(32, 64),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def tiny_cnn() -> nn.Module:
    return TinyCNN()


def tiny_swin() -> nn.Module:
    """Swin-style: patch 4 (8x8 tokens, dim 48), stage 1 two blocks with 4x4 windows (the second
    shifted by 2 with torch.roll and the region attention mask), patch merging to 4x4 x 96,
    stage 2 two blocks whose single 4x4 window covers the map (so, as in Swin, no shift there),
    relative position bias, LayerNorm, GELU MLP, mean pooling, linear head."""
    return SwinTransformer(
        img_size=32, patch=4, in_chans=3, num_classes=10, embed_dim=48,
        depths=(2, 2), heads=(3, 6), window=4, mlp_ratio=2.0,
    )


def tiny_vit() -> nn.Module:
    """ViT-style: patch 4 (64 tokens + cls), dim 64, 4 blocks, 4 heads, MLP 128."""
    return VisionTransformer(img_size=32, patch=4, in_chans=3, num_classes=10, dim=64, depth=4, heads=4, mlp_ratio=2.0)


BUILDERS = {"tiny_cnn": tiny_cnn, "tiny_swin": tiny_swin, "tiny_vit": tiny_vit}
