"""The columns of a 3 x 3 convolution at stride 2 written by a loop (``fused.columns_3x3_s2``, through
``accel.columns``) against the kernels' window view, byte for byte; which geometries take the loop; and a
3-channel stem (MobileNetV2's, fewer channels than ``accel.IM2COL_MIN_CHANNELS``) taking the columns' GEMM route
once its input plane is known to be even, at 0 LSB from the kernel's numpy form.
"""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.kernels import Conv
from hbtool.kernels.conv import pad_numpy, windows_numpy
from hbtool.simulator import accel


def _window_columns(x, pads):
    """The columns as :func:`accel.columns` spelled them before the loop: a copy of the window view."""
    windows = windows_numpy(pad_numpy(x, pads), (3, 3), (2, 2), (1, 1))
    n, c, oh, ow = windows.shape[:4]
    return np.ascontiguousarray(windows.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * 9, oh * ow)


@pytest.mark.parametrize("seed", range(20))
def test_the_loop_writes_the_window_views_columns(seed):
    rng = np.random.default_rng(300 + seed)
    pads = [[0, 0, 1, 1], [1, 1, 1, 1]][seed % 2]
    H, W = (2 * int(v) for v in rng.integers(1, 12, 2))
    x = rng.integers(-128, 128, (int(rng.integers(1, 4)), int(rng.integers(1, 40)), H, W)).astype(np.int8)
    x.reshape(-1)[:2] = [-128, 127]
    assert accel._strided_3x3_columns((3, 3), (2, 2), pads, (1, 1), x.shape)
    np.testing.assert_array_equal(accel.columns(x, (3, 3), (2, 2), pads, (1, 1)), _window_columns(x, pads))


def test_which_geometries_take_the_loop():
    even = (1, 3, 224, 224)
    assert accel._strided_3x3_columns((3, 3), (2, 2), (0, 0, 1, 1), (1, 1), even)
    assert accel._strided_3x3_columns((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), even)
    assert not accel._strided_3x3_columns((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 3, 223, 224))  # odd: bottom pad read
    assert not accel._strided_3x3_columns((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), None)
    assert not accel._strided_3x3_columns((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), even)
    assert not accel._strided_3x3_columns((3, 3), (2, 2), (1, 1, 0, 0), (1, 1), even)
    assert not accel._strided_3x3_columns((3, 3), (2, 2), (1, 1, 1, 1), (2, 2), even)
    assert not accel._strided_3x3_columns((5, 5), (2, 2), (2, 2, 2, 2), (1, 1), even)


@pytest.mark.parametrize("pads", [[0, 0, 1, 1], [1, 1, 1, 1]])
def test_a_three_channel_stem_takes_the_columns_gemm_on_an_even_plane(pads):
    rng = np.random.default_rng(sum(pads))
    kern = Conv.build(rng.integers(-128, 128, (32, 3, 3, 3)), rng.integers(-5000, 5000, 32), 0.03, rng.uniform(0.0005, 0.002, 32),
                      0.5, strides=[2, 2], pads=pads, rounding="half_up")
    w = np.asarray(kern.weight, np.int64)
    if not accel._cpu_integer_gemm_never_saturates():
        pytest.skip("the columns' GEMM needs a uint8 x int8 kernel that never saturates (VNNI)")
    assert accel._im2col_integer_matmul(kern, w, 1, (1, 3, 16, 20)) is not None
    assert accel._im2col_integer_matmul(kern, w, 1, (1, 3, 15, 20)) is None  # odd plane: the route before it
    assert accel._im2col_integer_matmul(kern, w, 1) is None
    fast = accel.conv_fast(kern, 1, (1, 3, 16, 20))
    assert accel.reader_dtype(fast, 0) == np.int8  # the columns' GEMM (the float convolution reads float32)
    assert accel.reader_dtype(accel.conv_fast(kern, 1, (1, 3, 15, 20)), 0) == np.float32
    x = rng.integers(-128, 128, (2, 3, 16, 20))
    x.reshape(-1)[:2] = [-128, 127]
    np.testing.assert_array_equal(fast(x.astype(np.int8)).astype(np.int64), kern.apply_numpy(x))
