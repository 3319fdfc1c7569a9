"""Where the benchmarks read and write, in one place: each from the environment, else beside the code.

``HBTOOL_BENCH_MODELS``  exported models (a cache; default ``benchmarks/_models``)
``HBTOOL_BENCH_OUT``     results and work folders (default ``benchmarks/_out``)
``HBTOOL_REFERENCE``     the folder of outside reference data (``published_perf_calibration.csv``);
                         only :mod:`benchmarks.perf_published` needs it
``HBTOOL_TIMM_PYTHON``   the interpreter of the separate timm/ultralytics export venv
                         (``benchmarks/zoo/export_timm.py``, ``benchmarks/published/export_models.py``)
``HBTOOL_KERAS_PYTHON``  the interpreter of the TensorFlow export venv (``benchmarks/zoo/export_keras.py``)

Scripts take ``--out`` / ``--json`` / ``--timm-python``... arguments over these where they have them.
Nothing here names a machine's own folders: an unset reference or export venv is an error that says
which variable to set, when a script needs it.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("HBTOOL_BENCH_MODELS") or ROOT / "benchmarks" / "_models")
OUT = Path(os.environ.get("HBTOOL_BENCH_OUT") or ROOT / "benchmarks" / "_out")
TIMM_PYTHON = os.environ.get("HBTOOL_TIMM_PYTHON", "")
KERAS_PYTHON = os.environ.get("HBTOOL_KERAS_PYTHON", "")


def reference(name: str) -> Path:
    """A file of the outside reference folder (``HBTOOL_REFERENCE``)."""
    folder = os.environ.get("HBTOOL_REFERENCE")
    if not folder:
        raise SystemExit(f"{name}: set HBTOOL_REFERENCE to the folder that holds it (the research notes' reference/)")
    return Path(folder) / name


def export_python(path: str, variable: str, option: str) -> str:
    """The interpreter of a separate export venv, or an error naming how to give it."""
    if not path:
        raise RuntimeError(f"no export interpreter: set {variable} or pass {option} (see the export script's docstring)")
    return path
