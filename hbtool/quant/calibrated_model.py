"""``*_calibrated_model.onnx``: the float graph plus the chosen quantization parameters.

Every quantized tensor is followed by one ``HzCalibration`` node (hbtool domain) carrying its
bits, scale, threshold and method; its body fake-quantizes (``clip(round(x/s)) * s``), so the
model runs in onnxruntime and shows the accuracy of the plan in float arithmetic. Weights of
the tensor unit get an ``HzCalibration`` node with per-channel scales. A PTF tensor's node also
carries ``ptf_alpha`` (channel c of the last axis at ``scale * 2**alpha_c``); a segmented model
output (:mod:`hbtool.quant.output_channels`) carries ``axis_scales`` and ``scale_axis``; a log2-coded
Softmax output has ``method: log2`` and ``bits: 4``. ``compile`` reads the
plan back with :func:`extract_plan`; nothing else is needed to lower the model.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.hz_ops import HZ_CALIBRATION
from hbtool.quant.plan import QMAX, QuantPlan, TensorQuant

CALIBRATION_OP = HZ_CALIBRATION
BIAS_DELTA_KEY = "hbtool.bias_delta"


def fake_quant_constants(bits: int, scale: np.ndarray, axis: int | None, rank: int,
                         code_range: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scale, qmin, qmax) of a fake-quantizer, float32, as its body holds them: one definition for the
    ``HzCalibration`` body and for the candidate-scoring model that feeds them as inputs
    (:mod:`hbtool.quant.candidate_scoring`)."""
    qmax = QMAX[bits] if code_range is None else code_range[1]
    s = np.asarray(scale, dtype=np.float32)
    if axis is not None and s.size > 1:
        shape = [1] * rank
        shape[axis] = s.size
        s = s.reshape(shape)
    qmin = (-qmax - 1 if bits == 16 else -128) if code_range is None else code_range[0]
    return s, np.array(qmin, np.float32), np.array(qmax, np.float32)


def _fake_quant_body(opset: int, bits: int, scale: np.ndarray, axis: int | None, rank: int,
                     code_range: tuple[int, int] | None = None) -> Graph:
    body = Graph("HzCalibration_body", opset)
    body.inputs, body.outputs = ["x"], ["y"]
    s, qmin, qmax = fake_quant_constants(bits, scale, axis, rank, code_range)
    body.add_const(s, name="scale")
    body.add_const(qmin, name="qmin")
    body.add_const(qmax, name="qmax")
    body.add_node("Div", ["x", "scale"], ["xs"], name="div")
    body.add_node("Round", ["xs"], ["xr"], name="round")
    body.add_node("Clip", ["xr", "qmin", "qmax"], ["xq"], name="clip")
    body.add_node("Mul", ["xq", "scale"], ["y"], name="mul")
    return body


def fake_quantized(x: np.ndarray, scale: np.ndarray, qmin: np.ndarray, qmax: np.ndarray) -> np.ndarray:
    """What :func:`_fake_quant_body` computes, in numpy: ``Mul(Clip(Round(Div(x, scale)), qmin, qmax), scale)`` in float32.

    Why it gives the body's bits: each step is one IEEE float32 operation, correctly rounded in numpy as in
    onnxruntime's kernels (``Div``, ``Mul``), or exact (``Round`` to the nearest even, as onnxruntime's ``Round`` and
    ``np.rint`` both do; ``Clip`` picks a value). For a constant ``x`` (a weight) onnxruntime folds the body into this
    very constant when it opens a session; computing it here spares that fold (the scoring session of
    :mod:`hbtool.quant.candidate_scoring`). ``tests/unit/quant/test_weight_fake_quant_in_numpy.py`` compares both."""
    s = np.asarray(scale, np.float32)
    y = np.divide(np.asarray(x, np.float32), s, dtype=np.float32)
    np.rint(y, out=y)
    np.maximum(y, np.asarray(qmin, np.float32), out=y)
    np.minimum(y, np.asarray(qmax, np.float32), out=y)
    np.multiply(y, s, out=y)
    return y


