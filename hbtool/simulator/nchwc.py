"""onnxruntime's blocked channel layout (NCHWc) for the simulator's float convolutions.

onnxruntime's float graph runs convolutions in a blocked layout: channels in blocks of ``B``
(16 with AVX-512, 8 with AVX2), a tensor ``(N, C, H, W)`` stored as ``(N, C/B, H, W, B)``, and
reorders to and from NCHW only at the graph's edges. A one-node session of the simulator is all
edge: its optimizer wraps the blocked convolution in a ``ReorderInput`` and a ``ReorderOutput``
on every call (profiled 2026-12-06: a MobileNetV2 depthwise layer 2.0 ms in a one-node session,
0.6 ms as the blocked convolution alone; the input reorder alone 0.5-1.5 ms).

Here the simulator uses the blocked convolution (``com.microsoft.nchwc`` ``Conv``) directly: its
weight reordered once, as onnxruntime's own transformer does, and the layout changes moved into
passes the simulator makes anyway. The requantizing loop after the product reads the blocked
accumulators and writes either NCHW codes (the layout change rides on that pass) or, where every
reader of the result is another blocked convolution, blocked float32 codes that the reader takes
as they are; a convolution whose input comes from anything else packs it in the one pass that
converted it to float32 before. The products are the same exact float sums of small integers
(every partial sum an integer under ``2**24``, in any order), so the results are the same bits.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from hbtool.kernels.builder import ElemType
from hbtool.simulator import onnx_bytes

DOMAIN = "com.microsoft.nchwc"


def padded(channels: int, block: int) -> int:
    """``channels`` rounded up to a whole number of blocks."""
    return -(-channels // block) * block


def reorder_weight(w: np.ndarray, depthwise: bool, block: int) -> np.ndarray:
    """A ``(Cout, Cin/group, kh, kw)`` weight in the layout the blocked convolution reads, zero-padded to whole
    blocks: ``OIHWBo`` (output channels innermost) for a depthwise weight, ``OIHWBiBo`` (input, then output
    channels innermost) otherwise; the shapes onnxruntime's NCHWc transformer gives them (checked in the tests)."""
    co, ci, kh, kw = w.shape
    cop = padded(co, block)
    if depthwise:
        p = np.zeros((cop, 1, kh, kw), np.float32)
        p[:co] = w
        return np.ascontiguousarray(p.reshape(cop // block, block, 1, kh, kw).transpose(0, 2, 3, 4, 1)).reshape(cop, 1, kh, kw)
    cip = padded(ci, block)
    p = np.zeros((cop, cip, kh, kw), np.float32)
    p[:co, :ci] = w
    blocked = p.reshape(cop // block, block, cip // block, block, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(blocked).reshape(cop, cip, kh, kw)


def block(x: np.ndarray, block_: int) -> np.ndarray:
    """NCHW ``x`` as blocked float32 ``(N, Cpad, H, W)`` (numpy; the fused loop is :func:`fused.pack_blocked`)."""
    n, c = x.shape[:2]
    cp = padded(c, block_)
    p = np.zeros((n, cp) + x.shape[2:], np.float32)
    p[:, :c] = x
    return np.ascontiguousarray(p.reshape((n, cp // block_, block_) + x.shape[2:]).transpose(0, 1, 3, 4, 2)).reshape(p.shape)


def unblock(x: np.ndarray, channels: int, block_: int) -> np.ndarray:
    """Blocked ``(N, Cpad, H, W)`` back to NCHW ``(N, channels, H, W)`` (numpy)."""
    n, cp = x.shape[:2]
    return np.ascontiguousarray(x.reshape((n, cp // block_) + x.shape[2:] + (block_,)).transpose(0, 1, 4, 2, 3)
                                .reshape(x.shape)[:, :channels])


def _conv_model(w: np.ndarray, attrs: dict, depthwise: bool, block_: int) -> bytes:
    """One blocked convolution: float32 blocked input ``x``, float32 blocked output ``y``."""
    wb = reorder_weight(w, depthwise, block_)
    node_attrs = dict(attrs, group=wb.shape[0] if depthwise else 1)
    node = onnx_bytes.Node("Conv", ["x", "w"], ["y"], node_attrs, domain=DOMAIN)
    return onnx_bytes.model([node], {"x": ElemType.FLOAT}, {"y": ElemType.FLOAT}, {"w": wb})


@functools.lru_cache(maxsize=None)
def block_size() -> int | None:
    """This onnxruntime's NCHWc block on this CPU, or None where it runs no blocked convolution.

    Found by running a small depthwise and a small full convolution of integer operands in the
    blocked form at each candidate block and comparing them with the plain ``Conv``: the block
    that gives the same numbers is the one the kernels use (a wrong one gives other numbers, a
    build without the blocked kernels fails to load the model).
    """
    from hbtool.simulator.accel import _session

    rng = np.random.default_rng(0)
    for b in (16,):  # the loops of .fused are written for 16 lanes (AVX-512); an AVX2 machine's 8 keeps the plain sessions
        try:
            for depthwise in (True, False):
                c = 2 * b + (0 if depthwise else 3)  # a ragged last block where the layout pads
                w = rng.integers(-8, 8, (2 * b, 1 if depthwise else c, 3, 3)).astype(np.float32)
                attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1])
                x = rng.integers(-8, 8, (2, w.shape[0] if depthwise else c, 5, 5)).astype(np.float32)
                plain = _session(onnx_bytes.model([onnx_bytes.node("Conv", ["x", "w"], ["y"], group=w.shape[0] if depthwise else 1,
                                                                   **attrs)],
                                                  {"x": ElemType.FLOAT}, {"y": ElemType.FLOAT}, {"w": w}), 1)
                blocked = _session(_conv_model(w, attrs, depthwise, b), 1)
                want = plain.run(None, {"x": x})[0]
                got = unblock(blocked.run(None, {"x": block(x, b)})[0], w.shape[0], b)
                if not np.array_equal(got, want):
                    raise ValueError("not this block")
            return b
        except Exception:
            continue
    return None


class BlockedConv:
    """``requantize(conv(x, W) + b)`` through onnxruntime's blocked convolution, then one requantizing pass.

    Takes NCHW codes (packed on entry) or, with :attr:`blocked_in`, blocked float32 codes as another
    blocked convolution wrote them; writes NCHW codes in ``requant.out_dtype`` or, with
    :attr:`blocked_out`, blocked float32 codes. The executor sets the two flags on both sides of a
    handoff together (``executor._blocked_handoffs``); a program output or any other reader sees NCHW.
    """

    def __init__(self, session, rq, bias: np.ndarray, in_channels: int, block_: int):
        from hbtool.simulator.accel import fused

        self._fused = fused
        self.session = session
        self.requant = rq
        self.reads: dict = {}  # reads any dtype: the packing pass converts it
        self.block = block_
        self.in_channels = in_channels
        self.channels = rq.channels
        cp = padded(rq.channels, block_)
        self.in_padded, self.out_padded = padded(in_channels, block_), cp

        def pad(v):
            out = np.zeros(cp, np.int64)
            out[: rq.channels] = v
            return out

        # the padding channels requantize 0 with M = 0: finite codes that no reader uses (their weights are 0)
        self._params = (pad(bias), pad(rq.M), pad(rq.n), pad(rq.half), rq.lo, rq.hi)
        self.blocked_in = False
        self.blocked_out = False

    def __call__(self, x: np.ndarray) -> np.ndarray:
        fused, b = self._fused, self.block
        n = x.shape[0]
        if self.blocked_in:
            feed = x
        else:
            feed = np.empty((n, self.in_padded) + x.shape[2:], np.float32)
            fused.pack_blocked(x.reshape(n, x.shape[1], -1), feed.reshape(n, self.in_padded // b, -1, b))
        y = self.session.run(None, {"x": feed})[0]
        blocks = y.reshape(n, self.out_padded // b, -1, b)
        if self.blocked_out:
            out = np.empty(y.shape, np.float32)
            fused.requantize_blocked(blocks, *self._params, out.reshape(blocks.shape))
            return out
        out = np.empty((n, self.channels) + y.shape[2:], self.requant.out_dtype)
        fused.requantize_unblock(blocks, *self._params, out.reshape(n, self.channels, -1))
        return out

    def numpy_args(self, x: np.ndarray) -> tuple:
        """The input as the kernel's numpy form takes it (NCHW codes)."""
        return (unblock(x, self.in_channels, self.block).astype(np.int64) if self.blocked_in else x,)

    def numpy_result(self, y: np.ndarray) -> np.ndarray:
        """The numpy form's result as this runner writes it."""
        return block(y, self.block) if self.blocked_out else y


def blocked_conv(kernel, w: np.ndarray, attrs: dict, rq, bias: np.ndarray, threads: int | None) -> Callable | None:
    """A :class:`BlockedConv` for a 2-D convolution whose float32 product needs no digit split, or None.

    Full convolutions of at least one block of input channels and depthwise ones (one input
    channel per group, as many groups as channels); others (a 3-channel stem, grouped
    convolutions) keep the plain session, which onnxruntime runs NCHW-input blocked anyway.
    Only requantizers of the vectorising loops (floor / half-up, no accumulator clamp).
    """
    from hbtool.kernels.conv import plan_float_conv
    from hbtool.simulator.accel import _session

    b = block_size()
    if b is None or w.ndim != 4 or not rq.simple:
        return None
    cout, cin_g = w.shape[:2]
    group = int(kernel.group)
    depthwise = group > 1 and cin_g == 1 and group == cout
    if (not depthwise and group != 1) or (cout if depthwise else cin_g) < b:
        return None  # grouped, or fewer channels than a block (a 3-channel stem): padding would multiply the work
    try:
        if plan_float_conv(w, kernel.in_bits) != (False, False):
            return None
    except ValueError:
        return None
    session = _session(_conv_model(w, {k: v for k, v in attrs.items() if k != "group"}, depthwise, b), threads)
    return BlockedConv(session, rq, bias, cout if depthwise else cin_g, b)
