"""ONNX -> IR: the one place where user models are read.

Real exports are messy: dynamic dimensions, shape-computation subgraphs (Shape/Gather/Concat/
Mod/...), weights stored as ``Constant`` nodes, Identity/Dropout leftovers, opsets from 11 up,
external-data weights, model-local functions from the dynamo exporter. The import fixes the
input shapes, lets onnxruntime's basic graph optimizer fold everything that is constant
(measured on a real Swin-T export: 3,379 nodes to 615 standard nodes in under a second, no
Shape/Gather left), lifts the opset to at least 17 with onnx's version converter, infers every
shape and builds the IR. Every failure becomes a one-line :class:`~hbtool.errors.ModelError`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hbtool.errors import ModelError, NotDeployableError
from hbtool.ir.fold_names import rename_invented_tensors, tensor_names
from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node
from hbtool.ir.prequantized import MICROSOFT_DOMAIN, MICROSOFT_QUANT_OPS, dequantize_graph

log = logging.getLogger(__name__)

MIN_OPSET = 11
MAX_OPSET = 21
IR_MIN_OPSET = 17  # LayerNormalization exists from 17: the IR never works below it
KNOWN_DOMAINS = {"", "ai.onnx"}
STAGE_KEY = "hbtool.stage"


def load_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    """Read an ONNX file (with external-data weights next to it), or say clearly why not."""
    return _load_onnx_with_bytes(path)[0]


def _load_onnx_with_bytes(path: str | os.PathLike) -> tuple[onnx.ModelProto, bytes | None]:
    """(:func:`load_onnx`'s model, the file's bytes when they are the whole model: no external data).

    The bytes parse to the model, so the checker can read them instead of a serialization of the model
    (onnx.checker.check_model serializes a ModelProto first: 0.35 s for a 100 MB model)."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file '{path}' does not exist", "check the path (relative paths in a YAML are taken from the YAML's folder)")
    if path.is_dir():
        raise ModelError(f"model path '{path}' is a directory", "give the .onnx file itself")
    try:
        # what onnx.load(path, load_external_data=False) does: the format from the extension (binary unless textual)
        fmt = onnx.serialization.registry.get_format_from_file_extension(path.suffix) or "protobuf"
        data = path.read_bytes()
        model = onnx.serialization.registry.get(fmt).deserialize_proto(data, onnx.ModelProto())
    except Exception as exc:  # protobuf DecodeError and friends
        raise ModelError(
            f"'{path}' is not a readable ONNX model ({type(exc).__name__})",
            "export the model again with torch.onnx.export or check that the file is complete",
        ) from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"'{path}' is not an ONNX model (no graph inside)", "give an .onnx file exported by torch.onnx.export, paddle2onnx or tf2onnx")
    if fmt != "protobuf" or _uses_external_data(model):
        data = None   # text, or weights in other files: the bytes are not the serialized model
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:
        raise ModelError(f"external weights of '{path}' cannot be read ({exc})", "keep the external-data files next to the .onnx file") from None
    return model, data


def import_onnx(
    source: str | os.PathLike | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    fold: bool | None = None,
) -> Graph:
    """Import a model into the IR with every shape static and constant subgraphs folded.

    ``input_shapes`` fixes (or overrides) the shapes of named graph inputs; a dynamic dimension
    with no shape given is an error that names the input and says how to give it. ``fold``
    defaults to True for user models and False for models hbtool wrote itself (already folded,
    and whose hbtool-domain functions must survive).
    """
    model, as_read = (source, None) if isinstance(source, onnx.ModelProto) else _load_onnx_with_bytes(source)
    ours = any(p.key == STAGE_KEY for p in model.metadata_props) or any(f.domain == HBTOOL_DOMAIN for f in model.functions)
    if fold is None:
        fold = not ours
    _check_domains(model)
    _check_opset(model)
    _check_model(model if as_read is None else as_read)
    del as_read
    _check_input_types(model)
    model = _inline_foreign_functions(model)
    _apply_input_shapes(model, dict(input_shapes or {}))
    model = _fold_lift_fold(model, fold)
    _check_static_sizes(model)
    model = _infer_shapes(model)
    graph = _to_ir(model)
    _fill_missing_shapes(graph, model)
    # an already-quantized model (QDQ, weight-only DequantizeLinear, QOperator) becomes its float graph
    graph.prequantized = dequantize_graph(graph)
    return graph


