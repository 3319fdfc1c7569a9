"""Atomic file output: write beside the target, then rename.

A crash, a full disk or Ctrl-C half-way through a write must never leave a truncated model or
report where a complete one is expected, nor destroy the previous good one.

:func:`atomic_write_files` (and :class:`AtomicFileSet`, which writes each file as soon as its bytes exist)
writes a set of files as one: every file goes to a temporary file
beside its target first, and only when all of them are complete are they renamed into place,
so a failure (disk full, Ctrl-C) leaves every earlier output as it was and no temporary file
behind. Every byte goes through :func:`_write_all` (``os.write``), the one low-level write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Iterator, Mapping

from hbtool.errors import InputError

_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NO_PERMISSION = {errno.EACCES, errno.EPERM, errno.EROFS}


def _mount_point(path: Path) -> Path:
    """The mount point of the disk that holds ``path`` (its nearest existing ancestor)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def _blocking_file(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` (or ``path`` itself) that exists but is not a folder."""
    for p in [path, *path.parents]:
        if p.exists():
            return None if p.is_dir() else p
    return None


def _fail(path: Path, exc: OSError) -> InputError:
    code = exc.errno
    reason = exc.strerror or (os.strerror(code) if code else str(exc) or type(exc).__name__)
    if code in _DISK_FULL:
        return InputError(
            f"disk full: no space left on the disk mounted at '{_mount_point(path.parent)}' while writing '{path}' "
            "(nothing was written, earlier outputs are kept)",
            "free space on that disk, or choose an output folder on another disk (working_dir / --output-dir)",
        )
    if code in (errno.ENOTDIR, errno.EEXIST):
        blocker = _blocking_file(path.parent)
        if blocker is not None:
            return InputError(
                f"cannot write '{path}': '{blocker}' is a file, not a folder",
                "choose another output folder (working_dir / --output-dir), or move that file away",
            )
    if code in _NO_PERMISSION:
        return InputError(
            f"cannot write '{path}': {reason}",
            "choose a writable output folder (working_dir / --output-dir), or fix its permissions",
        )
    return InputError(f"cannot write '{path}': {reason}", "choose a writable output directory with free space")


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _make_dirs(folder: Path, created: list[Path]) -> None:
    """``mkdir -p folder``, recording the folders it creates (outermost first)."""
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        created.append(d)


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()  # only when still empty


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; it replaces ``path`` only if the block succeeds."""
    path = Path(path)
    created: list[Path] = []
    try:
        _make_dirs(path.parent, created)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        _remove_dirs(created)
        raise _fail(path, exc) from None
    tmp_path = Path(tmp)
    ok = False
    try:
        yield tmp_path
        os.replace(tmp_path, path)
        ok = True
    except OSError as exc:
        raise _fail(path, exc) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
        if not ok:
            _remove_dirs(created)


class AtomicFileSet:
    """Files written as one, all or nothing, each as soon as its bytes exist: :meth:`stage` writes a file to a
    temporary file beside its target (and syncs it to disk), :meth:`commit` renames every staged file into place.

    Staging lets a caller write the large files while it still computes the small ones (``hbtool calibrate``
    writes its four models while the final evaluation runs), instead of writing everything at the end; nothing
    reaches a target before :meth:`commit`, so the all-or-nothing rule of :func:`atomic_write_files` holds. Used
    as a context manager: leaving the block without :meth:`commit` (an error, Ctrl-C) removes the temporary
    files and the folders the set created, leaving every target as it was. An :class:`OSError` becomes a
    one-line :class:`InputError` naming the file.
    """

    def __init__(self) -> None:
        self._created: list[Path] = []
        self._temps: list[tuple[Path, Path]] = []   # (temporary file, target), in staging order
        self._done = False

    def __enter__(self) -> "AtomicFileSet":
        return self

    def __exit__(self, *exc_info: object) -> None:
        for tmp_path, _ in self._temps:
            with contextlib.suppress(OSError):
                if tmp_path.exists():
                    tmp_path.unlink()
        if not self._done:
            _remove_dirs(self._created)

    def __contains__(self, target: str | os.PathLike) -> bool:
        return any(staged == Path(target) for _, staged in self._temps)

    def stage(self, target: str | os.PathLike, data: bytes) -> None:
        """Write ``data`` to a temporary file beside ``target`` (synced to disk); ``target`` itself is untouched
        until :meth:`commit`."""
        current = Path(target)
        try:
            _make_dirs(current.parent, self._created)
            fd, tmp = tempfile.mkstemp(prefix=f".{current.name}.", suffix=".tmp", dir=current.parent)
            self._temps.append((Path(tmp), current))
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _fail(current, exc) from None

    def commit(self) -> None:
        """Rename every staged file into place, in staging order."""
        current = Path(".")
        try:
            for tmp_path, target in self._temps:
                current = target
                os.replace(tmp_path, target)
        except OSError as exc:
            raise _fail(current, exc) from None
        self._done = True


def atomic_write_files(files: Mapping[str | os.PathLike, bytes]) -> None:
    """Write ``{path: bytes}`` all or nothing: temporary files first, renamed once all are complete.

    Any failure (an :class:`OSError` becomes a one-line :class:`InputError`; Ctrl-C passes
    through) removes the temporary files and the folders this call created, leaving every
    target as it was.
    """
    with AtomicFileSet() as staged:
        for target, data in files.items():
            staged.stage(target, data)
        staged.commit()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    atomic_write_files({path: data})


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
