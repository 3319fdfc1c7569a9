"""The user's simulate inputs: ``NAME=PATH`` pairs checked against the artifact's inputs.

PATH is a ``.npy`` whose first axis stacks samples (``(S, *shape[1:])``, or exactly the
input's shape), or a folder of images / ``.npy`` / ``.bin`` files read like calibration data
(one sample per file, sorted by name). Every problem is a one-line InputError.

An input the artifact takes in a run-time format (its description has ``runtime``: nv12,
yuv444, rgb/bgr/gray in another layout, ``*_128``; see :mod:`hbtool.io.runtime_input`)
takes the chip's buffer: a ``.npy`` in that shape and dtype, raw ``.nv12`` files (each a whole
number of ``H*W*3/2``-byte frames), or images, which are converted as the camera pipeline
would (:func:`hbtool.io.runtime_input.to_runtime`); PATH may be one such file or a folder
of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from hbtool.errors import InputError
from hbtool.io.samples import InputFolder, InputInfo

_FLOAT_OK = "fiu"  # float inputs take float or integer arrays (raw pixels as uint8 are fine)


@dataclass
class InputSource:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    count: int                      # samples (each of the input's full shape)
    array: np.ndarray | None = None  # stacked .npy (memory-mapped)
    reader: Any = None              # folder reader

    def sample(self, i: int) -> np.ndarray:
        if self.array is not None and not self.shape:      # a rank-0 input: one scalar, or N side by side
            return _convert(np.asarray(self.array if self.array.ndim == 0 else self.array[i]), self.dtype, self.name, i)
        if self.array is not None:
            b = self.shape[0]
            x = np.asarray(self.array[i * b:(i + 1) * b])
        else:
            x = self.reader.read(i)
        return _convert(x, self.dtype, self.name, i)

    def batch(self, start: int, stop: int) -> np.ndarray:
        """Samples ``start..stop-1`` stacked on the first axis (one slice of a memory-mapped stack).

        The slice is copied out and the stack's pages are released again (``MADV_DONTNEED``, clean
        file pages: nothing is lost), so reading a stack of any size leaves the process's resident
        memory where it was instead of growing by every page read.
        """
        if self.array is not None and not self.shape:
            x = np.array(self.array[None] if self.array.ndim == 0 else self.array[start:stop])
            return _convert(x, self.dtype, self.name, start)
        if self.array is not None:
            b = self.shape[0]
            x = np.array(self.array[start * b:stop * b])
            release_pages(self.array)
            return _convert(x, self.dtype, self.name, start)
        return np.concatenate([self.sample(i) for i in range(start, stop)], axis=0)


def release_pages(array: np.ndarray) -> None:
    """Drop a memory-mapped array's resident pages (they are re-read from, or were written to, its file)."""
    import mmap

    mapping = getattr(array, "_mmap", None)
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if mapping is None or advice is None:
        return
    try:
        mapping.madvise(advice)
    except (OSError, ValueError):  # pragma: no cover - a platform without madvise on file maps
        pass


def _convert(x: np.ndarray, dtype: np.dtype, name: str, i: int) -> np.ndarray:
    if dtype.kind in "iu" and dtype.itemsize == 1 and x.dtype.kind in "iuf" and x.size:
        info = np.iinfo(dtype)
        if float(x.min()) < info.min or float(x.max()) > info.max:
            raise InputError(f"input '{name}' sample {i}: values {x.min()}..{x.max()} do not fit {dtype.name}",
                             f"give the run-time buffer's {dtype.name} values ({info.min}..{info.max})")
    if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
        bad = int(x.size - np.count_nonzero(np.isfinite(x)))
        raise InputError(f"input '{name}' sample {i}: {bad} values are NaN or Inf", "give finite input values")
    if dtype.kind in "iu" and x.dtype.kind == "f":
        if np.any(x != np.floor(x)):
            raise InputError(f"input '{name}' sample {i}: holds fractions but the model takes {dtype.name}",
                             f"give {dtype.name} values (token ids, indices)")
    return np.ascontiguousarray(x.astype(dtype, copy=False))