# --------------------------------------------------------------------------- checks
#: ops whose output size depends on the values of their input, not its shape
DATA_DEPENDENT_SIZE = ("NonZero",)


def _check_static_sizes(model: onnx.ModelProto) -> None:
    """Refuse an op left after folding whose output size depends on the data (a deployed model has one shape
    per tensor).

    torch_geometric's ``add_remaining_self_loops`` (GCN, GAT) keeps the edges that are not self-loops
    with ``NonZero``: the exporter writes the count its example graph had, and every later shape was
    folded from it, so another graph failed deep inside onnxruntime (``invalid expand shape``, exit 3)."""
    constant = {t.name for t in model.graph.initializer}
    for node in model.graph.node:          # graph order is topological: a node of constants is constant
        if all(not name or name in constant for name in node.input):
            constant.update(node.output)
        elif node.op_type in DATA_DEPENDENT_SIZE:
            raise NotDeployableError(
                f"node '{node.name or node.output[0]}' ({node.op_type}) has an output whose size depends on the input "
                "data, and a deployed model has static shapes",
                "export the model so that no op's output size depends on the data (e.g. a fixed number of edges: "
                "torch_geometric's add_self_loops=False with the self-loops in the input graph), or cut the graph before it")


def _opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def _check_domains(model: onnx.ModelProto) -> None:
    local = {(f.domain, f.name) for f in model.functions}
    for node in model.graph.node:
        if node.domain in KNOWN_DOMAINS or (node.domain, node.op_type) in local:
            continue
        if node.domain == MICROSOFT_DOMAIN and node.op_type in MICROSOFT_QUANT_OPS:
            continue  # onnxruntime's quantized operators: hbtool.ir.prequantized reads them
        raise ModelError(
            f"node '{node.name}' uses op '{node.op_type}' of custom domain '{node.domain}', which the BPU toolchain cannot run",
            "export the model with standard ONNX ops only (replace the custom op or split it out of the model)",
        )


def _check_opset(model: onnx.ModelProto) -> None:
    op = _opset(model)
    if op < MIN_OPSET or op > MAX_OPSET + 2:
        raise ModelError(
            f"model uses ONNX opset {op}; hbtool reads opsets {MIN_OPSET} to {MAX_OPSET}",
            f"export again with opset_version between {MIN_OPSET} and {MAX_OPSET}",
        )


def _uses_external_data(model: onnx.ModelProto) -> bool:
    """Whether a tensor of the model (initializers, attributes, subgraphs) keeps its data in another file; True
    when this onnx cannot tell (then the model is serialized for the checker, as always)."""
    helper_module = onnx.external_data_helper
    try:
        return any(helper_module.uses_external_data(t) for t in helper_module._get_all_tensors(model))
    except AttributeError:   # pragma: no cover - an onnx without the walk
        return True


def _check_model(model: onnx.ModelProto | bytes) -> None:
    """onnx's checker on the model, or on the file's bytes that parse to it (the same message, one serialization less)."""
    try:
        onnx.checker.check_model(model)
    except ValueError:
        # over 2 GB: the checker wants a path; the import itself can go on
        pass
    except onnx.checker.ValidationError as exc:
        first = " ".join(str(exc).split())[:300]  # onnx spreads one message over several lines
        raise ModelError(f"the ONNX checker rejects the model: {first}", "fix the export so that onnx.checker.check_model passes") from None


