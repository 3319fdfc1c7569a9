"""Error metrics between a float tensor and its quantized counterpart (Horizon's table columns)."""

from __future__ import annotations

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).reshape(-1)
    b = np.asarray(b, np.float64).reshape(-1)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def error_metrics(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """``Cosine | L1 | L2 | Chebyshev``: L1/L2 are mean absolute / root-mean-square errors."""
    r = np.asarray(ref, np.float64).reshape(-1)
    g = np.asarray(got, np.float64).reshape(-1)
    d = r - g
    return {
        "cosine": cosine(r, g),
        "l1": float(np.abs(d).mean()) if d.size else 0.0,
        "l2": float(np.sqrt((d**2).mean())) if d.size else 0.0,
        "chebyshev": float(np.abs(d).max()) if d.size else 0.0,
    }


class RunningCosine:
    """Cosine similarity accumulated over many samples without keeping them."""

    def __init__(self) -> None:
        self.dot = 0.0
        self.na = 0.0
        self.nb = 0.0

    def update(self, a: np.ndarray, b: np.ndarray) -> None:
        # float32 BLAS dot products: cosine needs ~1e-6 relative precision, not float64 copies
        a = np.ascontiguousarray(a, np.float32).reshape(-1)
        b = np.ascontiguousarray(b, np.float32).reshape(-1)
        self.dot += float(np.dot(a, b))
        self.na += float(np.dot(a, a))
        self.nb += float(np.dot(b, b))

    @property
    def value(self) -> float:
        if self.na == 0 and self.nb == 0:
            return 1.0
        if self.na == 0 or self.nb == 0:
            return 0.0
        return self.dot / np.sqrt(self.na * self.nb)


class RunningErrors:
    """Cosine / L1 / L2 / Chebyshev accumulated over samples."""

    def __init__(self) -> None:
        self.cos = RunningCosine()
        self.abs_sum = 0.0
        self.sq_sum = 0.0
        self.n = 0
        self.cheb = 0.0

    def update(self, ref: np.ndarray, got: np.ndarray) -> None:
        r = np.ascontiguousarray(ref, np.float32).reshape(-1)
        g = np.ascontiguousarray(got, np.float32).reshape(-1)
        d = r - g
        self.cos.update(r, g)
        self.abs_sum += float(np.abs(d).sum(dtype=np.float64))
        self.sq_sum += float(np.dot(d, d))
        self.n += d.size
        self.cheb = max(self.cheb, float(np.abs(d).max()) if d.size else 0.0)

    def result(self) -> dict[str, float]:
        n = max(self.n, 1)
        return {"cosine": self.cos.value, "l1": self.abs_sum / n, "l2": float(np.sqrt(self.sq_sum / n)), "chebyshev": self.cheb}


def output_channel_axis(shape: tuple[int, ...] | list[int], layout: str | None = None) -> int | None:
    """The axis an output's channels lie on: 1, or the last axis of an NHWC or rank-2 output.

    Why: a model output often concatenates quantities of unrelated ranges (a detector's box
    pixels beside its class scores); judged as one tensor, the large channels hide the small
    ones. ``None`` for a rank-0/1 output, which is one channel."""
    rank = len(shape)
    if rank < 2:
        return None
    if rank == 2 or (layout or "").upper() in ("NHWC", "NLC", "NWC"):
        return rank - 1
    return 1


#: ops whose output keeps the channel axis of their first non-constant input: the walk back from an
#: output goes through them to the op that decides what the channels are
_CHANNEL_KEEPING = frozenset({
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid",
    "HardSwish", "Swish", "Gelu", "Elu", "Selu", "Softplus", "Softsign", "Erf", "Exp", "Log", "Neg", "Abs", "Sqrt",
    "Pow", "Identity", "Cast", "Dropout", "QuantizeLinear", "DequantizeLinear", "HzCalibration", "HzDequantize",
})
#: ops whose channels lie on their last axis (a feature or class vector per row)
_LAST_AXIS = frozenset({"MatMul", "Gemm", "Linear", "LayerNormalization", "Einsum"})
#: ops whose channels lie on axis 1 (NCHW feature maps)
_AXIS_ONE = frozenset({"Conv", "ConvTranspose", "BatchNormalization", "InstanceNormalization", "MaxPool",
                       "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Resize", "Upsample", "DepthToSpace",
                       "SpaceToDepth", "ChannelLayerNorm"})


def producer_channel_axis(producer, output: str, rank: int) -> int | None:
    """The channel axis of ``output`` read from the op that makes it, else :func:`output_channel_axis`'s rule.

    ``producer(name)`` gives ``(op_type, attrs, inputs, input_rank)`` of the op writing ``name``, or None.
    Why: the shape alone cannot tell a detector's ``1 x (4+nc) x anchors`` (channels on axis 1, a Concat
    over axis 1 made it) from a recogniser's ``1 x steps x classes`` (a Softmax over the last axis made
    it, and judged along axis 1 its "channels" would be time steps). The walk goes back through
    elementwise ops and transposes to a Concat, Softmax, Conv or MatMul, whose axis says it.
    """
    if rank < 2:
        return None
    name, perm_chain = output, []
    for _ in range(32):
        found = producer(name)
        if found is None:
            break
        op, attrs, inputs, in_rank = found
        if op in ("Softmax", "LogSoftmax") or (op == "Concat" and "axis" in attrs):
            axis = int(attrs.get("axis", -1))
            axis = axis + in_rank if axis < 0 else axis
            return _through(perm_chain, axis, rank)
        if op in _LAST_AXIS:
            return _through(perm_chain, in_rank - 1, rank)
        if op in _AXIS_ONE:
            return _through(perm_chain, 1, rank)
        if op == "Transpose" and attrs.get("perm") is not None:
            perm_chain.append([int(p) for p in attrs["perm"]])
            name = inputs[0]
            continue
        if op in _CHANNEL_KEEPING and inputs and in_rank == rank:
            name = inputs[0]
            continue
        break
    return output_channel_axis([0] * rank)


def _through(perms: list[list[int]], axis: int, rank: int) -> int | None:
    """Where input axis ``axis`` ends up after the transposes met on the walk (outermost last in ``perms``)."""
    for perm in reversed(perms):
        if axis not in perm:
            return output_channel_axis([0] * rank)
        axis = perm.index(axis)
    return axis if 0 <= axis < rank else output_channel_axis([0] * rank)


def onnx_channel_axes(model) -> dict[str, int | None]:
    """:func:`producer_channel_axis` of every output of an ``onnx.ModelProto`` (shapes from its value infos)."""
    from onnx import helper, shape_inference

    try:
        model = shape_inference.infer_shapes(model)
    except Exception:  # an unknown domain: ranks of the outputs still come from the graph's outputs
        pass
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in list(model.graph.value_info) + list(model.graph.input)
             + list(model.graph.output)}
    consts = {i.name for i in model.graph.initializer}
    by_output = {o: n for n in model.graph.node for o in n.output}

    def producer(name: str):
        node = by_output.get(name)
        if node is None:
            return None
        data = [i for i in node.input if i and i not in consts]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return node.op_type, attrs, data, ranks.get(data[0], ranks.get(name, 0)) if data else ranks.get(name, 0)

    return {o.name: producer_channel_axis(producer, o.name, ranks.get(o.name, 0)) for o in model.graph.output}


