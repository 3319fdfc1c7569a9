"""A weight's fake-quantizer computed in numpy gives the constant onnxruntime folds its ``HzCalibration`` body into.

The candidate-scoring model (hbtool.quant.candidate_scoring) holds its weights fake-quantized in numpy instead of
letting onnxruntime fold each weight's body when the session opens (ResNet50: 0.2 CPU s and 85,000 page faults
less), which keeps every candidate's score only if the constants are the same bits: checked here against
onnxruntime running the body itself, per channel and per tensor, int8 and int4 code ranges, with values on the
rounding ties (x / s = k + 0.5), beyond the clip and signed zeros.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import to_onnx
from hbtool.quant.calibrated_model import _fake_quant_body, fake_quantized


def _weights(shape, scales, axis, rng):
    s = np.asarray(scales, np.float32)
    bshape = [1] * len(shape)
    if s.size > 1:
        bshape[axis] = s.size
    step = s.reshape(bshape)
    w = (rng.standard_normal(shape) * 60).astype(np.float32) * step
    flat = w.reshape(-1)
    ties = (rng.integers(-140, 140, flat.size // 4) + np.float32(0.5)).astype(np.float32)
    # exact multiples of half a step (ties of Round) where the product is exact; and zeros of both signs
    flat[: ties.size] = ties * np.broadcast_to(step, shape).reshape(-1)[: ties.size]
    flat[ties.size : ties.size + 3] = [0.0, -0.0, -1e-30]
    return w


@pytest.mark.parametrize("shape, scales, axis, code_range", [
    ((16, 8, 3, 3), np.linspace(0.001, 0.05, 16), 0, None),
    ((16, 8, 3, 3), np.linspace(0.001, 0.05, 16), 0, (-7, 7)),
    ((32, 24), np.linspace(0.01, 0.3, 24), 1, None),
    ((5, 7), [0.0123], 0, None),
])
def test_numpy_fake_quant_is_the_folded_body(shape, scales, axis, code_range):
    rng = np.random.default_rng(0)
    w = _weights(shape, scales, axis, rng)
    body = _fake_quant_body(17, 8, np.asarray(scales, np.float32), axis, len(shape), code_range)
    consts = {k: v.data for k, v in body.values.items() if v.data is not None}
    g = Graph("fq", 17)
    g.inputs, g.outputs = ["x"], ["y"]
    g.set_value("x", shape, np.float32)
    g.set_value("y", shape, np.float32)
    for name in ("scale", "qmin", "qmax"):
        g.add_const(consts[name], name=name)
    for n in body.nodes:
        g.add_node(n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs), name=n.name)
    sess = ort.InferenceSession(to_onnx(g).SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(["y"], {"x": w})[0]
    got = fake_quantized(w, consts["scale"], consts["qmin"], consts["qmax"])
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