# element types a model input may have: real numbers and booleans (the chip has no strings or complex numbers)
_INPUT_ELEM_TYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL,
}


def _check_input_types(model: onnx.ModelProto) -> None:
    init_names = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        kind = inp.type.WhichOneof("value")
        if kind != "tensor_type":
            raise ModelError(
                f"input '{inp.name}' is a {kind or 'value of unknown kind'}, not a tensor",
                "export the model with tensor inputs only (sequences, maps and optionals cannot be fed to the BPU)",
            )
        elem = inp.type.tensor_type.elem_type
        if elem not in _INPUT_ELEM_TYPES:
            name = onnx.TensorProto.DataType.Name(elem) if elem in onnx.TensorProto.DataType.values() else str(elem)
            raise ModelError(
                f"input '{inp.name}' has element type {name.lower()}, which hbtool does not support",
                "export the model with float32 (or integer/bool) inputs; convert strings or complex numbers outside the model",
            )


# ------------------------------------------------------------------------ rewrites
def _inline_foreign_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Inline model-local functions that are not hbtool's own (dynamo exports use them)."""
    foreign = [(f.domain, f.name) for f in model.functions if f.domain != HBTOOL_DOMAIN]
    if not foreign:
        return model
    from onnx import inliner

    return inliner.inline_selected_functions(model, foreign, exclude=False)


def _apply_input_shapes(model: onnx.ModelProto, shapes: dict[str, Sequence[int]]) -> None:
    init_names = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in init_names]
    names = [i.name for i in graph_inputs]
    for name in shapes:
        if name not in names:
            raise ModelError(
                f"input '{name}' given a shape does not exist in the model (inputs: {', '.join(names)})",
                "use one of the model's input names in --input-shape / input_name",
            )
    for inp in graph_inputs:
        tt = inp.type.tensor_type
        if not tt.HasField("shape"):
            if inp.name not in shapes:
                raise ModelError(
                    f"input '{inp.name}' has no shape in the model",
                    f"give one with --input-shape {inp.name} 1x3x224x224 or input_parameters.input_shape",
                )
        if inp.name in shapes:
            want = [int(d) for d in shapes[inp.name]]
            have = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
            if have is not None and len(have) != len(want):
                raise ModelError(
                    f"input '{inp.name}' has rank {len(have)} in the model but the given shape {'x'.join(map(str, want)) or 'scalar'} "
                    f"has rank {len(want)}",
                    "give a shape with one number per dimension of the model input"
                    + (f" (a rank-0 input: --input-shape {inp.name} scalar, or input_shape: scalar)" if not have else ""),
                )
            if have is not None:
                for axis, (h, w) in enumerate(zip(have, want)):
                    if h not in (None, 0) and h != w:
                        raise ModelError(
                            f"input '{inp.name}' has fixed dimension {axis} = {h} in the model, the given shape says {w}",
                            f"give {'x'.join(str(x if x not in (None, 0) else '?') for x in have)} with the '?' filled in",
                        )
            tt.ClearField("shape")
            for d in want:
                tt.shape.dim.add().dim_value = d
            continue
        dims = tt.shape.dim
        dynamic = [k for k, d in enumerate(dims) if not d.HasField("dim_value") or d.dim_value <= 0]
        if dynamic:
            pretty = "x".join(str(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in dims)
            raise ModelError(
                f"input '{inp.name}' has dynamic dimension(s) {dynamic} (shape {pretty})",
                f"fix them with --input-shape {inp.name} <shape like 1x3x224x224> or input_parameters.input_shape",
            )
    # stale intermediate shapes from the exporter may disagree with the fixed ones
    del model.graph.value_info[:]
    for out in model.graph.output:
        tt = out.type.tensor_type
        if tt.HasField("shape"):
            tt.ClearField("shape")


# onnxruntime's basic-level fusions into ops that exist only from opset 17 (LayerNormalization)
# or 20 (Gelu): a model below 17 never met them before the lift, and hbtool's own passes
# (ir/passes/fuse_layernorm.py, fuse_gelu.py) fuse the same patterns keeping the user's node
# names, so a lifted model keeps the decomposed form it was exported with
_FUSIONS_LEFT_TO_HBTOOL = ("LayerNormFusionL1", "GeluFusionL1")


# onnxruntime's basic level quantizes a float weight that feeds a node between Q/DQ pairs (per tensor, with the
# activation's zero point): the model's float weight would arrive as integers it never fixed
_QDQ_REWRITES_LEFT_TO_HBTOOL = ("WeightBiasQuantization",)


#: where a weight left out of a serialized model says it is: ONNX external data needs a location, and this one names no
#: file. The consumer is handed the array itself (onnxruntime's in-memory external initializers: the folds here, and
#: ``hbtool.quant.collect.open_session``)
IN_MEMORY_LOCATION = "hbtool-in-memory"
#: the types onnxruntime is handed as arrays (numpy's own, which ``OrtValue.ortvalue_from_numpy`` takes): float
#: weights, and the int8 / uint8 weights of the quantized model
_IN_MEMORY_DTYPES = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.uint8))