def _channels_first(x: np.ndarray, axis: int | None) -> np.ndarray:
    x = np.asarray(x)
    if axis is None:
        return x.reshape(1, -1)
    return np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)


class RunningChannelErrors:
    """Cosine and SNR of every channel of one output, accumulated over samples.

    One definition used wherever an output is reported or compared (calibrate, debug,
    ``simulate --compare``, the gates): a channel quantized to zero shows as cosine 0 and
    an SNR near 0 dB even when the whole output's cosine is 0.99."""

    def __init__(self, axis: int | None) -> None:
        self.axis = axis
        self.dot = self.na = self.nb = self.err = None

    def update(self, ref: np.ndarray, got: np.ndarray) -> None:
        r = _channels_first(np.asarray(ref, np.float64), self.axis)
        g = _channels_first(np.asarray(got, np.float64), self.axis)
        if self.dot is None:
            self.dot, self.na, self.nb, self.err = (np.zeros(r.shape[0]) for _ in range(4))
        self.dot += (r * g).sum(1)
        self.na += (r * r).sum(1)
        self.nb += (g * g).sum(1)
        self.err += ((r - g) ** 2).sum(1)

    @property
    def cosine(self) -> np.ndarray:
        """Per channel; 1 where both are all zero, 0 where exactly one is."""
        if self.dot is None:
            return np.ones(0)
        denom = np.sqrt(self.na * self.nb)
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(denom > 0, self.dot / np.where(denom > 0, denom, 1), 0.0)
        return np.where((self.na == 0) & (self.nb == 0), 1.0, c)

    @property
    def snr_db(self) -> np.ndarray:
        """Per channel signal-to-noise ratio in dB (inf where the channel is exact)."""
        if self.dot is None:
            return np.ones(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            snr = 10 * np.log10(np.where(self.err > 0, self.na / np.where(self.err > 0, self.err, 1), np.inf))
        snr = np.where(self.err == 0, np.inf, snr)
        return np.where((self.na == 0) & (self.err > 0), -np.inf, snr)


def channel_errors(ref: np.ndarray, got: np.ndarray, axis: int | None) -> RunningChannelErrors:
    """Per-channel cosine / SNR of one pair of tensors (see :class:`RunningChannelErrors`)."""
    acc = RunningChannelErrors(axis)
    acc.update(ref, got)
    return acc
