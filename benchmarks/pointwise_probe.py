"""The simulator's int8 pointwise expansions: ``ConvInteger`` (uint8 x uint8) against ``MatMulInteger`` (uint8 x int8).

``accel._pointwise_integer_matmul`` runs a pointwise convolution as ``W @ x`` on the NCHW layout
where the input has >= 8 channels (32 until sim9, 2026-12-07); narrower inputs keep ``ConvInteger``. Until 2026-12-06 an
output-width limit (``cout <= 4 * cin``) also kept every 6x expansion on ``ConvInteger``; this
probe times both routes, whole steps (product and requantization), interleaved, one thread, on
MobileNetV2's expansions, and checks both against the kernel's numpy form bit for bit.

A third column (2026-12-06, issue 34) times the narrow expansions' product and requantization in one
numba loop (:func:`_fused_loop`: float32 multiply-adds over contiguous pixel runs, exact integers,
requantized straight from the sums, no int32 tensor). It loses everywhere (docs/simulate.md): numba's
loop reaches about 25 GFLOP/s (the running sums go through L1 on every input channel), onnxruntime's
VNNI GEMM several times that, and the requantizing pass it would save is a vectorised int64 loop.

    python -m benchmarks.pointwise_probe [--repeat 30]
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._timing import interleaved_best

def _fused_loop():
    """The one-pass candidate: ``out[c, p] = requant_c(bias[c] + sum_k w[c, k] * x[k, p])`` (floor / half_up),
    pixels in blocks of 512 whose float32 copy stays in L1 across the output channels."""
    from numba import njit

    @njit(nogil=True, cache=False)
    def loop(x, w, bias, M, n, half, lo, hi, out):
        Cout, K = w.shape
        P = x.shape[1]
        B = 512
        xb = np.empty((K, B), w.dtype)
        acc = np.empty(B, w.dtype)
        for p0 in range(0, P, B):
            L = min(B, P - p0)
            for k in range(K):
                for p in range(L):
                    xb[k, p] = x[k, p0 + p]
            for c in range(Cout):
                for p in range(L):
                    acc[p] = 0
                for k in range(K):
                    wv = w[c, k]
                    for p in range(L):
                        acc[p] += wv * xb[k, p]
                b, m, nn, h = bias[c], M[c], n[c], half[c]
                for p in range(L):
                    v = ((b + np.int64(acc[p])) * m + h) >> nn
                    out[c, p0 + p] = min(max(v, lo), hi)

    return loop


SHAPES = [(16, 96, 112), (24, 144, 56), (32, 192, 28), (64, 384, 14), (96, 576, 14), (160, 960, 7), (320, 1280, 7)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)

    from hbtool.kernels import Conv
    from hbtool.simulator import accel, fused

    fused.set_threads(1)
    rng = np.random.default_rng(0)
    loop = _fused_loop()
    print(f"{'cin->cout':>10} {'px':>4}  ConvInteger ms  MatMulInteger ms  ratio  fused loop ms  ratio  exact  (route taken)")
    for cin, cout, px in SHAPES:
        w = rng.integers(-128, 128, (cout, cin, 1, 1))
        kern = Conv.build(w, rng.integers(-1000, 1000, cout), 0.03, rng.uniform(0.001, 0.01, cout), 0.5, out_bits=8, relu=True)
        taken = "MatMulInteger" if accel._pointwise_integer_matmul(kern, w, 1) is not None else "ConvInteger"
        rq, bias = accel.RequantParams(kern.requant, cout), accel._bias(kern, cout)
        integer = accel._pointwise_integer_conv(kern, w, kern.onnx_attrs, 1)

        def conv_integer(x, integer=integer, rq=rq, bias=bias, C=cout):
            y = integer.run(None, {"x": accel.offset_u8(x)})[0]
            return rq.apply((y.reshape(y.shape[0] * C, -1),), accel._ONE, bias, False).reshape(y.shape)

        inits = {"w": (w.reshape(cout, cin) + 128).astype(np.uint8), "wz": np.array(128, np.uint8)}
        from hbtool.kernels.builder import ElemType
        from hbtool.simulator import onnx_bytes

        model = onnx_bytes.model([onnx_bytes.node("MatMulInteger", ["w", "x", "wz"], ["y"])], {"x": ElemType.INT8},
                                 {"y": ElemType.INT32}, inits)
        matmul_integer = accel._pointwise_gemm_runner(accel._session(model, 1), 8, w, rq, bias)
        wf = w.reshape(cout, cin).astype(np.float32)  # |sums| <= 128 * 128 * cin < 2**24: exact

        def fused_loop(x, wf=wf, rq=rq, bias=bias, C=cout):
            out = np.empty((C, x.shape[2] * x.shape[3]), np.int16)
            loop(x.reshape(x.shape[1], -1), wf, bias, rq.M, rq.n, rq.half, rq.lo, rq.hi, out)
            return out.reshape((1, C) + x.shape[2:])

        x = rng.integers(-128, 128, (1, cin, px, px)).astype(np.int8)
        want = kern.apply_numpy(x.astype(np.int64))
        exact = all(np.array_equal(f(x).astype(np.int64), want) for f in (conv_integer, matmul_integer, fused_loop))
        a, b, c = interleaved_best([(conv_integer, x), (matmul_integer, x), (fused_loop, x)], args.repeat)
        print(f"{f'{cin}->{cout}':>10} {px:>4}  {a * 1e3:>14.3f}  {b * 1e3:>16.3f}  {b / a:>5.2f}  {c * 1e3:>13.3f}  {c / a:>5.2f}"
              f"  {'yes' if exact else 'NO':>5}  ({taken})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
