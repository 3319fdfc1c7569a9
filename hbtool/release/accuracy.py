"""The artifact's outputs against the float model's, on held-out samples, per output and per channel.

What is compared, and why these two:

* quantized: the compiled artifact (``<prefix>.bin``) run through the simulator, which is what the
  chip computes bit for bit, so a gate judges the file that ships, not an intermediate model;
* float: ``<prefix>_original_float_model.onnx``, the user's float model with the config's
  preprocessing (mean/scale, colour) built in, run in onnxruntime, so both take the same raw samples
  (as ``simulate --compare`` does with hbtool's own stage models).

The samples are read as ``cal_data_dir`` is; inputs the artifact takes as the chip's run-time buffer
(nv12, ...) are converted as the camera would (calibrate's own evaluation does the same). Every
output is judged as a whole and channel by channel (:class:`RunningChannelErrors`), since a model
output that concatenates quantities of unrelated ranges hides a collapsed small channel behind
the large ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hbtool.config import HbConfig
from hbtool.errors import InputError
from hbtool.io.metrics import RunningChannelErrors, RunningErrors, output_channel_axis

QUANTIZED_WHAT = "the artifact run through the simulator"
FLOAT_WHAT = "the original float model with the config's preprocessing (onnxruntime)"
#: samples stacked per simulator pass
BATCH = 8


@dataclass
class OutputAccuracy:
    name: str
    cosine: float                       # the whole output
    channel_axis: int | None
    channel_cosines: list[float]        # one per channel along channel_axis
    max_lsb: float | None = None        # against the quantized ONNX (bit_exact_samples), in output LSBs

    @property
    def worst_channel(self) -> int | None:
        return int(np.argmin(self.channel_cosines)) if self.channel_cosines else None

    @property
    def worst(self) -> float:
        """The least of the whole output's cosine and every channel's."""
        return float(min([self.cosine, *self.channel_cosines]))

    def to_json(self) -> dict[str, Any]:
        k = self.worst_channel
        return {"cosine": _round(self.cosine), "channel_axis": self.channel_axis, "channels": len(self.channel_cosines),
                "worst_channel": k, "worst_channel_cosine": None if k is None else _round(self.channel_cosines[k])}


@dataclass
class Accuracy:
    samples: int
    data: str                                      # which setting the samples came from
    outputs: dict[str, OutputAccuracy]
    quantized_outputs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # stacked over the samples
    float_outputs: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    feeds: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False)      # the artifact's inputs per sample
    skipped: list[str] = field(default_factory=list)  # artifact outputs with no float counterpart (layer dumps, codes)
    bit_exact_samples: int = 0                     # of the first bit_exact_checked samples, those equal to the quantized ONNX
    bit_exact_checked: int = 0

    def worst(self) -> tuple[str, OutputAccuracy]:
        name = min(self.outputs, key=lambda n: self.outputs[n].worst)
        return name, self.outputs[name]

    def to_json(self) -> dict[str, Any]:
        return {"samples": self.samples, "data": self.data, "quantized": QUANTIZED_WHAT, "float": FLOAT_WHAT,
                "outputs": {n: o.to_json() for n, o in sorted(self.outputs.items())}, "skipped_outputs": self.skipped}


def _round(x: float) -> float:
    """Stable JSON: 8 significant digits, so that the last bits of a float sum do not show in a manifest."""
    return float(f"{float(x):.8g}")


def stage_model(cfg: HbConfig, stage: str) -> Path:
    path = Path(cfg.model.working_dir) / f"{cfg.model.output_model_file_prefix}_{stage}_model.onnx"
    if not path.exists():
        raise InputError(f"{path} not found: the gates compare with the models calibrate writes",
                         "run hbtool makertbin -c cfg.yaml first (hbtool gate checks an existing working_dir)")
    return path


def _session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def load_samples(cfg: HbConfig, data_dir: Path | None, key: str, count: int | None = None) -> list[dict[str, np.ndarray]]:
    """Held-out samples from ``data_dir`` (or, when None, the calibration data), as the float model takes them."""
    from hbtool.ir.onnx_import import import_onnx
    from hbtool.quant.data import held_out_data, load_calibration_data

    graph = import_onnx(stage_model(cfg, "original_float"))
    if data_dir is not None:
        data = held_out_data(cfg, data_dir, key, graph, max_samples=count)
    else:
        data = load_calibration_data(cfg, graph, max_samples=count)
    if data.num_samples == 0:
        raise InputError(f"{key}: no samples found", "put at least one sample in the folder")
    return [data.sample(i) for i in range(data.num_samples)]


def measure(cfg: HbConfig, artifact: Path, samples: list[dict[str, np.ndarray]], data: str,
            against_quantized_onnx: int = 0, workers: int = 1, cluster: str | None = None) -> Accuracy:
    """Run ``samples`` through the artifact and the float model; with ``against_quantized_onnx`` = N also
    compare the first N artifact outputs with the quantized ONNX's in output LSBs (bit-exactness).

    The artifact runs through ``hbtool simulate``'s own path (:func:`hbtool.simulator.simulate.simulate`),
    so ``workers`` / ``cluster`` shard the samples exactly as ``simulate --workers/--cluster`` does."""
    from hbtool.compiler.artifact import read_artifact
    from hbtool.quant.calibrate import runtime_feeds
    from hbtool.simulator.executor import Executor
    from hbtool.simulator.simulate import simulate

    art = read_artifact(artifact)
    executor = Executor(art)
    float_sess = _session(stage_model(cfg, "original_float"))
    float_names = {o.name for o in float_sess.get_outputs()}
    descs = {d["name"]: d for d in art.header["outputs"]}
    compared = [o for o in executor.output_names if o in float_names and descs.get(o, {}).get("dtype") == "float32"]
    skipped = [o for o in executor.output_names if o not in compared]
    if not compared:
        raise InputError(f"{artifact}: none of its outputs is an output of the float model ({', '.join(executor.output_names)})",
                         "the accuracy gates compare dequantized model outputs: remove remove_node_type Dequantize / "
                         "remove_node_name at the outputs for the gated build")
    convert = runtime_feeds(cfg, executor.input_names)
    in_dtypes = {d["name"]: np.dtype(d["dtype"]) for d in art.header["inputs"]}
    feeds = [convert(s) if convert else s for s in samples]
    feeds = [{n: np.ascontiguousarray(np.asarray(f[n]).astype(in_dtypes[n], copy=False)) for n in executor.input_names}
             for f in feeds]
    quant: dict[str, list[np.ndarray]] = {o: [] for o in compared}
    if feeds:
        stacked = {n: np.concatenate([f[n] for f in feeds]) for n in executor.input_names}
        outs = simulate(artifact, stacked, batch_size=BATCH, workers=workers, cluster=cluster).outputs
        for o in compared:
            quant[o].append(np.asarray(outs[o], np.float32).reshape(len(feeds), *executor.program.shape(o)))
    flt: dict[str, list[np.ndarray]] = {o: [] for o in compared}
    for s in samples:
        for o, y in zip(compared, float_sess.run(compared, dict(s))):
            flt[o].append(np.asarray(y, np.float32))
    result = Accuracy(len(samples), data, {}, skipped=skipped, feeds=feeds)
    for o in compared:
        got = np.concatenate(quant[o]) if quant[o] else np.zeros(0, np.float32)
        ref = np.stack(flt[o])
        if got.size != ref.size:
            raise InputError(f"output '{o}': the artifact gives {got.size // max(len(samples), 1)} values per sample, "
                             f"the float model {ref.size // max(len(samples), 1)}",
                             "compile the model again from the same working_dir (hbtool makertbin -c cfg.yaml)")
        got = got.reshape(ref.shape)
        shape = list(executor.program.shape(o))
        axis = output_channel_axis(shape)
        whole, chans = RunningErrors(), RunningChannelErrors(None if axis is None else axis + 1)
        whole.update(ref, got)
        chans.update(ref, got)
        result.outputs[o] = OutputAccuracy(o, float(whole.result()["cosine"]), axis, [float(c) for c in chans.cosine])
        result.quantized_outputs[o] = got.reshape(-1, *shape[1:])
        result.float_outputs[o] = ref.reshape(-1, *shape[1:])
    if against_quantized_onnx:
        _bit_exact(cfg, result, art.header, min(against_quantized_onnx, len(samples)))
    return result


def _bit_exact(cfg: HbConfig, result: Accuracy, header: dict[str, Any], n: int) -> None:
    """Largest difference, in output LSBs, between the artifact and the quantized ONNX on the first ``n`` samples."""
    sess = _session(stage_model(cfg, "quantized"))
    names = list(result.outputs)
    scales = {d["name"]: (d.get("dequantize") or {}).get("scale") for d in header["outputs"]}
    rows = {o: result.quantized_outputs[o].shape[0] // max(result.samples, 1) for o in names}
    worst = {o: 0.0 for o in names}
    result.bit_exact_samples = 0
    for i in range(n):
        refs = sess.run(names, result.feeds[i])
        exact = True
        for o, ref in zip(names, refs):
            got = result.quantized_outputs[o][i * rows[o]:(i + 1) * rows[o]].astype(np.float64)
            d = np.abs(got.reshape(-1) - np.asarray(ref, np.float64).reshape(-1))
            lsb = float(d.max() / scales[o]) if scales.get(o) and d.size else float(d.max() if d.size else 0.0)
            worst[o] = max(worst[o], lsb)
            exact = exact and lsb == 0.0
        result.bit_exact_samples += int(exact)
    for o in names:
        result.outputs[o].max_lsb = worst[o]
    result.bit_exact_checked = n
