"""Per-process and per-call costs of simulate that change no numbers (issue 34): numba's BLAS check
kept from importing SciPy, and the row-scalar shape analysis worked out once per shape pair."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]

_CHILD = r"""
import sys
import numpy as np
from hbtool.simulator import fused
assert "scipy.linalg" not in sys.modules
x = np.arange(-300, 300, dtype=np.int16).reshape(6, 100)
out = np.empty((2, 6, 100), np.uint8)
fused.digits_u8(x, out)                      # the first loop: numba's target loads here
assert np.array_equal(out[1], (x & 255).astype(np.uint8))
print("scipy.linalg loaded by the loops:", "scipy.linalg" in sys.modules)
import scipy.linalg                          # the hook is gone: SciPy imports as usual
from numba import njit

@njit
def dot(a, b):
    return np.dot(a, b)                      # numba's BLAS route still works

a = np.arange(6.0).reshape(2, 3)
assert np.allclose(dot(a, a.T), a @ a.T)
print("ok")
"""


def test_the_loops_load_without_scipy_and_leave_scipy_and_numba_blas_working():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               HBTOOL_SIM_COMPILE="inline")
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "scipy.linalg loaded by the loops: False" in r.stdout
    assert r.stdout.strip().endswith("ok")


def test_the_import_hook_fails_only_numbas_blas_check():
    from hbtool.simulator.jit import _SkipNumbaBlasCheck

    hook = _SkipNumbaBlasCheck()
    assert hook.find_spec("scipy.linalg") is None       # anyone else's import of SciPy goes ahead
    assert hook.find_spec("numpy") is None

    def ensure_blas():  # a frame named like numba's, in another file: not numba's check either
        return hook.find_spec("scipy")

    assert ensure_blas() is None


def test_row_scalar_plan_is_worked_out_once_per_shape_pair_and_stays_exact():
    from hbtool.kernels import Mul
    from hbtool.simulator import accel

    accel._row_scalar_plan.cache_clear()
    mul = Mul.build(0.02, 0.0003, 0.01, 16, 8, 8)
    fast = accel.accelerate(mul)
    rng = np.random.default_rng(5)
    for _ in range(3):
        a = rng.integers(-32768, 32768, (2, 1, 8, 40, 15))
        b = rng.integers(-128, 128, (1,))
        np.testing.assert_array_equal(fast(a.astype(np.int16), b.astype(np.int16)), mul.apply_numpy(a, b))
    info = accel._row_scalar_plan.cache_info()
    assert info.misses == 1 and info.hits == 2
    # shapes the row form cannot take: varying along the last axis, both full, incompatible
    assert accel._row_scalar_plan((2, 5, 3, 4), (1, 1, 1, 4)) is None
    assert accel._row_scalar_plan((2, 5), (2, 5)) is None
    assert accel._row_scalar_plan((2, 5), (3, 1)) is None
    assert accel._row_scalar_plan((2, 5, 3, 4), (5, 1, 1)) == (False, 10, (2, 5, 3, 4))
