"""Stand-in models for the RDK model zoo configs in tests/data/horizon_configs/.

Each builder is the named architecture in plain torch, narrow (a few channels) so a config runs
in seconds to minutes, with the module names of the reference implementation (timm, ultralytics)
so that the node names a config's ``node_info`` uses (``/model.10/m/m.0/attn/Softmax``,
``/stages/stages.3/downsample/downsample.0/Pow``, ...) exist in the export. Exported at opset
11 with the TorchScript exporter, as the zoo's conversion scripts do (LayerNorm and GELU come
out decomposed, as in the files the configs were written for). Weights are seeded random.

Where the project's corpus holds the real exported model (timm MobileNetV3 / EfficientNet,
PP-OCR det/rec) that model is used instead, with its input fixed to the config's size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ZOO = Path(__file__).resolve().parent / "_models" / "zoo"


def _torch():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    return torch, nn, F


def export(model, shape, path: Path) -> Path:
    torch, _, _ = _torch()
    model.eval()
    x = torch.rand(*shape) * 2 - 1
    torch.onnx.export(model, (x,), str(path), opset_version=11, input_names=["images"], dynamo=False,
                      do_constant_folding=True)
    return path


def _blocks():
    torch, nn, F = _torch()

    class Conv(nn.Module):  # ultralytics Conv: conv + bn + SiLU
        def __init__(self, c1, c2, k=1, s=1, g=1, act=True):
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, k, s, k // 2, groups=g, bias=False)
            self.bn = nn.BatchNorm2d(c2)
            self.act = nn.SiLU() if act else nn.Identity()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.cv1, self.cv2 = Conv(c, c, 3), Conv(c, c, 3)

        def forward(self, x):
            return x + self.cv2(self.cv1(x))

    class C2f(nn.Module):
        def __init__(self, c1, c2, n=1):
            super().__init__()
            self.c = c2 // 2
            self.cv1 = Conv(c1, 2 * self.c)
            self.cv2 = Conv((2 + n) * self.c, c2)
            self.m = nn.ModuleList(Bottleneck(self.c) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).chunk(2, 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, c1, c2):
            super().__init__()
            self.cv1, self.cv2 = Conv(c1, c1 // 2), Conv(c1 * 2, c2)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            x = self.cv1(x)
            y1 = self.m(x)
            y2 = self.m(y1)
            return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

    class Attention(nn.Module):  # ultralytics Attention (PSA / C2PSA)
        def __init__(self, dim, num_heads=1, attn_ratio=0.5):
            super().__init__()
            self.num_heads, self.head_dim = num_heads, dim // num_heads
            self.key_dim = int(self.head_dim * attn_ratio)
            self.scale = self.key_dim ** -0.5
            h = dim + self.key_dim * num_heads * 2
            self.qkv, self.proj, self.pe = Conv(dim, h, act=False), Conv(dim, dim, act=False), Conv(dim, dim, 3, g=dim, act=False)

        def forward(self, x):
            b, c, hh, ww = x.shape
            n = hh * ww
            q, k, v = self.qkv(x).view(b, self.num_heads, self.key_dim * 2 + self.head_dim, n).split(
                [self.key_dim, self.key_dim, self.head_dim], dim=2)
            attn = (q.transpose(-2, -1) @ k) * self.scale
            attn = attn.softmax(dim=-1)
            x = (v @ attn.transpose(-2, -1)).view(b, c, hh, ww) + self.pe(v.reshape(b, c, hh, ww))
            return self.proj(x)

    class PSA(nn.Module):  # YOLOv10 model.10: .attn
        def __init__(self, c):
            super().__init__()
            self.c = c // 2
            self.cv1, self.cv2 = Conv(c, 2 * self.c), Conv(2 * self.c, c)
            self.attn = Attention(self.c)
            self.ffn = nn.Sequential(Conv(self.c, self.c * 2), Conv(self.c * 2, self.c, act=False))

        def forward(self, x):
            a, b = self.cv1(x).split((self.c, self.c), dim=1)
            b = b + self.attn(b)
            b = b + self.ffn(b)
            return self.cv2(torch.cat((a, b), 1))

    class PSABlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.attn = Attention(c)
            self.ffn = nn.Sequential(Conv(c, c * 2), Conv(c * 2, c, act=False))

        def forward(self, x):
            x = x + self.attn(x)
            return x + self.ffn(x)

    class C2PSA(nn.Module):  # YOLO11 model.10: .m[0].attn
        def __init__(self, c):
            super().__init__()
            self.c = c // 2
            self.cv1, self.cv2 = Conv(c, 2 * self.c), Conv(2 * self.c, c)
            self.m = nn.Sequential(PSABlock(self.c))

        def forward(self, x):
            a, b = self.cv1(x).split((self.c, self.c), dim=1)
            return self.cv2(torch.cat((a, self.m(b)), 1))

    return dict(Conv=Conv, C2f=C2f, SPPF=SPPF, PSA=PSA, C2PSA=C2PSA, Attention=Attention)


def yolo(version: str, task: str = "detect", nc: int = 80):
    """YOLOv8 / v10 / 11 (``model.0`` .. ``model.10`` backbone, RDK-style per-scale outputs)."""
    torch, nn, F = _torch()
    B = _blocks()
    Conv, C2f = B["Conv"], B["C2f"]
    w = (8, 16, 32, 64, 64)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            tail = {"v8": nn.Identity(), "v10": B["PSA"](w[4]), "v11": B["C2PSA"](w[4])}[version]
            self.model = nn.ModuleList([
                Conv(3, w[0], 3, 2), Conv(w[0], w[1], 3, 2), C2f(w[1], w[1]), Conv(w[1], w[2], 3, 2), C2f(w[2], w[2]),
                Conv(w[2], w[3], 3, 2), C2f(w[3], w[3]), Conv(w[3], w[4], 3, 2), C2f(w[4], w[4]), B["SPPF"](w[4], w[4]), tail,
            ])
            chans = (w[2], w[3], w[4])
            self.cls = nn.ModuleList(nn.Sequential(Conv(c, 16, 3), nn.Conv2d(16, nc, 1)) for c in chans)
            self.box = nn.ModuleList(nn.Sequential(Conv(c, 16, 3), nn.Conv2d(16, 64, 1)) for c in chans)
            extra = {"seg": 32, "pose": 51}.get(task)
            self.extra = nn.ModuleList(nn.Sequential(Conv(c, 16, 3), nn.Conv2d(16, extra, 1)) for c in chans) if extra else None
            self.proto = nn.Sequential(Conv(w[2], 16, 3), nn.Conv2d(16, 32, 1)) if task == "seg" else None

        def forward(self, x):
            feats = []
            for i, m in enumerate(self.model):
                x = m(x)
                if i in (4, 6):
                    feats.append(x)
            p5 = x
            p4 = feats[1] + F.interpolate(p5, scale_factor=2.0, mode="nearest")
            p3 = feats[0] + F.interpolate(p4[:, : feats[0].shape[1]], scale_factor=2.0, mode="nearest")
            outs = []
            for k, p in enumerate((p3, p4, p5)):
                outs += [self.cls[k](p), self.box[k](p)]
                if self.extra is not None:
                    outs.append(self.extra[k](p))
            if self.proto is not None:
                outs.append(self.proto(p3))
            return tuple(outs)

    return Model()


def unet(classes: int = 21):
    torch, nn, F = _torch()

    def block(c1, c2):
        return nn.Sequential(nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(),
                             nn.Conv2d(c2, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            w = (8, 16, 32, 32, 32)
            self.stem = nn.Conv2d(3, w[0], 3, 2, 1)
            self.enc = nn.ModuleList([block(w[0], w[0])] + [block(w[i - 1], w[i]) for i in range(1, 5)])
            self.dec = nn.ModuleList(block(w[i] + w[i - 1], w[i - 1]) for i in range(4, 0, -1))
            self.final = nn.Conv2d(w[0], classes, 1)

        def forward(self, x):
            x = self.stem(x)
            skips = []
            for i, e in enumerate(self.enc):
                x = e(x if i == 0 else F.max_pool2d(x, 2))
                skips.append(x)
            for d, s in zip(self.dec, reversed(skips[:-1])):
                x = d(torch.cat([F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False), s], 1))
            return F.interpolate(self.final(x), scale_factor=2.0, mode="bilinear", align_corners=False)

    return UNet()


class _Norms:
    """LayerNorm over channels (timm LayerNorm2d) and the channels-last one, both exported decomposed."""

    @staticmethod
    def make():
        torch, nn, F = _torch()

        class LayerNorm2d(nn.LayerNorm):
            def forward(self, x):
                return F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps).permute(0, 3, 1, 2)

        return LayerNorm2d


def convnext(dims=(8, 16, 24, 32), depths=(2, 2, 6, 2), classes=1000):
    """timm ConvNeXt (femto/atto layout): stem, stages[i].downsample = [LayerNorm2d, Conv], blocks."""
    torch, nn, F = _torch()
    LayerNorm2d = _Norms.make()

    class Mlp(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv_dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.norm = nn.LayerNorm(c)
            self.mlp = Mlp(c)
            self.gamma = nn.Parameter(torch.full((c,), 0.5))

        def forward(self, x):
            y = self.norm(self.conv_dw(x).permute(0, 2, 3, 1))
            y = self.mlp(y) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    class Stage(nn.Module):
        def __init__(self, c1, c2, depth, first):
            super().__init__()
            self.downsample = nn.Identity() if first else nn.Sequential(LayerNorm2d(c1), nn.Conv2d(c1, c2, 2, 2))
            self.blocks = nn.Sequential(*[Block(c2) for _ in range(depth)])

        def forward(self, x):
            return self.blocks(self.downsample(x))

    class ConvNeXt(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0]))
            self.stages = nn.Sequential(*[Stage(dims[max(i - 1, 0)], dims[i], depths[i], i == 0) for i in range(4)])
            self.head = nn.Linear(dims[-1], classes)

        def forward(self, x):
            return self.head(self.stages(self.stem(x)).mean((2, 3)))

    return ConvNeXt()


def _attention_module(dim, heads=2):
    torch, nn, F = _torch()

    class Attention(nn.Module):  # token mixer on (B, N, C)
        def __init__(self):
            super().__init__()
            self.heads, self.scale = heads, (dim // heads) ** -0.5
            self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

        def forward(self, x):
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            attn = (q @ k.transpose(-2, -1)) * self.scale
            attn = attn.softmax(dim=-1)
            return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))

    return Attention()


def efficientformer(depths=(1, 1, 1, 4), dims=(8, 16, 24, 32), classes=1000):
    """timm EfficientFormer (L1 layout): Meta4D pooling blocks, then Flat and Meta3D attention in stage 3."""
    torch, nn, F = _torch()

    class Meta4D(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.token_mixer = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
            self.mlp = nn.Sequential(nn.Conv2d(c, 2 * c, 1), nn.GELU(), nn.Conv2d(2 * c, c, 1))

        def forward(self, x):
            x = x + (self.token_mixer(x) - x)
            return x + self.mlp(x)

    class Flat(nn.Module):
        def forward(self, x):
            return x.flatten(2).transpose(1, 2)

    class Meta3D(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.token_mixer = _attention_module(c)
            self.mlp = nn.Sequential(nn.Linear(c, 2 * c), nn.GELU(), nn.Linear(2 * c, c))

        def forward(self, x):
            x = x + self.token_mixer(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class Stage(nn.Module):
        def __init__(self, c1, c2, depth, last):
            super().__init__()
            self.downsample = nn.Identity() if c1 == c2 else nn.Sequential(nn.Conv2d(c1, c2, 3, 2, 1), nn.BatchNorm2d(c2))
            blocks = [Meta4D(c2) for _ in range(depth - 1 if last else depth)]
            if last:
                blocks += [Flat(), Meta3D(c2)]
            self.blocks = nn.Sequential(*blocks)

        def forward(self, x):
            return self.blocks(self.downsample(x))

    class EfficientFormer(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 3, 2, 1), nn.BatchNorm2d(dims[0]), nn.ReLU(),
                                      nn.Conv2d(dims[0], dims[0], 3, 2, 1), nn.BatchNorm2d(dims[0]), nn.ReLU())
            self.stages = nn.Sequential(*[Stage(dims[max(i - 1, 0)], dims[i], depths[i], i == 3) for i in range(4)])
            self.norm, self.head = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], classes)

        def forward(self, x):
            return self.head(self.norm(self.stages(self.stem(x))).mean(1))

    return EfficientFormer()


def efficientformerv2(dims=(8, 16, 24, 32), depths=(1, 1, 6, 4), classes=1000):
    """timm EfficientFormerV2 (S0 layout): attention token mixers in the last blocks of stages 2 and 3,
    and an attention downsample into stage 3."""
    torch, nn, F = _torch()

    class Attention2d(nn.Module):
        def __init__(self, c, stride=1):
            super().__init__()
            self.stride = stride
            self.q = nn.Conv2d(c, c, 3 if stride > 1 else 1, stride, 1 if stride > 1 else 0)
            self.k, self.v, self.proj = nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1), nn.Conv2d(c, c, 1)
            self.scale = c ** -0.5

        def forward(self, x):
            b, c, h, w = x.shape
            q = self.q(x)
            ho, wo = q.shape[2], q.shape[3]
            q = q.flatten(2).transpose(1, 2)
            k, v = self.k(x).flatten(2), self.v(x).flatten(2).transpose(1, 2)
            attn = (q @ k) * self.scale
            attn = attn.softmax(dim=-1)
            return self.proj((attn @ v).transpose(1, 2).reshape(b, c, ho, wo))

    class Block(nn.Module):
        def __init__(self, c, attn):
            super().__init__()
            self.token_mixer = Attention2d(c) if attn else None
            self.mlp = nn.Sequential(nn.Conv2d(c, 2 * c, 1), nn.BatchNorm2d(2 * c), nn.GELU(),
                                     nn.Conv2d(2 * c, 2 * c, 3, 1, 1, groups=2 * c), nn.GELU(), nn.Conv2d(2 * c, c, 1))

        def forward(self, x):
            if self.token_mixer is not None:
                x = x + self.token_mixer(x)
            return x + self.mlp(x)

    class Downsample(nn.Module):
        def __init__(self, c1, c2, attn):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(c1, c2, 3, 2, 1), nn.BatchNorm2d(c2))
            self.attn = Attention2d(c1, stride=2) if attn else None
            self.attn_proj = nn.Conv2d(c1, c2, 1) if attn else None

        def forward(self, x):
            y = self.conv(x)
            if self.attn is not None:
                y = y + self.attn_proj(self.attn(x))
            return y

    class Stage(nn.Module):
        def __init__(self, i):
            super().__init__()
            c1, c2 = dims[max(i - 1, 0)], dims[i]
            self.downsample = nn.Identity() if i == 0 else Downsample(c1, c2, attn=i == 3)
            n = depths[i]
            n_attn = 2 if i >= 2 else 0
            self.blocks = nn.Sequential(*[Block(c2, attn=k >= n - n_attn) for k in range(n)])

        def forward(self, x):
            return self.blocks(self.downsample(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 3, 2, 1), nn.BatchNorm2d(dims[0]), nn.GELU(),
                                      nn.Conv2d(dims[0], dims[0], 3, 2, 1), nn.BatchNorm2d(dims[0]), nn.GELU())
            self.stages = nn.Sequential(*[Stage(i) for i in range(4)])
            self.head = nn.Linear(dims[-1], classes)

        def forward(self, x):
            return self.head(self.stages(self.stem(x)).mean((2, 3)))

    return Model()


def edgenext(dims=(8, 16, 24, 32), depths=(2, 2, 6, 2), classes=1000):
    """timm EdgeNeXt (xx_small layout): conv encoder blocks, the last block of stages 1-3 an SDTA block
    whose cross-covariance attention (``xca``) softmaxes over channels."""
    torch, nn, F = _torch()

    class XCA(nn.Module):
        def __init__(self, c, heads=2):
            super().__init__()
            self.heads = heads
            self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 4, 1)
            q, k, v = qkv[0], qkv[1], qkv[2]
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            attn = (q @ k.transpose(-2, -1)) * self.temperature
            attn = attn.softmax(dim=-1)
            return self.proj((attn @ v).permute(0, 3, 1, 2).reshape(b, n, c))

    class ConvBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv_dw = nn.Conv2d(c, c, 3, 1, 1, groups=c)
            self.norm = nn.LayerNorm(c)
            self.mlp = nn.Sequential(nn.Linear(c, 2 * c), nn.GELU(), nn.Linear(2 * c, c))

        def forward(self, x):
            y = self.mlp(self.norm(self.conv_dw(x).permute(0, 2, 3, 1)))
            return x + y.permute(0, 3, 1, 2)

    class SDTA(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv_dw = nn.Conv2d(c, c, 3, 1, 1, groups=c)
            self.norm_xca = nn.LayerNorm(c)
            self.xca = XCA(c)
            self.norm = nn.LayerNorm(c)
            self.mlp = nn.Sequential(nn.Linear(c, 2 * c), nn.GELU(), nn.Linear(2 * c, c))

        def forward(self, x):
            b, c, h, w = x.shape
            x = x + self.conv_dw(x)
            t = x.flatten(2).transpose(1, 2)
            t = t + self.xca(self.norm_xca(t))
            t = t + self.mlp(self.norm(t))
            return t.transpose(1, 2).reshape(b, c, h, w)

    class Stage(nn.Module):
        def __init__(self, i):
            super().__init__()
            c1, c2 = dims[max(i - 1, 0)], dims[i]
            self.downsample = nn.Identity() if i == 0 else nn.Conv2d(c1, c2, 2, 2)
            self.blocks = nn.Sequential(*[SDTA(c2) if (i > 0 and k == depths[i] - 1) else ConvBlock(c2) for k in range(depths[i])])

        def forward(self, x):
            return self.blocks(self.downsample(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, dims[0], 4, 4)
            self.stages = nn.Sequential(*[Stage(i) for i in range(4)])
            self.head = nn.Linear(dims[-1], classes)

        def forward(self, x):
            return self.head(self.stages(self.stem(x)).mean((2, 3)))

    return Model()


def fasternet(dims=(8, 16, 32, 64), depths=(1, 2, 2, 1), classes=1000):
    """FasterNet (T0 layout): partial 3x3 conv on a quarter of the channels, then mlp = [Conv, BN, GELU, Conv]."""
    torch, nn, F = _torch()

    class PConv(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c // 4
            self.partial_conv3 = nn.Conv2d(self.c, self.c, 3, 1, 1, bias=False)

        def forward(self, x):
            a, b = torch.split(x, [self.c, x.shape[1] - self.c], dim=1)
            return torch.cat((self.partial_conv3(a), b), 1)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.spatial_mixing = PConv(c)
            self.mlp = nn.Sequential(nn.Conv2d(c, 2 * c, 1, bias=False), nn.BatchNorm2d(2 * c), nn.GELU(), nn.Conv2d(2 * c, c, 1, bias=False))

        def forward(self, x):
            return x + self.mlp(self.spatial_mixing(x))

    class Stage(nn.Module):
        def __init__(self, c, depth):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(c) for _ in range(depth)])

        def forward(self, x):
            return self.blocks(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4, bias=False), nn.BatchNorm2d(dims[0]))
            stages = []
            for i in range(4):
                if i:
                    stages.append(nn.Sequential(nn.Conv2d(dims[i - 1], dims[i], 2, 2, bias=False), nn.BatchNorm2d(dims[i])))
                stages.append(Stage(dims[i], depths[i]))
            self.stages = nn.Sequential(*stages)
            self.head = nn.Linear(dims[-1], classes)

        def forward(self, x):
            return self.head(self.stages(self.patch_embed(x)).mean((2, 3)))

    return Model()


def mobilenetv4_small(classes=1000):
    """MobileNetV4 conv-small layout: conv stem, fused inverted bottlenecks, universal inverted bottlenecks."""
    torch, nn, F = _torch()

    def cbr(c1, c2, k=3, s=1, g=1, act=True):
        layers = [nn.Conv2d(c1, c2, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(c2)]
        return nn.Sequential(*layers, nn.ReLU()) if act else nn.Sequential(*layers)

    class UIB(nn.Module):
        def __init__(self, c1, c2, s, e=4):
            super().__init__()
            self.dw_start = cbr(c1, c1, 3, 1, c1, act=False)
            self.pw_exp = cbr(c1, c1 * e, 1)
            self.dw_mid = cbr(c1 * e, c1 * e, 3, s, c1 * e)
            self.pw_proj = cbr(c1 * e, c2, 1, act=False)
            self.res = s == 1 and c1 == c2

        def forward(self, x):
            y = self.pw_proj(self.dw_mid(self.pw_exp(self.dw_start(x))))
            return x + y if self.res else y

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_stem = cbr(3, 8, 3, 2)
            self.blocks = nn.Sequential(cbr(8, 8, 3, 2), cbr(8, 16, 3, 2), UIB(16, 24, 2), UIB(24, 24, 1), UIB(24, 32, 2), UIB(32, 32, 1))
            self.conv_head = cbr(32, 64, 1)
            self.classifier = nn.Linear(64, classes)

        def forward(self, x):
            return self.classifier(self.conv_head(self.blocks(self.conv_stem(x))).mean((2, 3)))

    return Model()


def fixed_input(src: Path, shape: tuple[int, ...], path: Path) -> Path:
    """A corpus ONNX model with its (dynamic) input fixed to ``shape`` (intermediate shapes dropped)."""
    import onnx

    m = onnx.load(str(src))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, shape):
        d.Clear()
        d.dim_value = int(v)
    del m.graph.value_info[:]
    onnx.save(m, str(path))
    return path


# config file -> (builder, input shape NCHW, what it stands for)
def _corpus(name: str) -> Path:
    return ZOO / name


STANDINS = {
    "yolov8_detect_nv12.yaml": ("YOLOv8n detect (narrow)", lambda: yolo("v8"), (1, 3, 640, 640)),
    "yolov8_detect_nchw.yaml": ("YOLOv8n detect (narrow)", lambda: yolo("v8"), (1, 3, 640, 640)),
    "yolov10_detect_bernoulli2_640x640_nv12.yaml": ("YOLOv10n detect (narrow)", lambda: yolo("v10"), (1, 3, 640, 640)),
    "yolov10_detect_bayese_640x640_nv12.yaml": ("YOLOv10n detect (narrow)", lambda: yolo("v10"), (1, 3, 640, 640)),
    "yolo11_detect_bayese_640x640_nv12.yaml": ("YOLO11n detect (narrow)", lambda: yolo("v11"), (1, 3, 640, 640)),
    "yolo11_detect_bayese_640x640_nchw.yaml": ("YOLO11n detect (narrow)", lambda: yolo("v11"), (1, 3, 640, 640)),
    "yolov8_instance_seg_bayese_640x640_nv12.yaml": ("YOLOv8 seg (narrow)", lambda: yolo("v8", "seg"), (1, 3, 640, 640)),
    "yolo11_pose_bayese_640x640_nchw.yaml": ("YOLO11n pose (narrow)", lambda: yolo("v11", "pose", nc=1), (1, 3, 640, 640)),
    "yolo11_pose_bayese_640x640_nv12.yaml": ("YOLO11n pose (narrow)", lambda: yolo("v11", "pose", nc=1), (1, 3, 640, 640)),
    "unet_resnet50_bernoulli2_512x512_nv12.yaml": ("UNet (narrow)", unet, (1, 3, 512, 512)),
    "unet_resnet50_bayese_512x512_nv12.yaml": ("UNet (narrow)", unet, (1, 3, 512, 512)),
    "paddleocr_det_config.yaml": ("PP-OCRv5 det (corpus)", _corpus("pkg/ppocrv5_det.onnx"), (1, 3, 640, 640)),
    "paddleocr_rec_config.yaml": ("PP-OCRv5 rec (corpus)", _corpus("pkg/ppocrv5_rec.onnx"), (1, 3, 48, 320)),
    "EfficientFormer_l1_config.yaml": ("EfficientFormer-L1 layout (narrow)", efficientformer, (1, 3, 224, 224)),
    "EfficientFormerv2_s0_config.yaml": ("EfficientFormerV2-S0 layout (narrow)", efficientformerv2, (1, 3, 224, 224)),
    "MobileNetV3_config.yaml": ("timm mobilenetv3_large_100 (corpus)", _corpus("timm/timm_mobilenetv3_large_100.onnx"), (1, 3, 224, 224)),
    "MobileNetV4_config.yaml": ("MobileNetV4 conv-small layout (narrow)", mobilenetv4_small, (1, 3, 224, 224)),
    "EfficientNet_B2_config.yaml": ("timm efficientnet_b0 (corpus)", _corpus("timm/timm_efficientnet_b0.onnx"), (1, 3, 224, 224)),
    "ConvNeXt_atto.yaml": ("ConvNeXt femto layout (narrow)", convnext, (1, 3, 224, 224)),
    "FasterNet_T0_config.yaml": ("FasterNet-T0 layout (narrow)", fasternet, (1, 3, 224, 224)),
    "EdgeNeXt_xx_small_config.yaml": ("EdgeNeXt-XXS layout (narrow)", edgenext, (1, 3, 224, 224)),
}


def build(config_name: str, folder: Path) -> tuple[Path, str, tuple[int, ...]]:
    """The stand-in ONNX model for a config, written into ``folder``: (path, description, input shape)."""
    torch, _, _ = _torch()
    what, maker, shape = STANDINS[config_name]
    path = Path(folder) / "model.onnx"
    if isinstance(maker, Path):
        if not maker.exists():
            raise FileNotFoundError(f"{maker} (the corpus models: see docs/conformance.md)")
        return fixed_input(maker, shape, path), what, shape
    torch.manual_seed(0)
    return export(maker(), shape, path), what, shape


def calibration_images(n: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """``n`` smooth random RGB images, N x 3 x H x W float32 in 0-255 (blurred noise plus gradients)."""
    rng = np.random.default_rng(seed)
    _, c, h, w = shape
    out = np.empty((n, c, h, w), np.float32)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    for k in range(n):
        small = rng.uniform(0, 255, size=(c, max(2, h // 32), max(2, w // 32)))
        big = np.kron(small, np.ones((32, 32)))[:, :h, :w]
        grad = 255 * (rng.uniform() * yy + rng.uniform() * xx)
        out[k] = np.clip(0.7 * big + 0.3 * grad[None], 0, 255)
    return out
