"""Single-pass integer loops for ``simulate``'s hot kernels, compiled by numba.

The kernels' numpy forms (:mod:`hbtool.kernels`) spell each step as a whole-array int64
operation: a requantization is four passes over the tensor, a LayerNorm about twenty. On
a memory-bound two-core machine those passes, not the products, dominated the emulator's
time. The loops here do the same integer arithmetic element by element, in one or two
passes, on narrow (int8/int16) tensors, rows split over the cores. They are the same
definitions in another spelling; ``tests/test_simulate.py`` and the fuzzer check each one
bit for bit against the kernel's numpy form, rounding ties and saturation included.

Every function takes its output array (allocated by the caller in the narrowest dtype
that holds the clamp range) and integer parameters only; float appears only as the
exact-integer accumulators an ORT product returns (read with an exact ``int64`` cast).

Rounding modes are passed as small ints (:data:`MODE_CODES`).
"""

from __future__ import annotations

import atexit
import os
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

import numpy as np  # noqa: E402
from numba import config as _numba_config, njit  # noqa: E402

if os.environ.get("NUMBA_CACHE_DIR") and not _numba_config.CACHE_DIR:  # numba was imported before us
    _numba_config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

MODE_CODES = {"floor": 0, "half_up": 1, "half_away": 2, "half_even": 3}