def _log2_body(opset: int, bits: int) -> Graph:
    """Fake log2 quantization of probabilities: ``k = clip(round(-log2 x), 0, Z)``, ``y = 2**-k`` (0 for ``k = Z``)."""
    body = Graph("HzCalibration_log2_body", opset)
    body.inputs, body.outputs = ["x"], ["y"]
    z = 2**bits - 1
    body.add_const(np.array(-1.0 / np.log(2.0), np.float32), name="neg_inv_ln2")
    body.add_const(np.array(0.0, np.float32), name="zero")
    body.add_const(np.array(float(z), np.float32), name="top")
    body.add_const(np.array(2.0, np.float32), name="two")
    body.add_node("Log", ["x"], ["lx"], name="log")
    body.add_node("Mul", ["lx", "neg_inv_ln2"], ["nl"], name="neg_log2")
    body.add_node("Round", ["nl"], ["kr"], name="round")
    body.add_node("Clip", ["kr", "zero", "top"], ["k"], name="clip")
    body.add_node("Neg", ["k"], ["nk"], name="neg")
    body.add_node("Pow", ["two", "nk"], ["p"], name="pow2")
    body.add_node("Equal", ["k", "top"], ["is_zero"], name="is_zero")
    body.add_node("Where", ["is_zero", "zero", "p"], ["y"], name="where")
    return body


def activation_fake_quant(tq: TensorQuant, rank: int) -> tuple[int, np.ndarray, int | None, int, tuple[int, int] | None] | None:
    """The arguments of a linear activation's fake-quantizer (:func:`fake_quant_constants`); None for a log2 code."""
    if tq.is_log2:
        return None
    if tq.axis_scales is not None:   # a segmented output: each channel on its piece's grid
        return tq.bits, np.asarray(tq.axis_scales, np.float32), rank + int(tq.scale_axis), rank, None
    if tq.ptf_alpha is not None:
        return tq.bits, np.asarray(tq.channel_scales(), np.float32), rank - 1, rank, None
    return tq.bits, np.array(tq.scale), None, rank, tq.code_range


def _activation_body(opset: int, tq: TensorQuant, rank: int) -> Graph:
    args = activation_fake_quant(tq, rank)
    if args is None:
        return _log2_body(opset, tq.bits)
    return _fake_quant_body(opset, *args)


def _insert_after(graph: Graph, tensor: str, attrs: dict[str, Any], body: Graph, consumers: list[Node]) -> str:
    out = graph.unique_name(f"{tensor}_calibrated")
    v = graph.values.get(tensor)
    graph.set_value(out, v.shape if v else None, v.dtype if v and v.dtype is not None else np.float32)
    node = graph.add_node(CALIBRATION_OP, [tensor], [out], attrs, name=f"{tensor}_HzCalibration", domain=HBTOOL_DOMAIN, body=body)
    node.meta["on"] = "BPU"
    for c in consumers:
        c.inputs = [out if i == tensor else i for i in c.inputs]
    return out


def build_calibrated_graph(graph: Graph, plan: QuantPlan, weight_scales: dict[str, tuple[np.ndarray, int]]) -> tuple[Graph, dict[str, str]]:
    """A copy of ``graph`` with ``HzCalibration`` nodes after every planned tensor.

    ``weight_scales`` maps a weight tensor to (per-channel scales, channel axis). Returns the
    graph and ``{tensor: name of its fake-quantized value}``.
    """
    g = graph.copy()
    names: dict[str, str] = {}
    consumers = g.consumer_map()
    for name, tq in plan.tensors.items():
        attrs = {"bits": tq.bits, "scale": float(tq.scale), "threshold": float(tq.threshold), "method": tq.method, "group": tq.group}
        if tq.code_range is not None:
            attrs["code_range"] = [int(v) for v in tq.code_range]
        if tq.ptf_alpha is not None:
            attrs["ptf_alpha"] = [int(a) for a in np.asarray(tq.ptf_alpha).reshape(-1)]
        if tq.axis_scales is not None:
            attrs["axis_scales"] = [float(v) for v in np.asarray(tq.axis_scales).reshape(-1)]
            attrs["scale_axis"] = int(tq.scale_axis)
        body = _activation_body(g.opset, tq, len(g.shape(name) or ()))
        if name in g.outputs and g.producer(name) is not None:
            # keep the model's output names: the float value is renamed, the fake-quantized one keeps the name
            float_name = g.unique_name(f"{name}_float")
            v = g.values[name]
            g.set_value(float_name, v.shape, v.dtype)
            prod = g.producer(name)
            prod.outputs = [float_name if o == name else o for o in prod.outputs]
            for c in consumers.get(name, []):
                c.inputs = [float_name if i == name else i for i in c.inputs]
            node = g.add_node(CALIBRATION_OP, [float_name], [name], attrs, name=f"{name}_HzCalibration", domain=HBTOOL_DOMAIN, body=body)
            node.meta["on"] = "BPU"
            consumers = g.consumer_map()
            names[name] = name
            continue
        names[name] = _insert_after(g, name, attrs, body, consumers.get(name, []))
    for wname, (scales, axis) in weight_scales.items():
        users = consumers.get(wname, [])
        shape = g.shape(wname) or ()
        wbits = int(plan.weight_bits.get(wname, 8))
        attrs = {"bits": wbits, "scales": [float(s) for s in np.asarray(scales).reshape(-1)], "axis": int(axis), "method": "weight"}
        # int4 weights are symmetric in [-7, 7] (hbtool.quant.int4); int8 ones fake-quantize as before
        body = _fake_quant_body(g.opset, 8, np.asarray(scales, np.float32), axis, len(shape), (-7, 7) if wbits == 4 else None)
        _insert_after(g, wname, attrs, body, users)
    g.toposort()
    if plan.bias_delta:
        g.metadata[BIAS_DELTA_KEY] = json.dumps({k: [float(x) for x in np.asarray(v).reshape(-1)] for k, v in sorted(plan.bias_delta.items())})
    g.metadata["hbtool.quant_plan"] = json.dumps({"method": plan.method, "tensors": len(plan.tensors)})
    return g, names