def handed_over_in_memory(dtype: Any, nbytes: int) -> bool:
    """A weight that a model for onnxruntime leaves out of its bytes: of a type above, and large enough that it is
    no shape, scalar or pads tensor (:data:`SET_ASIDE_MIN_BYTES`, the size onnx's passes set aside from too)."""
    return np.dtype(dtype) in _IN_MEMORY_DTYPES and nbytes >= SET_ASIDE_MIN_BYTES


def _copy_fields(source: Any, target: Any, skip: str) -> None:
    """Every field of protobuf message ``source`` but ``skip`` into the empty ``target``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if isinstance(value, (bytes, str, int, float)):
            setattr(target, field.name, value)
        elif hasattr(value, "CopyFrom"):   # a message
            getattr(target, field.name).CopyFrom(value)
        else:   # a repeated field
            getattr(target, field.name).extend(value)


def _large_weights_apart(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """(``model`` without the bytes of its large float initializers, {name: array} of them): a copy, where
    :func:`_weights_set_aside` takes the same tensors' bytes out of ``model`` itself for onnx's passes.

    Each left-out initializer keeps its name, shape and type and points at :data:`IN_MEMORY_LOCATION`; onnxruntime
    is given the arrays (``add_external_initializers``). Serializing a 100 MB model for a fold and onnxruntime parsing
    it again took half of each fold's time on ResNet50; onnxruntime optimizes the arrays exactly as it does
    initializers in the bytes (the folded models are the same bytes: ``tests/unit/ir/test_fold_in_memory.py``)."""
    light = onnx.ModelProto()
    _copy_fields(model, light, "graph")
    _copy_fields(model.graph, light.graph, "initializer")
    weights: dict[str, np.ndarray] = {}
    for tensor in model.graph.initializer:
        dtype = _raw_dtype(tensor) if tensor.data_type in SET_ASIDE_TYPES else None
        if dtype is not None and tensor.name not in weights and handed_over_in_memory(dtype, len(tensor.raw_data)):
            weights[tensor.name] = np.frombuffer(tensor.raw_data, dtype=dtype).reshape(tuple(tensor.dims))
            ref = light.graph.initializer.add()
            ref.name = tensor.name
            ref.dims.extend(tensor.dims)
            ref.data_type = tensor.data_type
            ref.data_location = onnx.TensorProto.EXTERNAL
            entry = ref.external_data.add()
            entry.key = "location"
            entry.value = IN_MEMORY_LOCATION
        else:
            light.graph.initializer.add().CopyFrom(tensor)
    return light, weights


def _raw_dtype(tensor: onnx.TensorProto) -> np.dtype | None:
    """The numpy type of a tensor stored in ``raw_data``, else None."""
    if not tensor.HasField("raw_data"):
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:   # a type this onnx does not know
        return None


def _serialized_below(model: onnx.ModelProto, limit: int) -> bytes | None:
    """``model`` serialized, or None when it is more than ``limit`` bytes.

    Serializing and measuring the bytes costs one pass over the weights; ``ByteSize()`` before
    serializing cost another as long (0.24 s for a 100 MB model, twice per import). A model whose
    tensors (read from their shapes, no data touched) come near the limit is measured with
    ``ByteSize()`` first as before, so a model past protobuf's 2 GB is never serialized whole."""
    if _tensor_bytes(model) > limit // 2 and model.ByteSize() > limit:
        return None
    data = model.SerializeToString()
    return data if len(data) <= limit else None


