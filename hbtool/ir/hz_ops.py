"""The names of the ops hbtool writes into its programs (``Hz*``), one definition each.

The integer program and the quantized model carry hbtool's own ops next to the standard ONNX
ones: the compiler's data movement (``HzReorder``, ``HzRearrange``), the lowered integer
kernels (``HzConv``... in ``*_quantized_model.onnx``, named after the kernel), the boundary
conversions and the CPU subgraphs. Every stage that writes or matches one of these names
imports it from here, so a rename cannot leave a reader behind.
"""

from __future__ import annotations

#: an explicit copy into the layout a reader needs (the compiler's layout plan)
HZ_REORDER = "HzReorder"
#: a chain of reshapes and transposes the data-movement unit runs as one pass (``attrs["steps"]``)
HZ_REARRANGE = "HzRearrange"
