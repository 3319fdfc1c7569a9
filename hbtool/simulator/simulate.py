"""``hbtool simulate``: run an artifact on many samples and compare with an ONNX model."""

from __future__ import annotations

import io
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from hbtool.compiler.artifact import read_artifact
from hbtool.errors import InputError
from hbtool.quant.metrics import RunningErrors
from hbtool.simulator.executor import Executor
from hbtool.simulator.inputs import iter_samples, open_inputs


@dataclass
class OutputComparison:
    name: str
    cosine: float
    l1: float
    l2: float
    chebyshev: float
    max_lsb: float | None          # largest difference in output LSBs (dequantized outputs)
    within_1lsb: float | None      # fraction of elements within 1 LSB


@dataclass
class SimulationResult:
    samples: int
    outputs: dict[str, np.ndarray]
    seconds: float
    comparisons: list[OutputComparison] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def _compare_session(path: Path, input_names: list[str], output_names: list[str], runtime_types: dict[str, str] | None = None):
    import onnxruntime as ort

    runtime_types = runtime_types or {}
    if not path.exists():
        raise InputError(f"--compare {path}: no such file", "give the float or quantized ONNX model to compare with")
    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
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


def safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"


def simulate(artifact: Path, inputs: dict[str, Path], output_dir: Path | None = None, compare: Path | None = None,
             progress: Callable[[str, int, int], None] | None = None, threads: int | None = None) -> SimulationResult:
    art = read_artifact(artifact)
    executor = Executor(art, threads=threads)
    sources = open_inputs(art.header["inputs"], inputs)
    out_names = executor.output_names
    scales = {o["name"]: (o.get("dequantize") or {}).get("scale") for o in art.header["outputs"]}
    runtime_types = {d["name"]: d["dtype"] for d in art.header["inputs"] if d.get("runtime")}
    session = _compare_session(Path(compare), executor.input_names, out_names, runtime_types) if compare is not None else None
    errors = {o: RunningErrors() for o in out_names}
    lsb = {o: [0.0, 0, 0] for o in out_names}  # max, within-1-LSB count, total
    collected: dict[str, list[np.ndarray]] = {o: [] for o in out_names}
    total = sources[0].count if sources else 0
    t0 = time.perf_counter()
    for k, feeds in enumerate(iter_samples(sources)):
        outs = executor.run(feeds)
        for o in out_names:
            collected[o].append(np.asarray(outs[o], np.float32))
        if session is not None:
            refs = session.run(out_names, feeds)
            for o, ref in zip(out_names, refs):
                got = np.asarray(outs[o], np.float32)
                ref = np.asarray(ref, np.float32)
                errors[o].update(ref, got)
                if scales.get(o):
                    d = np.abs(got.astype(np.float64) - ref.astype(np.float64)) / scales[o]
                    lsb[o][0] = max(lsb[o][0], float(d.max()) if d.size else 0.0)
                    lsb[o][1] += int(np.count_nonzero(d <= 1.0 + 1e-6))
                    lsb[o][2] += d.size
        if progress:
            progress("simulate", k + 1, total)
    seconds = time.perf_counter() - t0
    result = SimulationResult(total, {o: np.concatenate(v, axis=0) if v else np.zeros((0,)) for o, v in collected.items()}, seconds)
    if session is not None:
        for o in out_names:
            e = errors[o].result()
            m, ok, n = lsb[o]
            result.comparisons.append(OutputComparison(o, e["cosine"], e["l1"], e["l2"], e["chebyshev"],
                                                       m if n else None, ok / n if n else None))
    if output_dir is not None:
        from hbtool.utils.atomic import atomic_write_files

        output_dir = Path(output_dir)
        if output_dir.exists() and not output_dir.is_dir():
            raise InputError(f"--output-dir {output_dir} is a file", "give a folder (it is created if missing)")
        payloads = {}
        for o, arr in result.outputs.items():
            buf = io.BytesIO()
            np.save(buf, arr)
            payloads[output_dir / f"{safe_file_name(o)}.npy"] = buf.getvalue()
        atomic_write_files(payloads)
        result.files.extend(payloads)
    return result