def _tensor_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the model's initializers and Constant-node tensors, from their shapes and types."""
    tensors = list(model.graph.initializer)
    tensors += [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.HasField("t")]
    total = 0
    for t in tensors:
        size = 1
        for d in t.dims:
            size *= d
        try:
            item = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except Exception:   # strings, a type this onnx does not know: 8 bytes an element, as if it were large
            item = 8
        total += size * max(item, 1)
    return total


def _fold_with_onnxruntime(model: onnx.ModelProto, disabled: Sequence[str] = ()) -> onnx.ModelProto:
    """Constant-fold shape subgraphs and drop redundant nodes with onnxruntime's basic level."""
    import onnxruntime as ort

    kwargs = {"disabled_optimizers": list(disabled) + list(_QDQ_REWRITES_LEFT_TO_HBTOOL)}

    with tempfile.TemporaryDirectory(prefix="hbtool_fold_") as tmp:
        out = Path(tmp) / "folded.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(out)
        so.log_severity_level = 3
        try:
            light, weights = _large_weights_apart(model)
            data = _serialized_below(light, 1_800_000_000)
            if data is None:
                src = Path(tmp) / "src.onnx"
                onnx.save(model, str(src), save_as_external_data=True, location="src.data")
                ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"], **kwargs)
            else:
                if weights:   # onnxruntime copies the arrays while it opens the session; it writes them into the file
                    values = [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()]
                    so.add_external_initializers(list(weights), values)
                ort.InferenceSession(data, so, providers=["CPUExecutionProvider"], **kwargs)
                del data
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0][:300]
            raise ModelError(
                f"onnxruntime cannot load the model to fold its shape computations: {msg}",
                "check the input shapes given and that the model runs in onnxruntime",
            ) from None
        folded = onnx.load(str(out))
    # onnxruntime leaves the ops but may drop names of new nodes; name everything
    _name_nodes(folded)
    # and the tensors its fusions added must not keep its stems (see fold_names)
    rename_invented_tensors(folded, tensor_names(model))
    return folded


def _fold_lift_fold(model: onnx.ModelProto, fold: bool) -> onnx.ModelProto:
    """Fold, lift the opset, and fold again what the lift wrote.

    At opset 13 Squeeze/Unsqueeze/ReduceSum ``axes`` and Split ``split`` became inputs, and
    Softmax changed meaning; onnx's version converter writes fresh ``Constant`` nodes for them,
    or Shape/Flatten/Reshape chains where it does not know a rank. Folded only before the lift,
    those stayed computed at run time (the checker put each such node on the CPU). The first
    fold still matters: it leaves every shape known to the converter, which then keeps a
    last-axis Softmax as it is.
    """
    if not fold:
        return _lift_opset(model)
    folded = _fold_with_onnxruntime(model)
    if _opset(folded) >= IR_MIN_OPSET:
        return folded
    return _fold_with_onnxruntime(_lift_opset(folded), disabled=_FUSIONS_LEFT_TO_HBTOOL)


def _name_nodes(model: onnx.ModelProto) -> None:
    seen: set[str] = set()
    for k, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{k}"
        while name in seen:
            name = f"{name}_{k}"
        node.name = name
        seen.add(name)


