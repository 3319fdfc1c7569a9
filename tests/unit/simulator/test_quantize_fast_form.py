"""The simulator's one-pass input Quantize (one float32 scale) gives the numpy form's codes bit for bit:
round-half-even ties, saturation, NaN and infinities, float64 and integer inputs."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels.quantize import Quantize
from hbtool.simulator import accel


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("scale", [0.0078125, 0.007629627361893654, 3.1])
def test_quantize_fast_form_equals_numpy_form(bits, scale):
    kern = Quantize.build(scale, bits)
    fast = accel.accelerate(kern)
    assert fast is not None
    rng = np.random.default_rng(11)
    s = np.float32(kern.scale.reshape(()))
    ties = (np.arange(-600, 600, dtype=np.float32) + np.float32(0.5)) * s      # x / scale lands on .5 (or next to it)
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 127.5, -128.5, 32767.5, -32768.5], np.float32) * s
    x = np.concatenate([ties, edges, rng.normal(0, 300 * s, 5000).astype(np.float32)]).reshape(1, -1, 1)
    got = fast(x)
    np.testing.assert_array_equal(got, kern.apply_numpy(x))
    assert got.dtype == np.int16
    # float64 and integer inputs: converted to float32 first, as the numpy form does
    x64 = rng.normal(0, 300 * float(s), (2, 3, 7))
    np.testing.assert_array_equal(fast(x64), kern.apply_numpy(x64))
    xi = rng.integers(-300, 300, (4, 5))
    np.testing.assert_array_equal(fast(xi), kern.apply_numpy(xi))


def test_per_channel_scales_keep_the_numpy_form():
    kern = Quantize.build(np.array([0.1, 0.2, 0.3], np.float32), 8, axis=-3)
    assert accel.quantize_fast(kern) is None
