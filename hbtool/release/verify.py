"""``hbtool verify DIR``: is this release folder still what its manifest says?

The artifact is hashed again (``artifact_sha256``), decoded (its own checksum), and every check
input is simulated again: the outputs must equal ``DIR/check/outputs`` bit for bit. A copy damaged
in transit, an artifact swapped for another build, or a simulator that changed its results all show
as a named difference (exit 4 through :class:`hbtool.errors.GateFailed`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hbtool.errors import GateFailed, HbError
from hbtool.release.manifest import read_manifest, sha256_file


def verify(path: Path) -> list[str]:
    """What differs from the manifest (empty: the bundle verifies)."""
    manifest, root = read_manifest(path)
    problems: list[str] = []
    artifact = root / manifest["artifact"]["file"]
    if not artifact.is_file():
        return [f"artifact {manifest['artifact']['file']}: missing"]
    got = sha256_file(artifact)
    if got != manifest["artifact_sha256"]:
        problems.append(f"artifact {artifact.name}: sha256 {got[:16]}... differs from the manifest's {manifest['artifact_sha256'][:16]}...")
    check = manifest.get("check") or {}
    arrays: dict[str, dict[str, np.ndarray]] = {"inputs": {}, "outputs": {}}
    for kind in ("inputs", "outputs"):
        for name, entry in (check.get(kind) or {}).items():
            file = root / entry["file"]
            if not file.is_file():
                problems.append(f"check {kind[:-1]} '{name}': {entry['file']} missing")
                continue
            if sha256_file(file) != entry["sha256"]:
                problems.append(f"check {kind[:-1]} '{name}': {entry['file']} differs from the manifest's sha256")
            arrays[kind][name] = np.load(file, allow_pickle=False)
    if problems or not check.get("samples"):
        return problems
    from hbtool.release.bundle import check_outputs

    try:
        outs = check_outputs(artifact, arrays["inputs"])
    except HbError as exc:
        return [f"artifact {artifact.name}: {exc.problem}"]
    for name, want in arrays["outputs"].items():
        have = outs.get(name)
        if have is None:
            problems.append(f"output '{name}': the artifact no longer gives it")
        elif have.shape != want.shape or have.dtype != want.dtype or have.tobytes() != want.tobytes():
            diff = np.abs(np.asarray(have, np.float64) - np.asarray(want, np.float64)).max() if have.shape == want.shape else float("nan")
            problems.append(f"output '{name}': simulated values differ from check/outputs (largest difference {diff:g})")
    return problems


def verify_or_raise(path: Path) -> dict:
    problems = verify(path)
    if problems:
        raise GateFailed([f"verify: {p}" for p in problems],
                         "the bundle is damaged or was changed: copy it again from the release job, or run hbtool release again")
    manifest, _ = read_manifest(path)
    return manifest
