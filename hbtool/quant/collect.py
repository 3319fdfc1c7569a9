"""Run the float graph over calibration data and observe chosen tensors.

The float IR is exported once with the observed tensors added as graph outputs and run in
onnxruntime, sample batch by sample batch; each output updates its :class:`TensorStats` and is
released before the next is looked at. Only the statistics stay in memory; a model whose observed
tensors are too many to hold at once runs in pieces (:mod:`hbtool.quant.pieces`).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import numpy as np
import onnx
from onnx import helper

from hbtool.errors import InputError
from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import _value_info, to_onnx
from hbtool.ir.onnx_import import IN_MEMORY_LOCATION, handed_over_in_memory
from hbtool.quant.observers import COMPILED_HISTOGRAM_MIN_ELEMENTS, MAX_HIST_SAMPLES, TensorStats, histogram_elements
from hbtool.quant.pieces import PiecewiseSession, plan_pieces, run_each, static_sizes


def stays_in_memory(array: np.ndarray) -> bool:
    """A weight (``hbtool.ir.onnx_import.handed_over_in_memory``): left out of a :class:`SessionModel`'s bytes."""
    return handed_over_in_memory(array.dtype, array.nbytes)


@dataclass(frozen=True)
class SessionModel:
    """A model for an onnxruntime session, serialized without its weights, and the weights as numpy arrays.

    :func:`open_session` hands the arrays to onnxruntime as the model's external initializers (in memory), so a
    session opened on a graph hbtool holds costs no serialization of the weights and no parse of them: on ResNet50
    (100 MB of weights) serializing the scoring model took 0.56 s and opening it 0.41 s, most of both page faults of
    the copies. onnxruntime folds and fuses the arrays as it does initializers in the bytes, so a session computes
    the same numbers (``tests/unit/quant/test_session_model.py``)."""

    data: bytes
    weights: dict[str, np.ndarray]


def session_model(graph: Graph, extra_outputs: Iterable[str] = ()) -> SessionModel:
    """The float IR (with ``extra_outputs`` added as graph outputs) as a :class:`SessionModel`."""
    model = to_onnx(graph, in_memory=stays_in_memory)
    return SessionModel(_with_outputs(model, extra_outputs).SerializeToString(), _in_memory_weights(model, graph))


def session_model_of(model: onnx.ModelProto, graph: Graph) -> SessionModel:
    """The :class:`SessionModel` of ``model``, which is ``to_onnx(graph, in_memory=stays_in_memory)`` (with any
    metadata): for a caller that then writes the model's file from the same message
    (``hbtool.ir.onnx_export.put_back_in_memory_weights``)."""
    return SessionModel(model.SerializeToString(), _in_memory_weights(model, graph))


def _in_memory_weights(model: onnx.ModelProto, graph: Graph) -> dict[str, np.ndarray]:
    return {t.name: np.asarray(graph.values[t.name].data) for t in model.graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL and t.external_data[0].value == IN_MEMORY_LOCATION}


def float_session(graph: Graph, extra_outputs: Iterable[str] = (), threads: int = 0, basic: bool = False,
                  spinning: bool = True):
    """An onnxruntime session of the float IR that also returns ``extra_outputs`` (its weights handed over as arrays);
    ``spinning`` as :func:`open_session`'s."""
    return open_session(session_model(graph, extra_outputs), threads, basic, spinning)



def float_model_bytes(graph: Graph, extra_outputs: Iterable[str] = ()) -> bytes:
    """The serialized ONNX model of the float IR with ``extra_outputs`` added as graph outputs.

    Separate from :func:`open_session` so that a caller can build the next model (Python, holding
    the GIL) while onnxruntime opens and runs the previous one on another thread."""
    return _with_outputs(to_onnx(graph), extra_outputs).SerializeToString()


