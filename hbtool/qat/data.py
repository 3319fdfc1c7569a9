"""QAT training data: the calibration readers on ``train_data_dir``, labels, image augmentations.

Samples are read exactly like ``cal_data_dir`` (:mod:`hbtool.io.samples`: images, ``.npy``,
``.bin``; raw 0-255 pixels when preprocessing is folded into the model). One folder for a
one-input model; for several inputs, one sub-folder per input named after it. Without
``train_data_dir`` the calibration data is used (every sample, not just ``num_samples``).

Augmentations (``augment``) apply to image inputs only, per sample, seeded by (seed, step,
sample index) so that a run sharded over processes sees the same pixels as a one-process run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from hbtool.config.types import HbConfig
from hbtool.errors import InputError
from hbtool.io.samples import InputFolder, resolve_inputs
from hbtool.quant.data import CalibrationSet, load_calibration_data, resize_policy

AUGMENTATIONS = ("flip", "crop", "color")


def training_data(cfg: HbConfig, graph) -> CalibrationSet:
    """Every training sample of ``cfg`` (lazily read)."""
    folder = cfg.qat.train_data_dir
    if folder is None:
        return load_calibration_data(cfg, graph, max_samples=10**12)
    infos = resolve_inputs(list(cfg.inputs), graph)
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"qat_parameters.train_data_dir {folder} is not a folder", "give a folder of samples read like cal_data_dir")
    folders = [folder] if len(infos) == 1 else [folder / info.name for info in infos]
    for f in folders:
        if not f.is_dir():
            raise InputError(f"qat_parameters.train_data_dir: {f} is missing",
                             "a model with several inputs needs one sub-folder per input, named after the input")
    readers = [InputFolder(info, f, resize_policy(cfg)) for info, f in zip(infos, folders)]
    counts = {len(r) for r in readers}
    if len(counts) != 1:
        raise InputError("qat_parameters.train_data_dir: the input folders hold different numbers of samples",
                         "give every input's folder the same number of samples (paired by sorted file name)")
    return CalibrationSet(readers, counts.pop())


def read_labels(path: Path | None, count: int) -> np.ndarray | None:
    """Integer labels, one per sample in sorted-file order: a ``.npy`` array or a text file of one label a line."""
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise InputError(f"qat_parameters.labels {path} is not a file", "give a .npy array or a text file with one integer label per line")
    labels = np.load(path) if path.suffix.lower() == ".npy" else np.loadtxt(path, dtype=np.int64, ndmin=1)
    labels = np.asarray(labels).reshape(-1)
    if labels.size != count or labels.dtype.kind not in "iu":
        raise InputError(f"qat_parameters.labels holds {labels.size} {labels.dtype} values for {count} samples",
                         "give one integer label per training sample")
    return labels.astype(np.int64)


def augment(batch: dict[str, np.ndarray], image_inputs: dict[str, str], kinds: Sequence[str], seed: int, step: int,
            indices: Sequence[int]) -> dict[str, np.ndarray]:
    """Flip / crop / colour-jitter each sample of the image inputs (``{name: layout}``), raw 0-255 pixels."""
    if not kinds:
        return batch
    out = dict(batch)
    for name, layout in image_inputs.items():
        x = np.array(batch[name], np.float32)
        for k, index in enumerate(indices):
            rng = np.random.default_rng([seed, step, int(index)])
            img = x[k] if layout == "NCHW" else np.moveaxis(x[k], -1, 0)  # C, H, W
            if "flip" in kinds and rng.random() < 0.5:
                img = img[:, :, ::-1]
            if "crop" in kinds:
                h, w = img.shape[1:]
                dy, dx = int(rng.integers(-(h // 8), h // 8 + 1)), int(rng.integers(-(w // 8), w // 8 + 1))
                img = np.roll(img, (dy, dx), axis=(1, 2))
            if "color" in kinds:
                gain, bias = rng.uniform(0.8, 1.2, (img.shape[0], 1, 1)), rng.uniform(-20, 20)
                img = np.clip((img - 127.5) * gain + 127.5 + bias, 0, 255)
            x[k] = img if layout == "NCHW" else np.moveaxis(img, 0, -1)
        out[name] = x
    return out
