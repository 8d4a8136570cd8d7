"""The folders a data directory indexes, for ``rcpkit index add|sync`` (§7.10 ids).

Each indexed folder is a root: its documents' ids are paths relative to it (after its prefix)
and their ``meta.source_root`` is its label, a name the operator chooses (default: the folder's
name). The host path of each root is kept here, in ``DIR/roots.json`` beside the index and
never in a document, so no client learns where the indexing host keeps its files.

The registry is what keeps ids from duplicating: a folder inside a root is read with that
root's ids (indexing ``docs/sub`` after ``docs`` updates ``sub/…``, it does not add a second
copy under new ids); a folder that holds a root, a second folder under a label already taken,
or a subfolder with a prefix of its own is refused with the command that does it right.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rcpkit.files import atomic_write

__all__ = ["ROOTS_FILE", "Root", "RootConflict", "RootRegistry"]

ROOTS_FILE = "roots.json"


@dataclass(frozen=True, slots=True)
class Root:
    """One indexed folder: where it is on this host, its label and its ids' prefix."""

    path: Path
    label: str
    prefix: str = ""


class RootConflict(Exception):
    """A folder that cannot be indexed without duplicating ids; the message says what to run."""


class RootRegistry:
    """The roots recorded in a data directory, and where a newly given folder belongs."""

    def __init__(self, data: Path) -> None:
        self.file = data / ROOTS_FILE
        self.roots: list[Root] = []
        if self.file.is_file():
            recorded = json.loads(self.file.read_text(encoding="utf-8"))
            self.roots = [Root(Path(r["path"]), r["label"], r.get("prefix", ""))
                          for r in recorded.get("roots", [])]
        self._changed = False

    def locate(self, folder: Path, *, label: str | None, prefix: str,
               excluded: Callable[[str], bool], command: str) -> Root:
        """The root ``folder`` (a resolved directory) is read as; recorded on :meth:`save`.

        ``excluded(relative_dir)`` tells whether the run skips a subfolder anyway (``--exclude``),
        so a folder holding a root may be indexed around it; ``command`` is the command line
        to suggest, with ``{args}`` where the folder and options go."""
        for held in self.roots:
            if folder in held.path.parents:
                below = held.path.relative_to(folder).as_posix()
                if not excluded(below + "/"):
                    raise RootConflict(
                        f"{folder} holds {held.path}, indexed with ids of its own (label "
                        f"{held.label!r}); index the rest around it: "
                        f"`{command.format(args=f'{folder} --exclude {below}/')}`")
        inner = [root for root in self.roots if folder == root.path or root.path in folder.parents]
        if inner:
            root = max(inner, key=lambda r: len(r.path.parts))  # the innermost one
            if (label not in (None, root.label)) or (prefix and prefix != root.prefix):
                where = "it" if folder == root.path else f"{root.path} holds it"
                raise RootConflict(
                    f"{folder} is already indexed ({where}, label {root.label!r}, id prefix "
                    f"{root.prefix!r}); another label or prefix would index its files twice: "
                    f"run `{command.format(args=folder)}` without --source-root/--prefix")
            return root
        chosen = label or folder.name or "root"
        taken = next((root for root in self.roots if root.label == chosen), None)
        if taken is not None:
            raise RootConflict(
                f"the label {chosen!r} is already the source_root of {taken.path}; give this "
                f"folder its own: `{command.format(args=f'{folder} --source-root NAME')}`")
        root = Root(folder, chosen, prefix)
        self.roots.append(root)
        self._changed = True
        return root

    def save(self) -> None:
        """Write the registry if a root was added (atomically: a lost registry would let the
        next run index a subfolder under new ids)."""
        if not self._changed:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.file, json.dumps(
            {"roots": [{"path": r.path.as_posix(), "label": r.label, "prefix": r.prefix}
                       for r in self.roots]}, indent=2) + "\n")
        self._changed = False
