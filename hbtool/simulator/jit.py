"""The jit machinery of the simulator's compiled loops (:mod:`.fused`): where numba caches them,
the threads their rows split over, and compiling them off the critical path.

* cache policy: numba's on-disk cache goes to the user's cache folder (``~/.cache/hbtool/numba``,
  unless ``NUMBA_CACHE_DIR`` says otherwise), keyed on the loops' source bytes rather than their
  path and mtime (:func:`content_keyed_cache`), so a clone or install compiles them once per machine;
* :func:`jit`: ``numba.njit`` serial, GIL released, cached where it can be;
* :func:`over_rows`: a loop over rows, split across a thread pool (:func:`set_threads`);
* :func:`compile_in_background`: signatures missing from the cache compile in a separate, niced
  process while the kernels' numpy forms run (:func:`start_call` / :func:`end_call`).

Importing this module sets ``NUMBA_CACHE_DIR`` before numba is imported: import it (or
:mod:`.fused`) before numba.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _default_cache_dir() -> None:
    """Point numba's on-disk cache at the user's cache folder (``~/.cache/hbtool/numba``) unless
    ``NUMBA_CACHE_DIR`` says otherwise: a place every user can write, whether hbtool is a clone or
    a read-only install, so the loops compile once per machine, not once per process."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "hbtool" / "numba"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # numba falls back to beside this file, or compiles without a cache
    if os.access(folder, os.W_OK):
        os.environ["NUMBA_CACHE_DIR"] = str(folder)


_default_cache_dir()

from numba import config as _numba_config, njit  # noqa: E402

from hbtool.simulator.cores import on_one_core  # noqa: E402

if os.environ.get("NUMBA_CACHE_DIR") and not _numba_config.CACHE_DIR:  # numba was imported before us
    _numba_config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]


def content_keyed_cache(loops_file: str) -> None:
    """Key the loops compiled from ``loops_file`` on its bytes (and this file's), not its path and mtime.

    numba's own cache is keyed on the source file's location and modification time, so every
    fresh clone or reinstall compiled the loops again (about 30 s on two cores). Keyed on the
    content, a clone or install of the same version on the same machine finds them compiled.
    Only the functions of ``loops_file`` use this locator; numba's internals are touched defensively:
    if they change, numba's default locators apply.
    """
    import hashlib
    import sys

    try:
        from numba.core import caching
    except ImportError:  # pragma: no cover
        return
    here = os.path.abspath(loops_file)
    try:  # this file too: the options the loops are compiled with are set here
        digest = hashlib.sha256(Path(here).read_bytes() + Path(__file__).read_bytes()).hexdigest()[:20]
    except OSError:  # pragma: no cover
        return
    root = _numba_config.CACHE_DIR

    class ContentKeyedLocator(caching.UserProvidedCacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(root, f"{Path(here).stem}-{digest}-py{sys.version_info[0]}{sys.version_info[1]}")

        def get_source_stamp(self):
            return digest

        @classmethod
        def from_function(cls, py_func, py_file):
            if not root or os.path.abspath(py_file) != here:
                return None
            return super().from_function(py_func, py_file)

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if isinstance(classes, list) and not any(c.__name__ == "ContentKeyedLocator" for c in classes):
        classes.insert(0, ContentKeyedLocator)



def jit(**options):
    """``numba.njit`` (serial, GIL released) with the on-disk cache where a folder for it is
    writable; without one numba refuses ``cache=True`` and the loops compile in every process.

    Serial loops compile about five times faster than ``parallel=True`` ones (numba's parfors
    pass): that is most of a first run's cost. The cores are used by :func:`over_rows` instead.
    """
    def decorate(fn):
        try:
            return njit(cache=True, nogil=True, **options)(fn)
        except RuntimeError:
            return njit(cache=False, nogil=True, **options)(fn)

    return decorate


# ------------------------------------------------------------------------------ threads
_THREADS = [max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))]
_POOL: list[ThreadPoolExecutor | None] = [None]
# Work (elements, or weighted elements for the heavier loops) below which a loop runs in the calling thread.
# Handing half the rows to the pool thread and waiting for it costs about 21 us of wall and of CPU on this
# project's 2-core VM (ThreadPoolExecutor submit + result of an empty function, 2026-12-07), while the loops
# run 0.2-0.7 ns an element: a split only pays past about 140k elements, and 1 << 15 (the old value) split
# every 10 us loop of a batch-1 CNN. Measured (sim7, load 4-5), MobileNetV2's 960 x 49 requantize one thread
# 10 us, split 33 us of CPU and 60 us of wall; whole models at batch 1, two threads: the old value cost
# 19-23 % more CPU a sample (best rounds) than no split at all (docs/benchmarks.md, "Batch 1: loops split only
# past 2**18"). Past 2**18 (loops of 60-100 us and more) an idle second core should still pay for the split.
MIN_PARALLEL_WORK = 1 << 18


