"""Packed artifacts (Horizon's ``hb_pack``): several compiled models in one file, each run by name.

Layout (little endian)::

    0   8   magic            b"HBTOOLP\\0"
    8   4   format version   uint32 (1)
    12  4   flags            uint32, 0
    16  8   index length     uint64 (H)
    24  H   index            UTF-8 JSON, sorted keys: {"models": [{"name", "offset", "nbytes", "sha256"}]}
    ..  p   zero padding to a multiple of 64
    ..      each member artifact, byte for byte as ``hbtool compile`` wrote it, 64-byte aligned
    ..  32  SHA-256 of every byte before it

A member is stored unchanged, so the model a packed file runs by name is bit for bit the
standalone artifact (its own header and checksum included). Names are the members' model names
(``output_model_file_prefix``); two members of one name are refused. A packed file is not a member
of another: packing is one level, as on the chip, where one ``.bin`` holds the models a program loads.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from hbtool.compiler.artifact import MAGIC as ARTIFACT_MAGIC
from hbtool.compiler.artifact import ArtifactError, from_bytes

MAGIC = b"HBTOOLP\0"
FORMAT_VERSION = 1
_FIXED = struct.Struct("<8sIIQ")
_ALIGN = 64
_DIGEST = 32


def is_packed(data: bytes) -> bool:
    return data[:len(MAGIC)] == MAGIC


def pack(paths: list[Path]) -> bytes:
    """One packed file from single-model artifacts, in the order given."""
    if not paths:
        raise ArtifactError("pack: no artifact given", "pass two or more .bin files: hbtool pack a.bin b.bin -o models.bin")
    members: list[tuple[str, bytes]] = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ArtifactError(f"pack: {path} is not a file", "give the .bin files hbtool compile wrote")
        data = path.read_bytes()
        if is_packed(data):
            names = ", ".join(members_of(data, str(path)))
            raise ArtifactError(f"pack: {path} is already a packed artifact ({names}); a packed artifact is not packed again",
                                "pack the single-model artifacts it was made from")
        if data[:len(ARTIFACT_MAGIC)] != ARTIFACT_MAGIC:
            raise ArtifactError(f"pack: {path} is not an hbtool artifact", "give the .bin files hbtool compile wrote")
        name = from_bytes(data, str(path)).header["model"]["name"]   # checks the member's checksum too
        if any(name == n for n, _ in members):
            raise ArtifactError(f"pack: two models named '{name}' ({path} and an earlier one)",
                                "give each model its own output_model_file_prefix and compile again")
        members.append((name, data))
    index, offset = [], 0
    for name, data in members:
        offset += (-offset) % _ALIGN
        index.append({"name": name, "offset": offset, "nbytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        offset += len(data)
    text = json.dumps({"models": index}, sort_keys=True, separators=(",", ":")).encode()
    head = _FIXED.pack(MAGIC, FORMAT_VERSION, 0, len(text))
    body = bytearray(head + text)
    body += b"\0" * ((-len(body)) % _ALIGN)
    start = len(body)
    for entry, (_, data) in zip(index, members):
        body += b"\0" * (start + entry["offset"] - len(body))
        body += data
    return bytes(body) + hashlib.sha256(bytes(body)).digest()


def _index(data: bytes, source: str) -> tuple[list[dict], int]:
    fix = "pack the models again (hbtool pack a.bin b.bin -o models.bin) or copy the file again"
    if len(data) < _FIXED.size + _DIGEST:
        raise ArtifactError(f"{source} is a truncated packed artifact", fix)
    magic, version, _flags, hlen = _FIXED.unpack_from(data, 0)
    if magic != MAGIC:
        raise ArtifactError(f"{source} is not a packed artifact", "give the file hbtool pack wrote")
    if version > FORMAT_VERSION:
        raise ArtifactError(f"{source} was packed by a newer hbtool (pack format {version})", "upgrade hbtool")
    if hashlib.sha256(data[:-_DIGEST]).digest() != data[-_DIGEST:]:
        raise ArtifactError(f"{source} is corrupted (checksum mismatch)", fix)
    try:
        index = json.loads(data[_FIXED.size:_FIXED.size + hlen].decode())["models"]
    except (UnicodeDecodeError, ValueError, KeyError):
        raise ArtifactError(f"{source} has an unreadable pack index", fix) from None
    start = _FIXED.size + hlen
    start += (-start) % _ALIGN
    return index, start


def members_of(data: bytes, source: str = "packed artifact") -> list[str]:
    return [e["name"] for e in _index(data, source)[0]]


def member(data: bytes, name: str | None, source: str = "packed artifact") -> bytes:
    """The bytes of one member (``name`` None: the only one)."""
    index, start = _index(data, source)
    names = [e["name"] for e in index]
    if name is None:
        if len(index) != 1:
            raise ArtifactError(f"{source} is a packed artifact of {len(index)} models ({', '.join(names)})",
                                "choose one with --model-name NAME")
        name = names[0]
    entry = next((e for e in index if e["name"] == name), None)
    if entry is None:
        raise ArtifactError(f"{source} holds no model named '{name}' (it holds {', '.join(names)})",
                            "use one of the names hbtool info lists")
    blob = data[start + entry["offset"]: start + entry["offset"] + entry["nbytes"]]
    if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        raise ArtifactError(f"{source}: model '{name}' is corrupted (checksum mismatch)", "pack the models again")
    return blob
