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
    _spin(1.5)
    progress("alone", 1, 1)
    child = subprocess.Popen([sys.executable, "-S", "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    while child.poll() is None:       # both spin until the child ends
        _spin(0.01)
    progress("beside a child", 1, 1)
    total = progress.close()
    (_, alone_cpu, alone), (_, beside_cpu, beside) = progress.stages["alone"], progress.stages["beside a child"]
    # counted in CPU seconds (what the stretch lasts idle): all of the lone spin's, little of the two processes'
    assert alone >= 0.5 * alone_cpu > 0 and beside <= 0.35 * beside_cpu, progress.stages
    assert abs(total - sum(v[2] for v in progress.stages.values())) < 1e-9
