"""A process's exit without the interpreter's last garbage collections (the CLI's process and each worker process)."""

from __future__ import annotations


def freeze_objects_at_exit() -> None:
    """Have the interpreter's shutdown skip its cyclic garbage collections (``gc.freeze`` as the first exit step).

    Shutdown collects garbage once more, traversing every object the collector tracks; after ``hbtool calibrate``
    that includes numba's compiled histogram loop and its object graph, and the exit took 0.3-0.6 s (0.14 s
    frozen) on the loaded 2-core machine, a second a time on the wall clock of a command users and CI wait for.
    A ``--workers`` process (:mod:`hbtool.utils.workers`) holds more of the same (the simulator's and the
    quantizer's numba loops, the debug session's graphs) and its exit is waited for at the end of the command.
    The process returns its memory to the system either way; an object left in a reference cycle is then not
    finalized at exit, which Python never promises. atexit runs its handlers last-registered first, so this one,
    registered by the command, runs before the handlers of the modules imported earlier (logging's flush among
    them), which still run."""
    import atexit
    import gc

    atexit.unregister(gc.freeze)   # once per process, however many commands a test runs in it
    atexit.register(gc.freeze)