def loaded_bias_delta(graph: Graph) -> dict[str, np.ndarray]:
    """The bias correction an hbtool calibrated model of an earlier version kept in its metadata
    (taken out of ``graph.metadata``, so no model written from it carries it twice); {} if none."""
    raw = graph.metadata.pop(BIAS_DELTA_KEY, None)
    return {} if raw is None else {k: np.asarray(v, np.float64) for k, v in json.loads(raw).items()}


def _tensor_quant(name: str, a: dict[str, Any]) -> TensorQuant:
    alpha = a.get("ptf_alpha")
    code = a.get("code_range")
    axis_scales = a.get("axis_scales")
    return TensorQuant(name, int(a["bits"]), float(a["scale"]), float(a["threshold"]), str(a["method"]), int(a.get("group", -1)),
                       ptf_alpha=None if alpha is None else np.asarray(alpha, np.int64),
                       code_range=None if code is None else (int(code[0]), int(code[1])),
                       axis_scales=None if axis_scales is None else stored_scales(axis_scales),
                       scale_axis=None if axis_scales is None else int(a["scale_axis"]))


def stored_scales(values: Any) -> np.ndarray:
    """Scales as an ONNX float attribute holds them (float32), in float64: calibrate and compile agree."""
    return np.asarray(values, np.float32).astype(np.float64)


def extract_plan(graph: Graph) -> tuple[Graph, QuantPlan, dict[str, tuple[np.ndarray, int]]]:
    """Remove ``HzCalibration`` nodes from a calibrated graph and return the plan they carried."""
    g = graph.copy()
    plan = QuantPlan()
    weights: dict[str, tuple[np.ndarray, int]] = {}
    for node in [n for n in g.nodes if n.op_type == CALIBRATION_OP]:
        src, dst = node.inputs[0], node.outputs[0]
        a = node.attrs
        if dst in g.outputs:
            # an output kept its name: give it back to the producer of the float value
            prod = g.producer(src)
            g.nodes.remove(node)
            if prod is not None:
                prod.outputs = [dst if o == src else o for o in prod.outputs]
            for c in g.nodes:
                c.inputs = [dst if i == src else i for i in c.inputs]
            src = dst
            tq = _tensor_quant(src, a)
            plan.tensors[src] = tq
            plan.groups.setdefault(tq.group, []).append(src)
            continue
        if a.get("method") == "weight":
            weights[src] = (np.asarray(a["scales"], np.float32), int(a["axis"]))
            if int(a.get("bits", 8)) == 4:
                plan.weight_bits[src] = 4
        else:
            tq = _tensor_quant(src, a)
            plan.tensors[src] = tq
            plan.groups.setdefault(tq.group, []).append(src)
        g.nodes.remove(node)
        g.replace_uses(dst, src)
    if BIAS_DELTA_KEY in g.metadata:
        plan.bias_delta = {k: np.asarray(v, np.float64) for k, v in json.loads(g.metadata.pop(BIAS_DELTA_KEY)).items()}
    g.remove_unused()
    return g, plan, weights
