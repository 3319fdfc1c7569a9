"""Small ONNX models that carry the warts of real-world exports.

Hand-written test models are clean; models that come out of real exporters are not. Every
``build_X(path) -> Path`` below writes one small (< 1 MB), deterministic ONNX model that
reproduces the constructs found in real exports, for the tests of the importer, the graph
passes and the checker. They are built with the TorchScript exporter
(``torch.onnx.export(..., dynamo=False)``) at the opset where the wart is natural, and then,
where the exporter cannot produce a wart by itself, edited or written with ``onnx.helper``.

``WARTS`` lists them with their opset, and ``example_feed(name)`` gives a valid input
(dynamic dimensions bound) on which onnxruntime runs each of them.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# --------------------------------------------------------------------------------------------
# helpers


def _torch_export(module, args, path: Path, opset: int, input_names, output_names, dynamic_axes=None,
                  training=None) -> onnx.ModelProto:
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {}
    if training is not None:
        kwargs["training"] = training
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=opset,
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=dynamic_axes, do_constant_folding=True, **kwargs)
    return onnx.load(str(path))


def _initializers_to_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Move every initializer into a ``Constant`` node at the top of the graph (as some exporters,
    e.g. Paddle2ONNX for small tensors and older TF/Caffe converters, write weights)."""
    g = model.graph
    inits = list(g.initializer)
    names = {t.name for t in inits}
    consts = [helper.make_node("Constant", [], [t.name], name=f"Constant_w{i}", value=t) for i, t in enumerate(inits)]
    del g.initializer[:]
    keep_inputs = [i for i in g.input if i.name not in names]
    del g.input[:]
    g.input.extend(keep_inputs)
    nodes = consts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    return model


def _insert_after(model: onnx.ModelProto, tensor: str, op_type: str, name: str, **attrs) -> None:
    """Insert a one-input node ``op_type`` on ``tensor``: its consumers read the new output."""
    g = model.graph
    out = f"{tensor}_{op_type.lower()}"
    for node in g.node:
        for i, inp in enumerate(node.input):
            if inp == tensor:
                node.input[i] = out
    for o in g.output:
        if o.name == tensor:
            o.name = out
    new = helper.make_node(op_type, [tensor], [out], name=name, **attrs)
    pos = next((k + 1 for k, n in enumerate(g.node) if tensor in n.output), 0)
    g.node.insert(pos, new)


def _finish(model: onnx.ModelProto, path: Path, producer: str) -> Path:
    model.producer_name = producer
    model.producer_version = ""
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _seeded(seed: int = 0) -> None:
    import torch

    torch.manual_seed(seed)


# --------------------------------------------------------------------------------------------
# Paddle-style text recogniser


