"""``manifest.json`` of a release bundle: what was built, from what, and how good it is, as hashes and numbers.

The manifest is a pure function of the inputs (model, config, calibration samples) and of the
hbtool version: no timestamps, no absolute paths, keys sorted, floats rounded to 8 significant
digits. So two releases from the same inputs write the same bytes, and ``hbtool diff`` can compare
any two manifests field by field. ``SCHEMA_VERSION`` changes when a field changes meaning.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from hbtool import __version__
from hbtool.config import HbConfig
from hbtool.config.schema import GROUPS
from hbtool.errors import InputError

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _relative(value: Any, base: Path) -> Any:
    if isinstance(value, list):
        return [_relative(v, base) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return Path(os.path.relpath(value, base)).as_posix()
    return value


def config_sha256(cfg: HbConfig) -> str:
    """SHA-256 of the config as read (every default filled), its paths made relative to the YAML's folder,
    so that the same config in another checkout or CI workspace hashes the same."""
    raw = json.loads(json.dumps(cfg.raw, default=str))
    for group, (table, _) in GROUPS.items():
        for name, key in table.items():
            if key.kind == "path" and name in raw.get(group, {}):
                raw[group][name] = _relative(raw[group][name], Path(cfg.base_dir))
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def samples_sha256(samples: Iterable[dict[str, np.ndarray]]) -> tuple[str, int]:
    """SHA-256 of samples in order (each input's name, dtype, shape and bytes), and their count."""
    digest = hashlib.sha256()
    count = 0
    for sample in samples:
        for name in sorted(sample):
            a = np.ascontiguousarray(sample[name])
            digest.update(f"{name}|{a.dtype.str}|{list(a.shape)}|".encode())
            digest.update(a.tobytes())
        count += 1
    return digest.hexdigest(), count


def precision(header: dict[str, Any]) -> dict[str, str]:
    """Per program node: where it runs and the bits of what it reads and writes (``BPU int8``,
    ``BPU int16->int8``, ``CPU int16``; ``w4`` for 4-bit weights)."""
    tensors = header.get("tensors", {})
    out: dict[str, str] = {}

    def bits(names) -> int | None:
        return next((tensors[t]["bits"] for t in names if t in tensors and "bits" in tensors[t]), None)

    for n in header["program"]["nodes"]:
        meta = n.get("meta", {})
        if meta.get("unit") == "data_movement":
            continue
        text = meta.get("on", "CPU")
        b_in, b_out = bits(n.get("inputs", [])), bits(n.get("outputs", []))
        if b_out is not None:
            text += f" int{b_in}->int{b_out}" if b_in is not None and b_in != b_out else f" int{b_out}"
        wbits = getattr(meta.get("kernel"), "weight_bits", None)
        if wbits and wbits != 8:
            text += f" w{wbits}"
        out[n["name"]] = text
    return out


def io_of(header: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    keep_in = ("name", "shape", "dtype", "type", "type_rt", "layout", "layout_rt", "norm_type", "mean", "scale")
    inputs = [{k: d.get(k) for k in keep_in} for d in header["inputs"]]
    outputs = [{"name": d["name"], "shape": d["shape"], "dtype": d["dtype"]} for d in header["outputs"]]
    return inputs, outputs


def dumps(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def read_manifest(path: Path) -> tuple[dict[str, Any], Path]:
    """A manifest from a release folder or a manifest file; returns it and the folder it describes."""
    path = Path(path)
    file = path / MANIFEST if path.is_dir() else path
    if not file.is_file():
        raise InputError(f"{path}: no {MANIFEST} there", "give a folder that hbtool release wrote, or its manifest.json")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{file}: not a readable manifest ({type(exc).__name__})", "give the manifest.json hbtool release wrote") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise InputError(f"{file}: not an hbtool release manifest (no schema_version)", "give the manifest.json hbtool release wrote")
    if data["schema_version"] > SCHEMA_VERSION:
        raise InputError(f"{file}: manifest schema {data['schema_version']} is newer than this hbtool reads ({SCHEMA_VERSION})",
                         "upgrade hbtool")
    return data, file.parent


def base_manifest(cfg: HbConfig, header: dict[str, Any], artifact_sha: str, artifact_bytes: int) -> dict[str, Any]:
    inputs, outputs = io_of(header)
    return {
        "schema_version": SCHEMA_VERSION,
        "hbtool_version": __version__,
        "model": cfg.model.output_model_file_prefix,
        "march": header["march"],
        "artifact": {"file": f"{cfg.model.output_model_file_prefix}.bin", "bytes": artifact_bytes},
        "artifact_sha256": artifact_sha,
        "model_sha256": sha256_file(cfg.require_model()),
        "config_sha256": config_sha256(cfg),
        "inputs": inputs,
        "outputs": outputs,
        "precision": precision(header),
    }
