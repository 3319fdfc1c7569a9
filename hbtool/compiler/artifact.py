"""The ``.hbm`` artifact: one file, versioned, checksummed, byte-for-byte reproducible.

Layout (little endian)::

    0   8   magic            b"HBTOOLM\\0"
    8   4   format version   uint32 (1; 2 when it holds packed int4 weights, which a format-1 reader cannot decode)
    12  4   flags            uint32, 0
    16  8   header length    uint64 (H)
    24  8   blob length      uint64 (B)
    32  H   header           UTF-8 JSON, sorted keys
    ..  p   zero padding to a multiple of 64
    ..  B   blobs            arrays and embedded ONNX, each 64-byte aligned
    ..  32  SHA-256 of every byte before it

The header holds everything but bulk data: tool version, march, compile options, model
inputs/outputs (name, shape, dtype, layout, scale, preprocessing), the program's nodes with
their integer kernels (dataclass fields; arrays point at blobs), tensor layouts and the
memory plan, and the CPU subgraphs (ONNX bytes in blobs). Integer arrays are stored in the
narrowest integer type that holds them (int8 weights take one byte each). Nothing depends
on time, paths or dict order, so the same inputs and options give the same bytes.

The ``weight`` of a kernel with ``weight_bits == 4`` (the 4-bit path, docs/int4.md) is stored
packed, two values per byte (``{"__int4__": blob}``, nibble order in
:mod:`hbtool.kernels.packing`: element 2i low nibble, 2i+1 high nibble); a packed blob whose
length does not match its shape is an :class:`ArtifactError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hbtool.errors import InputError
from hbtool.kernels.base import narrowest_int

MAGIC = b"HBTOOLM\0"
FORMAT_VERSION = 2
#: the version of an artifact without packed int4 weights (readable by every hbtool)
BASE_FORMAT_VERSION = 1
_FIXED = struct.Struct("<8sIIQQ")
_ALIGN = 64
_DIGEST = 32


class ArtifactError(InputError):
    """The artifact file is missing, damaged, or from an incompatible hbtool (exit 2)."""


def _kernel_classes() -> dict[str, type]:
    import hbtool.kernels  # noqa: F401  (importing it defines every kernel class)
    from hbtool.kernels.base import Kernel

    out: dict[str, type] = {}
    stack = list(Kernel.__subclasses__())
    while stack:
        cls = stack.pop()
        out[cls.__name__] = cls
        stack.extend(cls.__subclasses__())
    return out


class _BlobWriter:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.index: list[dict[str, Any]] = []

    def add_bytes(self, data: bytes, kind: str, extra: dict[str, Any] | None = None) -> int:
        pad = (-self.size) % _ALIGN
        if pad:
            self.chunks.append(b"\0" * pad)
            self.size += pad
        entry = {"offset": self.size, "nbytes": len(data), "kind": kind, **(extra or {})}
        self.chunks.append(data)
        self.size += len(data)
        self.index.append(entry)
        return len(self.index) - 1

    def add_array(self, a: np.ndarray) -> int:
        a = np.asarray(a)
        stored = np.ascontiguousarray(narrowest_int(a)).astype(np.dtype(narrowest_int(a).dtype).newbyteorder("<"), copy=False)
        return self.add_bytes(stored.tobytes(), "array", {"dtype": stored.dtype.str, "restore": a.dtype.str, "shape": list(a.shape)})


def encode(obj: Any, blobs: _BlobWriter) -> Any:
    """JSON-able form of kernels (dataclasses), arrays (blobs), tuples and plain values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        packed = getattr(obj, "weight_bits", 8) == 4
        return {"__kernel__": type(obj).__name__,
                "fields": {f.name: (_encode_int4(getattr(obj, f.name), blobs) if packed and f.name == "weight" else encode(getattr(obj, f.name), blobs))
                           for f in dataclasses.fields(obj)}}
    if isinstance(obj, np.ndarray):
        return {"__blob__": blobs.add_array(obj)}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, blobs) for v in obj]}
    if isinstance(obj, list):
        return [encode(v, blobs) for v in obj]
    if isinstance(obj, dict):
        return {str(k): encode(v, blobs) for k, v in obj.items()}
    if isinstance(obj, bytes):
        return {"__bytes__": blobs.add_bytes(obj, "bytes")}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store {type(obj).__name__} in an artifact")


def _encode_int4(a: np.ndarray, blobs: _BlobWriter) -> dict[str, Any]:
    from hbtool.kernels.packing import pack_int4

    return {"__int4__": blobs.add_bytes(pack_int4(a), "int4", {"shape": list(np.shape(a))})}


class _BlobReader:
    def __init__(self, index: list[dict[str, Any]], data: memoryview):
        self.index = index
        self.data = data

    def bytes(self, k: int) -> bytes:
        e = self.index[k]
        return bytes(self.data[e["offset"]: e["offset"] + e["nbytes"]])

    def array(self, k: int) -> np.ndarray:
        e = self.index[k]
        a = np.frombuffer(self.data[e["offset"]: e["offset"] + e["nbytes"]], dtype=np.dtype(e["dtype"]))
        return a.astype(np.dtype(e["restore"]).newbyteorder("="), copy=True).reshape(e["shape"])


