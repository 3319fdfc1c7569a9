"""The hardware parameters the cost model reads from the march's description file.

Every number comes from ``hbtool/march/<march>.yaml``, where each is marked published,
derived or assumed, with its source or reason. :func:`parameter_table` lists them with those
marks for the reports, so a reader of a perf number can see what it rests on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hbtool.march.description import March, load_march

# (attribute, dotted path in the march file)
_PARAMS: tuple[tuple[str, str], ...] = (
    ("cores", "cores"),
    ("clock_hz", "clock_hz"),
    ("peak_int8_tops", "peak_int8_tops"),
    ("macs_per_cycle", "units.tensor.macs_per_cycle"),
    ("array_w", "units.tensor.array.w"),
    ("array_c_out", "units.tensor.array.c_out"),
    ("array_reduce", "units.tensor.array.reduce"),
    ("tensor_int16_rate", "units.tensor.int16_rate"),
    ("output_stage_lut", "units.tensor.output_stage_lut"),
    ("groups_share_lanes", "units.tensor.groups_share_lanes"),
    ("vector_lanes", "units.vector.lanes"),
    ("vector_int16_rate", "units.vector.int16_rate"),
    ("cpe_elementwise", "units.vector.cycles_per_element.elementwise"),
    ("cpe_lut", "units.vector.cycles_per_element.lut"),
    ("cpe_lut_int16", "units.vector.cycles_per_element.lut_int16"),
    ("cpe_layernorm", "units.vector.cycles_per_element.layernorm"),
    ("cpe_softmax", "units.vector.cycles_per_element.softmax"),
    ("cpe_pool", "units.vector.cycles_per_element.pool"),
    ("cpe_divide", "units.vector.cycles_per_element.divide"),
    ("cpe_colour_convert", "units.vector.cycles_per_element.colour_convert"),
    ("dm_bytes_per_cycle", "units.data_movement.bytes_per_cycle"),
    ("dm_transpose_lines", "units.data_movement.transpose_lines"),
    ("dm_ddr_tiled", "units.data_movement.ddr_tiled"),
    ("sram_bytes", "memory.sram_bytes_per_core"),
    ("sram_bytes_per_cycle", "memory.sram_bytes_per_cycle"),
    ("sram_access_bytes", "memory.sram_access_bytes"),
    ("ddr_bytes_per_s", "memory.ddr_bytes_per_s"),
    ("ddr_efficiency", "memory.ddr_efficiency"),
    ("ddr_burst_bytes", "memory.ddr_burst_bytes"),
    ("weight_fetch_exposed", "memory.weight_fetch_exposed"),
    ("per_op_cycles", "overheads.per_op_cycles"),
    ("per_frame_us", "overheads.per_frame_us"),
    ("host_per_frame_us", "overheads.host_per_frame_us"),
    ("dual_core_sync_cycles", "overheads.dual_core_sync_cycles"),
    ("cpu_cores", "cpu.cores"),
    ("cpu_clock_hz", "cpu.clock_hz"),
    ("cpu_gflops", "cpu.gflops"),
    ("cpu_quantize_cpe", "cpu.quantize_cycles_per_element"),
    ("cpu_per_op_us", "cpu.per_op_us"),
    ("cpu_concurrency_slowdown", "cpu.concurrency_slowdown"),
)


@dataclass(frozen=True)
class Hardware:
    """One BPU core and its surroundings, as numbers (see the module docstring)."""

    march: str
    cores: int
    clock_hz: float
    peak_int8_tops: float
    macs_per_cycle: int
    array_w: int
    array_c_out: int
    array_reduce: int
    tensor_int16_rate: float
    output_stage_lut: bool
    groups_share_lanes: bool
    c_in_quantum: int
    vector_lanes: int
    vector_int16_rate: float
    cpe_elementwise: float
    cpe_lut: float
    cpe_lut_int16: float
    cpe_layernorm: float
    cpe_softmax: float
    cpe_pool: float
    cpe_divide: float
    cpe_colour_convert: float
    dm_bytes_per_cycle: float
    dm_transpose_lines: int
    dm_ddr_tiled: bool
    sram_bytes: int
    sram_bytes_per_cycle: float
    sram_access_bytes: int
    ddr_bytes_per_s: float
    ddr_efficiency: float
    ddr_burst_bytes: int
    weight_fetch_exposed: float
    per_op_cycles: float
    per_frame_us: float
    host_per_frame_us: float
    dual_core_sync_cycles: float
    cpu_cores: int
    cpu_clock_hz: float
    cpu_gflops: float
    cpu_quantize_cpe: float
    cpu_per_op_us: float
    cpu_concurrency_slowdown: float
    #: the 4-bit path (march ``int4``, docs/int4.md): absent on marches without one
    int4_supported: bool = False
    int4_tensor_rate: float = 1.0
    int4_activation_bytes: float = 1.0
    int4_weight_bytes: float = 1.0
    int4_c_in_quantum: int = 8
    #: the board whose operating point these numbers are (march ``boards``; empty: the march has none)
    board: str = ""

    @property
    def ddr_bytes_per_cycle(self) -> float:
        """Sustained DDR bytes per BPU cycle (peak x efficiency)."""
        return self.ddr_bytes_per_s * self.ddr_efficiency / self.clock_hz

    @property
    def ddr_sustained_bytes_per_s(self) -> float:
        return self.ddr_bytes_per_s * self.ddr_efficiency

    def tensor_rate(self, *bits: int) -> float:
        """Fraction of the int8 MAC rate for operands of these widths: ``units.tensor.int16_rate`` per
        int16 operand (an int16 operand is split into signed-int8 digits, each its own pass: int16 x int8
        at the rate, int16 x int16 at its square); all operands 4-bit: the march's int4 rate; int8 x int4
        runs at the int8 rate."""
        if bits and all(int(b) <= 4 for b in bits) and self.int4_supported:
            return float(self.int4_tensor_rate)
        wide = sum(1 for b in bits if int(b) > 8)
        return float(self.tensor_int16_rate) ** wide


def _int4_values(m: March) -> dict[str, Any]:
    """The 4-bit path's parameters (``int4`` in the march file); none where the march has no such path."""
    try:
        if not bool(m.param("int4.supported")):
            return {}
        return {"int4_supported": True, "int4_tensor_rate": float(m.param("int4.tensor_rate")),
                "int4_activation_bytes": float(m.param("int4.activation_bytes_per_element")),
                "int4_weight_bytes": float(m.param("int4.weight_bytes_per_element")),
                "int4_c_in_quantum": int(m.param("int4.alignment")["c_in"])}
    except KeyError:
        return {}


