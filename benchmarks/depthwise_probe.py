"""The simulator's depthwise convolutions: one fused numba loop against a one-node session and a requantizing pass.

Before this probe every depthwise layer ran as a one-node onnxruntime float32 ``Conv`` session
(which onnxruntime turns into ``ReorderInput -> blocked Conv -> ReorderOutput`` on every call)
followed by a requantizing loop over its float accumulators. ``fused.depthwise_rows`` reads the
int8/int16 codes and writes the requantized codes in one pass. This probe times both routes,
interleaved, on MobileNetV2's depthwise shapes (3 x 3, stride 1 and 2, 32-960 channels, 7-112
px) and a few others, one thread, batch 1 and 16, and checks every result against the kernel's
numpy form bit for bit.

    python -m benchmarks.depthwise_probe [--repeat 30] [--threads 1]
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._timing import interleaved_best

# (channels, input px, stride, in_bits): MobileNetV2's depthwise layers at 224 x 224, then
# int16 inputs and a 5 x 5 kernel (EfficientNet-style) for coverage
SHAPES = [
    (32, 112, 1, 8, 3), (96, 112, 2, 8, 3), (144, 56, 1, 8, 3), (144, 56, 2, 8, 3), (192, 28, 1, 8, 3),
    (192, 28, 2, 8, 3), (384, 14, 1, 8, 3), (576, 14, 1, 8, 3), (576, 14, 2, 8, 3), (960, 7, 1, 8, 3),
    (144, 56, 1, 16, 3), (576, 14, 2, 16, 3), (240, 28, 1, 8, 5),
]


def _kernel(C: int, stride: int, in_bits: int, k: int, rng):
    from hbtool.kernels.conv import Conv

    w = rng.integers(-127, 128, size=(C, 1, k, k))
    b = rng.integers(-2000, 2000, size=C)
    sw = rng.uniform(0.5, 2.0, size=C) / 127
    return Conv.build(w, b, 0.05, sw, 0.05, strides=[stride] * 2, pads=[k // 2] * 4, group=C, in_bits=in_bits,
                      out_bits=8, relu=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args(argv)

    from hbtool.simulator import accel, fused

    fused.set_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"{'C':>4} {'px':>4} {'s':>2} {'bits':>4} {'k':>2} {'N':>3}  session+requant ms  fused loop ms  ratio  exact")
    for C, px, stride, bits, k in SHAPES:
        kern = _kernel(C, stride, bits, k, rng)
        C_out = kern.weight.shape[0]
        fused_run = accel._depthwise_runner(kern, accel.RequantParams(kern.requant, C_out), accel._bias(kern, C_out))
        session_run = accel.conv_fast(kern, args.threads)  # no input shape: the session route
        for n in args.batches:
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            x = rng.integers(lo, hi + 1, size=(n, C, px, px)).astype(np.int8 if bits <= 8 else np.int16)
            want = kern.apply_numpy(x.astype(np.int64))
            exact = (np.array_equal(fused_run(x).astype(np.int64), want)
                     and np.array_equal(session_run(x.astype(np.float32) if bits <= 8 else x).astype(np.int64), want))
            xf = x.astype(np.float32) if bits <= 8 else x  # what the session route is fed (narrowed producers)
            t_old, t_new = interleaved_best([(session_run, xf), (fused_run, x)], args.repeat)
            print(f"{C:>4} {px:>4} {stride:>2} {bits:>4} {k:>2} {n:>3}  {t_old * 1e3:>18.3f}  {t_new * 1e3:>13.3f}  "
                  f"{t_new / t_old:>5.2f}  {'yes' if exact else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
