"""Calibration samples given as arrays in memory (``api.calibrate(cfg, data=...)``, ``qat.prepare``).

A caller that already holds its samples (a training pipeline, a notebook, a QAT loop) passes
``{input name: array}`` per sample instead of writing ``.npy`` files for ``cal_data_dir``. Each
array is checked and cast exactly as the same array saved with ``numpy.save`` into the input's
folder would be (:mod:`hbtool.quant.data`): shape ``input_shape`` or ``input_shape[1:]`` (a
batch axis of one is added), NaN/Inf refused, integer inputs must hold whole numbers in range,
cast to the model input's dtype. So calibrating on arrays and on the same arrays in a folder
gives the same model, bit for bit (tested in tests/e2e/test_library_api.py).

The samples are read once, up front, and kept (at most ``calibration_parameters.num_samples``
of them): calibration passes over them several times (statistics, candidates, evaluation).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from hbtool.config.types import HbConfig
from hbtool.errors import InputError
from hbtool.io.samples import InputInfo, check_values, default_dtype_for, resolve_inputs
from hbtool.quant.data import CalibrationSet


class _ArrayInput:
    """One input's samples, already checked and cast (the reader interface CalibrationSet reads)."""

    def __init__(self, info: InputInfo, arrays: list[np.ndarray], dtype: np.dtype):
        self.info = info
        self.arrays = arrays
        self.dtype = dtype

    def __len__(self) -> int:
        return len(self.arrays)

    def source(self, i: int) -> str:
        return f"data[{i}]['{self.info.name}']"

    def read(self, i: int) -> np.ndarray:
        return self.arrays[i]


def _one_array(info: InputInfo, value: Any, k: int, dtype: np.dtype | None) -> np.ndarray:
    """Sample ``k`` of one input: shape checked, values checked, cast (as a one-sample .npy file is)."""
    where = f"data[{k}]['{info.name}']"
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:
        raise InputError(f"{where}: holds {arr.dtype} values, not numbers", "pass numeric arrays (float32, uint8, int64, ...)")
    shape = tuple(arr.shape)
    if shape == info.shape[1:] and shape != info.shape:
        arr = arr[None]
    elif shape != info.shape:
        raise InputError(f"{where}: shape {shape} does not fit {info.label}, which takes {info.shape}",
                         f"pass one sample per entry, shaped {info.shape} or {info.shape[1:]}")
    target = dtype or default_dtype_for(arr.dtype)
    check_values(arr, target, where, info.label)
    return np.ascontiguousarray(arr.astype(target, copy=False))


def array_calibration_data(cfg: HbConfig, graph: Any, samples: Iterable[Mapping[str, Any]]) -> CalibrationSet:
    """The caller's samples (``{input name: array}`` each) as a CalibrationSet for ``graph``'s inputs.

    Takes at most ``calibration_parameters.num_samples`` samples (all when unset). Raises
    InputError naming the sample and input on a missing or unknown input name, a wrong shape,
    non-finite values or integers out of range, and when there is no sample at all.
    """
    if isinstance(samples, Mapping):
        raise InputError("data is one {input: array} dict, not an iterable of samples",
                         "pass a list of samples, e.g. data=[{'input': x0}, {'input': x1}]")
    infos = resolve_inputs(list(cfg.inputs), graph)
    names = [info.name for info in infos]
    limit = cfg.calibration.num_samples
    columns: list[list[np.ndarray]] = [[] for _ in infos]
    dtypes: list[np.dtype | None] = [info.dtype for info in infos]
    for k, sample in enumerate(samples):
        if limit is not None and k >= int(limit):
            break
        if not isinstance(sample, Mapping):
            raise InputError(f"data[{k}] is a {type(sample).__name__}, not a dict of arrays",
                             f"give each sample as {{input name: array}}; the inputs are: {', '.join(names)}")
        unknown = [n for n in sample if n not in names]
        if unknown:
            raise InputError(f"data[{k}]: the model has no input '{unknown[0]}' (its inputs: {', '.join(names)})",
                             "key each sample by the model's input names")
        for j, info in enumerate(infos):
            if info.name not in sample:
                raise InputError(f"data[{k}] has no array for {info.label}", f"give every sample an array for each input: {', '.join(names)}")
            arr = _one_array(info, sample[info.name], k, dtypes[j])
            dtypes[j] = arr.dtype   # a featuremap without a graph dtype: the first sample decides, as a folder's first file does
            columns[j].append(arr)
    if not columns[0]:
        raise InputError("data holds no samples", "pass at least one {input name: array} sample")
    readers = [_ArrayInput(info, column, np.dtype(dtype)) for info, column, dtype in zip(infos, columns, dtypes)]
    return CalibrationSet(readers, len(columns[0]))