def _paddle_module():
    import torch
    from torch import nn

    def layer_norm(x, w, b, eps=1e-5):
        mean = x.mean(-1, keepdim=True)  # ReduceMean
        d = x - mean  # Sub
        var = d.pow(2.0).mean(-1, keepdim=True)  # Pow, ReduceMean
        return d / (var + eps).sqrt() * w + b  # Add, Sqrt, Div, Mul, Add

    def gelu(x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))

    class LN(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(c))
            self.bias = nn.Parameter(0.1 * torch.randn(c))

        def forward(self, x):
            return layer_norm(x, self.weight, self.bias)

    class Block(nn.Module):
        def __init__(self, c, heads):
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = LN(c), LN(c)
            self.qkv = nn.Linear(c, 3 * c)
            self.proj = nn.Linear(c, c)
            self.fc1 = nn.Linear(c, 2 * c)
            self.fc2 = nn.Linear(2 * c, c)

        def forward(self, x):
            n, L, c = x.shape
            qkv = self.qkv(self.norm1(x)).reshape(n, L, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = torch.softmax(q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5, dim=-1)
            x = x + self.proj((attn @ v).transpose(1, 2).reshape(n, L, c))
            return x + self.fc2(gelu(self.fc1(self.norm2(x))))

    class Recogniser(nn.Module):
        """SVTR-like: conv stem (stride 4), 2 global-mixing blocks, height pooling, CTC head."""

        def __init__(self, c=32, classes=37):
            super().__init__()
            self.conv1 = nn.Conv2d(3, c // 2, 3, stride=2, padding=1)
            self.conv2 = nn.Conv2d(c // 2, c, 3, stride=2, padding=1)
            self.blocks = nn.Sequential(Block(c, 2), Block(c, 2))
            self.norm = LN(c)
            self.head = nn.Linear(c, classes)

        def forward(self, x):
            x = self.conv2(gelu(self.conv1(x)))
            n, c, h, w = x.shape
            x = x.reshape(n, c, h * w).transpose(1, 2)  # tokens: n, h*w, c
            x = self.norm(self.blocks(x))
            x = x.transpose(1, 2).reshape(n, c, h, w).mean(dim=2)  # pool the height: n, c, w
            return torch.softmax(self.head(x.transpose(1, 2)), dim=-1)  # n, w, classes

    return Recogniser()


def build_paddle_style_ln(path: Path) -> Path:
    """Paddle2ONNX-style text recogniser (SVTR/PP-OCR-like), opset 12.

    Warts: input ``x`` is ``batch x 3 x 32 x width`` with dynamic batch AND width (OCR models
    take variable-width text lines); reshape targets computed at run time from the dynamic
    dims by ``Shape -> Gather -> (Mul) -> Unsqueeze -> Concat -> Reshape`` subgraphs;
    LayerNorm decomposed into ``ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add``
    (exactly how Paddle2ONNX writes ``layer_norm`` for opsets < 17); GELU written as
    ``x * 0.5 * (1 + Erf(x / sqrt(2)))``; every weight stored as a ``Constant`` node instead of
    an initializer (as Paddle2ONNX and older converters emit them). Output ``y`` is
    ``batch x width/4 x 37`` CTC probabilities.
    """
    import torch

    _seeded(0)
    module = _paddle_module()
    model = _torch_export(
        module, (torch.randn(1, 3, 32, 64),), path, 12, ["x"], ["y"],
        dynamic_axes={"x": {0: "batch", 3: "width"}, "y": {0: "batch", 1: "steps"}},
    )
    return _finish(_initializers_to_constants(model), path, "PaddlePaddle-like")


# --------------------------------------------------------------------------------------------
# BERT-style encoder


def _bert_module():
    import torch
    from torch import nn

    hidden, heads, vocab, inter = 64, 4, 1000, 256

    def decomposed_ln(x, ln):
        mean = x.mean(-1, keepdim=True)
        d = x - mean
        var = d.pow(2.0).mean(-1, keepdim=True)
        return d / torch.sqrt(var + ln.eps) * ln.weight + ln.bias

    class Layer(nn.Module):
        def __init__(self, mask_style: str, decomposed: bool):
            super().__init__()
            self.mask_style, self.decomposed = mask_style, decomposed
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.inter = nn.Linear(hidden, inter)
            self.act = nn.GELU()  # exported as Erf for opset < 20
            self.output = nn.Linear(inter, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

        def split(self, t):
            b, s, _ = t.shape
            return t.view(b, s, heads, hidden // heads).permute(0, 2, 1, 3)

        def norm(self, x, ln):
            return decomposed_ln(x, ln) if self.decomposed else ln(x)

        def forward(self, x, ext_mask, attention_mask):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(hidden // heads)
            if self.mask_style == "float_min":
                scores = scores + ext_mask
            else:  # Where(mask == 0, -inf, scores)
                scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
            ctx = torch.softmax(scores, dim=-1) @ v
            b, _, s, _ = ctx.shape
            ctx = ctx.permute(0, 2, 1, 3).reshape(b, s, hidden)
            x = self.norm(x + self.out(ctx), self.ln1)
            return self.norm(x + self.output(self.act(self.inter(x))), self.ln2)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Embedding(128, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList([Layer("float_min", decomposed=True), Layer("where_inf", decomposed=False)])
            self.pooler = nn.Linear(hidden, hidden)

        def forward(self, input_ids, attention_mask):
            seq = input_ids.shape[1]
            pos = torch.arange(seq, dtype=torch.long).unsqueeze(0)  # Range on a Shape
            x = self.word(input_ids) + self.position(pos) + self.token_type(torch.zeros_like(input_ids))
            x = self.ln(x)
            ext = attention_mask[:, None, None, :].to(torch.float32)
            ext = (1.0 - ext) * torch.finfo(torch.float32).min
            for layer in self.layers:
                x = layer(x, ext, attention_mask)
            return x, torch.tanh(self.pooler(x[:, 0]))

    return Encoder()


def build_bert_style(path: Path) -> Path:
    """BERT-like encoder as exported from Hugging Face models, opset 14.

    2 layers, hidden 64, 4 heads, vocab 1000. Warts: int64 inputs ``input_ids`` and
    ``attention_mask`` (batch x seq, both dynamic); token, position (``Range`` over a
    ``Shape``) and token-type embeddings as ``Gather``; the extended attention mask built as
    ``(1 - mask) * torch.finfo(float32).min`` (a -3.4e38 constant that wrecks naive range
    calibration) in layer 0, and as ``Where(mask == 0, -inf, scores)`` (``masked_fill``) in
    layer 1; LayerNorm decomposed (ReduceMean/Sub/Pow/Sqrt/Div) in layer 0 and as the
    exporter writes ``nn.LayerNorm`` elsewhere; GELU as Erf; head split/merge reshapes from
    ``Shape/Gather/Concat``; Softmax. Outputs ``last_hidden_state`` (batch x seq x 64) and
    ``pooler_output`` (batch x 64). Feed at least one 1 per ``attention_mask`` row (an all-zero
    row is NaN in the -inf layer, as in the original models).
    """
    import torch

    _seeded(0)
    module = _bert_module()
    ids = torch.randint(0, 1000, (1, 8))
    mask = torch.ones(1, 8, dtype=torch.long)
    axes = {0: "batch", 1: "seq"}
    model = _torch_export(
        module, (ids, mask), path, 14, ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes,
                      "pooler_output": {0: "batch"}},
    )
    return _finish(model, path, "pytorch")


# --------------------------------------------------------------------------------------------
# Swin block with dynamic H/W


def _swin_block_module(dim=32, heads=2, window=7, shift=3):
    import torch
    import torch.nn.functional as F
    from torch import nn

    from .architectures.swin import Mlp, relative_position_index

    class DynamicSwinBlock(nn.Module):
        """One shifted-window block on a B x H x W x C map of any H, W (padded to the window)."""

        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.bias_table = nn.Parameter(0.02 * torch.randn((2 * window - 1) ** 2, heads))
            self.register_buffer("rel_index", relative_position_index(window), persistent=False)
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = Mlp(dim, 4 * dim)

        @staticmethod
        def region(n):
            idx = torch.arange(n)
            return (idx >= n - window).long() + (idx >= n - shift).long()

        def forward(self, x):
            B, H, W, C = x.shape
            shortcut = x
            x = self.norm1(x)
            pad_b = (window - H % window) % window
            pad_r = (window - W % window) % window
            x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
            _, Hp, Wp, _ = x.shape
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
            # attention mask from the padded size: ids of the 3x3 regions the roll creates
            reg = self.region(Hp)[:, None] * 3 + self.region(Wp)[None, :]
            reg = reg.view(Hp // window, window, Wp // window, window).permute(0, 2, 1, 3).reshape(-1, window * window)
            mask = (reg[:, None, :] != reg[:, :, None]).float() * -100.0  # nW, N, N
            nW, N = mask.shape[0], window * window
            win = x.view(B, Hp // window, window, Wp // window, window, C)
            win = win.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, N, C)
            qkv = self.qkv(win).reshape(-1, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = (q * (C // heads) ** -0.5) @ k.transpose(-2, -1)
            bias = self.bias_table[self.rel_index.view(-1)].view(N, N, -1).permute(2, 0, 1)
            attn = attn + bias.unsqueeze(0)
            attn = attn.view(-1, nW, heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, heads, N, N).softmax(dim=-1)
            win = self.proj((attn @ v).transpose(1, 2).reshape(-1, N, C))
            x = win.view(B, Hp // window, Wp // window, window, window, C)
            x = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, Hp, Wp, C)
            x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
            x = x[:, :H, :W, :].contiguous()
            x = shortcut + x
            return x + self.mlp(self.norm2(x))

    return DynamicSwinBlock()


def build_swin_block_dynamic(path: Path) -> Path:
    """One Swin block (window 7, shift 3, dim 32, 2 heads) with dynamic batch, H and W, opset 11.

    Input ``x`` is ``batch x H x W x 32`` (channels-last, like the torchvision Swin). Warts of
    Swin exports at dynamic resolution: ``Pad`` to a multiple of the window with pads computed
    by ``Shape/Gather/Mod/Sub``; ``torch.roll`` exported as ``Slice + Slice + Concat`` per axis
    (ONNX has no Roll; this is what every opset writes); the shifted-window attention mask
    computed at run time from the padded size (``Range``, comparisons, ``Cast``); window
    partition/reverse as ``Reshape -> Transpose -> Reshape`` with ``Shape``-derived targets and
    ``Div`` for ``H // window``; the final crop ``x[:, :H, :W]`` as a ``Slice`` with dynamic
    ends; relative position bias; LayerNorm decomposed by the opset-11 exporter.
    """
    import torch

    _seeded(0)
    module = _swin_block_module()
    model = _torch_export(
        module, (torch.randn(1, 13, 20, 32),), path, 11, ["x"], ["y"],
        dynamic_axes={"x": {0: "batch", 1: "height", 2: "width"}, "y": {0: "batch", 1: "height", 2: "width"}},
    )
    return _finish(model, path, "pytorch")


# --------------------------------------------------------------------------------------------
# CNN with unfolded BN, hard activations built from primitives, Identity/Dropout


def _cnn_warts_module():
    import torch
    from torch import nn

    def hard_sigmoid(x):
        return torch.clamp(x + 3.0, 0.0, 6.0) / 6.0  # Add, Clip, Div

    def hard_swish(x):
        return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0  # Add, Clip, Mul, Div

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16)
            self.dw, self.bn2 = nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16)
            self.se_reduce, self.se_expand = nn.Conv2d(16, 8, 1), nn.Conv2d(8, 16, 1)
            self.pw, self.bn3 = nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32)
            self.fc = nn.Linear(32, 10)
            for bn in (self.bn1, self.bn2, self.bn3):  # non-trivial statistics
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.data.uniform_(0.5, 1.5)
                bn.bias.data.uniform_(-0.2, 0.2)

        def forward(self, x):
            x = hard_swish(self.bn1(self.conv1(x)))
            x = hard_swish(self.bn2(self.dw(x)))
            s = x.mean((2, 3), keepdim=True)
            x = x * hard_sigmoid(self.se_expand(torch.relu(self.se_reduce(s))))
            x = self.bn3(self.pw(x))
            x = x * torch.sigmoid(x)  # Swish / SiLU as Sigmoid + Mul
            return self.fc(torch.flatten(x.mean((2, 3)), 1))

    return Net()


def build_cnn_warts(path: Path) -> Path:
    """MobileNetV3-like CNN, opset 11.

    Warts: ``BatchNormalization`` left unfolded after each ``Conv`` (export with
    ``training=TrainingMode.PRESERVE``, as training pipelines and Caffe/MXNet converters leave
    it); HardSwish built from primitives ``x * Clip(x + 3, 0, 6) / 6`` (``Add, Clip, Mul, Div``)
    and HardSigmoid as ``Clip(x + 3, 0, 6) / 6`` (``Add, Clip, Div``), as written in model code
    that predates ``nn.Hardswish``; Swish as ``x * Sigmoid(x)``; an ``Identity`` and a
    ``Dropout`` node (inference no-ops that exporters and converters leave in); every weight a
    ``Constant`` node. Input ``input`` 1x3x32x32, output ``logits`` 1x10.
    """
    import torch

    _seeded(0)
    module = _cnn_warts_module()
    model = _torch_export(
        module, (torch.randn(1, 3, 32, 32),), path, 11, ["input"], ["logits"],
        training=torch.onnx.TrainingMode.PRESERVE,
    )
    g = model.graph
    first_conv = next(n for n in g.node if n.op_type == "Conv")
    _insert_after(model, first_conv.output[0], "Identity", "Identity_0")
    last_in = next(n for n in g.node if n.op_type == "Gemm").input[0]
    _insert_after(model, last_in, "Dropout", "Dropout_0", ratio=0.2)
    return _finish(_initializers_to_constants(model), path, "pytorch")


# --------------------------------------------------------------------------------------------
# TF-style NHWC model (written with onnx.helper, as tf2onnx emits it)


def build_tf_style(path: Path) -> Path:
    """tf2onnx-style NHWC CNN, opset 13, written with ``onnx.helper``.

    Warts: NHWC input ``input_1:0`` (1x32x32x3) with a ``Transpose`` to NCHW before every
    convolution and back to NHWC after it, so pairs of ``Transpose`` cancel between layers;
    TF "SAME" padding with stride 2 (asymmetric) as a separate ``Pad`` node before a ``Conv``
    with no padding; a ``Reshape -> Reshape`` chain that restores the shape it started from;
    global pooling as ``ReduceMean`` over the NHWC spatial axes; the dense layer as
    ``MatMul + Add`` instead of ``Gemm``; TF tensor names with ``/`` and ``:0``;
    an ``Identity`` on the output. Output ``Identity:0`` 1x10 (softmax).
    """
    rng = np.random.RandomState(0)

    def const(name, arr):
        return numpy_helper.from_array(np.asarray(arr), name)

    def w(*shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        return (rng.randn(*shape) * (scale or math.sqrt(2.0 / fan_in))).astype(np.float32)

    inits = [
        const("model/conv1/Conv2D/ReadVariableOp:0", w(8, 3, 3, 3)),
        const("model/conv1/BiasAdd/ReadVariableOp:0", w(8, scale=0.1)),
        const("model/conv2/Conv2D/ReadVariableOp:0", w(16, 8, 3, 3)),
        const("model/conv2/BiasAdd/ReadVariableOp:0", w(16, scale=0.1)),
        const("model/dense/MatMul/ReadVariableOp:0", w(16, 10, scale=0.3)),
        const("model/dense/BiasAdd/ReadVariableOp:0", w(10, scale=0.1)),
        const("model/pad/paddings:0", np.array([0, 0, 0, 0, 0, 0, 1, 1], dtype=np.int64)),
        const("model/flat/shape:0", np.array([1, 16, 256], dtype=np.int64)),
        const("model/unflat/shape:0", np.array([1, 16, 16, 16], dtype=np.int64)),
    ]
    N = helper.make_node
    nodes = [
        N("Transpose", ["input_1:0"], ["model/conv1/Conv2D__6:0"], name="model/conv1/Conv2D__6", perm=[0, 3, 1, 2]),
        N("Pad", ["model/conv1/Conv2D__6:0", "model/pad/paddings:0"], ["model/pad/Pad:0"], name="model/pad/Pad",
          mode="constant"),
        N("Conv", ["model/pad/Pad:0", "model/conv1/Conv2D/ReadVariableOp:0", "model/conv1/BiasAdd/ReadVariableOp:0"],
          ["model/conv1/BiasAdd:0"], name="model/conv1/BiasAdd", kernel_shape=[3, 3], strides=[2, 2],
          pads=[0, 0, 0, 0], dilations=[1, 1], group=1),
        N("Relu", ["model/conv1/BiasAdd:0"], ["model/conv1/Relu:0"], name="model/conv1/Relu"),
        N("Transpose", ["model/conv1/Relu:0"], ["model/conv1/Relu__9:0"], name="model/conv1/Relu__9",
          perm=[0, 2, 3, 1]),
        N("Transpose", ["model/conv1/Relu__9:0"], ["model/conv2/Conv2D__12:0"], name="model/conv2/Conv2D__12",
          perm=[0, 3, 1, 2]),
        N("Conv", ["model/conv2/Conv2D__12:0", "model/conv2/Conv2D/ReadVariableOp:0",
                   "model/conv2/BiasAdd/ReadVariableOp:0"],
          ["model/conv2/BiasAdd:0"], name="model/conv2/BiasAdd", kernel_shape=[3, 3], strides=[1, 1],
          pads=[1, 1, 1, 1], dilations=[1, 1], group=1),
        N("Relu", ["model/conv2/BiasAdd:0"], ["model/conv2/Relu:0"], name="model/conv2/Relu"),
        N("Reshape", ["model/conv2/Relu:0", "model/flat/shape:0"], ["model/flat/Reshape:0"], name="model/flat/Reshape"),
        N("Reshape", ["model/flat/Reshape:0", "model/unflat/shape:0"], ["model/unflat/Reshape:0"],
          name="model/unflat/Reshape"),
        N("Transpose", ["model/unflat/Reshape:0"], ["model/conv2/Relu__15:0"], name="model/conv2/Relu__15",
          perm=[0, 2, 3, 1]),
        N("ReduceMean", ["model/conv2/Relu__15:0"], ["model/gap/Mean:0"], name="model/gap/Mean", axes=[1, 2],
          keepdims=0),
        N("MatMul", ["model/gap/Mean:0", "model/dense/MatMul/ReadVariableOp:0"], ["model/dense/MatMul:0"],
          name="model/dense/MatMul"),
        N("Add", ["model/dense/MatMul:0", "model/dense/BiasAdd/ReadVariableOp:0"], ["model/dense/BiasAdd:0"],
          name="model/dense/BiasAdd"),
        N("Softmax", ["model/dense/BiasAdd:0"], ["model/dense/Softmax:0"], name="model/dense/Softmax", axis=-1),
        N("Identity", ["model/dense/Softmax:0"], ["Identity:0"], name="Identity"),
    ]
    graph = helper.make_graph(
        nodes, "tf2onnx",
        [helper.make_tensor_value_info("input_1:0", TensorProto.FLOAT, [1, 32, 32, 3])],
        [helper.make_tensor_value_info("Identity:0", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return _finish(model, path, "tf2onnx")


# --------------------------------------------------------------------------------------------
# custom-domain op


def build_custom_op(path: Path, with_function: bool = True) -> Path:
    """A small CNN with one node of a custom domain: ``com.example::MyOp``, opset 13.

    Wart: real exports of models with custom CUDA/plugin ops (deformable conv, NMS plugins,
    fused attention, TensorRT plugins) carry nodes of a non-standard domain that no standard
    backend knows. ``MyOp`` computes ``x * Sigmoid(1.702 * x)`` (a quick GELU). With
    ``with_function=True`` (default) the model also holds a model-local ``FunctionProto`` body
    for it, so onnxruntime can run the model while the graph still has the custom-domain node;
    with ``with_function=False`` the node is opaque (onnx.checker accepts it; onnxruntime
    refuses to load it). Input ``input`` 1x3x16x16, output ``logits`` 1x4.
    """
    rng = np.random.RandomState(0)
    inits = [
        numpy_helper.from_array((rng.randn(8, 3, 3, 3) * 0.3).astype(np.float32), "conv.weight"),
        numpy_helper.from_array((rng.randn(8) * 0.1).astype(np.float32), "conv.bias"),
        numpy_helper.from_array((rng.randn(4, 8) * 0.3).astype(np.float32), "fc.weight"),
        numpy_helper.from_array((rng.randn(4) * 0.1).astype(np.float32), "fc.bias"),
    ]
    N = helper.make_node
    nodes = [
        N("Conv", ["input", "conv.weight", "conv.bias"], ["conv_out"], name="Conv_0", kernel_shape=[3, 3],
          pads=[1, 1, 1, 1]),
        N("MyOp", ["conv_out"], ["myop_out"], name="MyOp_0", domain="com.example"),
        N("GlobalAveragePool", ["myop_out"], ["pool_out"], name="GlobalAveragePool_0"),
        N("Flatten", ["pool_out"], ["flat"], name="Flatten_0", axis=1),
        N("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="Gemm_0", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "custom_op",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])],
        initializer=inits,
    )
    functions = []
    if with_function:
        body = [
            N("Constant", [], ["alpha"], value=numpy_helper.from_array(np.array(1.702, dtype=np.float32))),
            N("Mul", ["X", "alpha"], ["ax"]),
            N("Sigmoid", ["ax"], ["s"]),
            N("Mul", ["X", "s"], ["Y"]),
        ]
        functions.append(helper.make_function("com.example", "MyOp", ["X"], ["Y"], body,
                                              [helper.make_opsetid("", 13)]))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)],
        functions=functions, ir_version=8,
    )
    return _finish(model, path, "custom")


# --------------------------------------------------------------------------------------------
# a standard op a BPU cannot run


def build_unsupported_op(path: Path) -> Path:
    """A small CNN with one standard op that a BPU typically cannot run: ``CumSum``, opset 13.

    Wart: real models carry the odd standard op outside an accelerator's op list (CumSum in
    position encodings and CTC/length logic, TopK, NonZero, Einsum...); the checker must place
    it on the CPU and split the graph into BPU / CPU / BPU subgraphs. Here the ``CumSum``
    (over the width axis) sits between two convolutions. Input ``input`` 1x3x32x32, output
    ``logits`` 1x10.
    """
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, 2, 1)
            self.conv2 = nn.Conv2d(16, 32, 3, 2, 1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = torch.relu(self.conv1(x))
            x = torch.cumsum(x, dim=3) / 16.0
            x = torch.relu(self.conv2(x))
            return self.fc(torch.flatten(x.mean((2, 3)), 1))

    _seeded(0)
    model = _torch_export(Net(), (torch.randn(1, 3, 32, 32),), path, 13, ["input"], ["logits"])
    return _finish(model, path, "pytorch")


# --------------------------------------------------------------------------------------------
# registry and example inputs


def _image(shape, seed):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def _bert_feed(seed):
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, 1000, size=(2, 11)).astype(np.int64)
    mask = np.ones((2, 11), dtype=np.int64)
    mask[1, 7:] = 0  # a padded second sequence
    return {"input_ids": ids, "attention_mask": mask}


# name -> (builder, opset, example feed(seed) with dynamic dims bound)
WARTS: dict[str, tuple[Callable[[Path], Path], int, Callable[[int], dict]]] = {
    "paddle_style_ln": (build_paddle_style_ln, 12, lambda s: {"x": _image((2, 3, 32, 100), s)}),
    "bert_style": (build_bert_style, 14, _bert_feed),
    "swin_block_dynamic": (build_swin_block_dynamic, 11, lambda s: {"x": _image((2, 13, 20, 32), s)}),
    "cnn_warts": (build_cnn_warts, 11, lambda s: {"input": _image((1, 3, 32, 32), s)}),
    "tf_style": (build_tf_style, 13, lambda s: {"input_1:0": _image((1, 32, 32, 3), s)}),
    "custom_op": (build_custom_op, 13, lambda s: {"input": _image((1, 3, 16, 16), s)}),
    "unsupported_op": (build_unsupported_op, 13, lambda s: {"input": _image((1, 3, 32, 32), s)}),
}


def example_feed(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """A valid input for wart model ``name`` (dynamic dimensions bound to non-trivial sizes)."""
    return WARTS[name][2](seed)


def build_all(folder: Path) -> dict[str, Path]:
    """Build every wart model into ``folder`` as ``<name>.onnx``."""
    folder = Path(folder)
    return {name: builder(folder / f"{name}.onnx") for name, (builder, _, _) in WARTS.items()}


__all__ = [
    "WARTS", "example_feed", "build_all", "build_paddle_style_ln", "build_bert_style", "build_swin_block_dynamic",
    "build_cnn_warts", "build_tf_style", "build_custom_op", "build_unsupported_op",
]

if __name__ == "__main__":
    import sys

    for n, p in build_all(Path(sys.argv[1] if len(sys.argv) > 1 else "warts_out")).items():
        print(n, p)
