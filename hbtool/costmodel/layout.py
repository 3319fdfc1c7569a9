"""The layout model of the BPU's data movement: where a move's bytes go, and which case it is.

The BPU keeps a feature map in its native layout: channel-last (NHWC bytes), C padded to the
unit's channel alignment and W to its width alignment (:mod:`hbtool.march.storage`; Horizon
documents the alignment per unit and that the runtime's native input and output layout is NHWC,
``input_layout_rt`` / ``output_layout``, docs of ``hb_mapper``). Every data-movement op is sorted
into one **layout case**, which the cost follows and the ``perf`` output names:

``view``             the bytes stay where they are (a Reshape that keeps the stored order): free.
``row copy``         the output is made of whole rows of the input, each at least one SRAM line long
                     (a permute INTO the native channel-last layout, e.g. a detector head's
                     ``NCHW -> NHWC`` at a model output, which keeps every byte in order; a permute
                     that moves whole channel rows, H and W swapped; a Reshape/Concat/Slice of whole
                     rows): a copy at the unit's rate, each side in order.
``strided in SRAM``  a real reorder (runs shorter than a line) with both sides in SRAM: the unit walks
                     the strided side through its transpose buffer (``transpose_lines``).
``tiled via SRAM``   a real reorder with a side in DDR on a march whose unit stages tiles in SRAM
                     (``units.data_movement.ddr_tiled``): DDR moves whole bursts in address order, the
                     reorder happens in SRAM as in the case above.
``gather in DDR``    a real reorder walking DDR run by run (a march without tiled staging, or a
                     data-dependent Gather): a burst per run.

Model outputs are handed to the user in their logical order (an ``N,H,W,C`` output as NHWC bytes:
the zoo's detector heads permute to NHWC for exactly this reason), so the move that makes a
rank-4 output is walked against that order, not against the BPU's internal one
(:func:`row_major_outputs`).
"""

from __future__ import annotations

from typing import Sequence

VIEW_CASE = "view"
KEEPS = "row copy"
STRIDED_SRAM = "strided in SRAM"
TILED = "tiled via SRAM"
GATHER_DDR = "gather in DDR"
COPY = "copy"            # a move whose element order the address walk cannot replay: a sequential copy

CASES = (VIEW_CASE, KEEPS, STRIDED_SRAM, TILED, GATHER_DDR, COPY)


#: boundary ops between the last BPU op and a model output (the CPU's dequantize): they read the
#: BPU's output buffer in the order the model output has
BOUNDARY_OPS = ("HzDequantize", "Dequantize", "DequantizeLinear")


def row_major_outputs(program, outputs: Sequence[str], rank_of, consumers: dict | None = None) -> list[str]:
    """The outputs of a move that are model outputs of rank 4 (directly or through the boundary
    dequantize): the runtime hands them out in their logical order, so they are written in it."""
    final = set(program.outputs)
    consumers = program.consumer_map() if consumers is None else consumers

    def is_final(name: str) -> bool:
        if name in final:
            return True
        readers = consumers.get(name, [])
        return bool(readers) and all(n.op_type in BOUNDARY_OPS and all(o in final for o in n.outputs if o) for n in readers)

    return [o for o in outputs if o and rank_of(o) == 4 and is_final(o)]


def case_of(mean_run_bytes: float, line_bytes: int, ddr_side: bool, tiled: bool) -> str:
    """The layout case of a move whose contiguous source runs average ``mean_run_bytes``."""
    if mean_run_bytes >= line_bytes:
        return KEEPS
    if not ddr_side:
        return STRIDED_SRAM
    return TILED if tiled else GATHER_DDR
