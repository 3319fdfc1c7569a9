"""What onnxruntime's blocked layout (NCHWc) costs and saves for the simulator's one-node sessions.

simulate runs every convolution as a one-node onnxruntime session; onnxruntime's optimizer turns
it into ``ReorderInput -> com.microsoft.nchwc Conv -> ReorderOutput``, so each call pays the
two reorders that the float model's graph pays only at its edges. This probe measures, one
thread, on MobileNetV2 shapes (an inverted-residual block at 56 x 56: pointwise 24 -> 144,
depthwise 3 x 3 of 144, pointwise 144 -> 24):

* each layer as the simulator's one-node NCHW session, as the blocked convolution alone (input
  and output already blocked, the weight reordered as onnxruntime's transformer does), and
  onnxruntime's ``ReorderInput`` alone;
* the three layers as three one-node sessions, as three blocked sessions handing blocked
  tensors to each other, and as one float graph (what onnxruntime float32 runs).

Products only (no requantization): the ceiling of what a blocked handoff could save. The
simulator's end-to-end attempt and why it was dropped are in docs/simulate.md.

    python -m benchmarks.nchwc_probe [--repeat 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

BLOCK = 16  # onnxruntime's NCHWc block with AVX-512 (8 with AVX2)
NCHWC = "com.microsoft.nchwc"


def _session(model):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _padded(c: int) -> int:
    return -(-c // BLOCK) * BLOCK


def _blocked_weight(w: np.ndarray, depthwise: bool) -> np.ndarray:
    """OIHWBo (depthwise) / OIHWBiBo (full), zero-padded: the layouts onnxruntime's NCHWc transformer writes."""
    co, ci, kh, kw = w.shape
    cop = _padded(co)
    if depthwise:
        p = np.zeros((cop, 1, kh, kw), np.float32)
        p[:co] = w
        return np.ascontiguousarray(p.reshape(cop // BLOCK, BLOCK, 1, kh, kw).transpose(0, 2, 3, 4, 1)).reshape(p.shape)
    cip = _padded(ci)
    p = np.zeros((cop, cip, kh, kw), np.float32)
    p[:co, :ci] = w
    return np.ascontiguousarray(p.reshape(cop // BLOCK, BLOCK, cip // BLOCK, BLOCK, kh, kw).transpose(0, 2, 4, 5, 3, 1)).reshape(p.shape)


def _block(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    p = np.zeros((n, _padded(c), h, w), np.float32)
    p[:, :c] = x
    return np.ascontiguousarray(p.reshape(n, -1, BLOCK, h, w).transpose(0, 1, 3, 4, 2)).reshape(p.shape)


def _unblock(x: np.ndarray, c: int) -> np.ndarray:
    n, cp, h, w = x.shape
    return x.reshape(n, cp // BLOCK, h, w, BLOCK).transpose(0, 1, 4, 2, 3).reshape(n, cp, h, w)[:, :c]


def _graph(layers, blocked: bool):
    """One model of ``layers`` (weight, depthwise) in a chain: plain NCHW Conv nodes, or blocked ones."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    x = "x"
    for k, (w, depthwise) in enumerate(layers):
        wk = _blocked_weight(w, depthwise) if blocked else w
        k_shape = list(w.shape[2:])
        group = (wk.shape[0] if depthwise else 1)
        nodes.append(helper.make_node("Conv", [x, f"w{k}"], [f"y{k}"], kernel_shape=k_shape, pads=[k_shape[0] // 2] * 4,
                                      strides=[1, 1], group=group, **({"domain": NCHWC} if blocked else {})))
        inits.append(numpy_helper.from_array(wk.astype(np.float32), f"w{k}"))
        x = f"y{k}"
    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(NCHWC, 1)] if blocked else [])
    return _session(helper.make_model(graph, opset_imports=opsets))


def _integer_pointwise(w: np.ndarray):
    """simulate's route for an int8 pointwise convolution: ``MatMulInteger(W + 128 (uint8), x (int8))`` on NCHW."""
    from onnx import TensorProto, helper, numpy_helper

    co, ci = w.shape[:2]
    node = helper.make_node("MatMulInteger", ["w", "x", "wz"], ["y"])
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", TensorProto.INT8, None)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array((w.reshape(co, ci) + 128).astype(np.uint8), "w"),
                               numpy_helper.from_array(np.array(128, np.uint8), "wz")])
    return _session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _reorder_input():
    from onnx import TensorProto, helper

    node = helper.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC)
    graph = helper.make_graph([node], "reorder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return _session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(NCHWC, 1)]))


def _time(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t) / repeat)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    H = 56
    layers = [(rng.integers(-8, 8, (144, 24, 1, 1)).astype(np.float32), False),
              (rng.integers(-8, 8, (144, 1, 3, 3)).astype(np.float32), True),
              (rng.integers(-8, 8, (24, 144, 1, 1)).astype(np.float32), False)]
    names = ["pointwise 24->144", "depthwise 144 3x3", "pointwise 144->24"]
    x = rng.integers(-128, 128, (1, 24, H, H)).astype(np.float32)
    reorder = _reorder_input()
    plain = [_graph([layer], False) for layer in layers]
    blocked = [_graph([layer], True) for layer in layers]
    print(f"one thread, {H}x{H}, microseconds per call (best of 3 x {args.repeat})")
    print("| layer | one-node NCHW float session | MatMulInteger int8 GEMM | blocked convolution alone | ReorderInput of its input |")
    print("|---|---|---|---|---|")
    feeds, feeds_b = x, _block(x)
    for name, p, b, (w, depthwise) in zip(names, plain, blocked, layers):
        t_plain = _time(lambda: p.run(None, {"x": feeds}), args.repeat)
        t_blocked = _time(lambda: b.run(None, {"x": feeds_b}), args.repeat)
        padded = np.zeros((1, _padded(feeds.shape[1])) + feeds.shape[2:], np.float32)
        padded[:, :feeds.shape[1]] = feeds
        t_reorder = _time(lambda: reorder.run(None, {"x": padded}), args.repeat)
        t_gemm = "-"
        if not depthwise:
            gemm, codes = _integer_pointwise(w), np.clip(feeds, -128, 127).astype(np.int8).reshape(feeds.shape[1], -1)
            t_gemm = f"{_time(lambda: gemm.run(None, {'x': codes}), args.repeat):.0f}"
        y, y_b = p.run(None, {"x": feeds})[0], b.run(None, {"x": feeds_b})[0]
        if not np.array_equal(_unblock(y_b, y.shape[1]), y):
            raise SystemExit(f"{name}: the blocked convolution does not equal the plain one")
        print(f"| {name} | {t_plain:.0f} | {t_gemm} | {t_blocked:.0f} | {t_reorder:.0f} |")
        feeds, feeds_b = y, y_b
    whole = _graph(layers, False)

    def three(sessions, start):
        y = start
        for s in sessions:
            y = s.run(None, {"x": y})[0]
        return y

    t_three = _time(lambda: three(plain, x), args.repeat)
    t_chain = _time(lambda: three(blocked, _block(x)), args.repeat)
    t_graph = _time(lambda: whole.run(None, {"x": x}), args.repeat)
    print(f"\nthe block: three one-node sessions {t_three:.0f} us, three blocked sessions (blocked handoffs, one numpy "
          f"reorder in) {t_chain:.0f} us, one float graph {t_graph:.0f} us")


if __name__ == "__main__":
    main()
