"""Faster forms of the integer kernels for ``simulate``, bit-identical to their numpy forms.

The numpy forms in :mod:`hbtool.kernels` define the arithmetic; the emulator must run
thousands of images, so its hot paths are replaced here by equivalent computations:

* **Products** (Conv, Linear, MatMul accumulators) run as float32 GEMM/convolutions in
  onnxruntime (MLAS, several times faster than numpy's BLAS here) on operands split into
  digits small enough that every partial sum is an integer of at most 2**24, hence exact in
  any summation order: int16 activations as ``256 * hi + lo`` and, when needed, int8
  weights as ``16 * hi + lo`` (the kernels' own ONNX forms use the same splits). The parts
  are recombined in int64.
* **Requantization** with per-channel shifts is rewritten to one common shift:
  ``round(acc * M_c / 2**n_c) == round(acc * (M_c << (n - n_c)) / 2**n)`` exactly for the
  ``half_up`` and ``floor`` modes, as long as the product stays below 2**62 (checked when
  built; otherwise the kernel's own form runs).
* **Tables**: an elementwise kernel of one int8/int16 input (LUT activations) is evaluated
  once on all 256 / 65536 codes by its own numpy form; running it is one gather.

Every accelerated kernel is checked against the kernel's numpy form in the tests; anything
not covered here runs the kernel's numpy form unchanged.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hbtool.kernels.conv import plan_float_conv, split_weight

F32_EXACT = 2**24
PRODUCT_LIMIT = 2**62


# ------------------------------------------------------------------------------ requantize
def fast_requantize(rq) -> Callable[[np.ndarray], np.ndarray]:
    """A function equal to ``rq.apply_trusted`` (see the module docstring)."""
    if rq.clamp_acc is not None or rq.pre_shift is not None or rq.rounding not in ("half_up", "floor"):
        return rq.apply_trusted
    M = np.asarray(rq.M, np.int64)
    n = np.asarray(rq.n, np.int64)
    nmax = int(n.max(initial=0))
    M2 = M << (nmax - n)
    if rq.acc_bound * int(np.abs(M2).max(initial=0)) >= PRODUCT_LIMIT:
        return rq.apply_trusted
    half = (1 << (nmax - 1)) if (rq.rounding == "half_up" and nmax > 0) else 0
    lo, hi = int(rq.lo), int(rq.hi)
    scalar = M2.ndim == 0 or M2.size == 1
    m_s = int(M2.reshape(-1)[0]) if scalar else None

    def apply(acc: np.ndarray) -> np.ndarray:
        y = acc * (m_s if scalar else M2)
        if half:
            y += half
        y >>= nmax
        np.clip(y, lo, hi, out=y)
        return y

    return apply


# ------------------------------------------------------------------------------ tables
def tabulate_unary(kernel, in_bits: int) -> Callable[[np.ndarray], np.ndarray]:
    """One gather through the kernel's values on every input code."""
    lo = -(1 << (in_bits - 1))
    codes = np.arange(lo, -lo, dtype=np.int64)
    table = np.asarray(kernel.apply_numpy(codes), np.int64)
    offset = -lo

    def apply(x: np.ndarray) -> np.ndarray:
        return table[x + offset]

    return apply


# ------------------------------------------------------------------------------ products
def _digits16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hi = (x + 128) >> 8
    return hi, x - (hi << 8)


