"""The QAT model: a torch module that runs the integer program the compiler would build.

Why not a float graph with fake-quant nodes: the J5's integer kernels are not float ops
followed by rounding. Requantization multiplies by a 15-bit ``M * 2**-n`` and rounds by the
configured mode, tables are interpolated, Softmax and LayerNorm are integer algorithms. A
fake-quant float model drifts from the artifact by an LSB here and there, and the drift
compounds through depth. So this module takes the other route:

* At every step it lowers the float graph (current weights, current scales) with
  :func:`hbtool.quant.lower.lower_to_integer`, the function ``compile`` uses (a few tens of
  milliseconds for a recogniser), and executes that program node by node in torch.
* The **forward value** of every node is the kernel's integer result: weighted kernels (Conv,
  Linear from Conv/Gemm/MatMul/Linear) accumulate the integer codes in torch, exactly
  (float32 while the accumulator bound is at most 2**24; int16 inputs split into two bytes,
  each product exact in float32, joined in int64) and requantize with the kernel's own
  :class:`~hbtool.kernels.requantize.Requantize`; tables read every code's output with one
  ``index_select``; every other kernel (Softmax, LayerNorm, Add, Mul, pools...) runs its numpy
  form on the CPU, and Add, Mul, Softmax and requantization their torch int64 twins on an
  accelerator (:mod:`hbtool.qat.int_ops` says why).
  Data movement runs in torch on the codes; CPU nodes run in torch in float.
* The **gradient** comes from a float surrogate of each node (:mod:`hbtool.qat.fake_quant`):
  the float op of the source node on dequantized inputs, divided by the output scale and
  clamped to the kernel's output range. Weight codes are ``W_int + (w/s_w - detach)``: the
  kernel's integers in value, ``1/s_w`` in gradient.

So the module's outputs are those of ``compile`` + ``simulate`` of the model it exports
(:mod:`hbtool.qat.export`), up to float rounding in CPU nodes.

Trained: the weights and biases of the tensor-unit nodes on the BPU (weight scales follow
the weights, per-channel max as calibration's default); optionally (``train_scales``) every
activation scale group, LSQ-style. Other constants (LayerNorm gamma/beta, CPU nodes) stay as
they are. PTF and log2-coded Softmax outputs are refused (their scales are not one number).
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from hbtool.errors import InputError
from hbtool.ir.graph import Graph, Node
from hbtool.ir.hz_ops import HZ_DEQUANTIZE, HZ_QUANTIZE
from hbtool.kernels.conv import Conv
from hbtool.kernels.fixedpoint import int_range
from hbtool.kernels.linear import F32_EXACT, Linear
from hbtool.qat.fake_quant import fake_quant_codes, lsq_grad_scale, straight_through
from hbtool.quant.output_channels import refresh_output_segments, segment_pieces
from hbtool.qat.int_ops import kernel_codes, requantize_codes
from hbtool.qat.torch_ops import OpContext, run_graph, run_node, supported
from hbtool.quant.lower import lower_to_integer
from hbtool.quant.plan import QMAX, QuantPlan
from hbtool.quant.weights import weight_input_and_axis, weight_scales

WEIGHTED_OPS = {"Conv", "Gemm", "MatMul", "Linear"}
_MIN_SCALE = 1e-12


def _t(a: np.ndarray) -> torch.Tensor:
    a = np.ascontiguousarray(a)
    return torch.from_numpy(a if a.flags.writeable else a.copy())


def _float_t(a: np.ndarray) -> torch.Tensor:
    return _t(np.array(a, np.float32))


def _needed_nodes(graph: Graph, tensors: Sequence[str]) -> set[str]:
    """Names of the nodes ``tensors`` depend on."""
    producers = graph.producer_map()
    needed: set[str] = set()
    todo = [t for t in tensors]
    while todo:
        node = producers.get(todo.pop())
        if node is None or node.name in needed:
            continue
        needed.add(node.name)
        todo.extend(i for i in node.inputs if i)
    return needed


class FloatGraphModule(nn.Module):
    """The float graph in torch (the distillation teacher): no quantization, constants frozen."""

    def __init__(self, graph: Graph):
        super().__init__()
        self.graph = graph
        self.device = torch.device("cpu")
        self._consts: dict[str, torch.Tensor] = {}

    def to_device(self, device: str | torch.device) -> "FloatGraphModule":
        self.device = torch.device(device)
        self._consts = {}
        return self

    def const(self, name: str) -> torch.Tensor:
        if name not in self._consts:
            self._consts[name] = _t(np.array(self.graph.const(name))).to(self.device)
        return self._consts[name]

    def forward(self, *inputs: torch.Tensor, tensors: Sequence[str] = (), outputs: bool = True) -> tuple[torch.Tensor, ...]:
        env = dict(zip(self.graph.inputs, inputs))
        run_graph(self.graph, env, self.const, None if outputs else _needed_nodes(self.graph, tensors))
        return tuple(env[o] for o in (list(self.graph.outputs) if outputs else []) + list(tensors))


class QatModel(nn.Module):
    """The integer program of a calibrated model as a trainable torch module (module docstring).

    ``graph`` is the placed, optimized float graph; ``plan`` and ``weight_scales`` the PTQ
    result (``CalibrationResult.graph/.plan/.weight_scales``). Inputs are what the float graph
    takes (raw pixels when preprocessing is folded in), in ``graph.inputs`` order; outputs are
    the dequantized model outputs.
    """

    def __init__(self, graph: Graph, plan: QuantPlan, weight_scales: Mapping[str, tuple[np.ndarray, int]] | None = None,
                 rounding: str = "half_up", per_channel: bool = True, train_scales: bool = False):
        super().__init__()
        self.graph = graph.copy()
        self.plan = copy.deepcopy(plan)
        self.rounding = rounding
        self.per_channel = bool(per_channel)
        self.train_scales = bool(train_scales)
        self.device = torch.device("cpu")
        for name, tq in self.plan.tensors.items():
            if tq.ptf_alpha is not None or tq.is_log2:
                raise InputError(f"QAT: tensor '{name}' uses {'PTF' if tq.ptf_alpha is not None else 'a log2 Softmax output'}, "
                                 "whose scales QAT does not train", "calibrate with ptf: false and softmax_log2: false before hbtool qat")
        self._fold_bias_delta()
        self.float_nodes = {n.name: n for n in self.graph.nodes}
        self.producers = self.graph.producer_map()
        unsupported = sorted({n.op_type for n in self.graph.nodes if not supported(n)})
        if unsupported:
            raise InputError(f"QAT has no torch form of {', '.join(unsupported)}",
                             "run hbtool qat on a model without these ops, or open an issue with the model")
        # trainable weights: the constant weight and bias of every tensor-unit node on the BPU
        self.weight_axis: dict[str, int] = {}
        self._param_index: dict[str, str] = {}
        for node in self.graph.nodes:
            if node.meta.get("on") != "BPU" or node.op_type not in WEIGHTED_OPS:
                continue
            wa = weight_input_and_axis(node, self.graph)
            if wa is None:
                continue
            self.weight_axis[wa[0]] = wa[1]
            self._add_param(wa[0])
            if node.op_type in ("Conv", "Gemm", "Linear") and len(node.inputs) > 2 and node.inputs[2] and self.graph.is_const(node.inputs[2]):
                self._add_param(node.inputs[2])
        # activation scales: one per shared-scale group (fixed Softmax scales stay constants)
        self.group_of = {name: tq.group for name, tq in self.plan.tensors.items()}
        self._scale_index: dict[int, str] = {}
        for gid, members in self.plan.groups.items():
            tq = self.plan.tensors[members[0]]
            if tq.method.startswith("fixed:") or tq.axis_scales is not None:  # a segmented output: its pieces' scales
                continue
            key = f"scale_{len(self._scale_index)}"
            p = nn.Parameter(torch.tensor(float(tq.scale), dtype=torch.float32), requires_grad=self.train_scales)
            self.register_parameter(key, p)
            self._scale_index[gid] = key
            if self.train_scales:
                shape = self.graph.shape(members[0]) or (1,)
                factor = lsq_grad_scale(int(np.prod(shape[1:] or (1,))), QMAX[tq.bits] if tq.code_range is None else tq.code_range[1])
                p.register_hook(lambda g, f=factor: g * f)
        self._synced: tuple | None = None
        self._float_of: dict[str, str] = {}
        self.program: Graph | None = None
        self.sync()

    # ------------------------------------------------------------------ parameters
    def _add_param(self, const_name: str) -> None:
        if const_name in self._param_index:
            return
        key = f"p{len(self._param_index)}"
        self.register_parameter(key, nn.Parameter(_float_t(self.graph.const(const_name)).clone()))
        self._param_index[const_name] = key

    def param(self, const_name: str) -> nn.Parameter | None:
        key = self._param_index.get(const_name)
        return None if key is None else getattr(self, key)

    def named_weights(self) -> dict[str, nn.Parameter]:
        """``{graph constant: parameter}`` of the trained weights and biases."""
        return {name: getattr(self, key) for name, key in self._param_index.items()}

    def scale(self, tensor: str) -> torch.Tensor:
        """The scale of a planned tensor: its group's parameter, or the fixed kernel scale."""
        tensor = self._float_of.get(tensor, tensor)
        gid = self.group_of[tensor]
        key = self._scale_index.get(gid)
        if key is None:
            return torch.tensor(float(self.plan.tensors[tensor].scale), dtype=torch.float32, device=self.device)
        return getattr(self, key)

    def _segment_scales(self, tensor: str, tq: Any, rank: int) -> torch.Tensor:
        """Per-channel scales of a segmented output from its pieces' scale parameters, shaped to broadcast."""
        parts = [self.scale(p).reshape(1).expand(n) for p, n in segment_pieces(self.graph, self.plan, tensor)]
        return torch.cat(parts).reshape([-1] + [1] * (-int(tq.scale_axis) - 1))

    def _fold_bias_delta(self) -> None:
        """Bias correction (plan.bias_delta) into the bias constants, so the exported model carries it."""
        from hbtool.quant.weights import fold_bias_delta

        self.graph, self.plan.bias_delta = fold_bias_delta(self.graph, self.plan.bias_delta)

    # ------------------------------------------------------------------ lowering
    def _version(self) -> tuple:
        return tuple(p._version for p in self.parameters())

    def sync(self, force: bool = False) -> None:
        """Lower the graph with the current weights and scales (skipped when nothing changed)."""
        version = self._version()
        if not force and version == self._synced and self.program is not None:
            return
        with torch.no_grad():
            for name, key in self._param_index.items():
                v = self.graph.values[name]
                v.data = getattr(self, key).detach().cpu().numpy().astype(np.float32).reshape(v.data.shape)
            for gid, key in self._scale_index.items():
                s = float(np.float32(max(float(getattr(self, key)), _MIN_SCALE)))
                for m in self.plan.groups[gid]:
                    tq = self.plan.tensors[m]
                    tq.scale, tq.threshold = s, s * (QMAX[tq.bits] if tq.code_range is None else tq.code_range[1])
        refresh_output_segments(self.graph, self.plan)
        self.weight_scales = {w: (self._weight_scales(w, self.graph.const(w), axis), axis) for w, axis in self.weight_axis.items()}
        self.program, self.report = lower_to_integer(self.graph, self.plan, self.weight_scales, self.rounding)
        self._program_consts: dict[str, torch.Tensor] = {}
        self._ctx = OpContext(self.program)
        # integer names the lowering gave planned tensors (boundary quantizers, renamed model outputs)
        self._float_of: dict[str, str] = {}
        self._cpu_outputs = {o for n in self.program.nodes if n.meta.get("on") != "BPU" and n.meta.get("kernel") is None
                             for o in n.outputs if o}
        for n in self.program.nodes:
            if n.op_type == HZ_QUANTIZE:
                self._float_of[n.outputs[0]] = n.inputs[0]
            elif n.op_type == HZ_DEQUANTIZE and n.outputs[0] in self.program.outputs:
                self._float_of[n.inputs[0]] = n.outputs[0]
        self._synced = version

    def _weight_scales(self, wname: str, w: np.ndarray, axis: int) -> np.ndarray:
        """The PTQ rule for the current weights: int4 MSE scales on the 4-bit path, else int8 ones."""
        if self.plan.weight_bits.get(wname) == 4:
            from hbtool.quant.int4 import int4_weight_scales

            return int4_weight_scales(w, axis)
        return weight_scales(w, axis, self.per_channel)

    # ------------------------------------------------------------------ execution
    def _const(self, name: str) -> torch.Tensor:
        if name not in self._program_consts:
            data = np.array(self.program.const(name))
            if data.dtype.kind == "f":  # integer codes the lowering stores as float64, float constants of CPU nodes
                data = data.astype(np.float32)
            self._program_consts[name] = _t(data).to(self.device)
        return self._program_consts[name]

    def forward(self, *inputs: torch.Tensor, tensors: Sequence[str] = (), outputs: bool = True) -> tuple[torch.Tensor, ...]:
        """Model outputs (float, dequantized), then the dequantized ``tensors`` asked for (distillation).

        ``outputs=False`` returns the ``tensors`` only and runs only the nodes they depend on
        (a KL loss on the logits needs no final Softmax)."""
        self.sync()
        prog = self.program
        env: dict[str, torch.Tensor] = {name: x for name, x in zip(prog.inputs, inputs)}
        needed = None if outputs else _needed_nodes(prog, tensors)
        for node in prog.nodes:
            if needed is not None and node.name not in needed:
                continue
            xs = [None if not i else (env[i] if i in env else self._const(i)) for i in node.inputs]
            outs = self._run(node, xs)
            for o, v in zip(node.outputs, outs):
                if o:
                    env[o] = v
        extra = []
        for t in tensors:
            if t in prog.outputs:
                extra.append(env[t])
            elif t in env and t in self.plan.tensors:
                extra.append(env[t] * self.scale(t))
            elif t in env and t in self._cpu_outputs:
                extra.append(env[t])  # a CPU node's float output
            else:
                raise InputError(f"QAT: distillation tensor '{t}' is not an integer tensor of the program",
                                 "name a BPU activation tensor of the optimized float model (see the calibrated model)")
        return (tuple(env[o] for o in prog.outputs) if outputs else ()) + tuple(extra)

    def _run(self, node: Node, xs: list) -> list[torch.Tensor]:
        kernel = node.meta.get("kernel")
        if node.op_type == HZ_QUANTIZE:
            tensor = node.inputs[0]
            tq = self.plan.tensors[tensor]
            qmin, qmax = int_range(tq.bits)
            return [fake_quant_codes(xs[0], self.scale(tensor), self._dev(np.asarray(kernel.scale, np.float32)), qmin, qmax)]
        if node.op_type == HZ_DEQUANTIZE:
            tensor = node.name[: -len("_HzDequantize")]
            tq = self.plan.tensors.get(self._float_of.get(tensor, tensor))
            if tq is not None and tq.axis_scales is not None:   # a segmented output: each piece at its own (trained) scale
                return [xs[0] * self._segment_scales(self._float_of.get(tensor, tensor), tq, xs[0].dim())]
            return [xs[0] * self.scale(tensor)]
        if kernel is not None and node.meta.get("on") == "BPU":
            return [self._kernel_node(node, kernel, xs)]
        return run_node(self._ctx, node, xs)

    def _kernel_node(self, node: Node, kernel: Any, xs: list) -> torch.Tensor:
        src = self.float_nodes.get(node.name)
        out_tensor = self._float_of.get(node.outputs[0], node.outputs[0])
        s_out = self.scale(out_tensor)
        trained = weight_input_and_axis(src, self.graph) if src is not None and isinstance(kernel, (Conv, Linear)) else None
        if trained is not None and trained[0] in self._param_index:
            return self._weighted(src, node, kernel, xs[0], s_out)
        exact = kernel_codes(kernel, [x.detach() for x in xs])
        if src is None:  # a node the lowering made up has no float form to differentiate
            return exact
        surrogate = self._surrogate(src, node, xs) / s_out
        qmin, qmax = int_range(self.plan.tensors[out_tensor].bits)
        rq = getattr(kernel, "requant", None)
        if rq is not None:
            qmin, qmax = rq.lo, rq.hi
        return straight_through(exact, torch.clamp(surrogate, qmin, qmax))

    def _surrogate(self, src: Node, node: Node, xs: list) -> torch.Tensor:
        """The float op of the source node on the dequantized codes (and any fused activation after it)."""
        live = iter(x for x, name in zip(xs, node.inputs) if name)
        args = []
        for i in src.inputs:
            if not i:
                args.append(None)
            elif self.graph.is_const(i):
                args.append(self._dev(np.array(self.graph.const(i)), keep_dtype=True))
            else:
                args.append(next(live) * self.scale(i))
        y = run_node(OpContext(self.graph), src, args)[0]
        out = self._float_of.get(node.outputs[0], node.outputs[0])
        if out != src.outputs[0]:  # a Relu/Clip the kernel applies as its clamp
            act = self.producers[out]
            y = run_node(OpContext(self.graph), act, [y] + [None if not i else self._dev(np.array(self.graph.const(i))) for i in act.inputs[1:]])[0]
        return y

    def _weighted(self, src: Node, node: Node, kernel: Any, x: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
        """Conv / Linear: integer codes accumulated in torch, the kernel's requantization, float gradient."""
        wname, _ = weight_input_and_axis(src, self.graph)
        w = self.param(wname)
        s_in = self.scale(src.inputs[0])
        if isinstance(kernel, Conv):
            s_w = self._dev(self.weight_scales[wname][0])
            w_eff, chan = w, (-1,) + (1,) * (w.dim() - 1)
        else:
            w_eff = w.t() if src.op_type == "Gemm" and src.attr("transB", 0) else w
            w_eff = w_eff * float(src.attr("alpha", 1.0)) if src.op_type == "Gemm" else w_eff
            scales = self.weight_scales[wname][0]
            if scales.size != w_eff.shape[1]:
                scales = self._weight_scales(wname, w_eff.detach().numpy(), 1)
            s_w, chan = self._dev(scales), (1, -1)
        ws = w_eff / s_w.reshape(chan)
        w_codes = straight_through(self._dev(kernel.weight), ws)
        b_codes = None
        if kernel.bias is not None:
            b = self.param(src.inputs[2]) if len(src.inputs) > 2 and src.inputs[2] else None
            exact_b = self._dev(kernel.bias)
            if b is not None:
                beta = float(src.attr("beta", 1.0)) if src.op_type == "Gemm" else 1.0
                b_codes = straight_through(exact_b, b.reshape(-1) * beta / (s_in.detach() * s_w))
            else:
                b_codes = exact_b
        if isinstance(kernel, Conv):
            from hbtool.qat.torch_ops import conv

            acc = conv(x, w_codes, b_codes, src)
        else:
            acc = x @ w_codes
            if b_codes is not None:
                acc = acc + b_codes
        bmax = int(np.abs(kernel.bias).max(initial=0)) if kernel.bias is not None else 0
        in_tensor = self._float_of.get(src.inputs[0], src.inputs[0])
        bits = self.plan.tensors[in_tensor].bits if in_tensor in self.plan.tensors else None
        # the input's integer range bounds the accumulator without a pass over the data (int8 inputs)
        xmax = float(2 ** (bits - 1)) if bits is not None else None
        if xmax is None or xmax * kernel.wsum + bmax > F32_EXACT:
            xmax = float(x.detach().abs().max()) if x.numel() else 0.0
        if xmax * kernel.wsum + bmax <= F32_EXACT:
            acc_int = torch.round(acc.detach()).to(torch.int64)
        else:  # int16 inputs: the same product, exact, without float64 convolutions (module docstring)
            with torch.no_grad():
                acc_int = self._exact_accumulate(src, kernel, x.detach())
        exact = requantize_codes(kernel.requant, acc_int)
        axis_shape = (1, -1) + (1,) * (acc.dim() - 2) if isinstance(kernel, Conv) else (-1,)
        ratio = (s_in * s_w / s_out).reshape(axis_shape)
        surrogate = torch.clamp(acc * ratio, kernel.requant.lo, kernel.requant.hi)
        return straight_through(exact, surrogate)

    def _exact_accumulate(self, src: Node, kernel: Any, x: torch.Tensor) -> torch.Tensor:
        """The int64 integer accumulator of a weighted kernel whose float32 product could round (int16 inputs).

        Why not one float64 product: torch has no fast float64 convolution on CPU, and this path
        ran for most layers of an int16-heavy recogniser (half of a training step). Instead the
        inputs are split into bytes, ``x = 256 * hi + lo`` with ``lo`` in [0, 255] and ``hi`` in
        [-128, 127] for int16 codes; each byte's product is exact in float32 while
        ``2**8 * wsum <= 2**24``, and the two are joined in int64. Wider weights fall back to float64."""
        hi = torch.floor(x / 256.0)
        lo = x - 256.0 * hi
        hmax = float(hi.abs().max()) if hi.numel() else 0.0
        w32 = self._dev(kernel.weight)
        if max(hmax, 255.0) * kernel.wsum > F32_EXACT:
            w64 = w32.double()
            parts = [(x.double(), 1, w64)]
        else:
            parts = [(hi, 256, w32), (lo, 1, w32)]
        acc = None
        for xs, factor, w in parts:
            if isinstance(kernel, Conv):
                from hbtool.qat.torch_ops import conv

                y = conv(xs, w, None, src)
            else:
                y = xs @ w
            y = torch.round(y).to(torch.int64) * factor
            acc = y if acc is None else acc + y
        if kernel.bias is not None:
            b = torch.from_numpy(np.asarray(kernel.bias, np.int64)).to(acc.device)
            acc = acc + (b.reshape((1, -1) + (1,) * (acc.dim() - 2)) if isinstance(kernel, Conv) else b)
        return acc

    def _dev(self, a: np.ndarray, keep_dtype: bool = False) -> torch.Tensor:
        """A numpy array as a tensor on the module's device (float32 unless ``keep_dtype``)."""
        t = _t(np.array(a)) if keep_dtype else _float_t(a)
        return t.to(self.device)

    def to_device(self, device: str | torch.device) -> "QatModel":
        """Move the parameters and every tensor the executor makes to ``device`` (``cpu``/``cuda``)."""
        self.device = torch.device(device)
        self._program_consts = {}
        return self.to(self.device)

    # ------------------------------------------------------------------ results
    def trained_graph(self) -> tuple[Graph, QuantPlan, dict[str, tuple[np.ndarray, int]]]:
        """The float graph with the trained weights, the plan with the trained scales, the weight scales."""
        self.sync(force=True)
        return self.graph.copy(), copy.deepcopy(self.plan), dict(self.weight_scales)

    def scale_parameters(self) -> Iterable[nn.Parameter]:
        return [getattr(self, k) for k in self._scale_index.values()]
