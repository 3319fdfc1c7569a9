"""How the BPU stores a tensor: which axes are innermost, how they are padded, bytes per element.

A rank-4 tensor counts as NCHW and is stored channel-innermost (as NHWC), its W axis next;
other tensors are stored row-major, their last axis innermost and the one before it as the
"W" row. Each unit pads those two axes to its alignment (the march's
``units.<unit>.alignment``). The compiler plans layouts by these rules (``compiler/layout.py``)
and the cost model walks memory by them (``costmodel/access.py``), so they are defined once,
here, below both.
"""

from __future__ import annotations

from typing import Sequence


def align(v: int, q: int) -> int:
    """``v`` rounded up to a multiple of ``q`` (``q <= 1``: unchanged)."""
    return -(-int(v) // int(q)) * int(q) if q > 1 else int(v)


def storage_axes(shape: Sequence[int]) -> tuple[int | None, int | None]:
    """(channel axis stored innermost, the "W" axis stored next) of a logical shape."""
    r = len(shape)
    if r == 4:
        return 1, 3
    if r >= 2:
        return r - 1, r - 2
    if r == 1:
        return 0, None
    return None, None


def stored_order(rank: int) -> list[int]:
    """Logical axes from outermost to innermost in the stored layout."""
    return [0, 2, 3, 1] if rank == 4 else list(range(rank))


def padded_shape(shape: Sequence[int], c_q: int, w_q: int) -> tuple[int, ...]:
    """The logical shape with its channel axis padded to ``c_q`` and its W axis to ``w_q``."""
    c_axis, w_axis = storage_axes(shape)
    out = list(shape)
    if c_axis is not None:
        out[c_axis] = align(out[c_axis], c_q)
    if w_axis is not None:
        out[w_axis] = align(out[w_axis], w_q)
    return tuple(out)


def element_bytes(bits: int | None) -> int:
    """Bytes per stored element of a ``bits``-bit integer tensor (None: a float32 tensor)."""
    return 4 if bits is None else max(1, int(bits) // 8)
