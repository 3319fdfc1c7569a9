"""The base-256 digit loops the int16 GEMM routes feed onnxruntime (``fused.digits_u8`` / ``digits_i8``) run flat over
the whole tensor: every int16 code gives its digits, in any shape, split over threads or not."""

from __future__ import annotations

import numpy as np
import pytest

from hbtool.simulator import fused


def _every_code(shape_tail: tuple[int, ...]) -> np.ndarray:
    """Every int16 code once (the last row topped up from the start) as rows of ``shape_tail``."""
    codes = np.arange(-(1 << 15), 1 << 15, dtype=np.int16)
    size = int(np.prod(shape_tail))
    codes = np.concatenate([codes, codes[: -len(codes) % size]])
    return codes.reshape((-1,) + shape_tail)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape_tail", [(3, 14, 14), (7,), (256,)])
def test_every_int16_code_gives_its_digits(threads, shape_tail):
    fused.set_threads(threads)
    try:
        x = _every_code(shape_tail)
        wide = x.astype(np.int64)
        u8 = np.empty((2,) + x.shape, np.uint8)
        fused.digits_u8(x, u8)
        np.testing.assert_array_equal(u8[0].astype(np.int64), (wide >> 8) + 128)
        np.testing.assert_array_equal(u8[1].astype(np.int64), wide & 255)
        i8 = np.empty((2,) + x.shape, np.int8)
        fused.digits_i8(x, i8)
        np.testing.assert_array_equal(i8[0].astype(np.int64), wide >> 8)
        np.testing.assert_array_equal(i8[1].astype(np.int64), (wide & 255) - 128)
        np.testing.assert_array_equal(256 * i8[0].astype(np.int64) + i8[1] + 128, wide)   # the digits make the code
    finally:
        fused.set_threads(None)


def test_a_view_that_is_not_contiguous_is_refused_not_written_through_a_copy():
    x = np.zeros((4, 6), np.int16)
    out = np.empty((2, 4, 12), np.uint8)[:, :, ::2]
    with pytest.raises(ValueError):
        fused.digits_u8(x, out)
