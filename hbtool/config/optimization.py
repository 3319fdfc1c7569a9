"""``calibration_parameters.optimization``: Horizon's switches, read with Horizon's meaning.

Horizon documents these values (``,`` or ``;`` separated, case-sensitive op names):

==============================  ==================================================================
``set_model_output_int8``       the nodes that produce the model outputs compute in int8
``set_model_output_int16``      ... in int16
``set_all_nodes_int16``         every BPU tensor in int16 (as ``enable_int16: true``)
``set_<Op>_input_int8/int16``   the data inputs of every node of ONNX type ``<Op>`` in that precision
``set_<Op>_output_int8/int16``  the outputs of every node of type ``<Op>`` in that precision
``bias_correction``             Horizon's BiasCorrection; hbtool's ``bias_correction: true``
==============================  ==================================================================

``set_Softmax_input_int8`` / ``set_Softmax_output_int8`` are what the RDK model zoo writes to
keep a YOLO's Softmax on the BPU in int8 instead of a float CPU op. hbtool places Softmax on
the BPU whenever the march's rule allows; the switch then keeps it in int8 where auto_int16
would otherwise choose int16.

Values hbtool refuses say what it does instead: ``asymmetric`` (hbtool's activations are
symmetric, as the BPU's), ``lstm_batch_last`` (no LSTM kernel), ``run_fast`` (a J6 switch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hbtool.config.values import describe, fail, split_list

_OP_SWITCH = re.compile(r"^set_([A-Za-z][A-Za-z0-9]*)_(input|output)_(int8|int16)$")

FIXED_VALUES = ("set_model_output_int8", "set_model_output_int16", "set_all_nodes_int16",
                "bias_correction")

REFUSED = {
    "asymmetric": ("hbtool quantizes activations symmetrically (zero point 0), as the BPU does",
                   "remove asymmetric; if accuracy suffers try calibration_type kl or max with "
                   "max_percentile, or node_info int16"),
    "lstm_batch_last": ("hbtool has no LSTM kernel, so the X5 LSTM batch-last layout does not apply",
                        "remove lstm_batch_last"),
    "run_fast": ("run_fast is a J6 (hb_compile) switch; hb_mapper for bayes, bayes-e and "
                 "bernoulli2 has no such value", "remove run_fast"),
}

ALLOWED_DOC = ("`set_model_output_int8`, `set_model_output_int16`, `set_all_nodes_int16`, "
               "`set_<Op>_input_int8`/`_int16`, `set_<Op>_output_int8`/`_int16` (`<Op>` an ONNX "
               "op type, e.g. `Softmax`), `bias_correction`")


def read_optimization(path: str, value: Any) -> list[str]:
    """The switches as written (canonical case for the fixed ones), each checked."""
    out: list[str] = []
    for item in split_list(path, value, ";,"):
        text = item.strip()
        fixed = next((v for v in FIXED_VALUES if v.lower() == text.lower()), None)
        if fixed is not None:
            canon = fixed
        elif _OP_SWITCH.match(text):
            canon = text
        elif text.lower() in REFUSED:
            fail(path, f"'{text}': " + REFUSED[text.lower()][0], REFUSED[text.lower()][1])
        else:
            fail(path, f"'{text}' is not an optimization value hbtool knows ({describe(text)})",
                 "write set_model_output_int8, set_model_output_int16, set_all_nodes_int16, "
                 "set_<Op>_input_int8|int16 or set_<Op>_output_int8|int16 with <Op> an ONNX op "
                 "type such as Softmax, or bias_correction")
        if canon not in out:
            out.append(canon)
    if "set_model_output_int8" in out and "set_model_output_int16" in out:
        fail(path, "set_model_output_int8 and set_model_output_int16 contradict each other",
             "keep one of them")
    for op in {m.group(1) for m in map(_OP_SWITCH.match, out) if m}:
        for side in ("input", "output"):
            if f"set_{op}_{side}_int8" in out and f"set_{op}_{side}_int16" in out:
                fail(path, f"set_{op}_{side}_int8 and set_{op}_{side}_int16 contradict each other",
                     "keep one of them")
    return out


@dataclass(frozen=True)
class Switches:
    """What the optimization list asks of the quantization plan."""

    model_output_bits: int | None = None            # 8, 16 or None (the plan decides)
    all_int16: bool = False
    bias_correction: bool = False
    # op type -> bits for its data inputs / its outputs
    op_input_bits: dict[str, int] = field(default_factory=dict)
    op_output_bits: dict[str, int] = field(default_factory=dict)


def switches(values: list[str] | None) -> Switches:
    values = list(values or [])
    out_bits = 8 if "set_model_output_int8" in values else 16 if "set_model_output_int16" in values else None
    op_in: dict[str, int] = {}
    op_out: dict[str, int] = {}
    for v in values:
        m = _OP_SWITCH.match(v)
        if m:
            (op_in if m.group(2) == "input" else op_out)[m.group(1)] = int(m.group(3)[3:])
    return Switches(out_bits, "set_all_nodes_int16" in values, "bias_correction" in values, op_in, op_out)
