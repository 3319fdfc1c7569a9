"""Vision Transformer / DeiT (Dosovitskiy et al., 2020; Touvron et al., 2021).

Patch embedding by a stride-``patch`` convolution, a learned class token, a learned absolute
position embedding, ``depth`` pre-norm blocks (LayerNorm, multi-head self-attention with a fused
qkv projection, LayerNorm, GELU MLP), a final LayerNorm and a linear head on the class token.

``deit_tiny()`` is DeiT-Tiny: patch 16, dim 192, 12 layers, 3 heads, MLP 768, 224x224:
5,717,416 parameters, ~1.26 GMACs. The same classes build the tiny digits model.
"""

from __future__ import annotations

import torch
from torch import nn

from .swin import Mlp, _init_weights


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(
        self,
        img_size: int = 224,
        patch: int = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        dim: int = 768,
        depth: int = 12,
        heads: int = 12,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        num_patches = (img_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(_init_weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # B, N, C
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


INPUT_SHAPE = (1, 3, 224, 224)


def deit_tiny(num_classes: int = 1000, seed: int = 0) -> VisionTransformer:
    """DeiT-Tiny (patch 16, dim 192, 12 layers, 3 heads) with seeded random init, eval mode."""
    torch.manual_seed(seed)
    return VisionTransformer(dim=192, depth=12, heads=3, num_classes=num_classes).eval()