def with_extra_outputs(model: bytes | SessionModel, graph: Graph, extra_outputs: Iterable[str]) -> bytes | SessionModel:
    """``model`` (``to_onnx(graph)`` serialized, with any metadata) with ``extra_outputs`` added as graph
    outputs, as :func:`float_model_bytes` adds them, without building or serializing the model again.

    A serialized message followed by another of the same type parses as their merge, and a merge
    appends repeated fields: so the bytes of a ``ModelProto`` holding only the new ``graph.output``
    entries, appended, give the model :func:`_with_outputs` gives (same outputs in the same order, the
    same value infos). A large model is then serialized once for the file and once more for nothing.
    A :class:`SessionModel` gets the outputs appended to its bytes and keeps its weights.
    """
    if isinstance(model, SessionModel):
        return SessionModel(with_extra_outputs(model.data, graph, extra_outputs), model.weights)
    have = set(graph.outputs)
    produced = {o for n in graph.nodes for o in n.outputs if o and o not in have}
    referenced = have | {t for n in graph.nodes for t in n.inputs}
    extra = onnx.ModelProto()
    for name in extra_outputs:
        if name in have:
            continue
        v = graph.values.get(name)
        # to_onnx writes a value info for every produced tensor of known shape that is not an initializer
        known = (name in produced and v is not None and v.shape is not None
                 and not (v.is_const and name in referenced and name not in graph.inputs))
        extra.graph.output.append(_value_info(graph, name) if known else helper.make_empty_tensor_value_info(name))
        have.add(name)
    return model + extra.SerializeToString() if len(extra.graph.output) else model


def _with_outputs(model: onnx.ModelProto, extra_outputs: Iterable[str]) -> onnx.ModelProto:
    have = {o.name for o in model.graph.output}
    vis = {v.name: v for v in model.graph.value_info}
    for name in extra_outputs:
        if name in have:
            continue
        model.graph.output.append(vis[name] if name in vis else helper.make_empty_tensor_value_info(name))
        have.add(name)
    return model


def open_session(model: bytes | SessionModel, threads: int = 0, basic: bool = False, spinning: bool = True):
    """An onnxruntime CPU session of a serialized model or a :class:`SessionModel`. ``spinning=False`` for sessions
    that run beside others: idle pool threads then sleep instead of spinning on the cores the others need (no effect
    on results)."""
    import onnxruntime as ort

    options = _options(threads, basic, spinning=spinning)
    if not isinstance(model, SessionModel):
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    values = [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a)) for a in model.weights.values()]
    options.add_external_initializers(list(model.weights), values)
    session = ort.InferenceSession(model.data, options, providers=["CPUExecutionProvider"])
    # onnxruntime copies them while it opens the session (tests/unit/quant/test_session_model.py); held anyway, as
    # its documentation asks the memory to outlive the session
    session._hbtool_weights = (values, model.weights)
    return session


def _options(threads: int = 0, basic: bool = False, pieces: bool = False, spinning: bool = True):
    """Session options; ``pieces``: for one of several sessions run one after the other (hbtool.quant.pieces):
    no memory arena (it would keep each session's high-water mark) and no spinning worker threads (the idle
    sessions' pools would spin against the working one: 10x slower on a loaded machine)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if pieces or not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if basic:
        # models hbtool wrote are already folded: the extended fusions only cost session time
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if pieces:
        so.enable_cpu_mem_arena = False
    return so


def observing_session(graph: Graph, observed: list[str], budget: int | None = None, model: bytes | SessionModel | None = None):
    """(session, output names) that runs the float graph and hands out ``observed``: one onnxruntime
    session, or for a graph whose observed tensors exceed ``budget`` bytes the same graph in pieces
    (:mod:`hbtool.quant.pieces`), which gives the same arrays with a fraction of them in memory.
    ``budget`` (bytes) defaults to ``hbtool.quant.pieces.PIECE_BUDGET_BYTES``.

    The one session's idle threads sleep instead of spinning: the statistics of one run are taken on
    another thread while the session computes the next (:func:`_observe_overlapped`), and on two cores
    onnxruntime's spinning pool thread took the core the statistics need (the pass cost 1.5x the CPU
    seconds on MobileNetV2). Spinning only decides how a waiting thread waits: the arrays are the same.
    ``model``: ``to_onnx(graph)`` already serialized (the observed tensors are appended to it)."""
    from hbtool.quant import pieces as _pieces

    pieces = plan_pieces(graph, observed, _pieces.PIECE_BUDGET_BYTES if budget is None else budget)
    if pieces is None:
        data = session_model(graph, observed) if model is None else with_extra_outputs(model, graph, observed)
        sess = open_session(data, spinning=False)
        del data
        return sess, [o.name for o in sess.get_outputs()]
    model = to_onnx(graph)
    names = list(graph.outputs) + [t for t in dict.fromkeys(observed) if t not in graph.outputs]
    sess = PiecewiseSession(graph, pieces, observed, model, _options(pieces=True))
    return sess, names


def _split_batch(batch: Mapping[str, np.ndarray], batch_dims: Mapping[str, int]) -> Iterator[dict[str, np.ndarray]]:
    """Cut a batch of N samples into pieces of the model's own batch size."""
    if any(np.ndim(arr) == 0 for arr in batch.values()):   # a rank-0 input: one sample, never stacked
        yield dict(batch)
        return
    first = next(iter(batch.values()))
    name0 = next(iter(batch))
    per = batch_dims[name0]
    n = first.shape[0]
    for k in range(0, n, per):
        yield {name: arr[k : k + batch_dims[name]] for name, arr in batch.items()}