def _content_keyed_cache() -> None:
    """Key the compiled loops on this file's bytes, not its path and mtime.

    numba's own cache is keyed on the source file's location and modification time, so every
    fresh clone or reinstall compiled the loops again (about 30 s on two cores). Keyed on the
    content, a clone or install of the same version on the same machine finds them compiled.
    Only this module's functions use this locator; numba's internals are touched defensively:
    if they change, numba's default locators apply.
    """
    import hashlib
    import sys

    try:
        from numba.core import caching
    except ImportError:  # pragma: no cover
        return
    here = os.path.abspath(__file__)
    try:
        digest = hashlib.sha256(Path(here).read_bytes()).hexdigest()[:20]
    except OSError:  # pragma: no cover
        return
    root = _numba_config.CACHE_DIR

    class ContentKeyedLocator(caching.UserProvidedCacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(root, f"fused-{digest}-py{sys.version_info[0]}{sys.version_info[1]}")

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


_content_keyed_cache()


def _jit(**options):
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
MIN_PARALLEL_WORK = 1 << 15  # elements below which splitting across threads costs more than it saves


def set_threads(n: int | None) -> None:
    """Cores the loops split their rows over (None: all of this process's)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = cores if not n else max(1, int(n))
    if n != _THREADS[0] and _POOL[0] is not None:
        _POOL[0].shutdown(wait=True)
        _POOL[0] = None
    _THREADS[0] = n


def over_rows(loop, rows: int, work: int, *args) -> None:
    """``loop(r0, r1, *args)`` over ``[0, rows)``: in the calling thread for small tensors, else in one
    contiguous chunk per core (the loops release the GIL, rows are independent, so the result is the
    same integers in any split).

    With :func:`compile_in_background` on, does nothing (and marks the kernel call skipped, see
    :func:`call_skipped`) when this signature is neither compiled here nor in the on-disk cache,
    or an earlier loop of the same call was skipped."""
    if _BACKGROUND[0] and getattr(_CALL, "active", False) and (not _compiled(loop, args) or getattr(_CALL, "skipped", False)):
        _CALL.skipped = True
        return
    threads = min(_THREADS[0], rows)
    if threads <= 1 or work < MIN_PARALLEL_WORK:
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
_PENDING: dict[tuple, None] = {}  # (loop name, signature) waiting for the compiler process
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
        key = (loop.py_func.__name__, sig)
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
        proc = subprocess.Popen([sys.executable, "-c", "import os, sys; os.nice(10); from hbtool.simulator import fused; "
                                 "fused.compile_requests(sys.argv[1])", f.name], env=env,
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
    """The compiler process: compile (into the on-disk cache) every ``(loop name, signature)`` pickled at ``path``."""
    import pickle

    try:
        with open(path, "rb") as f:
            batch = pickle.load(f)
    finally:
        os.unlink(path)
    for name, sig in batch:
        globals()[name].compile(sig)


@_jit(inline="always")
def _rshift(x, n, mode):
    """``rounding_shift_numpy`` of one int64 by ``n >= 0`` (see :mod:`hbtool.kernels.fixedpoint`)."""
    if n == 0:
        return x
    if mode == 0:
        return x >> n
    half = np.int64(1) << (n - 1)
    if mode == 1:
        return (x + half) >> n
    if mode == 2:
        m = (abs(x) + half) >> n
        return -m if x < 0 else m
    q = x >> n
    r = x - (q << n)
    if r > half or (r == half and (q & 1) == 1):
        q += 1
    return q


@_jit(inline="always")
def _clip(x, lo, hi):
    return lo if x < lo else (hi if x > hi else x)


@_jit(inline="always")
def _requant_one(acc, m, n, clamp, pre, lo, hi, mode):
    """:meth:`Requantize.apply_trusted` of one accumulator."""
    if acc > clamp:
        acc = clamp
    elif acc < -clamp:
        acc = -clamp
    if pre:
        acc = _rshift(acc, pre, mode)
    return _clip(_rshift(acc * m, n - pre, mode), lo, hi)


@_jit()
def _requantize_parts(r0_, r1_, parts, factors, bias, M, n, clamp, pre, lo, hi, mode, per_col, out):
    """``out[r,q] = requant_c(bias[c] + sum_k factors[k] * parts[k][r,q])``.

    ``parts``: a tuple of 2-D arrays ``(R, Q)`` holding exact integers (the digit parts of a
    product, or one accumulator); per-channel parameters are ``[C]`` int64 arrays, channel
    ``c = q`` (``per_col``: channels last, as Linear) or ``c = r % C`` (rows of NCHW, as Conv).
    """
    R, Q = out.shape
    C = M.shape[0]
    K = len(parts)
    for r in range(r0_, r1_):
        cr = 0 if C == 1 else r % C
        for q in range(Q):
            c = (q if C > 1 else 0) if per_col else cr
            acc = bias[c]
            for k in range(K):
                acc += factors[k] * np.int64(parts[k][r, q])
            out[r, q] = _requant_one(acc, M[c], n[c], clamp[c], pre[c], lo, hi, mode)


@_jit()
def _requantize_cols(r0_, r1_, y0, y1, f0, f1, bias, M, n, half, lo, hi, out):
    """The common case of :func:`requantize_parts`, written to vectorise: at most two parts
    (``f1 = 0`` for one), channels along columns, ``floor``/``half_up`` (``half`` = 0 or
    ``2**(n-1)`` per channel), no accumulator clamp or pre-shift."""
    R, Q = out.shape
    for r in range(r0_, r1_):
        for q in range(Q):
            acc = bias[q] + f0 * np.int64(y0[r, q]) + f1 * np.int64(y1[r, q])
            v = (acc * M[q] + half[q]) >> n[q]
            out[r, q] = min(max(v, lo), hi)


@_jit()
def _requantize_rows(r0_, r1_, y0, y1, f0, f1, bias, M, n, half, lo, hi, out):
    """:func:`requantize_cols` with the channel of row ``r`` being ``r % C`` (NCHW rows; C = 1: per tensor)."""
    R, Q = out.shape
    C = M.shape[0]
    for r in range(r0_, r1_):
        c = r % C
        b, m, nn, h = bias[c], M[c], n[c], half[c]
        for q in range(Q):
            acc = b + f0 * np.int64(y0[r, q]) + f1 * np.int64(y1[r, q])
            v = (acc * m + h) >> nn
            out[r, q] = min(max(v, lo), hi)


@_jit()
def _split_digits(r0_, r1_, x, out):
    """``x = 256 * hi + lo`` with ``hi = (x + 128) >> 8``, ``lo`` in [-128, 127]: ``out[0] = hi``, ``out[1] = lo`` (float32).

    ``x`` and ``out[0]`` are 2-D ``(R, Q)``; the balanced digits keep ``|digit| <= 128``.
    """
    R, Q = x.shape
    for r in range(r0_, r1_):
        for q in range(Q):
            v = np.int64(x[r, q])
            h = (v + 128) >> 8
            out[0, r, q] = h
            out[1, r, q] = v - (h << 8)


@_jit()
def _layernorm_rows(r0_, r1_, q, alpha, f, E, G, B, shift, lo, hi, d_shift, mode, out):
    """:meth:`LayerNorm.apply_numpy` on rows ``q[r, :]`` (three passes over each row, no temporaries)."""
    R, N = q.shape
    two_n = np.int64(2 * N)
    for r in range(r0_, r1_):
        S = np.int64(0)
        for j in range(N):
            S += np.int64(q[r, j]) << alpha[j]
        mu = ((S << (f + 1)) + N) // two_n
        V = np.int64(0)
        for j in range(N):
            d = ((np.int64(q[r, j]) << alpha[j]) << f) - mu
            if d_shift:
                d = _rshift(d, d_shift, mode)
            V += d * d
        w = V + E
        if w < 1:
            w = np.int64(1)
        t = w
        p = np.int64(1)
        for step in (16, 8, 4, 2, 1):
            if t < (np.int64(1) << (52 - 2 * step)):
                t = t << (2 * step)
                p = p << step
        s = np.int64(np.sqrt(np.float64(t)))  # exact floor sqrt after the fix-ups (t < 2**52)
        while s * s > t:
            s -= 1
        while (s + 1) * (s + 1) <= t:
            s += 1
        Rr = (np.int64(1) << 50) // s
        for j in range(N):
            d = ((np.int64(q[r, j]) << alpha[j]) << f) - mu
            if d_shift:
                d = _rshift(d, d_shift, mode)
            u = _rshift(d * Rr * p, 20, mode)
            out[r, j] = _clip(_rshift(u * G[j] + B[j], shift, mode), lo, hi)


@_jit(inline="always")
def _exp_fixed(qv, m, t_hi, t_lo, in8, exp_bits, mask_min, qmin, mode):
    u = m - np.int64(qv)
    if in8:
        e = t_lo[u]
    else:
        e = _rshift(t_hi[u >> 8] * t_lo[u & 255], exp_bits, mode)
    if mask_min and qv == qmin and u > 0:
        e = np.int64(0)
    return e


@_jit()
def _softmax_rows(r0_, r1_, q, t_hi, t_lo, in8, exp_bits, mask_min, qmin, p, ymax, thresholds, mode, out):
    """:meth:`Softmax.apply_numpy` on rows ``q[r, :]``; ``thresholds`` non-empty means log2 codes."""
    R, N = q.shape
    L = len(thresholds)
    for r in range(r0_, r1_):
        m = np.int64(q[r, 0])
        for j in range(1, N):
            if q[r, j] > m:
                m = np.int64(q[r, j])
        total = np.int64(0)
        for j in range(N):
            total += _exp_fixed(q[r, j], m, t_hi, t_lo, in8, exp_bits, mask_min, qmin, mode)
        half_total = total >> 1
        inv = 1.0 / np.float64(total)
        for j in range(N):
            e = _exp_fixed(q[r, j], m, t_hi, t_lo, in8, exp_bits, mask_min, qmin, mode)
            num = (e << p) + half_total
            # floor(num / total) by the reciprocal: num < 2**53 and the quotient < 2**23, so the
            # float estimate is within 1 of it; one integer check each way makes it exact
            y = np.int64(np.float64(num) * inv)
            if y * total > num:
                y -= 1
            elif (y + 1) * total <= num:
                y += 1
            if L:
                k = 0
                for i in range(L):
                    if y < thresholds[i]:
                        k += 1
                out[r, j] = k
            else:
                out[r, j] = _clip(y, 0, ymax)


@_jit()
def _add_rows(r0_, r1_, a, b, A, B, n, lo, hi, mode, out):
    """:meth:`Add.apply_numpy` with ``b``'s rows repeating over ``a``'s (``R % Rb == 0``); ``B`` carries the sign."""
    R, C = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        rb = r % Rb
        for c in range(C):
            acc = np.int64(a[r, c]) * A[c] + B[c] * np.int64(b[rb, c])
            out[r, c] = _clip(_rshift(acc, n[c], mode), lo, hi)


@_jit()
def _mul_rows(r0_, r1_, a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:meth:`Mul.apply_numpy` (scalar requantizer) with ``b``'s rows repeating over ``a``'s."""
    R, C = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        rb = r % Rb
        for c in range(C):
            out[r, c] = _requant_one(np.int64(a[r, c]) * np.int64(b[rb, c]), m, n, clamp, pre, lo, hi, mode)


@_jit()
def _mul_rowscalar(r0_, r1_, a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:meth:`Mul.apply_numpy` with one ``b`` value per row of ``a`` (a channel scale over the spatial axes),
    ``b`` repeating over ``a``'s rows (``R % b.size == 0``)."""
    R, Q = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        bv = np.int64(b[r % Rb])
        for q in range(Q):
            out[r, q] = _requant_one(np.int64(a[r, q]) * bv, m, n, clamp, pre, lo, hi, mode)


@_jit()
def _add_rowscalar(r0_, r1_, a, b, A, B, n, lo, hi, mode, out):
    """:meth:`Add.apply_numpy` (scalar ``A``, ``B``, ``n``) with one ``b`` value per row of ``a``, repeating as in
    :func:`_mul_rowscalar`."""
    R, Q = out.shape
    Rb = b.shape[0]
    for r in range(r0_, r1_):
        bb = B * np.int64(b[r % Rb])
        for q in range(Q):
            out[r, q] = _clip(_rshift(np.int64(a[r, q]) * A + bb, n, mode), lo, hi)


@_jit()
def _lookup(r0_, r1_, x, table, offset, out):
    """``out[i] = table[x[i] + offset]`` (a whole-code-range table of an elementwise kernel)."""
    for i in range(r0_, r1_):
        out[i] = table[np.int64(x[i]) + offset]


@_jit()
def _offset_u8(r0_, r1_, x, out):
    """``out = x + 128`` as uint8 for an int8-range ``x``."""
    for i in range(r0_, r1_):
        out[i] = np.uint8(x[i] + 128)


@_jit()
def _digits_u8(r0_, r1_, x, out):
    """Base-256 digits of an int16 ``x`` (2-D) as uint8 with zero point 128: ``out[0] = (x >> 8) + 128``
    (the signed high digit) and ``out[1] = x & 255`` (the low digit, read as ``lo - 128``)."""
    R, Q = x.shape
    for r in range(r0_, r1_):
        for q in range(Q):
            v = np.int64(x[r, q])
            out[0, r, q] = np.uint8((v >> 8) + 128)
            out[1, r, q] = np.uint8(v & 255)


# ------------------------------------------------------------------------------ entry points (rows over the cores)
def requantize_parts(parts, factors, bias, M, n, clamp, pre, lo, hi, mode, per_col, out):
    """:func:`_requantize_parts` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_parts, out.shape[0], out.size, parts, factors, bias, M, n, clamp, pre, lo, hi, mode, per_col, out)


def requantize_cols(y0, y1, f0, f1, bias, M, n, half, lo, hi, out):
    """:func:`_requantize_cols` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_cols, out.shape[0], out.size, y0, y1, f0, f1, bias, M, n, half, lo, hi, out)


def requantize_rows(y0, y1, f0, f1, bias, M, n, half, lo, hi, out):
    """:func:`_requantize_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_requantize_rows, out.shape[0], out.size, y0, y1, f0, f1, bias, M, n, half, lo, hi, out)


def split_digits(x, out):
    """:func:`_split_digits` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_split_digits, x.shape[0], x.size, x, out)