def _lift_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    op = _opset(model)
    if op >= IR_MIN_OPSET:
        return model
    from onnx import version_converter

    try:
        converted = _without_weights(lambda m: version_converter.convert_version(m, IR_MIN_OPSET), model, "the opset converter")
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0][:200]
        raise ModelError(
            f"cannot convert the model from opset {op} to {IR_MIN_OPSET}: {msg}",
            f"export the model with opset_version={IR_MIN_OPSET}",
        ) from None
    return converted


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return _without_weights(lambda m: onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True), model,
                                "shape inference")
    except Exception as exc:  # shape inference failures are not fatal: the fallback runs the model
        log.debug("onnx shape inference failed: %s", exc)
        return model


#: initializers whose bytes are set aside while onnx's C++ passes copy the model: floating-point tensors (the values
#: shape inference propagates are integers: shapes, axes, indices) far larger than any scales or pads tensor that the
#: version converter's adapters read
SET_ASIDE_MIN_BYTES = 4096
SET_ASIDE_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


def _without_weights(call: Callable[[onnx.ModelProto], onnx.ModelProto], model: onnx.ModelProto, what: str) -> onnx.ModelProto:
    """``call(model)`` run on ``model`` with its large float weights set aside (:func:`_weights_set_aside`), the
    weights put back into what it returns; should that fail (a pass that did read a weight's values), the plain
    ``call(model)``, so that the set-aside never turns a model the plain call takes into an error."""
    try:
        with _weights_set_aside(model) as restore:
            return restore(call(model))
    except Exception as exc:
        log.debug("%s without the weights failed (%s): run with them", what, exc)
        return call(model)


@contextmanager
def _weights_set_aside(model: onnx.ModelProto) -> Iterator[Callable[[onnx.ModelProto], onnx.ModelProto]]:
    """The raw bytes of ``model``'s large initializers taken out for the ``with`` block, and put back after it;
    yields ``restore``, which puts the same bytes into a model the block made from ``model``.

    onnx's version converter and shape inference serialize the model, parse it in C++, and serialize and parse
    their result again: four copies of every weight (ResNet50's 100 MB: 0.8 and 0.4 CPU seconds, against 0.1 and
    0.15 without the weights). Neither reads a weight's values, only its name, type and dims, which stay; the
    tensors whose values they do read are integers (Reshape shapes, Squeeze axes, Gather indices) or small (Resize
    scales, Pad values). The same bytes are put back, so the models are the ones the plain calls give
    (``tests/unit/ir/test_import_weights_set_aside.py`` compares them)."""
    aside = {}
    for tensor in model.graph.initializer:
        if (tensor.data_type in SET_ASIDE_TYPES and tensor.data_location != onnx.TensorProto.EXTERNAL
                and len(tensor.raw_data) >= SET_ASIDE_MIN_BYTES):
            aside[tensor.name] = tensor.raw_data
            tensor.ClearField("raw_data")

    def restore(result: onnx.ModelProto) -> onnx.ModelProto:
        if result is not model:
            _put_back(result, aside)
        return result

    try:
        yield restore
    finally:
        _put_back(model, aside)


def _put_back(model: onnx.ModelProto, aside: Mapping[str, bytes]) -> None:
    for tensor in model.graph.initializer:
        data = aside.get(tensor.name)
        if data is not None and not tensor.raw_data:
            tensor.raw_data = data