def parse_input_args(pairs: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for text in pairs:
        if "=" not in text:
            raise InputError(f"--input {text}: expected NAME=PATH", "write it like --input input=images.npy")
        name, path = text.split("=", 1)
        if not name or not path:
            raise InputError(f"--input {text}: expected NAME=PATH", "write it like --input input=images.npy")
        if name in out:
            raise InputError(f"--input {name} is given twice", "give each input once")
        out[name] = Path(path)
    return out


def _spec_for(desc: dict[str, Any], folder: Path):
    from hbtool.config.types import InputSpec

    return InputSpec(
        name=desc["name"], shape=tuple(desc["shape"]), type_train=desc.get("type") or "featuremap",
        type_rt=desc.get("type_rt") or desc.get("type") or "featuremap", layout_train=desc.get("layout"),
        layout_rt=desc.get("layout_rt"), norm_type="no_preprocess", mean=None, scale=None, cal_data_dir=folder,
        cal_data_type=desc.get("cal_data_type") or "float32",
    )


def open_inputs(descriptions: list[dict[str, Any]], paths: dict[str, Path | np.ndarray]) -> list[InputSource]:
    """Check names, shapes and dtypes; returns one source per model input (same sample count).

    A value may be an array in memory instead of a path: it is read as the same array saved as a ``.npy``.
    """
    names = [d["name"] for d in descriptions]
    for name in paths:
        if name not in names:
            raise InputError(f"--input {name}: the artifact has no input '{name}' (its inputs: {', '.join(names)})",
                             "use the input names hbtool info prints")
    missing = [n for n in names if n not in paths]
    if missing:
        raise InputError(f"no data for input '{missing[0]}'", f"add --input {missing[0]}=PATH (a .npy or a folder)")
    sources = []
    for desc in descriptions:
        name, shape, dtype = desc["name"], tuple(int(d) for d in desc["shape"]), np.dtype(desc["dtype"])
        path = paths[name]
        if isinstance(path, np.ndarray):   # the library's in-memory samples: read as the same array in a .npy file
            sources.append(_stacked_source(name, path, shape, dtype, f"input '{name}'"))
            continue
        if not path.exists():
            raise InputError(f"--input {name}={path}: no such file or folder", "check the path")
        if desc.get("runtime") and (path.is_dir() or path.suffix.lower() != ".npy"):
            from hbtool.simulator.runtime_files import RuntimeReader

            reader = RuntimeReader(desc, path)
            sources.append(InputSource(name, shape, dtype, len(reader), reader=reader))
            continue
        if path.is_dir():
            info = InputInfo(_spec_for(desc, path), name, shape, dtype)
            reader = InputFolder(info, path, resize=True)
            sources.append(InputSource(name, shape, dtype, len(reader), reader=reader))
            continue
        if path.suffix.lower() != ".npy":
            raise InputError(f"--input {name}={path}: not a .npy file or a folder", "save the samples with numpy.save, or give a folder of images")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"--input {name}={path}: cannot read it as .npy ({exc})", "save the samples with numpy.save") from None
        sources.append(_stacked_source(name, arr, shape, dtype, f"--input {name}={path}"))
    counts = {s.name: s.count for s in sources}
    if len(set(counts.values())) > 1:
        raise InputError(f"inputs hold different numbers of samples: {counts}", "give every input the same number of samples")
    return sources


def _stacked_source(name: str, arr: Any, shape: tuple[int, ...], dtype: np.dtype, where: str) -> InputSource:
    """Samples stacked on the first axis (a ``.npy`` file or an array in memory), checked against the input."""
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf" or arr.dtype.fields is not None:
        raise InputError(f"{where}: holds {getattr(arr, 'dtype', type(arr).__name__)} data, not numbers",
                         "store a plain numeric array (float32, uint8, int64...)")
    if dtype.kind == "f" and arr.dtype.kind not in _FLOAT_OK or dtype.kind in "iu" and arr.dtype.kind not in "iuf":
        raise InputError(f"{where}: holds {arr.dtype} but the input takes {dtype.name}",
                         f"save the array as {dtype.name}")
    if not shape:   # a rank-0 input (an audio model's sample rate): one scalar, or N of them side by side
        if arr.ndim > 1:
            raise InputError(f"{where}: shape {tuple(arr.shape)} does not fit the rank-0 input",
                             "give one scalar, or N scalars as a 1-D array of N")
        return InputSource(name, shape, dtype, 1 if arr.ndim == 0 else arr.shape[0], array=arr)
    if tuple(arr.shape[1:]) != shape[1:] or arr.ndim != len(shape) or arr.shape[0] % shape[0]:
        raise InputError(f"{where}: shape {tuple(arr.shape)} does not fit the input's shape {shape}",
                         f"stack samples along the first axis: (N, {', '.join(str(d) for d in shape[1:])})")
    if arr.shape[0] == 0:
        raise InputError(f"{where}: holds no samples", "give at least one sample")
    return InputSource(name, shape, dtype, arr.shape[0] // shape[0], array=arr)


def iter_samples(sources: list[InputSource]) -> Iterator[dict[str, np.ndarray]]:
    n = sources[0].count if sources else 0
    for i in range(n):
        yield {s.name: s.sample(i) for s in sources}


def iter_batches(sources: list[InputSource], batch_size: int, start: int = 0) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
    """``(first, stop, feeds)`` for batches of ``batch_size`` samples from sample ``start`` on.

    The next batch is read (images decoded, pages of the stack faulted in) on a background
    thread while the caller runs the current one; at most two batches are in memory.
    """
    from concurrent.futures import ThreadPoolExecutor

    n = sources[0].count if sources else 0
    bounds = [(i, min(i + batch_size, n)) for i in range(start, n, batch_size)]
    if not bounds:
        return

    def read(span):
        return {s.name: s.batch(*span) for s in sources}

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(read, bounds[0])
        for k, span in enumerate(bounds):
            feeds = pending.result()
            if k + 1 < len(bounds):
                pending = pool.submit(read, bounds[k + 1])
            yield span[0], span[1], feeds
