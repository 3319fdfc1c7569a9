"""Generated samples for corpus models whose inputs are neither images nor token ids (``inputs="features"``).

Deterministic per index, like ``data.py``'s images, and nothing downloaded:

* ``speech``: one second of 16 kHz synthetic speech for the speech encoders (``input_values``):
  voiced syllables (a glottal pulse train at 90-260 Hz shaped by two formants, a Hann envelope),
  fricative noise bursts, pauses and a low noise floor, normalised to zero mean and unit variance
  as Wav2Vec2's feature extractor does;
* ``vad_chunk``: what silero-vad's ``OnnxWrapper`` feeds its model: 512 new samples of the same
  kind of audio (at peak 0.05-0.5, every third sample noise alone) after the 64 samples of context
  the wrapper keeps from the chunk before, and the recurrent ``state`` that the float model itself
  left after the 8 chunks before this one (the deployed model gets the float model's state: a
  calibration of the step the device runs, not of a state the int8 model would drift to); the
  rank-0 ``sr`` is 16000;
* ``graph``: a graph of ``x`` node features (standard normal) and an int64 ``edge_index`` (2 x E):
  a ring in both directions plus random edges, a different graph per sample.
"""

from __future__ import annotations

import functools

import numpy as np

from benchmarks.zoo.corpus import ModelSpec

RATE = 16000
VAD_CHUNK, VAD_CONTEXT, VAD_WARMUP = 512, 64, 8


def speech(samples: int, seed: int, peak: float = 0.3, voiced: bool = True) -> np.ndarray:
    """``samples`` of synthetic speech-like audio at 16 kHz (float32; ``voiced=False``: the noise floor alone)."""
    rng = np.random.default_rng(seed)
    out = rng.normal(0, 0.003, samples)
    pos = int(rng.integers(0, RATE // 10))
    while voiced and pos < samples:
        length = int(rng.uniform(0.08, 0.25) * RATE)
        t = np.arange(length) / RATE
        if rng.random() < 0.2:     # a fricative: high-passed noise
            noise = rng.normal(0, 1, length)
            burst = np.diff(noise, prepend=0) * np.hanning(length) * 0.3
        else:                      # a vowel: harmonics of f0 weighted by two formant resonances
            f0 = rng.uniform(90, 260) * (1 + rng.uniform(-0.15, 0.15) * t / t[-1])
            phase = 2 * np.pi * np.cumsum(f0) / RATE
            f1, f2 = rng.uniform(300, 900), rng.uniform(900, 2500)
            burst = np.zeros(length)
            for h in range(1, int(4000 / f0.max())):
                freq = h * f0.mean()
                gain = 1 / (1 + ((freq - f1) / 120) ** 2) + 0.6 / (1 + ((freq - f2) / 200) ** 2) + 0.02
                burst += gain * np.sin(h * phase)
            burst *= np.hanning(length)
        end = min(samples, pos + length)
        out[pos:end] += burst[:end - pos]
        pos = end + int(rng.uniform(0.03, 0.2) * RATE)
    return (out / max(np.abs(out).max(), 1e-9) * peak).astype(np.float32)


def _speech_input(spec: ModelSpec, index: int) -> dict[str, np.ndarray]:
    feature = spec.features[0]
    wave = speech(int(np.prod(feature.shape)), 9000 + index)
    wave = (wave - wave.mean()) / (wave.std() + 1e-7)
    return {feature.name: wave.reshape(feature.shape).astype(np.float32)}


@functools.lru_cache(maxsize=4)
def _session(path: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def _vad_input(spec: ModelSpec, index: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(10000 + index)
    wave = speech(VAD_CONTEXT + (VAD_WARMUP + 1) * VAD_CHUNK, 10000 + index, peak=rng.uniform(0.05, 0.5),
                  voiced=index % 3 != 0)
    names = {f.name for f in spec.features}
    sess = _session(str(spec.onnx_path))
    state = np.zeros((2, 1, 128), np.float32)
    feed: dict[str, np.ndarray] = {}
    for k in range(VAD_WARMUP + 1):
        chunk = wave[k * VAD_CHUNK: k * VAD_CHUNK + VAD_CONTEXT + VAD_CHUNK][None]
        feed = {"input": chunk, "state": state}
        if "sr" in names:
            feed["sr"] = np.array(RATE, np.int64)
        if k < VAD_WARMUP:
            state = sess.run(None, feed)[1].astype(np.float32)
    return feed


def _graph_input(spec: ModelSpec, index: int) -> dict[str, np.ndarray]:
    x_feature, edge_feature = spec.features
    nodes, edges = x_feature.shape[0], edge_feature.shape[1]
    rng = np.random.default_rng(11000 + index)
    ring = np.arange(nodes)
    src = np.concatenate([ring, (ring + 1) % nodes, rng.integers(0, nodes, edges - 2 * nodes)])
    dst = np.concatenate([(ring + 1) % nodes, ring, rng.integers(0, nodes, edges - 2 * nodes)])
    return {x_feature.name: rng.normal(0, 1, x_feature.shape).astype(np.float32),
            edge_feature.name: np.stack([src, dst]).astype(np.int64)}


KINDS = {"speech": _speech_input, "vad_chunk": _vad_input, "graph": _graph_input}


def feature_samples(spec: ModelSpec, count: int, offset: int) -> list[dict[str, np.ndarray]]:
    """``count`` samples (input name -> array) of the kind ``spec.extra["data"]`` names; ``offset`` as in ``data.samples``."""
    make = KINDS[spec.extra["data"]]
    return [make(spec, offset + k) for k in range(count)]