def set_threads(n: int | None) -> None:
    """Cores the loops split their rows over (None: all of this process's)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = cores if not n else max(1, int(n))
    if n != _THREADS[0] and _POOL[0] is not None:
        _POOL[0].shutdown(wait=True)
        _POOL[0] = None
    _THREADS[0] = n


def threads() -> int:
    """The cores the loops split their rows over now (:func:`set_threads`)."""
    return _THREADS[0]


class _SkipNumbaBlasCheck:
    """An import hook that fails SciPy's import only when numba's BLAS check asks for it.

    numba's CPU target, on its first use in a process, imports ``numba.np.arraymath``, whose
    module-level BLAS check imports ``scipy.linalg`` (0.4-0.75 s of CPU, measured on every
    ``hbtool simulate`` process start). The loops here use no BLAS; without SciPy numba only
    picks its own loop for ``np.convolve``/``np.correlate`` in compiled code. The hook looks
    for numba's ``ensure_blas`` on the importing stack, so an import of SciPy from anywhere
    else (another thread, the user's code) is untouched, and it is installed only while
    :func:`_load_numba_target` imports that module.
    """

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] != "scipy":
            return None
        frame = sys._getframe(1)
        for _ in range(40):
            if frame is None:
                break
            code = frame.f_code
            if code.co_name == "ensure_blas" and code.co_filename.endswith(os.path.join("numba", "np", "linalg.py")):
                raise ImportError("numba's BLAS check skipped by hbtool: its loops use no BLAS")
            frame = frame.f_back
        return None


_TARGET_LOADED = [False]
_TARGET_LOCK = threading.Lock()


def _load_numba_target() -> None:
    """Import the numba module whose BLAS check would import SciPy, with the check skipped
    (:class:`_SkipNumbaBlasCheck`); once per process, before the first loop runs or loads."""
    with _TARGET_LOCK:  # another thread's first loop waits here until the module is in
        if _TARGET_LOADED[0]:
            return
        try:
            if "numba.np.arraymath" not in sys.modules:
                hook = _SkipNumbaBlasCheck()
                sys.meta_path.insert(0, hook)
                try:
                    import numba.np.arraymath  # noqa: F401
                except Exception:  # pragma: no cover - numba's layout changed: its own import path runs later
                    pass
                finally:
                    sys.meta_path.remove(hook)
        finally:
            _TARGET_LOADED[0] = True


def over_rows(loop, rows: int, work: int, *args) -> None:
    """``loop(r0, r1, *args)`` over ``[0, rows)``: in the calling thread for small tensors (or inside
    :func:`.cores.one_core`), else in one
    contiguous chunk per core (the loops release the GIL, rows are independent, so the result is the
    same integers in any split).

    With :func:`compile_in_background` on, does nothing (and marks the kernel call skipped, see
    :func:`call_skipped`) when this signature is neither compiled here nor in the on-disk cache,
    or an earlier loop of the same call was skipped."""
    if not _TARGET_LOADED[0]:
        _load_numba_target()
    if _BACKGROUND[0] and getattr(_CALL, "active", False) and (not _compiled(loop, args) or getattr(_CALL, "skipped", False)):
        _CALL.skipped = True
        return
    threads = min(_THREADS[0], rows)
    if threads <= 1 or work < MIN_PARALLEL_WORK or on_one_core():
        loop(0, rows, *args)
        return
    if _POOL[0] is None:
        _POOL[0] = ThreadPoolExecutor(_THREADS[0] - 1, thread_name_prefix="hbtool-sim")
    bounds = [rows * k // threads for k in range(threads + 1)]
    futures = [_POOL[0].submit(loop, bounds[k], bounds[k + 1], *args) for k in range(1, threads)]
    loop(bounds[0], bounds[1], *args)
    for f in futures:
        f.result()


# ------------------------------------------------------------------------------ compiling off the critical path
_BACKGROUND = [False]
_LOCK = threading.Lock()
_PENDING: dict[tuple, None] = {}  # (loop module, loop name, signature) waiting for the compiler process
_REQUESTED: set[tuple] = set()
_FINISHED = [0]  # compiler processes finished: a miss is looked up on disk again only after one more finished
_MISSES: dict[tuple, int] = {}
_FAILED: set[tuple] = set()
_WORKER: list[threading.Thread | None] = [None]
_SKIPPED_CALLS = [0]
_CALL = threading.local()  # .skipped: a loop of the current kernel call was not run (not compiled yet)


def compile_in_background(on: bool = True) -> None:
    """Compile loops missing from the cache in a separate process instead of in the calling one.

    The first simulate on a machine (a fresh numba cache) spent seconds compiling the loops while
    the work itself took milliseconds (the tiny CNN: 7.9 s more than its second run at load 10-16).
    With this on, a missing signature is handed to a compiler process (another interpreter, so it
    neither waits for nor holds this one's GIL) and the kernel's numpy form runs meanwhile
    (:func:`start_call` / :func:`call_skipped`); each loop switches to its compiled form as soon as
    the compiler process has written it to the cache. The compiler process finishes its work even
    when this one exits, so the next run finds the loops cached. Off (the default for library
    calls and the tests of the loops), or with ``HBTOOL_SIM_COMPILE=inline``: numba compiles
    inline on the first call, as before.
    """
    _BACKGROUND[0] = bool(on) and os.environ.get("HBTOOL_SIM_COMPILE", "").lower() != "inline"


def background() -> bool:
    """Whether :func:`compile_in_background` is on."""
    return _BACKGROUND[0]


def start_call() -> None:
    """A kernel call begins: its loops run until one is found not compiled (then none runs after it)."""
    _CALL.skipped = False
    _CALL.active = True


def end_call() -> bool:
    """The kernel call begun by :func:`start_call` ended: whether a loop of it was skipped (see
    :func:`call_skipped`). Loops called outside such a call (the library's direct uses) never skip."""
    _CALL.active = False
    skipped = call_skipped()
    if skipped:
        _SKIPPED_CALLS[0] += 1
    return skipped


def skipped_calls() -> int:
    """How many kernel calls so far ran their numpy form because a loop was still compiling."""
    return _SKIPPED_CALLS[0]


def call_skipped() -> bool:
    """Whether a loop of the kernel call begun by :func:`start_call` was not run: its outputs are not
    valid and the caller must use the kernel's numpy form. The call went on (on unset outputs, which
    no loop reads) only so that every signature it needs is requested at once."""
    return getattr(_CALL, "skipped", False)


def _signature(loop, args) -> tuple:
    from numba.core import types

    return (types.int64, types.int64) + tuple(loop.typeof_pyval(a) for a in args)


def _load_cached(loop, sig) -> bool:
    """Load ``sig`` of ``loop`` from numba's on-disk cache without compiling (what ``Dispatcher.compile``
    does first); False when it is not there."""
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        if tuple(sig) in loop.overloads:
            return True
        cres = loop._cache.load_overload(sig, loop.targetctx)
        if cres is None:
            return False
        if not cres.objectmode:
            loop.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        loop.add_overload(cres)
        return True


def _compiled(loop, args) -> bool:
    """Whether ``loop`` may run on ``args`` now: compiled here, loaded from the cache, or to be compiled
    inline; False (the signature handed to the compiler process) when it is being compiled elsewhere."""
    try:
        sig = _signature(loop, args)
        if sig in loop.overloads:
            return True
        key = (loop.py_func.__module__, loop.py_func.__name__, sig)
        if key in _FAILED or type(loop._cache).__name__ == "NullCache":
            return True  # the compiler process failed, or no cache to hand loops over through: compile inline
        if _MISSES.get(key) == _FINISHED[0]:
            return False
        if _load_cached(loop, sig):
            return True
    except Exception:  # numba internals changed: compile inline as numba would
        return True
    _MISSES[key] = _FINISHED[0]
    _request(key)
    return False


def _request(key: tuple) -> None:
    with _LOCK:
        if key in _REQUESTED:
            return
        _REQUESTED.add(key)
        _PENDING[key] = None
        if _WORKER[0] is None or not _WORKER[0].is_alive():
            _WORKER[0] = threading.Thread(target=_compile_pending, name="hbtool-sim-compile", daemon=True)
            _WORKER[0].start()


def _launch(batch: list) -> None:
    """Start one compiler process (nice 10) for ``batch`` and a thread that notes when it finished."""
    import pickle
    import subprocess
    import sys
    import tempfile

    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, NUMBA_CACHE_DIR=str(_numba_config.CACHE_DIR or ""),
               PYTHONPATH=os.pathsep.join([package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))

    def wait(proc):
        try:
            if proc.wait() != 0:
                _FAILED.update(batch)
        finally:
            _FINISHED[0] += 1

    with tempfile.NamedTemporaryFile("wb", suffix=".pkl", delete=False) as f:
        pickle.dump(batch, f)
    try:
        proc = subprocess.Popen([sys.executable, "-c", "import os, sys; os.nice(10); from hbtool.simulator import jit; "
                                 "jit.compile_requests(sys.argv[1])", f.name], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        _FAILED.update(batch)
        return
    threading.Thread(target=wait, args=(proc,), name="hbtool-sim-compile-wait", daemon=True).start()


def _compile_pending() -> None:
    """Start a compiler process for the requests made in the last 50 ms, until none is pending.

    Each batch gets its own process, started at once (not after the previous one finished), so
    everything a run asked for is being compiled before it exits (what is still pending at exit
    is started by :func:`_flush_at_exit`); at a lower priority (nice 10), so that on a busy machine
    it takes the cores the run leaves idle rather than the run's."""
    while True:
        time.sleep(0.05)  # the requests of one pass over the program go to one process
        # taken and launched under the lock: a run that exits between the two would otherwise lose
        # the batch (its exit flush, which waits for the lock, finds nothing pending, and this
        # daemon thread dies before it starts the process), and the next run would find nothing cached
        with _LOCK:
            batch = list(_PENDING)
            _PENDING.clear()
            if not batch:
                _WORKER[0] = None
                return
            _launch(batch)


def _flush_at_exit() -> None:
    with _LOCK:
        batch = list(_PENDING)
        _PENDING.clear()
    if batch:
        _launch(batch)


atexit.register(_flush_at_exit)


def compile_requests(path: str) -> None:
    """The compiler process: compile (into the on-disk cache) every ``(loop module, loop name, signature)``
    pickled at ``path``."""
    import importlib
    import pickle

    try:
        with open(path, "rb") as f:
            batch = pickle.load(f)
    finally:
        os.unlink(path)
    _load_numba_target()
    for module, name, sig in batch:
        getattr(importlib.import_module(module), name).compile(sig)


