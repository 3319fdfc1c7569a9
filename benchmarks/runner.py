"""The one way a benchmark runs an hbtool stage: the real CLI in its own subprocess.

An exit 3, a traceback, a crash or a timeout is recorded in the result, never fatal to the
benchmark; the stage's stdout and stderr are kept beside its work folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.paths import ROOT


def hbtool_env(**extra: str) -> dict[str, str]:
    """The environment of a subprocess that imports this checkout's hbtool (and ``benchmarks``)."""
    path = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return dict(os.environ, PYTHONPATH=path, COLUMNS="300", NO_COLOR="1", **extra)


def run_stage(stage: str, args: list[str], cwd: Path, timeout: float, verbose: bool = True,
              log_dir: Path | None = None) -> dict:
    """``python -m hbtool.cli [-v] <stage> <args>``: its exit code (``"timeout"`` past ``timeout`` seconds),
    seconds, the last ``hbtool:`` error line (else the last stderr line of a failure), whether stderr
    holds a traceback, and its stdout. ``<stage>.stdout.txt`` / ``.stderr.txt`` go to ``log_dir`` (default ``cwd``)."""
    cmd = [sys.executable, "-m", "hbtool.cli", *(["-v"] if verbose else []), stage, *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=hbtool_env(), capture_output=True, text=True, timeout=max(1.0, timeout))
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or ""), ""
    seconds = time.perf_counter() - t0
    logs = log_dir or cwd
    (logs / f"{stage}.stdout.txt").write_text(out)
    (logs / f"{stage}.stderr.txt").write_text(err)
    error_lines = [ln for ln in err.splitlines() if ln.startswith("hbtool: ")]
    return {"rc": rc, "seconds": round(seconds, 2), "error": error_lines[-1] if error_lines else
            (err.strip().splitlines()[-1] if rc not in (0,) and err.strip() else None),
            "traceback": "Traceback (most recent call last)" in err, "stdout": out}
