"""Two 4-bit weights per byte: the artifact's storage of int4 tensor-unit weights.

Nibble order (the order MegEngine and ONNX's INT4 type use): the array is flattened in C order,
element ``2i`` goes into the low nibble of byte ``i`` and element ``2i + 1`` into its high nibble;
an odd count leaves the last high nibble zero. Each nibble is the value's 4-bit two's complement
(-8..7), so ``unpack(pack(q)) == q`` for every int4 array. A blob whose length does not match
the shape (short, long) is refused with :class:`PackedBlobError`, never silently padded.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

INT4_MIN, INT4_MAX = -8, 7


class PackedBlobError(ValueError):
    """A packed 4-bit blob does not hold the values its shape promises."""


def packed_nbytes(count: int) -> int:
    """Bytes of ``count`` packed 4-bit values."""
    return (int(count) + 1) // 2


def pack_int4(q: np.ndarray) -> bytes:
    """int4 values (any integer dtype, within -8..7) -> bytes, two per byte (see the module docstring)."""
    flat = np.asarray(q).reshape(-1).astype(np.int64)
    if flat.size and (int(flat.min()) < INT4_MIN or int(flat.max()) > INT4_MAX):
        raise ValueError(f"int4 packing: values must lie in [{INT4_MIN}, {INT4_MAX}], got [{int(flat.min())}, {int(flat.max())}]")
    nib = (flat & 0xF).astype(np.uint8)
    if nib.size % 2:
        nib = np.concatenate([nib, np.zeros(1, np.uint8)])
    return (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()


def unpack_int4(data: bytes, shape: Sequence[int], what: str = "packed int4 blob") -> np.ndarray:
    """bytes -> int64 array of ``shape``: the inverse of :func:`pack_int4`."""
    count = int(np.prod(shape, dtype=np.int64))
    need = packed_nbytes(count)
    if len(data) != need:
        raise PackedBlobError(f"{what} holds {len(data)} bytes, but shape {list(shape)} needs {need} "
                              f"(two 4-bit values per byte)")
    raw = np.frombuffer(data, np.uint8)
    nib = np.empty(raw.size * 2, np.int64)
    nib[0::2] = raw & 0xF
    nib[1::2] = raw >> 4
    if count % 2 and nib[-1] != 0:
        raise PackedBlobError(f"{what}: the unused last nibble is {int(nib[-1])}, not 0 (the blob is damaged)")
    vals = nib[:count]
    return np.where(vals >= 8, vals - 16, vals).reshape(tuple(int(d) for d in shape))
