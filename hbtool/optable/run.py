"""Run one probe on one march: checker -> calibrate -> compile -> simulate, in process.

What comes back is what the op table prints and what its test holds: where the checker put the
probed op (and why), which integer kernel the compiler built for it, whether any BPU node stayed in
float, and how far the simulator is from the quantized ONNX model (in codes: 0 is the promise).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from hbtool.optable.probes import INPUT_SHAPE, Probe, build_model

#: the nodes a probe adds around the probed op (never reported as the op's placement)
_FRAME = ("first_conv", "second_conv", "helper_")


#: what the kernel column says of a BPU node without a kernel of its own
FUSED = "clamp of the producer"
MOVES = "moves codes"


@dataclass
class ProbeResult:
    probe: Probe
    march: str
    #: ``[(on, bpu_type or None, reason or None)]`` of the probed op's nodes in the placed float graph
    placements: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    #: integer kernels the compiler built for the probed op's nodes (class names; "moves codes" for data movement)
    kernels: list[str] = field(default_factory=list)
    #: BPU nodes that stayed in float: ``(node, op, why)``
    fallbacks: list[tuple[str, str, str]] = field(default_factory=list)
    #: largest |simulate - quantized ONNX| over the outputs, in output codes
    max_lsb: float = 0.0
    error: str | None = None
    seconds: float = 0.0

    @property
    def on(self) -> str:
        """BPU when every probed node runs on the BPU, CPU when none does, else mixed; absorbed when a pass removed it."""
        ons = {p[0] for p in self.placements}
        if not ons:
            return "absorbed"
        return ons.pop() if len(ons) == 1 else "mixed"

    @property
    def ok(self) -> bool:
        """The op table's promise: no error, nothing on the BPU in float, simulate = quantized ONNX bit for bit."""
        return self.error is None and not self.fallbacks and self.max_lsb == 0


def _probed_nodes(graph, probe: Probe) -> list:
    ops = {probe.op, "Squeeze"} if probe.op == "Unsqueeze" else {probe.op}
    return [n for n in graph.nodes if n.op_type in ops and not n.name.startswith(_FRAME)]


def run_probe(probe: Probe, march: str, samples: int = 4, seed: int = 0) -> ProbeResult:
    """Probe ``probe`` on ``march`` (see the module docstring); an exception is caught into ``error``."""
    t0 = time.perf_counter()
    result = ProbeResult(probe, march)
    with tempfile.TemporaryDirectory(prefix="hbtool_optable_") as tmp:
        try:
            _run(probe, march, Path(tmp), samples, seed, result)
        except Exception as exc:  # noqa: BLE001 - the table reports any failure as the probe's error
            result.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    result.seconds = time.perf_counter() - t0
    return result


def _run(probe: Probe, march: str, tmp: Path, samples: int, seed: int, result: ProbeResult) -> None:
    from hbtool import api
    from hbtool.quant.calibrate import run_calibration, write_outputs

    model = build_model(probe, seed)
    onnx.save(model, tmp / "m.onnx")
    cfg = api.load_config({
        "model_parameters": {"onnx_model": str(tmp / "m.onnx"), "working_dir": str(tmp / "wd"), "output_model_file_prefix": "m",
                             "march": march},
        "input_parameters": {"input_name": "x", "input_shape": "x".join(map(str, INPUT_SHAPE)), "input_type_train": "featuremap",
                             "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": samples},
    }, base_dir=tmp)
    # api.calibrate would also measure the quantized model's errors and render its report into the
    # log (together as long again as the rest of a probe); the table reads neither, so it calibrates
    # without them: the same plan and the same files otherwise
    calibration = run_calibration(cfg, evaluate=False)
    files = write_outputs(cfg, calibration, "")
    probed = _probed_nodes(calibration.graph, probe)
    for node in probed:
        result.placements.append((node.meta.get("on"), node.meta.get("bpu_type"), node.meta.get("reason")))
    compiled = api.compile(cfg)
    result.fallbacks = list(compiled.details.fallbacks)
    lowered = {n.name: n for n in calibration.program.nodes}
    for node in probed:
        if node.meta.get("on") != "BPU":
            continue
        new = lowered.get(node.name)
        if new is None:  # a Relu/Clip the producer's requantization applies as its clamp
            result.kernels.append(FUSED)
        elif new.meta.get("on") == "BPU":
            kernel = new.meta.get("kernel")
            result.kernels.append(type(kernel).__name__ if kernel is not None else MOVES)
    result.kernels = sorted(set(result.kernels))
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(files["quantized_model"]), so, providers=["CPUExecutionProvider"])
    scales = {o["name"]: (o.get("dequantize") or {}).get("scale") for o in compiled.details.header.get("outputs") or []}
    rng = np.random.default_rng(seed + 1)
    feeds = [{"x": rng.standard_normal(INPUT_SHAPE).astype(np.float32)} for _ in range(2)]
    got = api.simulate(compiled.path, {"x": np.concatenate([f["x"] for f in feeds])})  # both samples in one pass
    want = [session.run(None, f) for f in feeds]
    for k, name in enumerate(got):
        ref = np.concatenate([np.asarray(w[k]).reshape(got[name].shape[0] // len(feeds), *got[name].shape[1:]) for w in want])
        diff = np.abs(np.asarray(got[name], np.float64) - np.asarray(ref, np.float64))
        step = scales.get(name) or 1.0
        result.max_lsb = max(result.max_lsb, float(diff.max() / step) if diff.size else 0.0)
