"""fold_parallel_branches: linear branches beside a Conv fold into it, the float graph computes the same.

The blocks are written as their training forms are (torch modules with random BatchNorm statistics,
exported as timm exports them, unfused); every positive case runs the original model and the
rewritten graph in onnxruntime. Negative cases change one condition the fold needs and require that
the Add stays.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from hbtool.ir import import_onnx, to_onnx
from hbtool.ir.passes import fold_parallel_branches, optimize_float


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
    return bn


class GhostBranch(nn.Module):
    """RepGhost's module: a depthwise conv of x1 plus a BatchNorm of x1 (the identity branch)."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.primary = nn.Sequential(nn.Conv2d(4, c, 1), nn.ReLU())
        self.cheap = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), _bn(c))
        self.fusion_bn = _bn(c)

    def forward(self, x):
        x1 = self.primary(x)
        return torch.relu(self.cheap(x1) + self.fusion_bn(x1))


class RepVggDw(nn.Module):
    """RepViT's token mixer: BN(dwconv3(x) + dwconv1(x) + x)."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), _bn(c))
        self.conv1 = nn.Conv2d(c, c, 1, groups=c)
        self.bn = _bn(c)

    def forward(self, x):
        return self.bn(self.conv(x) + self.conv1(x) + x)


class RepVggBlock(nn.Module):
    """RepVGG's training block (dense conv): conv3+BN + conv1+BN + BN(x)."""

    def __init__(self, c: int = 8, stride: int = 1):
        super().__init__()
        self.c3 = nn.Sequential(nn.Conv2d(c, c, 3, stride, 1, bias=False), _bn(c))
        self.c1 = nn.Sequential(nn.Conv2d(c, c, 1, stride, 0, bias=False), _bn(c))
        self.id = _bn(c) if stride == 1 else None

    def forward(self, x):
        y = self.c3(x) + self.c1(x)
        return y + self.id(x) if self.id is not None else y


def _export(module: nn.Module, c_in: int, tmp_path) -> tuple[onnx.ModelProto, np.ndarray]:
    path = tmp_path / "m.onnx"
    x = torch.randn(1, c_in, 10, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (x,), str(path), opset_version=17, dynamo=False, input_names=["x"])
    return onnx.load(str(path)), x.numpy()


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _optimized(model: onnx.ModelProto):
    graph = import_onnx(model)
    results = {r.name: r.rewrites for r in optimize_float(graph)}
    return graph, results


def _same(model: onnx.ModelProto, graph, x: np.ndarray) -> None:
    ref, got = _run(model, x), _run(to_onnx(graph), x)
    assert float(np.abs(ref - got).max() / np.abs(ref).max()) <= 1e-5


def test_repghost_identity_batchnorm_folds_into_the_depthwise_conv(tmp_path):
    model, x = _export(GhostBranch(), 4, tmp_path)
    graph, results = _optimized(model)
    assert results["fold_parallel_branches"] == 1
    ops = graph.op_types()
    assert ops.get("Add", 0) == 0 and ops.get("Mul", 0) == 0 and ops.get("BatchNormalization", 0) == 0
    assert ops["Conv"] == 2
    _same(model, graph, x)


def test_repvit_token_mixer_becomes_one_depthwise_conv(tmp_path):
    model, x = _export(RepVggDw(), 8, tmp_path)
    graph, results = _optimized(model)
    assert results["fold_parallel_branches"] == 2          # the 1x1 branch, then the identity
    assert graph.op_types() == {"Conv": 1}                 # the BN after the sum folds too
    _same(model, graph, x)


def test_repvgg_training_block_becomes_one_dense_conv(tmp_path):
    model, x = _export(RepVggBlock(), 8, tmp_path)
    graph, results = _optimized(model)
    assert graph.op_types() == {"Conv": 1}
    _same(model, graph, x)


def test_strided_block_folds_the_1x1_branch_but_has_no_identity(tmp_path):
    model, x = _export(RepVggBlock(stride=2), 8, tmp_path)
    graph, _ = _optimized(model)
    assert graph.op_types() == {"Conv": 1}
    _same(model, graph, x)


class SharedBranch(nn.Module):
    """The BN branch is read twice: folding it would change the other reader."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.bn = _bn(c)

    def forward(self, x):
        b = self.bn(x)
        return self.conv(x) + b, b * 2.0


class IdentityAfterStride(nn.Module):
    """x + conv(x) where the conv changes the channel count cannot be an identity tap."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.other = nn.Conv2d(8, 8, 3, padding=1, groups=4)

    def forward(self, x):
        return self.conv(x) + self.other(x)   # different groups: not one conv of the same shape


def test_shared_branch_and_mismatched_groups_stay(tmp_path):
    for module in (SharedBranch(), IdentityAfterStride()):
        model, x = _export(module, 8, tmp_path)
        graph = import_onnx(model)
        before = graph.op_types().get("Add", 0)
        assert fold_parallel_branches(graph) == 0
        assert graph.op_types().get("Add", 0) == before


def test_a_conv_whose_weights_the_model_quantized_keeps_them(tmp_path):
    """A QDQ / weight-only model's conv weights are the user's integers: folding the identity branch into
    them would rewrite those integers and drop the user's scales (found by the QDQ e2e test), so it stays."""
    from types import SimpleNamespace

    model, x = _export(RepVggDw(), 8, tmp_path)
    graph = import_onnx(model)
    weights = {n.inputs[1] for n in graph.nodes if n.op_type == "Conv"}
    graph.prequantized = SimpleNamespace(weights={w: object() for w in weights})
    before = graph.op_types().get("Add", 0)
    assert fold_parallel_branches(graph) == 0
    assert graph.op_types().get("Add", 0) == before
    del graph.prequantized
    assert fold_parallel_branches(graph) > 0