def decode(obj: Any, blobs: _BlobReader, classes: dict[str, type]) -> Any:
    if isinstance(obj, dict):
        if "__kernel__" in obj:
            cls = classes.get(obj["__kernel__"])
            if cls is None:
                raise ArtifactError(f"the artifact uses kernel '{obj['__kernel__']}', which this hbtool does not have",
                                    "compile the model again with this hbtool, or upgrade hbtool")
            fields = {k: decode(v, blobs, classes) for k, v in obj["fields"].items()}
            init = {f.name for f in dataclasses.fields(cls) if f.init}
            inst = cls(**{k: v for k, v in fields.items() if k in init})
            for k, v in fields.items():
                if k not in init:
                    object.__setattr__(inst, k, v)
            return inst
        if "__blob__" in obj:
            return blobs.array(obj["__blob__"])
        if "__int4__" in obj:
            from hbtool.kernels.packing import PackedBlobError, unpack_int4

            k = obj["__int4__"]
            try:
                return unpack_int4(blobs.bytes(k), blobs.index[k]["shape"], f"packed int4 weight blob {k}")
            except (PackedBlobError, IndexError, KeyError) as exc:
                raise ArtifactError(f"the artifact's {exc}", "compile the model again (hbtool compile -c cfg.yaml)") from None
        if "__tuple__" in obj:
            return tuple(decode(v, blobs, classes) for v in obj["__tuple__"])
        if "__bytes__" in obj:
            return blobs.bytes(obj["__bytes__"])
        return {k: decode(v, blobs, classes) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v, blobs, classes) for v in obj]
    return obj


@dataclass
class Artifact:
    """An artifact in memory: the JSON header (decoded) and its size on disk."""

    header: dict[str, Any]
    nbytes: int = 0
    sha256: str = ""
    blob_index: list[dict[str, Any]] = field(default_factory=list)


def to_bytes(header: dict[str, Any]) -> bytes:
    """Serialize a header whose values may hold kernels, arrays and bytes (see the module docstring)."""
    blobs = _BlobWriter()
    body = encode(header, blobs)
    body["blobs"] = blobs.index
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True).encode("utf-8")
    blob_bytes = b"".join(blobs.chunks)
    version = FORMAT_VERSION if any(e["kind"] == "int4" for e in blobs.index) else BASE_FORMAT_VERSION
    head = _FIXED.pack(MAGIC, version, 0, len(text), len(blob_bytes))
    pad = (-(len(head) + len(text))) % _ALIGN
    payload = head + text + b"\0" * pad + blob_bytes
    return payload + hashlib.sha256(payload).digest()


def from_bytes(data: bytes, source: str = "artifact") -> Artifact:
    """Check and decode an artifact; every kind of damage is a one-line :class:`ArtifactError`."""
    fix_recompile = "compile the model again (hbtool compile -c cfg.yaml)"
    if len(data) < _FIXED.size + _DIGEST:
        raise ArtifactError(f"{source} is truncated or not an hbtool artifact ({len(data)} bytes)", fix_recompile)
    magic, version, _flags, hlen, blen = _FIXED.unpack_from(data, 0)
    if magic != MAGIC:
        raise ArtifactError(f"{source} is not an hbtool artifact (bad magic bytes)", "give the .bin file that hbtool compile wrote")
    pad = (-(_FIXED.size + hlen)) % _ALIGN
    expected = _FIXED.size + hlen + pad + blen + _DIGEST
    if len(data) < expected:
        raise ArtifactError(f"{source} is truncated: {len(data)} bytes, the header promises {expected}", fix_recompile + " or copy the file again")
    if len(data) > expected:
        raise ArtifactError(f"{source} has {len(data) - expected} unexpected trailing bytes", fix_recompile + " or copy the file again")
    payload, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(payload).digest() != digest:
        raise ArtifactError(f"{source} is corrupted (checksum mismatch)", fix_recompile + " or copy the file again")
    if version > FORMAT_VERSION:
        raise ArtifactError(f"{source} was written by a newer hbtool (artifact format {version}; this hbtool reads up to {FORMAT_VERSION})",
                            "upgrade hbtool, or compile the model with this version")
    if version < 1:
        raise ArtifactError(f"{source} has an unknown artifact format version {version}", fix_recompile)
    try:
        body = json.loads(data[_FIXED.size:_FIXED.size + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{source} has an unreadable header ({exc.__class__.__name__})", fix_recompile) from None
    index = body.pop("blobs", [])
    start = _FIXED.size + hlen + pad
    reader = _BlobReader(index, memoryview(data)[start:start + blen])
    header = decode(body, reader, _kernel_classes())
    return Artifact(header, len(data), hashlib.sha256(data).hexdigest(), index)


def read_artifact(path: Path | str, model_name: str | None = None) -> Artifact:
    """One model's artifact; from a packed file (``hbtool pack``) the member named ``model_name``
    (None: its only member). A plain artifact given a ``model_name`` must be that model."""
    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"artifact {path} does not exist", "check the path, or run hbtool compile -c cfg.yaml to make it")
    if path.is_dir():
        raise ArtifactError(f"{path} is a directory, not an artifact", "give the .bin file that hbtool compile wrote")
    data = path.read_bytes()
    from hbtool.compiler.pack import is_packed, member

    if is_packed(data):
        return from_bytes(member(data, model_name, str(path)), f"{path}:{model_name}" if model_name else str(path))
    art = from_bytes(data, str(path))
    if model_name is not None and art.header["model"]["name"] != model_name:
        raise ArtifactError(f"--model-name {model_name}: {path} is the single model '{art.header['model']['name']}'",
                            "drop --model-name, or give the packed artifact (hbtool pack) that holds the model")
    return art
