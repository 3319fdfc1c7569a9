"""Preprocessing folded into the model: one ``HzPreprocess`` node per image input.

With ``norm_type`` set, Horizon's models take raw pixel values and do the normalisation
themselves; hbtool does the same. :func:`insert_preprocess` puts, right after the graph input,
one node ``HzPreprocess`` (domain ``hbtool``) computing ``(x - mean) * scale`` per channel
(Horizon's meaning of ``mean_value`` / ``scale_value``). Its body is standard ONNX (Sub, Mul,
and for run-time colour conversion Gather / Conv / MatMul / Add on constants), exported as a
model-local function, so onnxruntime runs the model unchanged. The graph input keeps its name,
shape and dtype; only its meaning changes, to raw pixels 0-255 in the training colour order and
layout (``input_layout_train`` describes the model's own input, so the channel axis is taken
from it).

Attributes of the node: ``mean`` and ``scale`` (float lists, one value or one per channel;
``data_mean`` has scale ``[1.0]``, ``data_scale`` has mean ``[0.0]``), ``input_type`` (the
colour order the node takes), ``train_type``, ``layout`` (``NCHW``/``NHWC``/``none``) and
``norm_type``. The same description goes, as JSON, to
``graph.metadata["hbtool.preprocess.<input>"]``.

Run-time input types: by default the node takes the *training* colour order, as the calibrated
and quantized models do (``input_type = input_type_train``). With ``runtime_input=True`` (the
compiled artifact's view) it takes ``input_type_rt`` instead and converts first:
``rgb``<->``bgr`` by a Gather on the channel axis, ``yuv444`` to ``rgb``/``bgr`` by the inverse
of full-range BT.601 (:func:`hbtool.kernels.colour.conversion_matrix`, the matrix the chip's
converter rounds to integers; the inverse of :func:`hbtool.io.colour.rgb_to_yuv`; no clipping), ``gray`` and
same-type pairs need nothing. This float view has no ``nv12`` form (an InputError names the key):
the compiled artifact and the quantized model take nv12 through the integer kernel
:class:`hbtool.kernels.colour.InputConvert`, which the lowering makes of this node
(:mod:`hbtool.io.runtime_input`).

Idempotent: an existing ``HzPreprocess`` reading the same input is rebuilt in place (never a
second one), so inserting twice, or inserting into a model hbtool wrote, does not apply the
normalisation twice.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from hbtool.config.types import InputSpec
from hbtool.errors import InputError
from hbtool.io.runtime_input import needs_conversion
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node, Value
from hbtool.ir.hz_ops import HZ_PREPROCESS
from hbtool.kernels.colour import conversion_matrix

OP_TYPE = HZ_PREPROCESS
METADATA_PREFIX = "hbtool.preprocess."


def find_preprocess(graph: Graph, input_name: str) -> Node | None:
    """The HzPreprocess node reading graph input ``input_name``, if there is one."""
    for node in graph.nodes:
        if node.op_type == OP_TYPE and node.domain == HBTOOL_DOMAIN and node.inputs[:1] == [input_name]:
            return node
    return None


def _input_name(graph: Graph, spec: InputSpec, index: int) -> str:
    name = spec.name
    if name is None:
        if len(graph.inputs) == 1:
            return graph.inputs[0]
        raise InputError(f"input {index + 1} has no name but the model has {len(graph.inputs)} "
                         "inputs", "set input_parameters.input_name to the model's input names")
    if name not in graph.inputs:
        raise InputError(f"input_parameters.input_name: the model has no input '{name}' (its "
                         f"inputs: {', '.join(graph.inputs) or 'none'})",
                         "use the model's input names")
    return name


def _conversion(spec: InputSpec, runtime_input: bool) -> str | None:
    """The colour conversion the node does first: None, 'swap' or 'yuv'."""
    if not runtime_input or spec.type_rt == spec.type_train:
        return None
    train, rt = spec.type_train, spec.type_rt
    if rt == "nv12":
        raise InputError(
            f"input_parameters.input_type_rt: nv12 run-time input (train {train}) for "
            f"{spec.label} is not supported in the model yet",
            "use input_type_rt rgb, bgr or yuv444 for now, or convert nv12 before the model")
    if {train, rt} == {"rgb", "bgr"}:
        return "swap"
    if rt == "yuv444" and train in ("rgb", "bgr"):
        return "yuv"
    raise InputError(f"input_parameters.input_type_rt: {rt} run-time input for "
                     f"{spec.label} trained on {train} cannot be converted",
                     "use an input_type_rt that input_type_train allows (see docs/config.md)")


def _values(spec: InputSpec) -> tuple[list[float], list[float]]:
    mean = [0.0]
    scale = [1.0]
    if spec.norm_type in ("data_mean", "data_mean_and_scale"):
        assert spec.mean is not None, "the config loader requires mean_value"
        mean = [float(v) for v in spec.mean]
    if spec.norm_type in ("data_scale", "data_mean_and_scale"):
        assert spec.scale is not None, "the config loader requires scale_value"
        scale = [float(v) for v in spec.scale]
    return mean, scale


def _broadcast(values: Sequence[float], rank: int, axis: int | None, dtype: np.dtype) -> np.ndarray:
    arr = np.asarray(values, dtype=dtype)
    if arr.size == 1 or axis is None:
        return arr.reshape(())
    shape = [1] * rank
    shape[axis] = arr.size
    return arr.reshape(shape)


def _build_body(name: str, out: str, spec: InputSpec, shape: tuple[int, ...],
                dtype: np.dtype, conversion: str | None, opset: int) -> Graph:
    """Standard-op body: [colour conversion] -> [Sub mean] -> [Mul scale]."""
    body = Graph(f"{OP_TYPE}_body", opset)
    body.inputs = [name]
    body.outputs = [out]
    body.values[name] = Value(name, shape, dtype)
    rank = len(shape)
    axis = spec.channel_axis
    mean, scale = _values(spec)
    steps: list[tuple[str, list[np.ndarray | None], dict[str, Any]]] = []
    if conversion == "swap":
        steps.append(("Gather", [None, np.array([2, 1, 0], dtype=np.int64)], {"axis": axis}))
    elif conversion == "yuv":
        w, bias = conversion_matrix("yuv444", spec.type_train)   # training colour = w @ yuv + bias
        if spec.layout_train == "NCHW":
            steps.append(("Conv", [None, w.reshape(3, 3, 1, 1).astype(dtype), bias.astype(dtype)],
                          {}))
        else:
            steps.append(("MatMul", [None, np.ascontiguousarray(w.T).astype(dtype)], {}))
            steps.append(("Add", [None, bias.astype(dtype)], {}))
    if spec.norm_type in ("data_mean", "data_mean_and_scale"):
        steps.append(("Sub", [None, _broadcast(mean, rank, axis, dtype)], {}))
    if spec.norm_type in ("data_scale", "data_mean_and_scale"):
        steps.append(("Mul", [None, _broadcast(scale, rank, axis, dtype)], {}))
    if not steps:
        steps.append(("Identity", [None], {}))
    current = name
    for k, (op, operands, attrs) in enumerate(steps):
        result = out if k == len(steps) - 1 else f"{name}__pre{k}"
        ins = []
        for j, data in enumerate(operands):
            if data is None:
                ins.append(current)
                continue
            cname = f"{name}__pre{k}_{op.lower()}{j}"
            body.values[cname] = Value(cname, tuple(int(d) for d in data.shape), data.dtype, data)
            ins.append(cname)
        body.add_node(op, ins, [result], attrs, name=f"{op}_{k}")
        body.values[result] = Value(result, shape, dtype)
        current = result
    return body


def insert_preprocess(graph: Graph, inputs: Sequence[InputSpec], *,
                      runtime_input: bool = False) -> None:
    """Put one HzPreprocess node after every graph input that needs preprocessing.

    An input needs it when its ``norm_type`` is not ``no_preprocess`` (a featuremap with a norm
    type gets one too: the config asked for it), or when it has a run-time format of its own
    (:func:`hbtool.io.runtime_input.needs_conversion`: the node, an Identity in float, is
    where the integer program converts the chip's buffer). Idempotent; see the module doc.
    Raises InputError for an unknown input name, a non-float input with a norm type, and nv12
    run-time input with ``runtime_input``.
    """
    for index, spec in enumerate(inputs):
        conversion = _conversion(spec, runtime_input)
        if spec.norm_type == "no_preprocess" and conversion is None and not needs_conversion(spec):
            continue
        name = _input_name(graph, spec, index)
        value = graph.values.get(name)
        shape = value.shape if value is not None else None
        if spec.shape is not None:
            shape = tuple(spec.shape)
        dtype = np.dtype(value.dtype) if value is not None and value.dtype is not None \
            else np.dtype(np.float32)
        if dtype.kind != "f":
            raise InputError(f"input '{name}' is {dtype.name}, but norm_type {spec.norm_type} "
                             "needs a float model input",
                             "set norm_type no_preprocess for this input, or export the model "
                             "with a float input")
        axis = spec.channel_axis
        if shape is None:
            if axis is not None or conversion is not None:
                raise InputError(f"the shape of input '{name}' is not known",
                                 "set input_parameters.input_shape, e.g. 1x3x224x224")
            shape_for_body: tuple[int, ...] = ()
        else:
            shape_for_body = tuple(int(d) for d in shape)
        mean, scale = _values(spec)
        channels = shape_for_body[axis] if axis is not None and shape_for_body else None
        for key, vals in (("mean_value", mean), ("scale_value", scale)):
            if len(vals) > 1 and channels is not None and len(vals) != channels:
                raise InputError(f"input_parameters.{key}: {len(vals)} values for input "
                                 f"'{name}', which has {channels} channels",
                                 f"give 1 or {channels} values")
        input_type = spec.type_rt if runtime_input else spec.type_train
        attrs = {"mean": mean, "scale": scale, "input_type": input_type,
                 "train_type": spec.type_train, "layout": spec.layout_train or "none",
                 "norm_type": spec.norm_type}

        existing = find_preprocess(graph, name)
        out = existing.outputs[0] if existing is not None else graph.unique_name(f"{name}_preprocessed")
        body = _build_body(name, out, spec, shape_for_body if shape is not None else (),
                           dtype, conversion, graph.opset)
        if shape is None:
            for v in body.values.values():
                if not v.is_const:
                    v.shape = None
        if existing is not None:
            existing.attrs = attrs
            existing.body = body
            node = existing
        else:
            node = graph.add_node(OP_TYPE, [name], [out], attrs, name=f"{OP_TYPE}_{name}",
                                  domain=HBTOOL_DOMAIN, body=body, index=0)
            for other in graph.nodes:
                if other is not node:  # consumers now read the normalised tensor
                    other.inputs = [out if i == name else i for i in other.inputs]
        graph.set_value(out, shape, dtype)
        graph.metadata[METADATA_PREFIX + name] = json.dumps({
            "node": node.name,
            "input": name,
            "formula": "(x - mean) * scale",
            "input_values": "raw pixels 0-255" if spec.is_image else "as given",
            "input_type": input_type,
            "train_type": spec.type_train,
            "layout": spec.layout_train,
            "norm_type": spec.norm_type,
            "mean": mean,
            "scale": scale,
            "conversion": conversion,
        }, sort_keys=True)