# ----------------------------------------------------------------------- to the IR
def _np_dtype(elem_type: int) -> np.dtype | None:
    if elem_type == 0:
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def _shape_of(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def attr_value(attr: onnx.AttributeProto) -> Any:
    """An ONNX attribute as a plain Python / numpy value (tensors as arrays, strings as str)."""
    value = helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [numpy_helper.to_array(v) for v in value]
    return value


def _base_op_type(op_type: str) -> str:
    return op_type.split("__", 1)[0]


def _function_body(func: onnx.FunctionProto, opset: int) -> Graph:
    body = Graph(func.name, opset)
    body.inputs = list(func.input)
    body.outputs = list(func.output)
    for name in list(func.input) + list(func.output):
        body.value(name)
    for k, fn in enumerate(func.node):
        attrs = {a.name: attr_value(a) for a in fn.attribute}
        body.add_node(fn.op_type, list(fn.input), list(fn.output), attrs, name=fn.name or f"{fn.op_type}_{k}", domain=fn.domain)
    return body


def _to_ir(model: onnx.ModelProto) -> Graph:
    g = model.graph
    graph = Graph(g.name or "main_graph", _opset(model))
    graph.metadata = {p.key: p.value for p in model.metadata_props}
    funcs = {(f.domain, f.name): f for f in model.functions}
    for init in g.initializer:
        data = numpy_helper.to_array(init)
        graph.add_const(data, name=init.name)
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.name in graph.values and graph.values[vi.name].is_const:
            continue
        graph.set_value(vi.name, _shape_of(vi.type), _np_dtype(vi.type.tensor_type.elem_type))
    init_names = {i.name for i in g.initializer}
    graph.inputs = [i.name for i in g.input if i.name not in init_names]
    graph.outputs = [o.name for o in g.output]
    seen: set[str] = set()
    for k, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{k}"
        if name in seen:
            name = f"{name}_{k}"
        seen.add(name)
        attrs = {a.name: attr_value(a) for a in n.attribute}
        if n.op_type == "Constant" and n.domain in KNOWN_DOMAINS:
            # the value_info loop above may have registered this name without data; the
            # constant takes it over under its own name (add_const would rename it and leave
            # every reader pointing at a tensor nobody produces)
            graph.values.pop(n.output[0], None)
            graph.add_const(_constant_value(n, attrs), name=n.output[0])
            continue
        body = None
        op_type = n.op_type
        if (n.domain, n.op_type) in funcs:
            body = _function_body(funcs[(n.domain, n.op_type)], graph.opset)
            op_type = _base_op_type(n.op_type)
        node = graph.add_node(op_type, list(n.input), list(n.output), attrs, name=name, domain=n.domain if n.domain != "ai.onnx" else "", body=body)
        node.meta.update(_node_meta(n))
    return graph


def _node_meta(n: onnx.NodeProto) -> dict[str, str]:
    props = getattr(n, "metadata_props", None)
    return {p.key: p.value for p in props} if props else {}


def _constant_value(node: onnx.NodeProto, attrs: dict[str, Any]) -> np.ndarray:
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], dtype=np.int64)
    raise ModelError(f"Constant node '{node.name}' holds a kind of value hbtool does not read", "store the constant as a tensor")


def _fill_missing_shapes(graph: Graph, model: onnx.ModelProto) -> None:
    """Where onnx's inference gave up, run the model once in onnxruntime to read the shapes."""
    missing = [o for n in graph.nodes for o in n.outputs if o and (graph.values[o].shape is None or graph.values[o].dtype is None)]
    if not missing:
        return
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in missing:
        if name not in have:
            m.graph.output.append(helper.make_empty_tensor_value_info(name))
    feeds = {}
    for name in graph.inputs:
        v = graph.values[name]
        if v.shape is None or v.dtype is None:
            raise ModelError(f"input '{name}' has no static shape", f"give one with --input-shape {name} <shape>")
        feeds[name] = np.zeros(v.shape, dtype=v.dtype) if v.dtype != np.bool_ else np.zeros(v.shape, dtype=bool)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        outs = sess.run(missing, feeds)
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0][:300]
        raise ModelError(f"cannot determine tensor shapes by running the model: {msg}", "check the input shapes given") from None
    for name, arr in zip(missing, outs):
        graph.set_value(name, arr.shape, arr.dtype)
