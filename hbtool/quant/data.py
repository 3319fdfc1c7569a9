"""Calibration data: the arrays the model-with-preprocessing takes, read from the user's folders.

When ``norm_type`` is set, the mean/scale preprocessing is part of the model
(:mod:`hbtool.quant.preprocess`), so image inputs are fed **raw pixel values 0-255 as float32**
in the training colour order (``input_type_train``) and layout (``input_layout_train``), with
the batch axis. Featuremap inputs are fed as stored, cast to the model input's dtype (for
example int64 token ids).

Folders and files
-----------------
One folder per input (``calibration_parameters.cal_data_dir``, ``;``-separated), each read by
:class:`hbtool.io.samples.InputFolder`: the files it knows (images, ``.npy``, ``.bin``, Horizon's
``.rgb .bgr .yuv444 .rgbchw`` dumps, ``.nv12`` frames), how samples pair across inputs (sorted
file name), dtypes and value checks, and what is validated up front are described there.
Memory stays flat in the number of samples: files are read when a batch needs them.

Resizing
--------
Horizon resizes calibration images only with ``preprocess_on: true``. hbtool resizes by default
and treats an *explicit* ``preprocess_on: false`` in the YAML as "never resize": an image of the
wrong size is then an error (:func:`resize_policy`). The ``resize`` argument of
:func:`load_calibration_data` overrides both.

Random data for ``calibration_type: skip``
------------------------------------------
:func:`random_calibration_data` (also ``CalibrationSet.random``) makes reproducible random
samples of the right shape and dtype: whole-number pixels uniform in 0-255 (float32) for image
inputs, N(0, 1) for float featuremaps, uniform integers in ``[0, high)`` for integer inputs,
where ``high`` is the smallest table size the input indexes through a ``Gather`` in the graph
(capped at 100), else 2 (valid for masks, token type ids and any vocabulary), and random bools
for bool inputs. Sample k depends only on ``(seed, k)``, not on the batch size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from hbtool.config.types import HbConfig, InputSpec
from hbtool.errors import InputError
from hbtool.io.samples import InputFolder, InputInfo, resolve_inputs

SKIP_DEFAULT_SAMPLES = 8          # random samples for calibration_type skip without num_samples
RANDOM_INT_HIGH_DEFAULT = 2       # random integer inputs: [0, 2) unless the graph says more
RANDOM_INT_HIGH_CAP = 100


def _specs_of(cfg_or_specs: HbConfig | Sequence[InputSpec]) -> list[InputSpec]:
    if isinstance(cfg_or_specs, HbConfig):
        return list(cfg_or_specs.inputs)
    return list(cfg_or_specs)


class _RandomInput:
    """Random samples for calibration_type skip; sample k depends only on (seed, input, k)."""

    def __init__(self, info: InputInfo, n: int, seed: int, index: int, high: int):
        self.info = info
        self.n = n
        self.seed = seed
        self.index = index
        self.high = high
        self.dtype = info.dtype or (np.dtype(np.float32) if info.spec.is_image
                                    else np.dtype(info.spec.cal_data_type))

    def __len__(self) -> int:
        return self.n

    def source(self, i: int) -> str:
        return f"random(seed={self.seed})[{i}]"

    def read(self, i: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.index, i])
        shape, dtype = self.info.shape, self.dtype
        if self.info.spec.is_image:
            return rng.integers(0, 256, size=shape).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, size=shape).astype(bool)
        if dtype.kind in "iu":
            return rng.integers(0, self.high, size=shape).astype(dtype)
        return rng.standard_normal(size=shape).astype(dtype)


# ----------------------------------------------------------------------------------- the set
class CalibrationSet:
    """Calibration samples for every model input, read lazily.

    ``num_samples`` (also ``len()``) is the total, for progress bars; ``iter_batches`` yields
    ``{input name: array}`` with up to ``batch_size`` samples concatenated on axis 0 (each
    sample has the input's full shape, so its first dimension is ``input_shape[0]``, usually 1).
    """

    def __init__(self, readers: list[InputFolder] | list[_RandomInput], num_samples: int):
        self._readers = readers
        self.num_samples = num_samples

    @property
    def input_names(self) -> list[str]:
        return [r.info.name for r in self._readers]

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one sample per input (``input_shape``)."""
        return {r.info.name: r.info.shape for r in self._readers}

    @property
    def dtypes(self) -> dict[str, np.dtype]:
        return {r.info.name: r.dtype for r in self._readers}

    def __len__(self) -> int:
        return self.num_samples

    def num_batches(self, batch_size: int) -> int:
        return -(-self.num_samples // max(1, int(batch_size)))

    def sources(self, i: int) -> dict[str, str]:
        """Where sample ``i`` comes from, per input (file path, or stacked-file row)."""
        return {r.info.name: r.source(i) for r in self._readers}

    def sample(self, i: int) -> dict[str, np.ndarray]:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} of {self.num_samples}")
        return {r.info.name: r.read(i) for r in self._readers}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self.num_samples):
            yield self.sample(i)

    def iter_batches(self, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
        """Batches of ``batch_size`` samples (the last may be smaller), read when needed."""
        if int(batch_size) < 1:
            raise InputError(f"batch size {batch_size} is below 1",
                             "set calibration_parameters.batch_size to 1 or more")
        bs = int(batch_size) if self._batchable() else 1
        for start in range(0, self.num_samples, bs):
            stop = min(start + bs, self.num_samples)
            if stop - start == 1:
                yield self.sample(start)
                continue
            parts = [self.sample(i) for i in range(start, stop)]
            yield {name: np.concatenate([p[name] for p in parts], axis=0)
                   for name in self.input_names}

    def _batchable(self) -> bool:
        """Samples stack on axis 0 only when every input's first axis is a batch axis of 1 (an
        ``edge_index`` of shape 2 x E, or a rank-0 input, has none: its samples run one by one)."""
        return all(len(r.info.shape) >= 1 and r.info.shape[0] == 1 for r in self._readers)

    @classmethod
    def random(cls, cfg_or_specs: HbConfig | Sequence[InputSpec], n: int, seed: int = 0,
               graph: Any | None = None) -> "CalibrationSet":
        return random_calibration_data(cfg_or_specs, n, seed, graph)


# ---------------------------------------------------------------------------------- entries
def resize_policy(cfg: HbConfig) -> bool:
    """Resize unless the YAML says ``preprocess_on: false`` explicitly (unset means resize)."""
    return cfg.calibration.preprocess_on is not False


def load_calibration_data(cfg: HbConfig, graph: Any | None = None,
                          max_samples: int | None = None, *,
                          resize: bool | None = None) -> CalibrationSet:
    """Validate the calibration folders of ``cfg`` and return a lazily read CalibrationSet.

    ``graph`` (the imported model) supplies input names, shapes and dtypes the config leaves
    out. ``max_samples`` (default ``calibration_parameters.num_samples``) keeps the first N
    samples in file-name order. ``resize`` forces image resizing on or off (default: see the
    module doc). With ``calibration_type: skip`` it returns random data instead
    (:func:`random_calibration_data`, ``num_samples`` or 8 samples, seed 0).
    Raises InputError (or ConfigError) before anything is read lazily if something is wrong.
    """
    if max_samples is None:
        max_samples = cfg.calibration.num_samples
    if cfg.calibration.calibration_type == "skip":
        return random_calibration_data(cfg, max_samples or SKIP_DEFAULT_SAMPLES, 0, graph)
    infos = resolve_inputs(list(cfg.inputs), graph)
    folders = cfg.require_calibration_data()
    do_resize = resize_policy(cfg) if resize is None else bool(resize)
    readers = [InputFolder(info, folder, do_resize) for info, folder in zip(infos, folders)]
    counts = [len(r) for r in readers]
    for r, c in zip(readers[1:], counts[1:]):
        if c != counts[0]:
            first = readers[0]
            raise InputError(
                f"calibration folders do not match: {first.folder} ({first.info.label}) holds "
                f"{counts[0]} samples but {r.folder} ({r.info.label}) holds {c}",
                "give every input's folder the same number of samples; files are paired by "
                "sorted file name")
    n = counts[0]
    if max_samples is not None:
        n = min(n, int(max_samples))
    return CalibrationSet(readers, n)


def held_out_data(cfg: HbConfig, data_dir: Path, key: str, graph: Any | None = None,
                  max_samples: int | None = None) -> CalibrationSet:
    """Samples of a folder other than the calibration set (``debug_parameters.data_dir``,
    ``gate_parameters.data_dir``), read exactly as ``cal_data_dir`` is.

    ``data_dir`` is the folder of a one-input model, or holds one sub-folder per input name.
    ``key`` names the setting in errors. Samples are as the model with its preprocessing takes
    them (the ``*_original_float_model.onnx`` input)."""
    import copy

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputError(f"{key} {data_dir}: not a folder",
                         "give a folder of samples in the format of cal_data_dir (one sub-folder per input name "
                         "for a model of several inputs)")
    folders = [data_dir / str(inp.name) for inp in cfg.inputs] if len(cfg.inputs) > 1 else [data_dir]
    data_cfg = copy.copy(cfg)
    data_cfg.inputs = [copy.copy(i) for i in cfg.inputs]
    for inp, folder in zip(data_cfg.inputs, folders):
        inp.cal_data_dir = folder
    data_cfg.calibration = copy.copy(cfg.calibration)
    data_cfg.calibration.cal_data_dir = folders
    if data_cfg.calibration.calibration_type in ("skip", "load"):
        data_cfg.calibration.calibration_type = "default"
    data_cfg.calibration.num_samples = None
    return load_calibration_data(data_cfg, graph, max_samples=max_samples)


def _index_bound(graph: Any | None, info: InputInfo) -> int | None:
    """The exclusive bound of an integer input's values from the ops that index with it
    (:mod:`hbtool.quant.index_ranges`); an input whose range cannot be read is an error."""
    from hbtool.quant.index_ranges import UnknownIndexRange, index_bound

    if graph is None:
        return None
    try:
        return index_bound(graph, info.name)
    except UnknownIndexRange as exc:
        raise InputError(f"{info.label} is an integer index whose valid range hbtool cannot read (it reaches "
                         f"'{exc.node}' ({exc.op_type}) through arithmetic or a table of dynamic size), so no random "
                         "data can be generated for it",
                         "give calibration data (cal_data_dir with .npy samples of real indices) instead of "
                         "calibration_type skip / perf --fast") from None


def random_calibration_data(cfg_or_specs: HbConfig | Sequence[InputSpec], n: int, seed: int = 0,
                            graph: Any | None = None) -> CalibrationSet:
    """``n`` reproducible random samples per input, for ``calibration_type: skip``.

    Image inputs: whole-number pixels uniform in 0-255 (float32). Float featuremaps: N(0, 1).
    Integer inputs: uniform in ``[0, high)``, ``high`` the smallest table the input indexes by
    Gather in ``graph`` (at most 100), else 2. Bool inputs: random bools. Sample k depends only
    on ``(seed, input index, k)``.
    """
    if int(n) < 1:
        raise InputError(f"{n} random samples requested", "ask for at least one sample")
    infos = resolve_inputs(_specs_of(cfg_or_specs), graph)
    readers = []
    for k, info in enumerate(infos):
        bound = _index_bound(graph, info) if info.dtype is not None and info.dtype.kind in "iu" else None
        high = RANDOM_INT_HIGH_DEFAULT if bound is None else max(1, min(bound, RANDOM_INT_HIGH_CAP))
        readers.append(_RandomInput(info, int(n), int(seed), k, high))
    return CalibrationSet(readers, int(n))


__all__ = ["CalibrationSet", "load_calibration_data", "random_calibration_data", "resize_policy"]
