"""Run the float graph over calibration data and observe chosen tensors.

The float IR is exported once with the observed tensors added as graph outputs and run in
onnxruntime, sample batch by sample batch; each output updates its :class:`TensorStats`.
Only the statistics stay in memory.
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


def float_session(graph: Graph, extra_outputs: Iterable[str] = (), threads: int = 0, basic: bool = False):
    """An onnxruntime session of the float IR that also returns ``extra_outputs``."""
    return open_session(float_model_bytes(graph, extra_outputs), threads, basic)


def float_model_bytes(graph: Graph, extra_outputs: Iterable[str] = ()) -> bytes:
    """The serialized ONNX model of the float IR with ``extra_outputs`` added as graph outputs.

    Separate from :func:`open_session` so that a caller can build the next model (Python, holding
    the GIL) while onnxruntime opens and runs the previous one on another thread."""
    model = to_onnx(graph)
    have = {o.name for o in model.graph.output}
    vis = {v.name: v for v in model.graph.value_info}
    for name in extra_outputs:
        if name in have:
            continue
        model.graph.output.append(vis[name] if name in vis else helper.make_empty_tensor_value_info(name))
        have.add(name)
    return model.SerializeToString()


def open_session(model: bytes, threads: int = 0, basic: bool = False, spinning: bool = True):
    """An onnxruntime CPU session of a serialized model. ``spinning=False`` for sessions that run beside
    others: idle pool threads then sleep instead of spinning on the cores the others need (no effect on results)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if basic:
        # models hbtool wrote are already folded: the extended fusions only cost session time
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


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
    sess = float_session(graph, list(tensors) + list(dict.fromkeys(extra)))
    out_names = [o.name for o in sess.get_outputs()]
    stats = {t: TensorStats(t) for t in tensors}
    mean_acc: dict[str, list] = {}
    max_acc: dict[str, np.ndarray] = {}
    batch_dims = {name: (graph.shape(name) or (1,))[0] for name in graph.inputs}
    rng = np.random.default_rng(0)
    subsets: dict[int, np.ndarray] = {}

    def observe(outs: list[np.ndarray]) -> None:
        for name, arr in zip(out_names, outs):
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

    # the statistics of run k are taken on one background thread while onnxruntime computes run k + 1
    # (both release the GIL for their heavy parts); runs are observed strictly in order, one at a time,
    # so every number is what a strictly sequential loop gives
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as observer:
        pending = None
        for batch in batches:
            for feeds in _split_batch(batch, batch_dims):
                outs = sess.run(out_names, feeds)
                if pending is not None:
                    pending.result()
                pending = observer.submit(observe, outs)
                if progress is not None:
                    progress(next(iter(feeds.values())).shape[0])
        if pending is not None:
            pending.result()
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
