"""Float ONNX operators in torch: the differentiable side of the QAT executor.

QAT needs every node of the graph as a torch function for three jobs: the CPU nodes of the
program run in float, data-movement nodes move integer codes (which torch moves exactly), and
every integer kernel needs a float *surrogate* through which its gradient flows (the forward
value is the kernel's own integers, see :mod:`hbtool.qat.module`). One table serves all three:
``OPS[op_type](ctx, node, inputs) -> outputs``.

hbtool-domain nodes that carry a ``body`` (``WindowPartition``, ``Roll``, ``HzPreprocess``...)
run their body, the standard-op definition export writes as an ONNX function.

Batch: graphs have static shapes (usually batch 1); QAT trains on batches. Reshape/Expand
targets whose first dimension is the static batch take the runtime batch instead, which is
what a batch-1 export means for every model whose leading axis is the batch.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from hbtool.ir.graph import Graph, Node

Tensor = torch.Tensor


class OpContext:
    """What an op implementation may read besides its inputs: the graph (attributes, static shapes)."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def const_list(self, x: Tensor | None) -> list[int]:
        return [] if x is None else [int(v) for v in x.detach().reshape(-1).tolist()]


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _batch_fix(ctx: OpContext, node: Node, x: Tensor, target: list[int]) -> list[int]:
    """A static (batch-1) target shape for a batch of B: the batch folded into the leading dimension."""
    if not target:
        return target
    if -1 in target:
        static = ctx.graph.shape(node.inputs[0])
        if static and static[0] == 1 and x.dim() and x.shape[0] > 1 and target[0] == 1:
            target = [int(x.shape[0])] + list(target[1:])
        return target
    size = int(np.prod(target, dtype=np.int64))
    if size and x.numel() != size and x.numel() % size == 0:
        target = [target[0] * (x.numel() // size)] + list(target[1:])
    return target


# ------------------------------------------------------------------ tensor unit
def _conv_pads(pads: list[int], nd: int) -> list[int] | None:
    begin, end = pads[:nd], pads[nd:]
    if begin == end:
        return None
    torch_pads: list[int] = []
    for i in reversed(range(nd)):
        torch_pads += [begin[i], end[i]]
    return torch_pads


def conv(x: Tensor, w: Tensor, b: Tensor | None, node: Node) -> Tensor:
    nd = w.dim() - 2
    pads = list(node.attr("pads") or [0] * (2 * nd))
    strides = list(node.attr("strides") or [1] * nd)
    dil = list(node.attr("dilations") or [1] * nd)
    group = int(node.attr("group", 1))
    asym = _conv_pads(pads, nd)
    if asym is not None:
        x = F.pad(x, asym)
        padding: Any = 0
    else:
        padding = pads[:nd]
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    return fn(x, w, b, strides, padding, dil, group)


def _conv(ctx, node, xs):
    return [conv(xs[0], xs[1], xs[2] if len(xs) > 2 else None, node)]


def _conv_transpose(ctx, node, xs):
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    nd = w.dim() - 2
    from hbtool.kernels.conv_transpose import resolve_pads

    strides = list(node.attr("strides") or [1] * nd)
    dil = list(node.attr("dilations") or [1] * nd)
    outpad = list(node.attr("output_padding") or [0] * nd)
    pads = resolve_pads(list(x.shape[2:]), list(w.shape[2:]), strides, dil, outpad, node.attr("pads"),
                        node.attr("auto_pad", "NOTSET"), node.attr("output_shape"))
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    y = fn(x, w, b, strides, 0, outpad, int(node.attr("group", 1)), dil)
    sl = [slice(None), slice(None)] + [slice(pads[i], y.shape[2 + i] - pads[i + nd]) for i in range(nd)]
    return [y[tuple(sl)]]


def _gemm(ctx, node, xs):
    a, b = xs[0], xs[1]
    if node.attr("transA", 0):
        a = a.transpose(-1, -2)
    if node.attr("transB", 0):
        b = b.transpose(-1, -2)
    y = float(node.attr("alpha", 1.0)) * (a @ b)
    if len(xs) > 2 and xs[2] is not None:
        y = y + float(node.attr("beta", 1.0)) * xs[2]
    return [y]


def _linear(ctx, node, xs):
    y = xs[0] @ xs[1]
    return [y + xs[2] if len(xs) > 2 and xs[2] is not None else y]


# ------------------------------------------------------------------ elementwise
def _unary(fn: Callable[[Tensor], Tensor]):
    return lambda ctx, node, xs: [fn(xs[0])]


def _clip(ctx, node, xs):
    lo = xs[1] if len(xs) > 1 and xs[1] is not None else None
    hi = xs[2] if len(xs) > 2 and xs[2] is not None else None
    return [torch.clamp(xs[0], min=None if lo is None else float(lo), max=None if hi is None else float(hi))]


def _gelu(ctx, node, xs):
    return [F.gelu(xs[0], approximate="tanh" if node.attr_text("approximate", "none") == "tanh" else "none")]


def _hardsigmoid(ctx, node, xs):
    a, b = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    return [torch.clamp(a * xs[0] + b, 0.0, 1.0)]


def _softmax(ctx, node, xs):
    return [torch.softmax(xs[0], dim=int(node.attr("axis", -1)))]


def _layernorm(ctx, node, xs):
    x = xs[0]
    axis = _axis(int(node.attr("axis", -1)), x.dim())
    dims = tuple(range(axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) / torch.sqrt(var + float(node.attr("epsilon", 1e-5)))
    y = y * xs[1]
    return [y + xs[2] if len(xs) > 2 and xs[2] is not None else y]


def _instance_norm(ctx, node, xs):
    x = xs[0]
    dims = tuple(range(2, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    shape = (1, -1) + (1,) * (x.dim() - 2)
    y = (x - mean) / torch.sqrt(var + float(node.attr("epsilon", 1e-5)))
    return [y * xs[1].reshape(shape) + xs[2].reshape(shape)]


# ------------------------------------------------------------------ pools and reductions
def _reduce_axes(ctx, node, xs) -> list[int] | None:
    axes = node.attr("axes")
    if axes is None and len(xs) > 1 and xs[1] is not None:
        axes = ctx.const_list(xs[1])
    if axes is None or len(axes) == 0:
        return None if not int(node.attr("noop_with_empty_axes", 0)) else []
    return [_axis(int(a), xs[0].dim()) for a in axes]


def _reduce(fn):
    def run(ctx, node, xs):
        axes = _reduce_axes(ctx, node, xs)
        x = xs[0]
        if axes == []:
            return [x]
        axes = list(range(x.dim())) if axes is None else axes
        keep = bool(node.attr("keepdims", 1))
        return [fn(x, axes, keep)]
    return run


def _amax(x, axes, keep):
    return torch.amax(x, dim=axes, keepdim=keep)


def _amin(x, axes, keep):
    return torch.amin(x, dim=axes, keepdim=keep)


def _global_avg(ctx, node, xs):
    return [xs[0].mean(dim=tuple(range(2, xs[0].dim())), keepdim=True)]


def _global_max(ctx, node, xs):
    return [torch.amax(xs[0], dim=tuple(range(2, xs[0].dim())), keepdim=True)]


def _pool_pads(node, nd):
    pads = list(node.attr("pads") or [0] * (2 * nd))
    return pads


def _max_pool(ctx, node, xs):
    x = xs[0]
    k = list(node.attr("kernel_shape"))
    nd = len(k)
    pads = _pool_pads(node, nd)
    asym = _conv_pads(pads, nd)
    strides = list(node.attr("strides") or [1] * nd)
    dil = list(node.attr("dilations") or [1] * nd)
    if asym is None and any(p > ((ki - 1) * di + 1) // 2 for p, ki, di in zip(pads, k, dil)):
        # torch takes at most half the window as padding; ONNX takes any pad below the window
        asym = [p for i in reversed(range(nd)) for p in (pads[i], pads[nd + i])]
    if asym is not None:
        x = F.pad(x, asym, value=-math.inf)
        padding: Any = 0
    else:
        padding = pads[:nd]
    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    return [fn(x, k, strides, padding, dil, ceil_mode=bool(node.attr("ceil_mode", 0)))]


def _avg_pool(ctx, node, xs):
    """ONNX AveragePool: zero padding, divided by the window size or (count_include_pad 0) by the real elements."""
    x = xs[0]
    k = list(node.attr("kernel_shape"))
    nd = len(k)
    pads = _pool_pads(node, nd)
    strides = list(node.attr("strides") or [1] * nd)
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
    torch_pads: list[int] = []
    for i in reversed(range(nd)):
        torch_pads += [pads[i], pads[i + nd]]
    ceil = bool(node.attr("ceil_mode", 0))  # torch divides an overhanging last window by what it covers, as onnxruntime
    mean = fn(F.pad(x, torch_pads), k, strides, 0, ceil_mode=ceil)
    if bool(node.attr("count_include_pad", 0)) or not any(pads):
        return [mean]
    ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
    return [mean / fn(F.pad(ones, torch_pads), k, strides, 0, ceil_mode=ceil)]


# ------------------------------------------------------------------ data movement
def _reshape(ctx, node, xs):
    x = xs[0]
    target = ctx.const_list(xs[1])
    allow0 = int(node.attr("allowzero", 0))
    target = [int(x.shape[i]) if (t == 0 and not allow0) else t for i, t in enumerate(target)]
    return [x.reshape(_batch_fix(ctx, node, x, target))]


def _transpose(ctx, node, xs):
    perm = node.attr("perm")
    perm = list(reversed(range(xs[0].dim()))) if perm is None else [int(p) for p in perm]
    return [xs[0].permute(perm)]


def _flatten(ctx, node, xs):
    x = xs[0]
    a = _axis(int(node.attr("axis", 1)), x.dim())
    lead = int(np.prod(x.shape[:a], dtype=np.int64)) if a else 1
    return [x.reshape(lead, -1)]


def _squeeze(ctx, node, xs):
    x = xs[0]
    axes = node.attr("axes")
    if axes is None and len(xs) > 1 and xs[1] is not None:
        axes = ctx.const_list(xs[1])
    if not axes:
        return [x.squeeze()]
    for a in sorted((_axis(int(a), x.dim()) for a in axes), reverse=True):
        x = x.squeeze(a)
    return [x]


def _unsqueeze(ctx, node, xs):
    x = xs[0]
    axes = node.attr("axes")
    if axes is None:
        axes = ctx.const_list(xs[1])
    rank = x.dim() + len(axes)
    for a in sorted(_axis(int(a), rank) for a in axes):
        x = x.unsqueeze(a)
    return [x]


def _concat(ctx, node, xs):
    parts = [x for x in xs if x is not None]
    batch = max(p.shape[0] for p in parts if p.dim())
    axis = int(node.attr("axis"))
    if _axis(axis, parts[0].dim()) != 0:  # constant pieces (class tokens) follow the runtime batch
        parts = [p.expand((batch,) + tuple(p.shape[1:])) if p.dim() and p.shape[0] == 1 and batch > 1 else p for p in parts]
    return [torch.cat(parts, dim=axis)]


def _slice(ctx, node, xs):
    """ONNX Slice: Python's slice semantics on each axis (the same clamping rules, any step)."""
    x = xs[0]
    starts, ends = ctx.const_list(xs[1]), ctx.const_list(xs[2])
    axes = ctx.const_list(xs[3]) if len(xs) > 3 and xs[3] is not None else list(range(len(starts)))
    steps = ctx.const_list(xs[4]) if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, x.dim())
        picked = range(x.shape[a])[slice(s, e, st)]
        if st == 1:
            x = x.narrow(a, picked.start if len(picked) else 0, len(picked))
        else:
            x = x.index_select(a, torch.tensor(list(picked), dtype=torch.long, device=x.device))
    return [x]


def _split(ctx, node, xs):
    x = xs[0]
    axis = _axis(int(node.attr("axis", 0)), x.dim())
    sizes = node.attr("split")
    if sizes is None and len(xs) > 1 and xs[1] is not None:
        sizes = ctx.const_list(xs[1])
    if sizes is None:
        n = len(node.outputs)
        sizes = [x.shape[axis] // n] * n
    return list(torch.split(x, [int(s) for s in sizes], dim=axis))


def _gather(ctx, node, xs):
    x, idx = xs[0], xs[1].long()
    axis = _axis(int(node.attr("axis", 0)), x.dim())
    idx = torch.where(idx < 0, idx + x.shape[axis], idx)
    out = x.index_select(axis, idx.reshape(-1))
    static = ctx.graph.shape(node.inputs[1])
    ishape = tuple(static) if static is not None and int(np.prod(static, dtype=np.int64)) == idx.numel() else tuple(idx.shape)
    return [out.reshape(tuple(x.shape[:axis]) + ishape + tuple(x.shape[axis + 1:]))]


def _expand(ctx, node, xs):
    x = xs[0]
    target = ctx.const_list(xs[1])
    if target and x.dim() == len(target) and x.shape[0] > 1 and target[0] == 1:
        target = [int(x.shape[0])] + list(target[1:])
    return [x * torch.ones(target, dtype=x.dtype, device=x.device)]


def _tile(ctx, node, xs):
    return [xs[0].repeat(*ctx.const_list(xs[1]))]


def _pad(ctx, node, xs):
    x = xs[0]
    pads = node.attr("pads") or ctx.const_list(xs[1])
    value = 0.0
    if len(xs) > 2 and xs[2] is not None:
        value = float(xs[2].reshape(-1)[0])
    mode = node.attr_text("mode", "constant")
    nd = x.dim()
    torch_pads: list[int] = []
    for i in reversed(range(nd)):
        torch_pads += [int(pads[i]), int(pads[i + nd])]
    while len(torch_pads) > 2 and torch_pads[-2:] == [0, 0]:
        torch_pads = torch_pads[:-2]
    if mode == "constant":
        return [F.pad(x, torch_pads, value=value)]
    return [F.pad(x, torch_pads, mode={"reflect": "reflect", "edge": "replicate"}[mode])]


def _depth_to_space(ctx, node, xs):
    x = xs[0]
    b = int(node.attr("blocksize"))
    n, c, h, w = x.shape
    if node.attr_text("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


def _space_to_depth(ctx, node, xs):
    x = xs[0]
    b = int(node.attr("blocksize"))
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return [y.reshape(n, c * b * b, h // b, w // b)]


def _where(ctx, node, xs):
    return [torch.where(xs[0].bool(), xs[1], xs[2])]


def _cast(ctx, node, xs):
    from onnx import helper

    to = helper.tensor_dtype_to_np_dtype(int(node.attr("to")))
    if np.dtype(to).kind == "f":
        return [xs[0].to(torch.float32) if np.dtype(to) != np.float64 else xs[0].double()]
    if np.dtype(to) == np.bool_:
        return [xs[0] != 0]
    return [xs[0].to(torch.int64)]


def _binary(fn):
    return lambda ctx, node, xs: [fn(xs[0], xs[1])]


OPS: dict[str, Callable[[OpContext, Node, list], list[Tensor]]] = {
    "Conv": _conv, "ConvTranspose": _conv_transpose, "Gemm": _gemm, "Linear": _linear,
    "MatMul": _binary(torch.matmul),
    "Add": _binary(torch.add), "Sub": _binary(torch.sub), "Mul": _binary(torch.mul), "Div": _binary(torch.div),
    "Pow": _binary(torch.pow), "Max": _binary(torch.maximum), "Min": _binary(torch.minimum),
    "Equal": _binary(torch.eq), "Greater": _binary(torch.gt), "Less": _binary(torch.lt),
    "Relu": _unary(F.relu), "Sigmoid": _unary(torch.sigmoid), "Tanh": _unary(torch.tanh), "Exp": _unary(torch.exp),
    "Log": _unary(torch.log), "Sqrt": _unary(torch.sqrt), "Reciprocal": _unary(torch.reciprocal), "Erf": _unary(torch.erf),
    "Abs": _unary(torch.abs), "Neg": _unary(torch.neg), "Floor": _unary(torch.floor), "Ceil": _unary(torch.ceil),
    "Round": _unary(torch.round), "Sign": _unary(torch.sign), "Not": _unary(torch.logical_not),
    "Softplus": _unary(F.softplus), "Mish": _unary(F.mish), "Swish": _unary(F.silu), "HardSwish": _unary(F.hardswish),
    "Gelu": _gelu, "HardSigmoid": _hardsigmoid, "Clip": _clip,
    "LeakyRelu": lambda ctx, node, xs: [F.leaky_relu(xs[0], float(node.attr("alpha", 0.01)))],
    "Elu": lambda ctx, node, xs: [F.elu(xs[0], float(node.attr("alpha", 1.0)))],
    "Softmax": _softmax, "LayerNormalization": _layernorm, "InstanceNormalization": _instance_norm,
    "ReduceMean": _reduce(lambda x, a, k: x.mean(dim=a, keepdim=k)), "ReduceSum": _reduce(lambda x, a, k: x.sum(dim=a, keepdim=k)),
    "ReduceMax": _reduce(_amax), "ReduceMin": _reduce(_amin),
    "ReduceL2": _reduce(lambda x, a, k: torch.sqrt((x * x).sum(dim=a, keepdim=k))),
    "GlobalAveragePool": _global_avg, "GlobalMaxPool": _global_max, "MaxPool": _max_pool, "AveragePool": _avg_pool,
    "Reshape": _reshape, "Transpose": _transpose, "Flatten": _flatten, "Squeeze": _squeeze, "Unsqueeze": _unsqueeze,
    "Concat": _concat, "Slice": _slice, "Split": _split, "Gather": _gather, "Expand": _expand, "Tile": _tile,
    "Pad": _pad, "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth, "Identity": lambda ctx, node, xs: [xs[0]],
    "Where": _where, "Cast": _cast,
    "PRelu": lambda ctx, node, xs: [torch.where(xs[0] >= 0, xs[0], xs[0] * xs[1])],
    "Selu": lambda ctx, node, xs: [float(node.attr("gamma", 1.05070102214813232421875)) * torch.where(
        xs[0] > 0, xs[0], float(node.attr("alpha", 1.67326319217681884765625)) * torch.expm1(torch.clamp(xs[0], max=0)))],
    "LogSoftmax": lambda ctx, node, xs: [F.log_softmax(xs[0], dim=int(node.attr("axis", -1)))],
    "Softsign": _unary(F.softsign), "Sin": _unary(torch.sin), "Cos": _unary(torch.cos),
    "ArgMax": lambda ctx, node, xs: [torch.argmax(xs[0], dim=int(node.attr("axis", 0)), keepdim=bool(node.attr("keepdims", 1)))],
    "ArgMin": lambda ctx, node, xs: [torch.argmin(xs[0], dim=int(node.attr("axis", 0)), keepdim=bool(node.attr("keepdims", 1)))],
}


def run_graph(graph: Graph, env: dict[str, Tensor], const: Callable[[str], Tensor], only: set[str] | None = None) -> dict[str, Tensor]:
    """Run every node of ``graph`` (a body, or a float graph; ``only`` these names when given) on ``env``; returns ``env`` filled in."""
    ctx = OpContext(graph)
    for node in graph.nodes:
        if only is not None and node.name not in only:
            continue
        xs = [None if not i else (env[i] if i in env else const(i)) for i in node.inputs]
        outs = run_node(ctx, node, xs)
        for o, v in zip(node.outputs, outs):
            if o:
                env[o] = v
    return env


def run_node(ctx: OpContext, node: Node, xs: list) -> list[Tensor]:
    """One float node: its table entry, else its body (hbtool-domain fusions such as WindowPartition)."""
    fn = OPS.get(node.op_type)
    if fn is not None:
        return fn(ctx, node, xs)
    if node.body is None:
        raise NotImplementedError(f"QAT has no torch form of {node.op_type} (node {node.name})")
    body = node.body
    env = {name: x for name, x in zip(body.inputs, xs) if x is not None}

    def body_const(name: str) -> Tensor:
        data = body.const(name)
        if data is None:
            data = ctx.graph.const(name)
        return torch.from_numpy(np.array(data))

    run_graph(body, env, body_const)
    return [env[o] for o in body.outputs]


def supported(node: Node) -> bool:
    """Whether :func:`run_node` can run ``node``."""
    return node.op_type in OPS or node.body is not None
