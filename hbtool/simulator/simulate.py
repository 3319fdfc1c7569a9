"""``hbtool simulate``: run an artifact on many samples and compare with an ONNX model."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hbtool.compiler.artifact import read_artifact
from hbtool.errors import InputError
from hbtool.io.files import safe_file_name
from hbtool.io.metrics import RunningChannelErrors, RunningErrors, output_channel_axis
from hbtool.simulator.executor import Executor
from hbtool.simulator.inputs import iter_batches, open_inputs, release_pages


@dataclass
class OutputComparison:
    name: str
    cosine: float
    l1: float
    l2: float
    chebyshev: float
    max_lsb: float | None          # largest difference in output LSBs (dequantized outputs)
    within_1lsb: float | None      # fraction of elements within 1 LSB
    # the output's worst channel (hbtool.io.metrics.RunningChannelErrors): a channel the whole output's cosine hides
    worst_channel: int | None = None
    worst_channel_snr_db: float | None = None
    worst_channel_cosine: float | None = None


@dataclass
class SimulationResult:
    samples: int
    outputs: dict[str, np.ndarray]
    seconds: float
    comparisons: list[OutputComparison] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    samples_run: int | None = None  # samples this call ran (fewer than ``samples`` after --resume)
    compare_preprocessed: list[str] = field(default_factory=list)  # inputs fed to --compare after (x - mean) * scale


def _compare_preprocessing(session, header_inputs: list[dict]) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """What the artifact does to each input before the model proper, for a --compare model that lacks it.

    The artifact takes raw pixels and folds ``(x - mean) * scale`` into the model; hbtool's own
    stage models (``*_original_float_model.onnx`` and later) carry the same step and say so in
    their metadata (``hbtool.preprocess.<input>``). A model without that metadata is the user's
    own float model, which expects the normalised input: fed the raw pixels it compares two
    different computations and shows a cosine near 0 for a correct artifact. So that model gets
    the artifact's normalisation first. (A colour or layout conversion makes the artifact take a
    run-time buffer, which ``_compare_session`` already matches against the model's input type.)
    """
    meta = session.get_modelmeta().custom_metadata_map or {}
    out: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
    for d in header_inputs:
        name = d["name"]
        if f"hbtool.preprocess.{name}" in meta or d.get("runtime"):
            continue   # hbtool's own model takes the same buffer, or the dtype check above handled the run-time buffer
        if (d.get("norm_type") or "no_preprocess") == "no_preprocess":
            continue
        mean = np.asarray(d.get("mean") or [0.0], np.float32)
        scale = np.asarray(d.get("scale") or [1.0], np.float32)
        shape = d.get("shape") or []
        if len(shape) == 4 and max(mean.size, scale.size) > 1:
            axis = 3 if d.get("layout") == "NHWC" else 1
            view = [1, 1, 1, 1]
            view[axis] = -1
            mean, scale = mean.reshape(view), scale.reshape(view)

        def normalise(x: np.ndarray, mean=mean, scale=scale) -> np.ndarray:
            return ((np.asarray(x, np.float32) - mean) * scale).astype(np.float32)

        out[name] = normalise
    return out


def _compare_session(path: Path, input_names: list[str], output_names: list[str], runtime_types: dict[str, str] | None = None,
                     threads: int | None = None):
    import onnxruntime as ort

    runtime_types = runtime_types or {}
    if not path.exists():
        raise InputError(f"--compare {path}: no such file", "give the float or quantized ONNX model to compare with")
    try:
        opts = ort.SessionOptions()
        if threads:   # a shard's worker shares the machine with the others (hbtool.simulator.shards)
            opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime reports bad models with many exception types
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise InputError(f"--compare {path}: onnxruntime cannot load it ({first})", "give a valid ONNX model") from None
    have_in = [i.name for i in sess.get_inputs()]
    have_out = [o.name for o in sess.get_outputs()]
    if sorted(have_in) != sorted(input_names):
        raise InputError(f"--compare {path}: its inputs {have_in} differ from the artifact's {input_names}",
                         "compare with a model of the same inputs (e.g. <prefix>_original_float_model.onnx or <prefix>_quantized_model.onnx)")
    for i in sess.get_inputs():
        want = runtime_types.get(i.name)
        if want is not None and i.type != f"tensor({want})":
            raise InputError(f"--compare {path}: its input '{i.name}' is {i.type}, but the artifact takes the run-time "
                             f"buffer ({want})", "compare with <prefix>_quantized_model.onnx, which takes the same buffer")
    missing = [o for o in output_names if o not in have_out]
    if missing:
        raise InputError(f"--compare {path}: has no output '{missing[0]}'", "compare with a model of the same outputs")
    return sess


class _OutputFiles:
    """The ``--output-dir`` files, written as batches finish, resumable after an interruption.

    Every output is a memory-mapped ``.npy`` of its full final shape in ``<dir>/.partial/``;
    a batch's rows are written there and flushed, then ``state.json`` records how many samples
    are done (and the comparison's running sums, so a resumed run prints the same table).
    Memory stays at one batch whatever the sample count. When the last batch is written the
    files are renamed into place, so ``<dir>/<output>.npy`` only ever appears complete.
    """

    def __init__(self, output_dir: Path, shapes: dict[str, tuple[int, ...]], total: int, key: dict):
        if output_dir.exists() and not output_dir.is_dir():
            raise InputError(f"--output-dir {output_dir} is a file", "give a folder (it is created if missing)")
        self.dir = Path(output_dir)
        self.partial = self.dir / ".partial"
        self.shapes = shapes
        self.total = total
        self.key = key
        self.files = {o: self.dir / f"{safe_file_name(o)}.npy" for o in shapes}
        self.arrays: dict[str, np.ndarray] = {}

    def _state_path(self) -> Path:
        return self.partial / "state.json"

    def resume_point(self) -> tuple[int, dict | None]:
        """Samples already written by an interrupted run with the same artifact and inputs (0: none), and its extras."""
        import json
        import pickle

        try:
            state = json.loads(self._state_path().read_text())
        except (OSError, ValueError):
            return 0, None
        if state.get("key") != self.key or not all((self.partial / f.name).exists() for f in self.files.values()):
            return 0, None
        extras = None
        if (self.partial / "compare.pkl").exists():
            extras = pickle.loads((self.partial / "compare.pkl").read_bytes())
        self._open("r+")
        return int(state["done"]), extras

    def _open(self, mode: str) -> None:
        from numpy.lib.format import open_memmap

        for o, path in self.files.items():
            shape = (self.total * self.shapes[o][0],) + tuple(self.shapes[o][1:]) if self.shapes[o] else (self.total,)
            self.arrays[o] = open_memmap(self.partial / path.name, mode=mode, dtype=np.float32, shape=shape if mode == "w+" else None)

    def start(self) -> None:
        import shutil

        if self.partial.exists():
            shutil.rmtree(self.partial)
        self.partial.mkdir(parents=True)
        self._open("w+")

    def write(self, first: int, stop: int, outs: dict[str, np.ndarray], extras: dict | None) -> None:
        import json
        import pickle

        from hbtool.utils.atomic import atomic_write_files

        for o, arr in self.arrays.items():
            rows = self.shapes[o][0] if self.shapes[o] else 1
            arr[first * rows: stop * rows] = np.asarray(outs[o], np.float32).reshape((-1,) + arr.shape[1:])
            arr.flush()
            release_pages(arr)  # written to the file: resident memory stays one batch whatever the count
        payload = {self._state_path(): json.dumps({"key": self.key, "done": stop}).encode()}
        if extras is not None:
            payload[self.partial / "compare.pkl"] = pickle.dumps(extras)
        atomic_write_files(payload)

    def finish(self) -> list[Path]:
        import os
        import shutil

        for o in list(self.arrays):
            del self.arrays[o]  # close the maps before the rename
        for path in self.files.values():
            os.replace(self.partial / path.name, path)
        shutil.rmtree(self.partial, ignore_errors=True)
        return list(self.files.values())


def _run_key(artifact: Path, inputs: dict[str, Path], compare: Path | None, total: int) -> dict:
    """What an interrupted run must share with this one to be resumed: the artifact's bytes, the inputs, the comparison."""
    import hashlib

    digest = hashlib.sha256()
    with open(artifact, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)

    def stamp(p: Path | np.ndarray) -> list:
        if isinstance(p, np.ndarray):  # samples given in memory: their bytes are their identity
            return ["array", list(p.shape), str(p.dtype), hashlib.sha256(np.ascontiguousarray(p).tobytes()).hexdigest()]
        st = Path(p).stat()
        return [str(Path(p).resolve()), st.st_size, st.st_mtime_ns]

    return {"artifact": digest.hexdigest(), "inputs": {k: stamp(v) for k, v in sorted(inputs.items())},
            "compare": stamp(compare) if compare is not None else None, "samples": total}


def output_lsb(description: dict[str, Any], shape: Any) -> float | np.ndarray | None:
    """One LSB of an output as the artifact dequantizes it: its scale, or per-channel scales shaped to
    broadcast over a sample batch (a segmented output, hbtool.quant.output_channels); None for a float output."""
    deq = description.get("dequantize") or {}
    if deq.get("scales"):
        return np.asarray(deq["scales"], np.float64).reshape([-1] + [1] * (-int(deq["axis"]) - 1))
    return deq.get("scale")


def compare_references(session, compare_feed: dict[str, Callable[[np.ndarray], np.ndarray]], feeds: dict[str, np.ndarray],
                       out_names: list[str], count: int) -> list[list[np.ndarray]]:
    """The --compare model's outputs for each of the ``count`` samples stacked in ``feeds`` (one run per sample)."""
    refs = []
    for k in range(count):
        one = {name: x[k * (x.shape[0] // count):(k + 1) * (x.shape[0] // count)] for name, x in feeds.items()}
        one = {name: compare_feed[name](x) if name in compare_feed else x for name, x in one.items()}
        refs.append(session.run(out_names, one))
    return refs


def _score(outs: dict[str, np.ndarray], refs: list[list[np.ndarray]], count: int, out_names: list[str], executor: Executor,
           errors: dict[str, RunningErrors], channels: dict[str, RunningChannelErrors], lsb: dict[str, list],
           scales: dict[str, Any]) -> None:
    """Add one batch to the comparison's running sums, sample by sample in order (so the sums do not depend
    on where the batch ran)."""
    for k in range(count):
        for o, ref in zip(out_names, refs[k]):
            rows = outs[o].shape[0] // count if outs[o].ndim else 1
            got = np.asarray(outs[o][k * rows:(k + 1) * rows] if outs[o].ndim else outs[o], np.float32)
            ref = np.asarray(ref, np.float32)
            errors[o].update(ref, got)
            if got.shape[1:] == tuple(executor.program.shape(o) or ())[1:]:
                channels[o].update(ref, got)
            if scales.get(o) is not None:
                d = np.abs(got.astype(np.float64) - ref.astype(np.float64)) / scales[o]
                lsb[o][0] = max(lsb[o][0], float(d.max()) if d.size else 0.0)
                lsb[o][1] += int(np.count_nonzero(d <= 1.0 + 1e-6))
                lsb[o][2] += d.size


def _local_batches(executor: Executor, sources, session, compare_feed, batch_size: int, start: int):
    """``(first, stop, outputs, references)`` per batch, run here (what a shard's worker does for its range)."""
    from hbtool.simulator.accel import fused

    for first, stop, feeds in iter_batches(sources, batch_size, start):
        skipped_before = fused.skipped_calls() if fused is not None else 0
        outs = executor.run(feeds)
        if fused is not None and fused.background() and fused.skipped_calls() == skipped_before:
            # every loop of the program ran compiled: stop checking each call (about 0.1 ms apiece);
            # a signature first met later (a new layout) compiles inline, as numba does
            fused.compile_in_background(False)
        refs = compare_references(session, compare_feed, feeds, executor.output_names, stop - first) if session is not None else None
        yield first, stop, outs, refs


def simulate(artifact: Path, inputs: dict[str, Path | np.ndarray], output_dir: Path | None = None, compare: Path | None = None,
             progress: Callable[[str, int, int], None] | None = None, threads: int | None = None,
             batch_size: int = 1, resume: bool = False, keep_outputs: bool = True,
             model_name: str | None = None, workers: int = 1, cluster: str | None = None) -> SimulationResult:
    """Run every sample of ``inputs`` through the artifact, ``batch_size`` samples per pass.

    With ``output_dir`` the outputs stream to memory-mapped ``.npy`` files (see
    :class:`_OutputFiles`) and ``resume`` continues an interrupted run of the same artifact,
    inputs and ``compare`` model where it stopped. ``keep_outputs=False`` (the CLI without
    ``--output-dir``) keeps no outputs in memory, so any number of samples runs in the memory
    of one batch. ``model_name`` picks one model of a packed artifact (``hbtool pack``).
    ``workers`` > 1 or ``cluster`` (a Ray address, or ``local``) run ranges of samples elsewhere
    (:mod:`hbtool.simulator.shards`); outputs, files and comparison are the same as with one worker.
    """
    from hbtool.utils.workers import check_workers

    pool_workers = check_workers(workers)
    parallel = pool_workers > 1 or cluster is not None
    if batch_size < 1:
        raise InputError(f"--batch-size {batch_size}: must be at least 1", "give a positive number of samples per pass")
    if resume and output_dir is None:
        raise InputError("--resume needs --output-dir", "give the --output-dir of the interrupted run")
    art = read_artifact(artifact, model_name)
    from hbtool.simulator.accel import fused

    if fused is not None and not parallel:
        fused.compile_in_background()  # a user's first run does not wait for the loops to compile
    executor = Executor(art, threads=threads)
    sources = open_inputs(art.header["inputs"], inputs)
    out_names = executor.output_names
    scales = {o["name"]: output_lsb(o, executor.program.shape(o["name"])) for o in art.header["outputs"]}
    runtime_types = {d["name"]: d["dtype"] for d in art.header["inputs"] if d.get("runtime")}
    session = _compare_session(Path(compare), executor.input_names, out_names, runtime_types) if compare is not None else None
    compare_feed = _compare_preprocessing(session, art.header["inputs"]) if session is not None else {}
    errors = {o: RunningErrors() for o in out_names}
    channels = {o: RunningChannelErrors(output_channel_axis(tuple(executor.program.shape(o) or ()))) for o in out_names}
    lsb = {o: [0.0, 0, 0] for o in out_names}  # max, within-1-LSB count, total
    total = sources[0].count if sources else 0
    files = None
    start = 0
    if output_dir is not None:
        shapes = {o: tuple(executor.program.shape(o)) for o in out_names}
        key = _run_key(Path(artifact), inputs, compare, total)
        key["model_name"] = model_name
        files = _OutputFiles(Path(output_dir), shapes, total, key)
        if resume:
            start, extras = files.resume_point()
            if extras is not None:
                errors, lsb = extras["errors"], extras["lsb"]
                channels = extras.get("channels", channels)
    collected: dict[str, list[np.ndarray]] = {o: [] for o in out_names}
    started = start > 0
    t0 = time.perf_counter()
    if progress and start:
        progress("simulate", start, total)
    if parallel:
        from hbtool.simulator.shards import sharded_batches

        batches = sharded_batches(Path(artifact), inputs, Path(compare) if compare is not None else None, model_name,
                                  batch_size, start, total, pool_workers, cluster, threads)
    else:
        batches = _local_batches(executor, sources, session, compare_feed, batch_size, start)
    for first, stop, outs, refs in batches:
        if refs is not None:
            _score(outs, refs, stop - first, out_names, executor, errors, channels, lsb, scales)
        if files is not None:
            if not started:
                files.start()
                started = True
            files.write(first, stop, outs, {"errors": errors, "lsb": lsb, "channels": channels} if session is not None else None)
        elif keep_outputs:
            for o in out_names:
                collected[o].append(np.asarray(outs[o], np.float32))
        if progress:
            progress("simulate", stop, total)
    seconds = time.perf_counter() - t0
    result = SimulationResult(total, {}, seconds, samples_run=total - start, compare_preprocessed=sorted(compare_feed))
    if files is not None:
        if not started:  # everything was done before: the interrupted run had finished its last batch
            files.start()
        result.files.extend(files.finish())
        if keep_outputs:
            result.outputs = {o: np.load(path, mmap_mode="r") for o, path in zip(out_names, result.files)}
    elif keep_outputs:
        result.outputs = {o: np.concatenate(v, axis=0) if v else np.zeros((0,)) for o, v in collected.items()}
    if session is not None:
        for o in out_names:
            e = errors[o].result()
            m, ok, n = lsb[o]
            comparison = OutputComparison(o, e["cosine"], e["l1"], e["l2"], e["chebyshev"], m if n else None, ok / n if n else None)
            ch = channels[o]
            if ch.dot is not None and ch.dot.size > 1:
                k = int(np.argmin(ch.snr_db))
                comparison.worst_channel, comparison.worst_channel_snr_db = k, float(ch.snr_db[k])
                comparison.worst_channel_cosine = float(ch.cosine[k])
            result.comparisons.append(comparison)
    return result