def layernorm_rows(q, alpha, f, E, G, B, shift, lo, hi, d_shift, mode, out):
    """:func:`_layernorm_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_layernorm_rows, q.shape[0], 8 * q.size, q, alpha, f, E, G, B, shift, lo, hi, d_shift, mode, out)


def softmax_rows(q, t_hi, t_lo, in8, exp_bits, mask_min, qmin, p, ymax, thresholds, mode, out):
    """:func:`_softmax_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_softmax_rows, q.shape[0], 8 * q.size, q, t_hi, t_lo, in8, exp_bits, mask_min, qmin, p, ymax, thresholds, mode, out)


def add_rows(a, b, A, B, n, lo, hi, mode, out):
    """:func:`_add_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_add_rows, out.shape[0], out.size, a, b, A, B, n, lo, hi, mode, out)


def mul_rows(a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:func:`_mul_rows` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_mul_rows, out.shape[0], out.size, a, b, m, n, clamp, pre, lo, hi, mode, out)


def mul_rowscalar(a, b, m, n, clamp, pre, lo, hi, mode, out):
    """:func:`_mul_rowscalar` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_mul_rowscalar, out.shape[0], out.size, a, b, m, n, clamp, pre, lo, hi, mode, out)


def add_rowscalar(a, b, A, B, n, lo, hi, mode, out):
    """:func:`_add_rowscalar` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_add_rowscalar, out.shape[0], out.size, a, b, A, B, n, lo, hi, mode, out)


def lookup(x, table, offset, out):
    """:func:`_lookup` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_lookup, x.size, x.size, x, table, offset, out)


def offset_u8(x, out):
    """:func:`_offset_u8` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_offset_u8, x.size, x.size, x, out)


def digits_u8(x, out):
    """:func:`_digits_u8` over all rows, split across the cores when the tensor is big enough."""
    over_rows(_digits_u8, x.shape[0], x.size, x, out)
