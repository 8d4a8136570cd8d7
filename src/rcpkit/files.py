"""Files rcpkit keeps: written durably, replaced atomically, readable by their owner only.

:func:`atomic_write` is the one write-then-rename of the project: a temporary file in the
target's directory (created 0600), flushed and fsynced, renamed over the target, then the
directory fsynced, so that after a crash the path holds the old bytes or the new ones — and,
once the call returned, the new ones; :func:`replace_durably` does the same for a file another
library wrote, and :func:`sync_file` flushes one that needs no rename. :func:`write_new`
writes a file under a fresh name that a later :func:`atomic_write` (a manifest) makes visible.
Data roots and their directories are made 0700 (:func:`private_dir`), the files in them 0600
(every file created here, and :func:`private_file` before SQLite opens a database): a store
holds documents, a keys file access. :func:`locked` serialises read-modify-write cycles
across processes with ``flock``.

Protocol-free and dependency-free: the engine, the tenancy layer and the tools share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["PRIVATE_DIR_MODE", "atomic_write", "fsync_directory", "locked", "private_dir",
           "private_file", "rename_durably", "replace_durably", "sync_file", "write_new"]

PRIVATE_DIR_MODE = 0o700
_PRIVATE_FILE_MODE = 0o600

Writer = Callable[[BinaryIO], object]
"""Writes a file's content to the binary stream it is given."""


def _owner_only(path: str, flags: int) -> int:
    """An ``opener`` for :func:`open` creating files 0600."""
    return os.open(path, flags, _PRIVATE_FILE_MODE)


def private_dir(path: Path) -> Path:
    """``path`` and its missing parents created 0700; an existing directory is left as is."""
    path = Path(path)
    if not path.parent.exists():
        private_dir(path.parent)
    path.mkdir(exist_ok=True, mode=PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path`` created empty, 0600, unless it exists (untouched then): for a file a library
    opens by name, such as an SQLite database, whose journal and WAL take its mode."""
    # O_EXCL: an existing file is not even opened for writing (it may be read-only).
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _PRIVATE_FILE_MODE))
    return Path(path)


def fsync_directory(path: Path) -> None:
    """Flush ``path``'s entries (a rename or a new file in it) to disk."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_synced(stream: BinaryIO, content: bytes | str | Writer) -> None:
    if callable(content):
        content(stream)
    else:
        stream.write(content.encode("utf-8") if isinstance(content, str) else content)
    stream.flush()
    os.fsync(stream.fileno())


def write_new(path: Path, content: bytes | str | Writer) -> None:
    """Write ``content`` (bytes, text as UTF-8, or a :data:`Writer`) to ``path``, 0600, and
    fsync it; for a file under a fresh name that a later :func:`atomic_write` publishes."""
    with open(path, "wb", opener=_owner_only) as stream:
        _write_synced(stream, content)


def atomic_write(path: Path, content: bytes | str | Writer) -> None:
    """Replace ``path`` with ``content`` (see :func:`write_new`) atomically and durably; the
    file is 0600. A failure leaves ``path`` as it was and no temporary file behind."""
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                             suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as stream:
            _write_synced(stream, content)
        rename_durably(Path(temporary), path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def replace_durably(written: Path, path: Path) -> None:
    """Rename ``written`` (a complete file another library wrote, in ``path``'s directory)
    over ``path``: made 0600 and fsynced first, the directory fsynced after."""
    sync_file(written, private=True)
    rename_durably(written, path)


def sync_file(path: Path, *, private: bool = False) -> None:
    """Flush a complete file another program wrote (``pg_dump``, SQLite's backup) to disk;
    ``private`` makes it 0600 first."""
    with open(path, "rb") as stream:
        if private:
            os.fchmod(stream.fileno(), _PRIVATE_FILE_MODE)
        os.fsync(stream.fileno())


def rename_durably(written: Path, path: Path) -> None:
    """Rename ``written`` (a file or a whole directory staged beside it) to ``path``, then
    fsync the directory that holds the new name."""
    os.replace(written, path)
    fsync_directory(path.parent)


@contextlib.contextmanager
def locked(lock_file: Path, *, exclusive: bool = True) -> Iterator[None]:
    """Hold ``flock`` on ``lock_file`` (created 0600; never deleted, so every process locks
    the same inode) for the ``with`` block: exclusive, or shared with other shared holders."""
    with open(lock_file, "ab", opener=_owner_only) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
