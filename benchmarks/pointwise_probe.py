"""The simulator's int8 pointwise expansions: ``ConvInteger`` (uint8 x uint8) against ``MatMulInteger`` (uint8 x int8).

``accel._pointwise_integer_matmul`` runs a pointwise convolution as ``W @ x`` on the NCHW layout
where the input has >= 32 channels; narrower inputs keep ``ConvInteger``. Until 2026-12-06 an
output-width limit (``cout <= 4 * cin``) also kept every 6x expansion on ``ConvInteger``; this
probe times both routes, whole steps (product and requantization), interleaved, one thread, on
MobileNetV2's expansions, and checks both against the kernel's numpy form bit for bit.

    python -m benchmarks.pointwise_probe [--repeat 30]
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._timing import best_of

SHAPES = [(16, 96, 112), (24, 144, 56), (32, 192, 28), (64, 384, 14), (96, 576, 14), (160, 960, 7), (320, 1280, 7)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)

    from hbtool.kernels import Conv
    from hbtool.simulator import accel, fused

    fused.set_threads(1)
    rng = np.random.default_rng(0)
    print(f"{'cin->cout':>10} {'px':>4}  ConvInteger ms  MatMulInteger ms  ratio  exact  (route taken)")
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
        x = rng.integers(-128, 128, (1, cin, px, px)).astype(np.int8)
        want = kern.apply_numpy(x.astype(np.int64))
        exact = all(np.array_equal(f(x).astype(np.int64), want) for f in (conv_integer, matmul_integer))
        a = b = float("inf")
        for _ in range(3):
            a = min(a, best_of(conv_integer, x, args.repeat))
            b = min(b, best_of(matmul_integer, x, args.repeat))
        print(f"{f'{cin}->{cout}':>10} {px:>4}  {a * 1e3:>14.3f}  {b * 1e3:>16.3f}  {b / a:>5.2f}  {'yes' if exact else 'NO':>5}  ({taken})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
