"""The compiler's program passes, each switchable and tied to ``optimize_level``.

They are the transformer optimizations of the J5 talk. None changes a computed integer: a
pass removes, merges or annotates data movement and tells the cost model (``hbtool perf``)
which unit does the work and where the bytes live; ``simulate`` runs the program the passes
leave and must produce the same integers at every level.

=================================  =====  ===================================================
pass                               level  effect
=================================  =====  ===================================================
window_ops_as_one                  O1     window partition/reverse and roll stay one op each
                                          (below O1 they are expanded to their reshape,
                                          transpose, slice and concat chains)
absorb_transpose_into_matmul       O2     a transpose feeding a matmul/linear becomes the
                                          tensor unit's operand read order
absorb_layernorm_views             O2     transposes around LayerNorm become its read/write order
fuse_movement_chains               O1     consecutive reshape/transpose become one rearrange
reshape_as_view                    O2     reshapes that keep the stored byte order cost nothing
                                          (absorbed into their consumers)
reduce_as_conv                     O2     long ReduceMean/ReduceSum run on the tensor unit
bmm_tiling                         O3     batched matmuls are tiled to fill the MAC array
data_movement_in_sram              O3     data-movement ops run in SRAM instead of DDR
=================================  =====  ===================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hbtool.ir.graph import Graph
from hbtool.compiler.passes.absorb_layernorm_views import absorb_layernorm_views
from hbtool.compiler.passes.absorb_transpose_into_matmul import absorb_transpose_into_matmul
from hbtool.compiler.passes.bmm_tiling import bmm_tiling
from hbtool.compiler.passes.data_movement_in_sram import data_movement_in_sram
from hbtool.compiler.passes.fuse_movement_chains import fuse_movement_chains
from hbtool.compiler.passes.reduce_as_conv import reduce_as_conv
from hbtool.compiler.passes.reshape_as_view import reshape_as_view
from hbtool.compiler.passes.window_ops_as_one import expand_window_ops, window_ops_as_one

LEVELS = {"O0": 0, "O1": 1, "O2": 2, "O3": 3}


@dataclass(frozen=True)
class ProgramPass:
    name: str
    level: int
    run: Callable[[Graph], int]
    #: what runs instead when the pass is off (most passes: nothing)
    when_off: Callable[[Graph], int] | None = None

    @property
    def summary(self) -> str:
        return " ".join((self.run.__doc__ or self.name).strip().split("\n\n")[0].split())


PASSES: tuple[ProgramPass, ...] = (
    ProgramPass("window_ops_as_one", 1, window_ops_as_one, expand_window_ops),
    ProgramPass("absorb_transpose_into_matmul", 2, absorb_transpose_into_matmul),
    ProgramPass("absorb_layernorm_views", 2, absorb_layernorm_views),
    ProgramPass("fuse_movement_chains", 1, fuse_movement_chains),
    ProgramPass("reshape_as_view", 2, reshape_as_view),
    ProgramPass("reduce_as_conv", 2, reduce_as_conv),
    ProgramPass("bmm_tiling", 3, bmm_tiling),
    ProgramPass("data_movement_in_sram", 3, data_movement_in_sram),
)


def level_number(optimize_level: str) -> int:
    return LEVELS[optimize_level]


def run_passes(program: Graph, optimize_level: str, disabled: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
    """Run the passes enabled at ``optimize_level`` (minus ``disabled``); ``{pass: changes}``.

    A pass that is off runs its ``when_off`` action, if it has one (recorded as ``-changes``).
    """
    level = level_number(optimize_level)
    applied: dict[str, int] = {}
    for p in PASSES:
        on = level >= p.level and p.name not in disabled
        if on:
            applied[p.name] = int(p.run(program))
        elif p.when_off is not None:
            applied[p.name] = -int(p.when_off(program))
    program.toposort()
    return applied
