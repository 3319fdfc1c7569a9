"""The one-node product sessions allocate from the process heap, not from an arena of their own.

Why it matters: with an arena per session, every step's outputs and scratch live at addresses no
other step touched since the previous sample, so they are read back from L3; from the heap they
reuse the blocks the previous steps just freed (docs/simulate.md, "Memory locality between steps").
"""

import numpy as np

from hbtool.kernels.builder import ElemType
from hbtool.simulator import accel, onnx_bytes


def test_a_product_session_has_no_arena_and_computes_the_same():
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    model = onnx_bytes.model([onnx_bytes.node("MatMul", ["x", "w"], ["y"])], {"x": ElemType.FLOAT},
                             {"y": ElemType.FLOAT}, {"w": w})
    session = accel._session(model, 1)
    assert session.get_session_options().enable_cpu_mem_arena is False
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for _ in range(3):  # repeated calls reuse freed heap blocks; the results stay the product
        (y,) = session.run(["y"], {"x": x})
        assert np.array_equal(y, x @ w)
