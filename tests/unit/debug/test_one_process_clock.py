"""``benchmarks.debug_auto``'s one-process clock: the wall seconds a second idle core could not shorten.

Issue 34's ``--workers 2`` line is lost in stretches where one process works and the other core idles; on a shared
machine wall seconds do not show them (everything is slower), the runnable threads of the command's process tree do.
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.debug_auto import _printer


def _spin(seconds: float) -> None:
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def test_one_process_time_counts_a_lone_thread_and_not_two():
    progress = _printer()
    _spin(0.8)
    progress("alone", 1, 1)
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    _spin(1.0)
    child.wait()
    progress("beside a child", 1, 1)
    total = progress.close()
    alone, beside = progress.stages["alone"][2], progress.stages["beside a child"][2]
    assert alone >= 0.5 and beside <= 0.5 * progress.stages["beside a child"][0]
    assert abs(total - sum(v[2] for v in progress.stages.values())) < 1e-9
