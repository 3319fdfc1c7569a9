"""The CPU side of ``hbtool perf``'s schedule: which CPU-op bytes count against the shared DDR, and how
several threads' CPU work slows each other (``cpu.concurrency_slowdown``, the RDK X3 rows of costmodel3)."""

from __future__ import annotations

import dataclasses

import pytest

from hbtool.costmodel.cost import CPU, TENSOR, CostContext, cost_op, crosses_cpu_boundary
from hbtool.costmodel.hardware import hardware_for
from hbtool.costmodel.schedule import cpu_slowdown, estimate_program
from tests.unit.perf.test_op_costs_schedule_and_cli import conv_op, node, tiny_program

SHAPE = (1, 16, 256, 256)   # CPU conversions of 1 M elements: the CPU, not the BPU, bounds several threads


def bpu_cpu_bpu_chain():
    """conv (BPU) -> dequantize -> float subgraph -> quantize (CPU) -> conv (BPU), every tensor in DDR."""
    conv = conv_op(16, 16, 64)[0].nodes[0].meta["kernel"]
    nodes = [node("HzConv", ["x"], ["a"], TENSOR, conv),
             node("HzDequantize", ["a"], ["a_f"], CPU),
             node("HzCpuSubgraph", ["a_f"], ["b_f"], CPU, flops=0),
             node("HzQuantize", ["b_f"], ["b"], CPU),
             node("HzConv", ["b"], ["y"], TENSOR, conv)]
    shapes = {n: SHAPE for n in ("x", "a", "a_f", "b_f", "b", "y")}
    g, t = tiny_program(shapes, nodes, bits={"a_f": 32, "b_f": 32}, where={n: "ddr" for n in shapes})
    return g, t


def test_float_tensors_between_cpu_ops_do_not_count_against_the_shared_ddr():
    g, t = bpu_cpu_bpu_chain()
    hw = hardware_for("bernoulli2")
    ctx = CostContext(g, t, hw)
    assert crosses_cpu_boundary("a", ctx) and crosses_cpu_boundary("b", ctx)           # written / read by the BPU
    assert not crosses_cpu_boundary("a_f", ctx) and not crosses_cpu_boundary("b_f", ctx)   # CPU op to CPU op
    deq, sub, quant = (cost_op(n, ctx) for n in g.nodes[1:4])
    assert deq.ddr_bytes == t["a"]["padded_bytes"]          # its int8 input only, not the float it writes
    assert sub.ddr_bytes == 0
    assert quant.ddr_bytes == t["b"]["padded_bytes"]
    assert deq.cycles > 0 and quant.cycles > 0             # the per-element time stays


def cpu_heavy_result(slowdown: float):
    g, t = bpu_cpu_bpu_chain()
    hw = dataclasses.replace(hardware_for("bernoulli2"), cpu_concurrency_slowdown=slowdown)
    return estimate_program(g, t, hw)


def test_cpu_contention_slows_only_frames_in_flight_together():
    alone, shared = cpu_heavy_result(0.0), cpu_heavy_result(0.14)
    assert shared.latency_ms == pytest.approx(alone.latency_ms)            # one frame: nothing to contend with
    assert shared.fps_threads(1) == pytest.approx(alone.fps_threads(1))
    for threads in (2, 4, 8):
        assert shared.fps_threads(threads) < alone.fps_threads(threads)
    # the cluster's own limit with every core busy: cores / (CPU time x (1 + slowdown x (cores - 1)))
    hw = shared.hw
    expected = hw.cpu_cores * hw.clock_hz / (shared.cpu_cycles * (1 + 0.14 * (hw.cpu_cores - 1)))
    assert shared.fps_limits["cpu"] == pytest.approx(expected)
    assert shared.fps_threads(16) <= expected * (1 + 1e-9)


def test_slowdown_grows_with_busy_cores_up_to_the_cluster_size():
    hw = dataclasses.replace(hardware_for("bernoulli2"), cpu_concurrency_slowdown=0.1)
    assert cpu_slowdown(hw, 1) == 1.0
    assert cpu_slowdown(hw, 2) == pytest.approx(1.1)
    assert cpu_slowdown(hw, hw.cpu_cores) == cpu_slowdown(hw, 4 * hw.cpu_cores)


def test_march_files_carry_the_slowdown_only_where_rows_show_it():
    assert hardware_for("bernoulli2").cpu_concurrency_slowdown > 0      # the X3 detectors' multi-thread rows
    assert hardware_for("bayes-e").cpu_concurrency_slowdown == 0
    assert hardware_for("bayes").cpu_concurrency_slowdown == 0


# ----------------------------------------------------------------------------- selecting moves


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
def test_a_selecting_move_reads_its_whole_input(op_type):
    """ReduceMax over the 400 scores of each attention row (YOLO12's patched softmax) reads all of them: its
    address walk replays only the picked addresses, which would cost it as a read of one element per output."""
    from hbtool.costmodel.cost import DATA_MOVEMENT, DDR

    shapes = {"x": (1, 8, 400, 400), "y": (1, 8, 400, 1)}
    n = node(op_type, ["x"], ["y"], DATA_MOVEMENT, attrs={"axes": [3], "keepdims": 1})
    g, t = tiny_program(shapes, [n], where={"x": "ddr", "y": "sram"})
    hw = hardware_for("bayes-e")
    op = cost_op(g.nodes[0], CostContext(g, t, hw))
    assert op.ddr_bytes >= t["x"]["padded_bytes"]                  # every input byte leaves the DDR once
    assert op.elements == t["x"]["padded_bytes"]                   # int8: one element per byte compared
    assert op.components[DDR] == pytest.approx(op.ddr_bytes / hw.ddr_bytes_per_cycle)
    assert op.cycles >= t["x"]["padded_bytes"] / hw.ddr_bytes_per_cycle
    assert "reads every input element" in op.note and op.unit == DATA_MOVEMENT
