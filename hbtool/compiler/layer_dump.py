"""``layer_out_dump: true``: every BPU layer's output also leaves the model, dequantized.

Horizon adds a dequantized output per layer so ``hb_mapper infer`` / ``vec_diff`` can compare
the deployed model with the float model layer by layer. hbtool does the same on the integer
program: each BPU kernel node's integer output gets an ``HzDequantize`` (on the CPU, like the
model's own output conversions) and becomes a model output named ``<tensor>_layer_out``. The
program computes exactly what it did before; it is only slower (more DDR writes), so this is
for debugging, as Horizon says.
"""

from __future__ import annotations

import numpy as np

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph
from hbtool.ir.hz_ops import HZ_DEQUANTIZE, HZ_QUANTIZE
from hbtool.kernels.quantize import Dequantize

SUFFIX = "_layer_out"


def add_layer_outputs(program: Graph, tensors: dict[str, tuple[float, int]]) -> list[str]:
    """Add the dequantized outputs; ``tensors`` is the lowering's ``{integer tensor: (scale, bits)}``."""
    added: list[str] = []
    for node in list(program.nodes):
        if node.meta.get("on") != "BPU" or "kernel" not in node.meta or node.op_type in (HZ_QUANTIZE, HZ_DEQUANTIZE):
            continue
        for t in node.outputs:
            if not t or t not in tensors or t in program.outputs:
                continue
            scale, _bits = tensors[t]
            name = f"{t}{SUFFIX}"
            if name in program.values:
                name = program.unique_name(name)
            program.set_value(name, program.shape(t), np.float32)
            deq = program.add_node(HZ_DEQUANTIZE, [t], [name], {"scale": float(scale)}, name=f"{name}_HzDequantize",
                                   domain=HBTOOL_DOMAIN)
            deq.meta.update(kernel=Dequantize.build(scale), on="CPU", boundary=True)
            program.outputs.append(name)
            added.append(name)
    return added
