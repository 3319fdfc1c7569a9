"""Run the float graph over calibration data and observe chosen tensors.

The float IR is exported once with the observed tensors added as graph outputs and run in
onnxruntime, sample batch by sample batch; each output updates its :class:`TensorStats` and is
released before the next is looked at. Only the statistics stay in memory; a model whose observed
tensors are too many to hold at once runs in pieces (:mod:`hbtool.quant.pieces`).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping

import numpy as np
import onnx
from onnx import helper

from hbtool.errors import InputError
from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import to_onnx
from hbtool.quant.observers import MAX_HIST_SAMPLES, TensorStats
from hbtool.quant.pieces import PiecewiseSession, plan_pieces, run_each, static_sizes


def float_session(graph: Graph, extra_outputs: Iterable[str] = (), threads: int = 0, basic: bool = False):
    """An onnxruntime session of the float IR that also returns ``extra_outputs``."""
    import onnxruntime as ort

    model = _with_outputs(to_onnx(graph), extra_outputs)
    return ort.InferenceSession(model.SerializeToString(), _options(threads, basic), providers=["CPUExecutionProvider"])


def _with_outputs(model: onnx.ModelProto, extra_outputs: Iterable[str]) -> onnx.ModelProto:
    have = {o.name for o in model.graph.output}
    vis = {v.name: v for v in model.graph.value_info}
    for name in extra_outputs:
        if name in have:
            continue
        model.graph.output.append(vis[name] if name in vis else helper.make_empty_tensor_value_info(name))
        have.add(name)
    return model


def _options(threads: int = 0, basic: bool = False, pieces: bool = False):
    """Session options; ``pieces``: for one of several sessions run one after the other (hbtool.quant.pieces):
    no memory arena (it would keep each session's high-water mark) and no spinning worker threads (the idle
    sessions' pools would spin against the working one: 10x slower on a loaded machine)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if basic:
        # models hbtool wrote are already folded: the extended fusions only cost session time
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    if pieces:
        so.enable_cpu_mem_arena = False
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def observing_session(graph: Graph, observed: list[str], budget: int | None = None):
    """(session, output names) that runs the float graph and hands out ``observed``: one onnxruntime
    session, or for a graph whose observed tensors exceed ``budget`` bytes the same graph in pieces
    (:mod:`hbtool.quant.pieces`), which gives the same arrays with a fraction of them in memory.
    ``budget`` (bytes) defaults to ``hbtool.quant.pieces.PIECE_BUDGET_BYTES``."""
    from hbtool.quant import pieces as _pieces

    pieces = plan_pieces(graph, observed, _pieces.PIECE_BUDGET_BYTES if budget is None else budget)
    if pieces is None:
        sess = float_session(graph, observed)
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
) -> dict[str, TensorStats]:
    """Observe ``tensors`` while running the float graph on every batch.

    ``progress`` (optional) is called with the number of samples done after each run.
    ``channel_means`` ``{tensor: channel axis}``: also accumulate the per-channel mean of those
    tensors (``TensorStats.channel_mean``), which bias correction needs.
    ``channel_maxes`` ``{tensor: channel axis}``: also keep the per-channel max |x| of those
    tensors (``TensorStats.channel_absmax``), which PTF and SmoothQuant need.
    """
    channel_means = channel_means or {}
    channel_maxes = channel_maxes or {}
    extra = [t for t in list(channel_means) + list(channel_maxes) if t not in tensors]
    sess, out_names = observing_session(graph, list(tensors) + list(dict.fromkeys(extra)))
    stats = {t: TensorStats(t) for t in tensors}
    mean_acc: dict[str, list] = {}
    max_acc: dict[str, np.ndarray] = {}
    batch_dims = {name: (graph.shape(name) or (1,))[0] for name in graph.inputs}
    rng = np.random.default_rng(0)
    subsets: dict[int, np.ndarray] = {}
    if isinstance(sess, PiecewiseSession):
        # pieces hand tensors out in their own order: draw the histogram subsets up front, in the order
        # the one-session run meets the sizes, so every tensor gets the very subset it got before
        for name, size in (static_sizes(graph, [n for n in out_names if n in stats]) or {}).items():
            if size > MAX_HIST_SAMPLES and size not in subsets:
                subsets[size] = np.sort(rng.choice(size, MAX_HIST_SAMPLES, replace=False))
    for batch in batches:
        for feeds in _split_batch(batch, batch_dims):
            # one tensor at a time, each released before the next is looked at (run_each)
            for name, arr in run_each(sess, out_names, feeds):
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
                    continue
                if arr.size > MAX_HIST_SAMPLES and arr.size not in subsets:
                    subsets[arr.size] = np.sort(rng.choice(arr.size, MAX_HIST_SAMPLES, replace=False))
                st.update(arr, subsets.get(arr.size))
            if progress is not None:
                progress(next(iter(feeds.values())).shape[0])
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
