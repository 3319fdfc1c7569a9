"""Batched matmuls tiled to fill the MAC array.

Window attention multiplies many small matrices (per window and head: 49x32 by 32x49 in
Swin-T). Issued one by one, each fills a sliver of the tensor unit's array and pays its
dispatch; tiled, several batch entries share one pass of the array. The cost model packs
the batch dimension into the array when ``bmm_tiled`` is set.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import Graph
from hbtool.ir.hz_ops import HZ_MATMUL


def bmm_tiling(program: Graph) -> int:
    """Tile batched matmuls (activation x activation) over their batch dimension."""
    count = 0
    for node in program.nodes:
        if node.op_type != HZ_MATMUL:
            continue
        shape = program.shape(node.outputs[0]) or ()
        if len(shape) > 2 and int(np.prod(shape[:-2])) > 1:
            node.meta["bmm_tiled"] = True
            count += 1
    return count