def collect_stats(
    graph: Graph,
    tensors: list[str],
    batches: Iterable[Mapping[str, np.ndarray]],
    progress=None,
    channel_means: dict[str, int] | None = None,
    channel_maxes: dict[str, int] | None = None,
    model: bytes | SessionModel | None = None,
    num_samples: int | None = None,
) -> dict[str, TensorStats]:
    """Observe ``tensors`` while running the float graph on every batch.

    ``progress`` (optional) is called with the number of samples done after each run.
    ``channel_means`` ``{tensor: channel axis}``: also accumulate the per-channel mean of those
    tensors (``TensorStats.channel_mean``), which bias correction needs.
    ``channel_maxes`` ``{tensor: channel axis}``: also keep the per-channel max |x| of those
    tensors (``TensorStats.channel_absmax``), which PTF and SmoothQuant need.
    ``model``: ``to_onnx(graph)`` serialized, when the caller has it (not built again).
    ``num_samples``: how many samples ``batches`` holds, when known: a short pass bins its histograms in numpy
    rather than start numba (the same counts either way).
    """
    channel_means = channel_means or {}
    channel_maxes = channel_maxes or {}
    extra = [t for t in list(channel_means) + list(channel_maxes) if t not in tensors]
    compiled = histogram_elements(static_sizes(graph, tensors), num_samples) >= COMPILED_HISTOGRAM_MIN_ELEMENTS
    with _loops_loading_beside(compiled):
        stats = _observe_all(graph, tensors, batches, progress, channel_means, channel_maxes, model, extra, compiled)
    return stats


@contextmanager
def _loops_loading_beside(compiled: bool) -> Iterator[None]:
    """With ``compiled``, the histogram's compiled loops load on a thread of their own while the block opens the
    session and starts the pass (:func:`hbtool.quant.abs_histogram.load_loops`): numba's import and cache cost about
    0.5 CPU seconds, which the first histogram paid on the statistics thread while the thread feeding onnxruntime
    waited for it, the second core idle on an idle machine. A histogram that comes before they are loaded waits
    for them (Python's import lock, numba's compiler lock): the same loops, the same counts."""
    if not compiled:
        yield
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="hbtool-loops") as loader:
        loading = loader.submit(_load_loops)
        yield
    loading.result()


def _load_loops() -> None:
    from hbtool.quant.abs_histogram import load_loops

    load_loops()


