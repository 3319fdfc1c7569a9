"""Activations that decay to 1e-40 (HF MobileViT with its seeded random initialisation ends near 1e-41).

On main the observer binned such a tensor with a float32 product ``|x| * bins / range`` that
overflowed to inf, and ``np.bincount`` got negative indices: ``calibrate`` exited 3. With that
fixed, the float32 scales of the tiny tensors underflowed to 0 and their nodes fell back to float.
Now a range at or below ``ZERO_RANGE`` is a zero-range group and the model runs wholly as integers.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from hbtool.quant.observers import TensorStats
from hbtool.quant.plan import ZERO_RANGE
from tests.helpers import make_model, run_pipeline, tensor, vinfo


def test_observer_bins_values_near_the_float32_floor():
    x = (np.random.default_rng(0).standard_normal(4096) * 1e-41).astype(np.float32)
    st = TensorStats("t")
    st.update(x)
    st.update(x * 2)
    assert st.hist.min() >= 0 and st.hist.sum() == 2 * x.size
    assert st.absmax == float(np.abs(x * 2).max()) and st.absmax < 1e-39


def _decaying_model() -> "onnx.ModelProto":
    """x -> three Convs with 1e-13 weights (1e-13, 1e-26, 1e-39) -> LayerNorm over W -> y."""
    rng = np.random.default_rng(6)
    nodes, inits, prev = [], [], "x"
    for i in range(3):
        w = (rng.standard_normal((4, 4, 3, 3)) * 1e-13).astype(np.float32)
        inits.append(tensor(f"w{i}", w))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        prev = f"c{i}"
    inits += [tensor("gamma", np.ones(8, np.float32)), tensor("beta", np.zeros(8, np.float32))]
    nodes.append(helper.make_node("LayerNormalization", [prev, "gamma", "beta"], ["y"], name="ln", axis=-1, epsilon=1e-5))
    return make_model(nodes, [vinfo("x", [1, 4, 8, 8])], [vinfo("y", [1, 4, 8, 8])], inits, opset=17)


def test_model_decaying_to_denormals_calibrates_and_runs_as_integers(tmp_path):
    model = _decaying_model()
    calibration, compiled, _feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 4, 8, 8))
    assert all(n.meta.get("on") == "BPU" for n in calibration.graph.nodes)
    assert compiled.fallbacks == []
    for t in calibration.plan.tensors.values():
        assert np.float32(t.scale) > 0, t
    for sim, q, f in zip(simulated, quantized, floats):
        assert 0 < np.abs(f[0]).max() < ZERO_RANGE  # the float output really is (numerically) zero
        np.testing.assert_array_equal(sim[0], q[0])  # the simulator is the quantized model, bit for bit
        assert np.abs(sim[0] - f[0]).max() < ZERO_RANGE
