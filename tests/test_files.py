"""``rcpkit.files``: the one write-then-rename (fsync the file, rename, fsync the directory),
owner-only modes, and no other write-then-rename anywhere in ``src/rcpkit``."""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import rcpkit
from rcpkit.files import atomic_write, private_dir, private_file, write_new

SOURCE = Path(rcpkit.__file__).parent


@pytest.fixture
def umask_022() -> Iterator[None]:
    """A permissive umask, as most shells have: the modes must not rely on a strict one."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_directory_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(descriptor).st_mode) else "file"
        events.append(("fsync " + kind, os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    def replace(source: str, destination: str) -> None:
        events.append(("replace", str(destination)))
        real_replace(source, destination)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    atomic_write(target, "new")
    assert [kind for kind, _ in events] == ["fsync file", "replace", "fsync dir"]
    assert events[0][1].startswith(str(tmp_path / ".state.json."))
    assert events[1][1] == str(target) and events[2][1] == str(tmp_path)
    assert target.read_text() == "new"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "CURRENT"
    target.write_bytes(b"state-1")

    def failing(stream: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(target, failing)
    assert target.read_bytes() == b"state-1"
    assert [path.name for path in tmp_path.iterdir()] == ["CURRENT"]


@pytest.mark.usefixtures("umask_022")
def test_files_are_0600_and_directories_0700(tmp_path: Path) -> None:
    root = private_dir(tmp_path / "root" / "nested")
    atomic_write(root / "a.json", b"{}")
    write_new(root / "b.npy", lambda stream: stream.write(b"x"))
    assert _mode(root) == 0o700
    assert [_mode(root / name) for name in ("a.json", "b.npy")] == [0o600, 0o600]


def test_private_file_creates_0600_and_leaves_an_existing_file_alone(tmp_path: Path) -> None:
    fresh = private_file(tmp_path / "store.sqlite3")
    assert (_mode(fresh), fresh.read_bytes()) == (0o600, b"")
    existing = tmp_path / "old.sqlite3"
    existing.write_bytes(b"SQLite format 3\0")
    existing.chmod(0o444)  # a read-only store is served read-only, never opened for writing
    private_file(existing)
    assert (_mode(existing), existing.read_bytes()) == (0o444, b"SQLite format 3\0")


_OWN_COPIES = {("os", "fsync"), ("os", "renames"), ("shutil", "move"), ("tempfile", "mkstemp"),
               ("tempfile", "mktemp"), ("tempfile", "NamedTemporaryFile")}
"""Calls that would make a write-then-rename (or its fsync) of their own: the temporary file,
the move, the flush; ``tempfile.TemporaryDirectory`` (scratch space, never renamed) is not."""


def _renames(path: Path) -> list[str]:
    """``os.replace``/``os.rename`` calls and ``x.rename(y)``/``x.replace(y)`` (a path's
    rename: ``str.replace`` takes two arguments, ``dataclasses.replace`` keywords), and the
    calls of ``_OWN_COPIES``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        module = owner.id if isinstance(owner, ast.Name) else None
        if (module, node.func.attr) in _OWN_COPIES:
            found.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
        if node.func.attr not in ("replace", "rename"):
            continue
        if module == "os" or (len(node.args) == 1 and not node.keywords):
            found.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    return found


def test_every_write_then_rename_goes_through_atomic_write() -> None:
    offenders = [found for path in sorted(SOURCE.rglob("*.py")) if path.name != "files.py"
                 for found in _renames(path)]
    assert offenders == []