def _session(model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.inter_op_num_threads = 1
    # many small sessions take turns with numpy: idle ORT threads must not spin on the cores
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _model(nodes, inputs, outputs, inits):
    from onnx import helper

    g = helper.make_graph(nodes, "accel", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


class FloatProduct:
    """Exact integer products through float32 onnxruntime ops on digit-split operands.

    ``parts`` is a list of ``(factor, ...)`` of the split; the result is
    ``sum(factor * part_result)`` in int64.
    """

    def __init__(self, session, x_split: bool, w_factors: list[int]):
        self.session = session
        self.x_split = x_split
        self.w_factors = w_factors

    def run(self, x: np.ndarray, extra: dict | None = None) -> np.ndarray:
        if self.x_split:
            hi, lo = _digits16(x)
            feed = np.concatenate([hi, lo], axis=0).astype(np.float32)
        else:
            feed = x.astype(np.float32)
        feeds = {"x": feed}
        if extra:
            feeds.update(extra)
        outs = self.session.run(None, feeds)
        n = x.shape[0]
        acc = None
        for f, y in zip(self.w_factors, outs):
            if self.x_split:
                part = (y[:n].astype(np.int64) << 8) + y[n:].astype(np.int64)
            else:
                part = y.astype(np.int64)
            if f != 1:
                part *= f
            acc = part if acc is None else acc + part
        return acc


def _plan(w_out_first: np.ndarray, in_bits: int) -> tuple[bool, bool] | None:
    """(split x, split w) keeping every partial sum at most 2**24 (the kernels' own plan), or None."""
    try:
        return plan_float_conv(w_out_first, in_bits)
    except ValueError:
        return None


def linear_product(kernel) -> Callable[[np.ndarray], np.ndarray] | None:
    """``x @ W + b`` (int64) of a Linear kernel through onnxruntime, or None if not exact."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.asarray(kernel.weight, np.int64)
    plan = _plan(w.T, kernel.in_bits)
    if plan is None:
        return None
    sx, sw = plan
    weights = list(zip([16, 1], split_weight(w))) if sw else [(1, w)]
    nodes, inits, outs = [], [], []
    for k, (_, wp) in enumerate(weights):
        inits.append(numpy_helper.from_array(wp.astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{k}"], [f"y{k}"]))
        outs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None))
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], outs, inits)
    prod = FloatProduct(_session(model), sx, [f for f, _ in weights])
    bias = None if kernel.bias is None else np.asarray(kernel.bias, np.int64)

    def run(x: np.ndarray) -> np.ndarray:
        shape = x.shape
        acc = prod.run(x.reshape(-1, shape[-1]))
        if bias is not None:
            acc += bias
        return acc.reshape(shape[:-1] + (acc.shape[-1],))

    return run


def conv_product(kernel) -> Callable[[np.ndarray], np.ndarray] | None:
    """``conv(x, W) + b`` (int64) of a Conv kernel through onnxruntime, or None if not exact."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.asarray(kernel.weight, np.int64)
    plan = _plan(w, kernel.in_bits)
    if plan is None:
        return None
    sx, sw = plan
    weights = list(zip([16, 1], split_weight(w))) if sw else [(1, w)]
    attrs = dict(kernel_shape=list(w.shape[2:]), strides=list(kernel.strides), pads=list(kernel.pads),
                 dilations=list(kernel.dilations), group=int(kernel.group))
    nodes, inits, outs = [], [], []
    for k, (_, wp) in enumerate(weights):
        inits.append(numpy_helper.from_array(wp.astype(np.float32), f"w{k}"))
        nodes.append(helper.make_node("Conv", ["x", f"w{k}"], [f"y{k}"], **attrs))
        outs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None))
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], outs, inits)
    prod = FloatProduct(_session(model), sx, [f for f, _ in weights])
    bias = None if kernel.bias is None else np.asarray(kernel.bias, np.int64).reshape((-1,) + (1,) * (w.ndim - 2))

    def run(x: np.ndarray) -> np.ndarray:
        acc = prod.run(x)
        if bias is not None:
            acc += bias
        return acc

    return run


def matmul_product(kernel) -> Callable[[np.ndarray, np.ndarray], np.ndarray] | None:
    """``a @ b`` (int64) of two activations through onnxruntime, or None if not exact."""
    from onnx import TensorProto, helper

    k = int(kernel.k)
    amax, bmax = 1 << (kernel.a_bits - 1), 1 << (kernel.b_bits - 1)
    for sa, sb in ((False, False), (True, False), (False, True), (True, True)):
        if sa and kernel.a_bits <= 8 or sb and kernel.b_bits <= 8:
            continue
        if k * (128 if sa else amax) * (128 if sb else bmax) <= F32_EXACT:
            break
    else:
        return None
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                   [helper.make_tensor_value_info("a", TensorProto.FLOAT, None), helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [])
    session = _session(model)

    def parts(x: np.ndarray, split: bool) -> list[tuple[int, np.ndarray]]:
        if not split:
            return [(0, x.astype(np.float32))]
        hi, lo = _digits16(x)
        return [(8, hi.astype(np.float32)), (0, lo.astype(np.float32))]

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        acc = None
        for sa_shift, ap in parts(a, sa):
            for sb_shift, bp in parts(b, sb):
                y = session.run(None, {"a": ap, "b": bp})[0].astype(np.int64)
                if sa_shift + sb_shift:
                    y <<= sa_shift + sb_shift
                acc = y if acc is None else acc + y
        return acc

    return run


# ------------------------------------------------------------------------------ dispatch
def accelerate(kernel) -> Callable | None:
    """An equivalent faster function for ``kernel.apply_numpy``, or None to keep the kernel's own."""
    kind = type(kernel).__name__
    try:
        if kind == "Linear":
            prod, rq = linear_product(kernel), fast_requantize(kernel.requant)
            if prod is None:
                return None
            return lambda x: rq(prod(np.asarray(x, np.int64)))
        if kind == "Conv":
            prod, rq = conv_product(kernel), fast_requantize(kernel.requant)
            if prod is None:
                return None
            return lambda x: rq(prod(np.asarray(x, np.int64)))
        if kind == "MatMul":
            prod, rq = matmul_product(kernel), fast_requantize(kernel.requant)
            if prod is None:
                return None
            return lambda a, b: rq(prod(np.asarray(a, np.int64), np.asarray(b, np.int64)))
        if kind == "Lut":
            return tabulate_unary(kernel, int(kernel.in_bits))
    except Exception:  # an unexpected kernel layout: the kernel's own form is always correct
        return None
    return None
