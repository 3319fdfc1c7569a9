"""The op table: every ONNX op type hbtool knows x march, from the checker's rules and the kernels.

For each op with probes (:mod:`.probes`) the placement, the reason and the integer kernel are what
the pipeline actually did to the probe model on that march (:mod:`.run`), so the table cannot
drift from the code: ``docs/ops.md`` is :func:`render` of :func:`build_table`, and
tests/unit/kernels/test_op_table_every_op_every_march.py fails when the file differs or when any probe runs a BPU op in float or
simulates off the quantized ONNX model. Ops without a probe (kept on the CPU by design, or written
only by hbtool's own float passes) take their row from the rules directly.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Iterable

from hbtool.march.op_rules import CPU_BY_DESIGN, CPU_REASON_OF_NODE, OP_TABLE, march_rules, reason_of
from hbtool.optable.horizon import DIFFERENCES, MARCHES, horizon_placement
from hbtool.optable.probes import PROBED_WITH, PROBES, Probe
from hbtool.optable.run import FUSED, MOVES, ProbeResult, run_probe

#: ops that only hbtool's float passes write (not in an exported model): where each comes from
INTERNAL_OPS = {
    "Linear": "MatMul/Gemm with a constant weight and its bias Add (fuse_linear)",
    "ChannelLayerNorm": "a LayerNorm over the channel axis, or GroupNorm(1, C) (fuse_group_norm)",
    "HzPreprocess": "the input's norm_type preprocessing (mean/scale), inserted by calibrate",
    "WindowPartition": "Swin's window partition Reshape/Transpose chain",
    "WindowReverse": "Swin's window reverse Reshape/Transpose chain",
    "Roll": "Swin's shifted windows (Slice/Concat pairs)",
    "Mish": "x * tanh(softplus(x)) (ONNX Mish is opset 18; hbtool reads exports up to opset 17)",
    "Upsample": "opset-9 Upsample, converted to Resize at import",
}

MARCH_NAMES = {"bayes": "Journey 5 / RDK Ultra", "bayes-e": "RDK X5", "bernoulli2": "RDK X3 / Journey 3"}


@dataclass
class Row:
    op: str
    march: str
    on: str                     # BPU | CPU | BPU or CPU (by form) | folded | internal
    kernels: list[str] = field(default_factory=list)
    precisions: str = ""
    detail: str = ""            # the forms probed and what each did, or the CPU reason
    horizon: str | None = None
    cpu_reason: str | None = None


def known_ops() -> list[str]:
    """Every op type the checker has a rule or a reason for."""
    return sorted(set(OP_TABLE) | set(CPU_BY_DESIGN) | set(CPU_REASON_OF_NODE))


def probes_of(op: str) -> list[Probe]:
    op = PROBED_WITH.get(op, op)
    return [p for p in PROBES if p.op == op]


def kernel_precisions(kernels: Iterable[str], march: str) -> str:
    """int8 / int16 / int4 of the kernels, from their ``build`` signatures and the march's int16 and int4 support."""
    from hbtool import kernels as K
    from hbtool.march.description import load_march

    m = load_march(march)
    int4 = bool(((m.raw.get("int4") or {}).get("supported") or {}).get("value", False))
    found = {"int8"}
    for name in kernels:
        if name in (FUSED, MOVES):
            found.add("int16")
            continue
        cls = getattr(K, name, None)
        params = set(inspect.signature(cls.build).parameters) if cls is not None else set()
        if params & {"in_bits", "out_bits", "a_bits", "bits"}:
            found.add("int16")
        if "weight_bits" in params and name in ("Conv", "Linear"):  # the 4-bit path is the tensor unit's (docs/int4.md)
            found.add("int4")
    if not m.has_int16:
        found.discard("int16")
    if not int4:
        found.discard("int4")
    return "/".join(p for p in ("int8", "int16", "int4") if p in found)


def _form_text(r: ProbeResult) -> str:
    label = r.probe.form or "default"
    if r.error:
        return f"{label}: ERROR {r.error}"
    if r.fallbacks:
        return f"{label}: FLOAT ON THE BPU ({r.fallbacks[0][2]})"
    if r.on == "absorbed":
        return f"{label}: folded into a neighbour by the float passes"
    if r.on == "BPU":
        return f"{label}: {', '.join(r.kernels) or 'BPU'}"
    reasons = sorted({p[2] for p in r.placements if p[2]})
    return f"{label}: CPU" + (f" ({reasons[0]})" if reasons else "")


def _static_rules(op: str, march: str) -> str:
    """The rules an op is placed by, for a row without a probe."""
    rules = march_rules(march, op) + (OP_TABLE[op].rules if op in OP_TABLE else ())
    from hbtool.march.description import load_march

    m = load_march(march)
    return "; ".join(reason_of(r, m, None) for r in rules)


def build_table(marches: Iterable[str] = MARCHES, run: Callable[[Probe, str], ProbeResult] = run_probe) -> list[Row]:
    """The rows of every known op on every march; ``run`` runs a probe (a cache of results in the test)."""
    return [_row(op, march, run) for march in marches for op in known_ops()]