def hardware_for(march: March | str, board: str | None = None) -> Hardware:
    """Read the cost-model parameters of a march (by name, on ``board`` or its default one; or loaded)."""
    from hbtool.errors import InputError

    m = load_march(march, board) if isinstance(march, str) else march
    try:
        values: dict[str, Any] = {name: m.param(path) for name, path in _PARAMS}
    except KeyError as exc:
        raise InputError(f"march '{m.name}' has no cost-model parameter: {exc.args[0]}",
                         "add it to the march's description file (see docs/perf.md for the parameters)") from None
    ints = {"cores", "macs_per_cycle", "array_w", "array_c_out", "array_reduce", "vector_lanes", "sram_bytes",
            "sram_access_bytes", "ddr_burst_bytes", "cpu_cores", "dm_transpose_lines"}
    values = {k: (int(v) if k in ints else bool(v) if k in ("output_stage_lut", "groups_share_lanes", "dm_ddr_tiled") else float(v)) for k, v in values.items()}
    values["c_in_quantum"] = int(m.alignment("tensor").get("c_in", 1))
    values.update(_int4_values(m))
    hw = Hardware(march=m.name, board=m.board, **values)
    if hw.array_w * hw.array_c_out * hw.array_reduce != hw.macs_per_cycle:
        raise InputError(f"march '{m.name}': units.tensor.array w x c_out x reduce = "
                         f"{hw.array_w * hw.array_c_out * hw.array_reduce}, not macs_per_cycle {hw.macs_per_cycle}",
                         "make the array shape multiply out to macs_per_cycle in the march file")
    return hw


def parameter_table(march: March | str, board: str | None = None) -> list[dict[str, Any]]:
    """Every parameter the cost model uses: path, value, kind (published/derived/assumed), source."""
    m = load_march(march, board) if isinstance(march, str) else march
    rows = []
    int4 = ("int4.supported", "int4.tensor_rate", "int4.activation_bytes_per_element", "int4.weight_bytes_per_element")
    extra = tuple(p for p in int4 if isinstance((m.raw.get("int4") or {}).get(p.split(".")[1]), dict))
    for path in tuple(p for _, p in _PARAMS) + extra:
        node: Any = m.raw
        for part in path.split("."):
            node = node[part]
        if isinstance(node, dict):
            rows.append({"parameter": path, "value": node.get("value"), "kind": node.get("kind", ""),
                         "source": node.get("source", "")})
        else:
            rows.append({"parameter": path, "value": node, "kind": "", "source": ""})
    return rows