def _observe_all(graph: Graph, tensors: list[str], batches: Iterable[Mapping[str, np.ndarray]], progress,
                 channel_means: dict[str, int], channel_maxes: dict[str, int], model: bytes | SessionModel | None, extra: list[str],
                 compiled: bool) -> dict[str, TensorStats]:
    """The pass of :func:`collect_stats`: the session, every batch observed, the statistics checked."""
    sess, out_names = observing_session(graph, list(tensors) + list(dict.fromkeys(extra)), model=model)
    stats = {t: TensorStats(t) for t in tensors}
    mean_acc: dict[str, list] = {}
    max_acc: dict[str, np.ndarray] = {}
    batch_dims = {name: (graph.shape(name) or (1,))[0] for name in graph.inputs}
    rng = np.random.default_rng(0)
    subsets: dict[int, np.ndarray] = {}

    def observe(name: str, arr: np.ndarray) -> None:
        if name in channel_means:
            axis = channel_means[name] % arr.ndim
            sums = arr.astype(np.float64).sum(axis=tuple(a for a in range(arr.ndim) if a != axis))
            acc = mean_acc.setdefault(name, [np.zeros_like(sums), 0])
            acc[0] += sums
            acc[1] += arr.size // arr.shape[axis]
        if name in channel_maxes:
            axis = channel_maxes[name] % arr.ndim
            m = np.abs(arr.astype(np.float64)).max(axis=tuple(a for a in range(arr.ndim) if a != axis))
            max_acc[name] = m if name not in max_acc else np.maximum(max_acc[name], m)
        st = stats.get(name)
        if st is None:
            return
        if arr.size > MAX_HIST_SAMPLES and arr.size not in subsets:
            subsets[arr.size] = np.sort(rng.choice(arr.size, MAX_HIST_SAMPLES, replace=False))
        st.update(arr, subsets.get(arr.size), compiled=compiled)

    if isinstance(sess, PiecewiseSession):
        # a graph too large to expose at once: pieces hand tensors out in their own order, so draw the histogram
        # subsets up front, in the order the one-session run meets the sizes (every tensor gets the very subset it
        # got before), and observe one tensor at a time, each released before the next is made (run_each)
        for name, size in (static_sizes(graph, [n for n in out_names if n in stats]) or {}).items():
            if size > MAX_HIST_SAMPLES and size not in subsets:
                subsets[size] = np.sort(rng.choice(size, MAX_HIST_SAMPLES, replace=False))
        for batch in batches:
            for feeds in _split_batch(batch, batch_dims):
                for name, arr in run_each(sess, out_names, feeds):
                    observe(name, arr)
                if progress is not None:
                    progress(next(iter(feeds.values())).shape[0])
    else:
        _observe_overlapped(sess, out_names, batches, batch_dims, observe, progress)
    for name, (sums, count) in mean_acc.items():
        stats.setdefault(name, TensorStats(name)).channel_mean = sums / max(count, 1)
    for name, m in max_acc.items():
        stats.setdefault(name, TensorStats(name)).channel_absmax = m
    for st in stats.values():
        if st.nonfinite:
            raise InputError(
                f"tensor '{st.name}' became NaN/Inf {st.nonfinite} times while running the float model on the calibration data",
                "check the calibration data and preprocessing (mean_value/scale_value), or the model itself",
            )
    return stats


def _observe_overlapped(sess, out_names, batches, batch_dims, observe, progress) -> None:
    """The statistics of run k taken on one background thread while onnxruntime computes run k + 1 (both release
    the GIL for their heavy parts); runs are observed strictly in order, one at a time, so every number is what a
    strictly sequential loop gives. Holds two runs' tensors at most: graphs whose observed tensors exceed the piece
    budget never come here (they run in pieces)."""
    from concurrent.futures import ThreadPoolExecutor

    def observe_run(outs: list[np.ndarray]) -> None:
        for i, name in enumerate(out_names):
            arr, outs[i] = outs[i], None
            observe(name, arr)

    with ThreadPoolExecutor(1) as observer:
        pending = None
        for batch in batches:
            for feeds in _split_batch(batch, batch_dims):
                outs = sess.run(out_names, feeds)
                if pending is not None:
                    pending.result()
                pending = observer.submit(observe_run, outs)
                del outs
                if progress is not None:
                    progress(next(iter(feeds.values())).shape[0])
        if pending is not None:
            pending.result()