def _row(op: str, march: str, run: Callable[[Probe, str], ProbeResult]) -> Row:
    horizon = horizon_placement(op, march)
    if op in CPU_BY_DESIGN:
        return Row(op, march, "CPU", detail=CPU_BY_DESIGN[op], horizon=horizon, cpu_reason=CPU_BY_DESIGN[op])
    if op in CPU_REASON_OF_NODE:
        doc = " ".join((CPU_REASON_OF_NODE[op].__doc__ or "").split())
        return Row(op, march, "CPU", detail=f"reason per node: {doc}", horizon=horizon, cpu_reason=doc)
    probes = probes_of(op)
    if not probes:
        where = INTERNAL_OPS.get(op, "no probe")
        rules = _static_rules(op, march)
        return Row(op, march, "internal", detail=f"written by hbtool from {where}" + (f"; rules: {rules}" if rules else ""),
                   horizon=horizon)
    results = [run(p, march) for p in probes]
    ons = {r.on for r in results if r.on != "absorbed"}
    kernels = sorted({k for r in results if r.on == "BPU" for k in r.kernels})
    on = "folded" if not ons else ons.pop() if len(ons) == 1 else "BPU or CPU (by form)"
    cpu = sorted({p[2] for r in results for p in r.placements if p[0] == "CPU" and p[2]})
    return Row(op, march, on, kernels, kernel_precisions(kernels, march) if kernels else "",
               "; ".join(_form_text(r) for r in results), horizon, cpu[0] if cpu else None)


def _cell(text: str | None) -> str:
    return (text or "—").replace("|", "\\|").replace("\n", " ")


def render(rows: list[Row]) -> str:
    marches = list(dict.fromkeys(r.march for r in rows))
    out = [
        "# Supported ops per march",
        "",
        "<!-- generated by `python -m hbtool.optable --write` from the checker's rules (hbtool/march/op_rules.py) and",
        "     the integer kernels (hbtool/kernels/, hbtool/quant/lower.py); tests/unit/kernels/test_op_table_every_op_every_march.py fails when it is stale -->",
        "",
        "Every ONNX op type the checker knows, on every march, the way Horizon publishes its supported-op list.",
        "Each op with a probe was run, in each attribute form listed, as a tiny model (the op between two",
        "convolutions, 1x8x8x8) through checker -> calibrate -> compile -> simulate on that march: the row says",
        "where the checker put it and why, which integer kernel the compiler built, and the test holds",
        "simulate = quantized ONNX bit for bit (0 LSB) with no BPU op left in float.",
        "",
        "* **hbtool**: `BPU`, `CPU` (the reason is the rule's own text, as `hbtool checker` prints it), `folded`",
        "  (a float pass merged the op into a neighbour, e.g. a constant Add into the convolution's bias), or",
        "  `internal` (an op only hbtool's float passes write; no exported model holds it).",
        "* **kernel**: the integer kernel class in `hbtool/kernels/` (`moves codes`: data movement of integer codes;",
        f"  `{FUSED}`: a Relu/Clip the producing kernel applies as its requantization clamp).",
        "* **precisions**: the activation/weight widths the kernel takes on this march (int16 where the march has it,",
        "  int4 weights where it has the 4-bit path, docs/int4.md).",
        "* **Horizon**: the placement in Horizon's list for the same chip (`—`: not in the list, e.g. ops newer than",
        "  opset 11); see hbtool/optable/horizon.py for the source.",
        "",
        "## Summary",
        "",
        "| march | ops | BPU | CPU | BPU or CPU by form | folded | internal | Horizon BPU, hbtool CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in marches:
        rs = [r for r in rows if r.march == m]
        count = lambda on: sum(r.on == on for r in rs)  # noqa: E731
        diff = sum(r.horizon == "BPU" and r.on == "CPU" for r in rs)
        out.append(f"| {m} | {len(rs)} | {count('BPU')} | {count('CPU')} | {count('BPU or CPU (by form)')} | {count('folded')} | "
                   f"{count('internal')} | {diff} |")
    for m in marches:
        out += ["", f"## {m} ({MARCH_NAMES.get(m, m)})", "",
                "| ONNX op | hbtool | kernel | precisions | Horizon | forms probed, or the reason |", "|---|---|---|---|---|---|"]
        for r in (r for r in rows if r.march == m):
            out.append(f"| {r.op} | {r.on} | {_cell(', '.join(r.kernels))} | {_cell(r.precisions)} | {_cell(r.horizon)} | {_cell(r.detail)} |")
    out += ["", "## Where hbtool and Horizon differ", "",
            "Ops Horizon's list runs on the BPU that hbtool sends to the CPU, with hbtool's reason; then the ops hbtool",
            "runs as integers on the BPU where Horizon's list uses the CPU.", ""]
    for m in marches:
        to_cpu = [r for r in rows if r.march == m and r.horizon == "BPU" and r.on == "CPU"]
        to_bpu = [r for r in rows if r.march == m and r.horizon == "CPU" and r.on == "BPU"]
        out += [f"### {m}", ""]
        out += [f"* **{r.op}**: Horizon BPU, hbtool CPU: {_cell(DIFFERENCES.get(r.op, r.cpu_reason))}" for r in to_cpu] \
            or ["* none on the CPU that Horizon runs on the BPU"]
        if to_bpu:
            ops = ", ".join(f"{r.op} ({_cell(', '.join(r.kernels))})" for r in to_bpu)
            out.append(f"* hbtool BPU, Horizon CPU: {ops}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
