"""Swin Transformer (Liu et al., 2021), written the way the reference implementation is.

Tokens are kept as ``(B, L, C)``; every block reshapes them to ``(B, H, W, C)``, optionally
shifts them with ``torch.roll``, cuts them into ``window x window`` windows with the usual
``view -> permute -> contiguous -> view`` sequence, runs multi-head self-attention inside each
window with a learned relative position bias (and, for shifted windows, an additive attention
mask that keeps tokens from different image regions apart), and reverses the partition and the
roll. Stages are joined by patch merging (2x2 neighbourhood concatenation, LayerNorm, linear
4C -> 2C). GELU MLPs, pre-norm LayerNorm.

``swin_t()`` is Swin-T: patch 4, embed 96, depths 2-2-6-2, heads 3-6-12-24, window 7, 224x224:
28,288,354 parameters, ~4.5 GMACs. The same classes build the tiny digits model in
``samples.tiny``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """(B, H, W, C) -> (B * H/window * W/window, window, window, C)."""
    B, H, W, C = x.shape
    x = x.view(B, H // window, window, W // window, window, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window, window, C)


def window_reverse(windows: torch.Tensor, window: int, H: int, W: int) -> torch.Tensor:
    """(B * H/window * W/window, window, window, C) -> (B, H, W, C)."""
    C = windows.shape[-1]
    x = windows.view(-1, H // window, W // window, window, window, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)


def relative_position_index(window: int) -> torch.Tensor:
    """(window^2, window^2) index into the (2*window-1)^2 relative-position bias table."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij"))
    coords = coords.flatten(1)  # 2, N
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)  # N, N, 2
    rel = rel + (window - 1)
    return rel[:, :, 0] * (2 * window - 1) + rel[:, :, 1]


def shifted_window_mask(H: int, W: int, window: int, shift: int) -> torch.Tensor:
    """(nW, window^2, window^2) additive mask: 0 inside a region, -100 across regions."""
    img = torch.zeros(1, H, W, 1)
    cuts = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    region = 0
    for hs in cuts:
        for ws in cuts:
            img[:, hs, ws, :] = region
            region += 1
    win = window_partition(img, window).view(-1, window * window)
    mask = win.unsqueeze(1) - win.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, window: int, heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.dim, self.window, self.heads = dim, window, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        self.register_buffer("relative_position_index", relative_position_index(window), persistent=False)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        bias = bias.view(N, N, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, N, N)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SwinBlock(nn.Module):
    def __init__(
        self, dim: int, resolution: tuple[int, int], heads: int, window: int, shift: int, mlp_ratio: float = 4.0
    ) -> None:
        super().__init__()
        self.dim, self.resolution = dim, resolution
        if min(resolution) <= window:  # the window covers the whole map: no shifting
            window, shift = min(resolution), 0
        self.window, self.shift = window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        if shift > 0:
            self.register_buffer("attn_mask", shifted_window_mask(*resolution, window, shift), persistent=False)
        else:
            self.attn_mask = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H, W = self.resolution
        B, L, C = x.shape
        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        if self.shift > 0:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = window_partition(x, self.window).view(-1, self.window * self.window, C)
        windows = self.attn(windows, mask=self.attn_mask)
        x = window_reverse(windows.view(-1, self.window, self.window, C), self.window, H, W)
        if self.shift > 0:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = shortcut + x.view(B, H * W, C)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int, resolution: tuple[int, int]) -> None:
        super().__init__()
        self.resolution = resolution
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        H, W = self.resolution
        B, L, C = x.shape
        x = x.view(B, H, W, C)
        x0 = x[:, 0::2, 0::2, :]
        x1 = x[:, 1::2, 0::2, :]
        x2 = x[:, 0::2, 1::2, :]
        x3 = x[:, 1::2, 1::2, :]
        x = torch.cat([x0, x1, x2, x3], -1).view(B, -1, 4 * C)
        return self.reduction(self.norm(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, in_chans: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x).flatten(2).transpose(1, 2)  # B, L, C
        return self.norm(x)


class SwinTransformer(nn.Module):
    def __init__(
        self,
        img_size: int = 224,
        patch: int = 4,
        in_chans: int = 3,
        num_classes: int = 1000,
        embed_dim: int = 96,
        depths: tuple[int, ...] = (2, 2, 6, 2),
        heads: tuple[int, ...] = (3, 6, 12, 24),
        window: int = 7,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(patch, in_chans, embed_dim)
        res = img_size // patch
        dim = embed_dim
        stages: list[nn.Module] = []
        for i, (depth, h) in enumerate(zip(depths, heads)):
            blocks: list[nn.Module] = [
                SwinBlock(dim, (res, res), h, window, shift=0 if j % 2 == 0 else window // 2, mlp_ratio=mlp_ratio)
                for j in range(depth)
            ]
            if i < len(depths) - 1:
                blocks.append(PatchMerging(dim, (res, res)))
                res //= 2
                dim *= 2
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        self.num_features = dim
        self.apply(_init_weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.layers(self.patch_embed(x)))  # B, L, C
        x = x.mean(dim=1)
        return self.head(x)


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


INPUT_SHAPE = (1, 3, 224, 224)


def swin_t(num_classes: int = 1000, seed: int = 0) -> SwinTransformer:
    """Swin-T (patch 4, dim 96, depths 2-2-6-2, heads 3-6-12-24, window 7) with seeded init."""
    torch.manual_seed(seed)
    return SwinTransformer(num_classes=num_classes).eval()
