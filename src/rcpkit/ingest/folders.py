"""Reading a user's folder into documents for ``rcpkit index add|sync`` (§7.10).

One bad file never stops a run: each file is read on its own and either yields documents or
becomes a :class:`Skip` with a reason. Text is decoded as UTF-8 (with or without a BOM, or
UTF-16 with one), then as the legacy encoding ``charset-normalizer`` detects; what is still
not text is skipped. Ids are stable: a file's id is its path relative to the indexed root
(after an optional prefix), whatever the current directory; a JSONL/CSV row's id is scoped to
its file (``<file>:<id>``, or ``<file>:<content hash>`` without one) unless global ids are
asked for, so two tables with ids 1 and 2 never overwrite each other, and re-reading an
unchanged folder writes nothing. Which root a folder belongs to is :mod:`rcpkit.ingest.roots`.

Every document records ``source`` (its file, as ids spell it) and ``source_root`` (its root's
label, never a host path) in its metadata: ``index sync`` deletes only documents of its own
root whose files are gone. Symbolic links that resolve outside the root are not followed
unless asked (a link to ``/etc/passwd`` must not end up served to every client); links inside
the root are skipped as duplicates of their target.

PDF (text layer, one document per page, ``page`` in the citation), HTML and DOCX need the
``formats`` extra; without it such files are skipped with the ``pip install`` to run.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import itertools
import json
import mimetypes
import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import charset_normalizer
import pathspec

from rcpkit.engine.types import DocumentIn
from rcpkit.ingest.roots import Root

__all__ = ["CHOSEN_SKIPS", "CODE_LANGUAGES", "FORMAT_SUFFIXES", "SUFFIXES", "Folder", "Selection",
           "Skip", "SkipKind", "SourceFile", "read_folder", "select_files", "split_text"]

TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".rst", ".org", ".adoc", ".asciidoc")
FORMAT_SUFFIXES = (".pdf", ".html", ".htm", ".docx")
CODE_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript", ".go": "go",
    ".rs": "rust", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".java": "java", ".kt": "kotlin", ".scala": "scala", ".rb": "ruby", ".php": "php",
    ".cs": "csharp", ".swift": "swift", ".lua": "lua", ".pl": "perl", ".pm": "perl",
    ".r": "r", ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".sql": "sql",
    ".css": "css", ".scss": "css", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml",
    ".ini": "ini", ".cfg": "ini", ".json": "json", ".xml": "xml", ".tex": "latex",
    ".el": "elisp", ".hs": "haskell", ".ml": "ocaml", ".ex": "elixir", ".erl": "erlang",
    ".cmake": "cmake", ".mk": "make", ".proto": "protobuf", ".graphql": "graphql",
}
"""Source code is indexed as text with ``language`` in its metadata (a filter field)."""
SUFFIXES = (*TEXT_SUFFIXES, ".jsonl", ".csv", *FORMAT_SUFFIXES, ".gz")
"""The suffixes read by name; man pages (``.1``–``.9``), source code and files without a
known suffix whose content is text are read too."""
FORMATS_HINT = "needs pip install 'rcpkit[formats]'"
MAX_FILE_BYTES = 64 * 2**20
"""Larger files (or gzip'd files that decompress to more) are skipped: reading them whole
would cost more memory than they are worth, and a small ``.gz`` may be a zip bomb."""
IGNORE_FILES = (".gitignore", ".rcpkitignore")

_MAN_SUFFIX = re.compile(r"\.[1-9][a-z]{0,3}\Z")
_SNIFF_BYTES = 8192
_TEXT_MIME_TYPES = ("application/json", "application/xml", "application/javascript",
                    "application/x-sh", "application/x-tex", "application/toml",
                    "application/yaml", "application/x-yaml", "application/sql")
_TEXT_COLUMNS = ("text", "body", "content")
_ID_COLUMNS = ("id", "_id", "doc_id")
_INTEGER = re.compile(r"[+-]?(?:0|[1-9][0-9]*)\Z")
_DECIMAL = re.compile(r"[+-]?(?:0|[1-9][0-9]*)?(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_CHAOS_TIE = 0.1
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


class SkipKind:
    """Why a file was skipped, as the summary groups them. A file that cannot be read has
    none: it is grouped by its reason (``not a readable PDF``, ``cannot read: …``)."""

    UNSUPPORTED = "unsupported file type"
    BINARY = "binary content, not text"
    EMPTY = "empty (no text to index)"
    TOO_LARGE = "too large"
    NEEDS_EXTRA = FORMATS_HINT
    HIDDEN = "hidden (name starts with '.')"
    IGNORED = "ignored by .gitignore or .rcpkitignore"
    EXCLUDED = "excluded by --exclude or not matched by --include"
    LINK_INSIDE = "symbolic link inside the folder, indexed there"
    LINK_OUTSIDE = "symbolic link out of the folder (--follow-links to index it)"
    BROKEN_LINK = "broken symbolic link"


CHOSEN_SKIPS = (SkipKind.HIDDEN, SkipKind.IGNORED, SkipKind.EXCLUDED)
"""Skips the user chose: their documents go on ``index sync`` and ``watch``; any other skip
may be transient (a file being written, a permission) and keeps what the file had indexed."""


@dataclass(frozen=True, slots=True)
class Skip:
    """A file (or ``file:line`` row) not indexed, why (``reason``), and the group it is
    counted in (``kind``, a :class:`SkipKind`; else the reason without its detail)."""

    source: str
    reason: str
    kind: str = ""

    @property
    def group(self) -> str:
        return self.kind or self.reason.split(" (", 1)[0]


@dataclass(slots=True)
class SourceFile:
    """One file's documents; ``warnings`` are row-level problems that did not stop it."""

    source: str
    documents: list[DocumentIn]
    warnings: list[Skip] = field(default_factory=list)


@dataclass(slots=True)
class Folder:
    """What :func:`read_folder` found: files with documents, skipped files, and the parts of
    roots read (``(root, folder relative to it)``, ``""`` for the whole root)."""

    files: list[SourceFile] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    roots: list[tuple[Root, str]] = field(default_factory=list)


class _NotReadable(Exception):
    """A file that is not indexed; the message is the reason shown to the user."""

    def __init__(self, reason: str, kind: str = "") -> None:
        super().__init__(reason)
        self.kind = kind


# ── walking ────────────────────────────────────────────────────────────────

def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True, slots=True)
class Selection:
    """Which files of a folder are read: ``--include``/``--exclude`` globs (gitignore syntax,
    relative to the folder) and, unless ``ignore_files`` is off, every ``.gitignore`` and
    ``.rcpkitignore`` on the way down, each relative to its own directory as git reads them."""

    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    ignore_files: bool = True

    def specs(self) -> tuple[pathspec.GitIgnoreSpec | None, pathspec.GitIgnoreSpec | None]:
        return (pathspec.GitIgnoreSpec.from_lines(self.include) if self.include else None,
                pathspec.GitIgnoreSpec.from_lines(self.exclude) if self.exclude else None)


_IgnoreStack = list[tuple[str, str, pathspec.GitIgnoreSpec]]
"""``(directory relative to the root, ignore file's shown name, its patterns)``."""


def _ignore_specs(directory: Path, shown: str) -> _IgnoreStack:
    found: _IgnoreStack = []
    for name in IGNORE_FILES:
        try:
            lines = (directory / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found.append((shown, f"{shown}/{name}" if shown else name,
                      pathspec.GitIgnoreSpec.from_lines(lines.splitlines())))
    return found


def _ignored_by(stack: _IgnoreStack, shown: str, is_dir: bool) -> str | None:
    """The ignore file that ignores ``shown`` (the deepest one that has a say wins, so a
    ``!pattern`` in a subfolder re-includes), or ``None``."""
    verdict: str | None = None
    for base, name, spec in stack:
        relative = shown[len(base) + 1:] if base else shown
        result = spec.check_file(relative + "/" if is_dir else relative)
        if result.include is not None:
            verdict = name if result.include else None
    return verdict


def _walk(start: Path, root: Path, follow_links: bool, selection: Selection,
          skipped: list[Skip],
          wanted: Callable[[str, bool], bool] | None = None) -> Iterator[Path]:
    """Files under ``start`` (``root`` or a folder in it) in a stable order; what is hidden,
    ignored or excluded is skipped (a directory once, not each file in it). Paths, globs
    and the ignore files of ``root`` and the folders down to ``start`` are read from ``root``.
    ``wanted(relative path, is a folder)`` says which entries are looked at (default: all).

    A link is judged by where it resolves: outside the root it is skipped unless
    ``follow_links``; inside, it is a second name for a file indexed anyway."""
    include, exclude = selection.specs()
    seen_dirs = {start}
    above: _IgnoreStack = []
    if selection.ignore_files:
        for ancestor in reversed(start.parents):
            if _within(ancestor, root):
                above += _ignore_specs(ancestor, _relative(ancestor, root))
    pending: list[tuple[Path, _IgnoreStack]] = [(start, above)]
    while pending:
        directory, inherited = pending.pop()
        shown_dir = _relative(directory, root)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(Skip(shown_dir or ".", f"cannot list: {exc.strerror}"))
            continue
        stack = inherited + _ignore_specs(directory, shown_dir) if selection.ignore_files \
            else inherited
        subdirs = []
        for entry in entries:
            # ``directory`` lies below ``root`` as written (links are not resolved here), so
            # the relative name is a join: relpath per entry costs ~10 µs × every file.
            shown = f"{shown_dir}/{entry.name}" if shown_dir else entry.name
            is_dir = entry.is_dir()
            if wanted is not None and not wanted(shown, is_dir):
                continue
            path = Path(entry.path)
            if entry.name.startswith("."):
                if entry.name not in IGNORE_FILES:
                    skipped.append(Skip(shown + "/" * is_dir, SkipKind.HIDDEN, SkipKind.HIDDEN))
                continue
            ignored_by = _ignored_by(stack, shown, is_dir)
            if ignored_by is not None:
                skipped.append(Skip(shown + "/" * is_dir, f"ignored by {ignored_by}",
                                    SkipKind.IGNORED))
                continue
            if exclude is not None and exclude.match_file(shown + "/" * is_dir):
                skipped.append(Skip(shown + "/" * is_dir, "excluded by --exclude",
                                    SkipKind.EXCLUDED))
                continue
            if entry.is_symlink():
                target = path.resolve()
                if not target.exists():
                    skipped.append(Skip(shown, SkipKind.BROKEN_LINK, SkipKind.BROKEN_LINK))
                    continue
                if _within(target, root):
                    skipped.append(Skip(shown, "symbolic link to "
                                        f"{_relative(target, root) or '.'}, indexed there",
                                        SkipKind.LINK_INSIDE))
                    continue
                if not follow_links:
                    skipped.append(Skip(shown, SkipKind.LINK_OUTSIDE, SkipKind.LINK_OUTSIDE))
                    continue
                if target.is_dir():
                    if target not in seen_dirs:
                        seen_dirs.add(target)
                        subdirs.append((path, stack))
                    continue
            elif is_dir:
                subdirs.append((path, stack))
                continue
            if not entry.is_file():
                continue  # a socket, FIFO or device: nothing a user keeps as a document
            if include is not None and not include.match_file(shown):
                skipped.append(Skip(shown, "not matched by --include", SkipKind.EXCLUDED))
                continue
            unsupported = _unsupported(path)
            if unsupported is None:
                yield path
            else:
                skipped.append(Skip(shown, unsupported, SkipKind.UNSUPPORTED))
        pending.extend(reversed(subdirs))


def select_files(start: Path, root: Path, *, follow_links: bool = False,
                 selection: Selection = Selection(),
                 wanted: Callable[[str, bool], bool] | None = None
                 ) -> tuple[list[Path], list[Skip]]:
    """The files of ``start`` (a folder in ``root``, or ``root``) that ``index add`` would
    read, and those it would skip, by the same rules; only the entries ``wanted`` accepts
    (path relative to ``root``, whether a folder) are looked at (a watcher looks at the paths
    that changed and the folders down to them)."""
    skipped: list[Skip] = []
    return list(_walk(start, root, follow_links, selection, skipped, wanted)), skipped


def _inner_name(path: Path) -> str:
    """The name a file is read as: a gzip'd file's name without ``.gz``."""
    return path.name[:-3] if path.name.lower().endswith(".gz") else path.name


def _unsupported(path: Path) -> str | None:
    """Why a file is not read by its name (a known binary type), or ``None`` to read it;
    a name that says nothing (README, NEWS, ``changelog.Debian``) is judged by content."""
    name = _inner_name(path).lower()
    suffix = PurePosixPath(name).suffix
    if path.name.lower().endswith(".gz") and suffix in (*FORMAT_SUFFIXES, ".gz"):
        return f"compressed {suffix} (decompress it first)"
    if suffix in SUFFIXES or suffix in CODE_LANGUAGES or _MAN_SUFFIX.search(name):
        return None
    guessed, _ = mimetypes.guess_type(name, strict=False)
    if guessed is None or guessed.startswith("text/") or guessed in _TEXT_MIME_TYPES:
        return None
    return f"unsupported file type {suffix} ({guessed})"


def _relative(path: Path, root: Path) -> str:
    """``path`` below ``root`` in POSIX form, without resolving the last link."""
    return Path(os.path.relpath(path, root)).as_posix() if path != root else ""


def read_folder(paths: Sequence[Path], *, prefix: str = "", follow_links: bool = False,
                max_text_bytes: int = 1_000_000, selection: Selection = Selection(),
                global_ids: bool = False, locate: Callable[[Path, bool], Root] | None = None,
                on_file: Callable[[str], None] | None = None) -> Folder:
    """Documents from files and directories. ``locate(directory, whole)`` says which root a
    given directory (``whole``) or a given file's directory is read as; by default each is
    its own, labelled with its name. ``selection`` picks a directory's files; a file given
    by name is read whatever its name. ``on_file(source)`` is told each file as read."""
    def own_root(directory: Path, whole: bool) -> Root:
        return Root(directory, directory.name or "root", prefix)

    folder = Folder()
    for given in paths:
        if given.is_dir():
            start = given.resolve()
            root = (locate or own_root)(start, True)
            files = list(_walk(start, root.path, follow_links, selection, folder.skipped))
        elif given.is_file():
            start = given.absolute().parent.resolve()
            unsupported = _unsupported(given)
            if unsupported is not None:
                folder.skipped.append(Skip(given.name, unsupported, SkipKind.UNSUPPORTED))
                continue
            root = (locate or own_root)(start, False)
            files = [start / given.name]
        else:
            folder.skipped.append(Skip(given.as_posix(), "no such file or directory"))
            continue
        part = (root, _relative(start, root.path) if given.is_dir() else "")
        if part not in folder.roots:
            folder.roots.append(part)
        for path in files:
            source = root.prefix + _relative(path, root.path)
            if on_file is not None:
                on_file(source)
            try:
                documents, warnings = _read(path, source, max_text_bytes, global_ids)
            except _NotReadable as exc:
                folder.skipped.append(Skip(source, str(exc), exc.kind))
                continue
            except OSError as exc:
                folder.skipped.append(Skip(source, f"cannot read: {exc.strerror or exc}"))
                continue
            stamped = [_stamp(doc, source, root.label) for doc in documents]
            if not stamped and not warnings:
                folder.skipped.append(Skip(source, SkipKind.EMPTY, SkipKind.EMPTY))
                continue
            folder.files.append(SourceFile(source, stamped, warnings))
    return folder


def _stamp(document: DocumentIn, source: str, label: str) -> DocumentIn:
    meta = dict(document.meta or {})
    meta.setdefault("source", source)
    meta["source_root"] = label
    return DocumentIn(text=document.text, id=document.id, meta=meta)


# ── decoding ───────────────────────────────────────────────────────────────

def _decode(data: bytes) -> str:
    """Text of a file's bytes, or :class:`_NotReadable` when they are not text."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise _NotReadable("not text (invalid UTF-16)", SkipKind.BINARY) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        if b"\x00" in data:
            raise _NotReadable(SkipKind.BINARY, SkipKind.BINARY) from None
        text = _legacy_text(data)
    if "\x00" in text or len(_CONTROL.findall(text[:65536])) > len(text[:65536]) // 100:
        raise _NotReadable(SkipKind.BINARY, SkipKind.BINARY)
    return text


def _legacy_text(data: bytes) -> str:
    """The detected legacy decoding. Short samples fit several code pages about equally;
    then Windows-1252 — what Western desktop tools wrote for decades — wins ties."""
    matches = charset_normalizer.from_bytes(data)
    best = matches.best()
    if best is None:
        raise _NotReadable("not text (no encoding fits)", SkipKind.BINARY)
    western = next((m for m in matches if m.encoding == "cp1252"), None)
    if western is not None and western.chaos <= best.chaos + _CHAOS_TIE:
        best = western
    return str(best)


def split_text(text: str, max_bytes: int) -> list[str]:
    """``text`` cut into parts of at most ``max_bytes`` UTF-8 bytes, at a paragraph, line or
    word break in the second half of each part when there is one."""
    parts: list[str] = []
    while len(text.encode()) > max_bytes:
        head = text.encode()[:max_bytes].decode("utf-8", "ignore")
        cut = len(head)
        for separator in ("\n\n", "\n", " "):
            at = head.rfind(separator)
            if at >= len(head) // 2:
                cut = at + len(separator)
                break
        parts.append(text[:cut])
        text = text[cut:]
    return [*parts, text]


# ── formats ────────────────────────────────────────────────────────────────

def _read(path: Path, source: str, max_text_bytes: int,
          global_ids: bool) -> tuple[list[DocumentIn], list[Skip]]:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise _NotReadable(f"too large ({size} bytes; the limit is {MAX_FILE_BYTES})",
                           SkipKind.TOO_LARGE)
    name = _inner_name(path)
    suffix = PurePosixPath(name.lower()).suffix
    if suffix == ".pdf":
        return _from_pdf(path, source, max_text_bytes), []
    if suffix == ".docx":
        title, text = _docx_text(path)
        return _parts(text, source, {"title": title or path.stem}, max_text_bytes), []
    data = _gunzip(path) if path.name.lower().endswith(".gz") else path.read_bytes()
    if suffix == ".jsonl":
        return _from_jsonl(_decode(data), source, global_ids)
    if suffix == ".csv":
        return _from_csv(_decode(data), source, global_ids)
    if suffix in (".html", ".htm"):
        title, text = _html_text(_decode(data))
        return _parts(text, source, {"title": title or path.stem}, max_text_bytes), []
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise _NotReadable(SkipKind.BINARY, SkipKind.BINARY)
    text = _decode(data)
    meta: dict[str, Any] = {"title": _title(text, suffix) or PurePosixPath(name).stem or name}
    if _MAN_SUFFIX.search(name.lower()) or _is_roff(text):
        man_title, text = _man_text(text)
        meta = {"title": man_title or meta["title"], "format": "man"}
    elif suffix in CODE_LANGUAGES:
        meta = {"title": name, "language": CODE_LANGUAGES[suffix]}
    return _parts(text, source, meta, max_text_bytes), []


def _gunzip(path: Path) -> bytes:
    """A gzip'd file's content, refused past :data:`MAX_FILE_BYTES` decompressed (read in
    bounded steps, so a zip bomb never takes more memory than that)."""
    try:
        with gzip.open(path, "rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise _NotReadable(f"not a readable gzip file ({exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise _NotReadable(f"decompresses to more than {MAX_FILE_BYTES} bytes (the limit)",
                           SkipKind.TOO_LARGE)
    return data


def _title(text: str, suffix: str) -> str | None:
    """The document's own title where its markup has one: markdown ``# T``, reStructuredText
    ``T`` over a line of ``=``/``-``/…, Org ``#+TITLE:``, AsciiDoc ``= T``."""
    lines = text.lstrip("\ufeff").splitlines()[:200]
    if suffix in (".md", ".markdown"):
        return next((line[2:].strip() or None for line in lines if line.startswith("# ")),
                    None)
    if suffix == ".rst":
        for above, line in itertools.pairwise(lines):
            if above.strip() and len(set(line.strip())) == 1 and line.strip()[0] in "=-~#*^\"'" \
                    and len(line.strip()) >= len(above.strip()):
                return above.strip()
    if suffix == ".org":
        return next((line.split(":", 1)[1].strip() or None for line in lines
                     if line.upper().startswith("#+TITLE:")), None)
    if suffix in (".adoc", ".asciidoc"):
        return next((line[2:].strip() or None for line in lines if line.startswith("= ")),
                    None)
    return None


# ── man pages (roff) ───────────────────────────────────────────────────────

_ROFF_ESCAPES = (
    (re.compile(r'\\".*'), ""),                            # comment to the end of the line
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),         # font changes
    (re.compile(r"\\s[+-]?[0-9]"), ""),                    # size changes
    (re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)"), ""),        # string interpolations
    (re.compile(r"\\\((?:em|en)"), "-"),
    (re.compile(r"\\\((?:aq|cq|oq)"), "'"),
    (re.compile(r"\\\((?:dq|lq|rq)"), '"'),
    (re.compile(r"\\\(bu"), "*"),
    (re.compile(r"\\\(co"), "(c)"),
    (re.compile(r"\\\(.."), ""),                           # any other named glyph
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[e\\]"), "\\\\"),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\[&|^%c:]"), ""),                       # zero-width escapes
)
_ROFF_ARGUMENT = re.compile(r'"((?:[^"]|"")*)"|(\S+)')
_ROFF_BREAKS = {"PP", "LP", "P", "TP", "sp", "br", "Pp", "Bl", "El", "RS", "RE", "nf", "fi"}
_ROFF_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}


def _is_roff(text: str) -> bool:
    """Whether ``text`` is a man page without a man suffix (its first request is ``.TH`` or
    the mdoc ``.Dd``)."""
    for line in text.lstrip("\ufeff").splitlines()[:20]:
        if line.startswith(('.\\"', "'\\\"")) or not line.strip():
            continue
        return line.startswith((".TH ", ".Dd", ".Dt "))
    return False


def _roff_inline(text: str) -> str:
    for pattern, replacement in _ROFF_ESCAPES:
        text = pattern.sub(replacement, text)
    return text


def _man_text(roff: str) -> tuple[str | None, str]:
    """``(title, text)`` of a man(7) or mdoc(7) page: requests and escapes removed, section
    headings kept as lines of their own, macro arguments kept as the words they set."""
    title: str | None = None
    out: list[str] = []
    in_definition = False
    for line in roff.splitlines():
        if in_definition:
            in_definition = line.strip() != ".."
            continue
        if not line.startswith((".", "'")):
            out.append(_roff_inline(line))
            continue
        name, _, rest = line[1:].strip().partition(" ")
        words = [(quoted or "").replace('""', '"') if bare is None else bare
                 for quoted, bare in ((m.group(1), m.group(2))
                                      for m in _ROFF_ARGUMENT.finditer(rest))]
        if name.startswith('\\"'):
            continue
        if name in ("de", "de1", "am"):
            in_definition = True
        elif name in ("TH", "Dt"):
            if words:
                title = f"{words[0]}({words[1]})" if len(words) > 1 else words[0]
        elif name in ("SH", "SS", "Sh", "Ss"):
            out += ["", _roff_inline(" ".join(words)), ""]
        elif name in _ROFF_BREAKS:
            out.append("")
        elif name in _ROFF_ALTERNATING:
            out.append(_roff_inline("".join(words)))
        elif name == "IP":
            out += ["", _roff_inline(words[0]) if words else ""]
        elif name[:1].isupper() and words:  # a text macro (.B, .I, .Nm, .Nd …): its words
            out.append(_roff_inline(" ".join(words)))
        # Lowercase requests (.ft, .in, .ne, .ds …) set layout, not text.
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    return title, text


def _parts(text: str, source: str, meta: dict[str, Any],
           max_text_bytes: int) -> list[DocumentIn]:
    """One document, or several when the text is over the engine's size limit (the first
    keeps the file's id, so a file that grows keeps its identity)."""
    if not text.strip():
        return []
    pieces = split_text(text, max_text_bytes)
    if len(pieces) == 1:
        return [DocumentIn(text=text, id=source, meta=meta)]
    return [DocumentIn(text=piece, id=source if number == 1 else f"{source}:part{number}",
                       meta={**meta, "part": number})
            for number, piece in enumerate(pieces, 1) if piece.strip()]


def _row_id(source: str, record: Any, taken: dict[str, int]) -> str:
    """``<file>:<hash of the row>``; a repeated identical row gets ``-2``, ``-3``…"""
    digest = hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False)
                            .encode()).hexdigest()[:16]
    base = f"{source}:{digest}"
    taken[base] = taken.get(base, 0) + 1
    return base if taken[base] == 1 else f"{base}-{taken[base]}"


def _given_id(source: str, given: str, global_ids: bool) -> str:
    """A row's own id, scoped to its file (``<file>:<id>``) unless ids are global."""
    return given if global_ids else f"{source}:{given}"


def _from_jsonl(text: str, source: str,
                global_ids: bool) -> tuple[list[DocumentIn], list[Skip]]:
    """A ``{"id", "text", "meta"}`` line, or a BEIR ``{"_id", "title", "text", "metadata"}``
    one (the title is kept as metadata and opens the indexed text)."""
    documents: list[DocumentIn] = []
    warnings: list[Skip] = []
    taken: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            warnings.append(Skip(where, f"not JSON ({exc.msg})"))
            continue
        if not isinstance(record, dict):
            warnings.append(Skip(where, "not a JSON object"))
            continue
        body = record.get("text")
        raw_meta = record.get("meta") or record.get("metadata") or {}
        if not isinstance(body, str) or not body.strip():
            warnings.append(Skip(where, "no text"))
            continue
        if not isinstance(raw_meta, dict):
            warnings.append(Skip(where, "'meta' is not an object"))
            continue
        meta = {**raw_meta, "row": number}
        title = record.get("title")
        if isinstance(title, str) and title:
            meta.setdefault("title", title)
            body = f"{title}\n\n{body}"
        given = record.get("id", record.get("_id"))
        doc_id = _given_id(source, str(given), global_ids) if given not in (None, "") \
            else _row_id(source, record, taken)
        documents.append(DocumentIn(text=body, id=doc_id, meta=meta))
    return documents, warnings


def _column_types(rows: list[dict[str, str]], columns: Sequence[str]) -> dict[str, type]:
    """``int`` or ``float`` for a column whose every non-empty value is one (``3.5`` and
    ``-7`` make a float column); everything else — ``01234`` included — stays text."""
    types: dict[str, type] = {}
    for column in columns:
        values = [row[column] for row in rows if row.get(column)]
        if not values or any(v != v.strip() for v in values):
            continue
        if all(_INTEGER.match(v) for v in values):
            types[column] = int
        elif all(_DECIMAL.match(v) and re.search(r"[0-9]", v) and not _leading_zero(v)
                 for v in values):
            types[column] = float
    return types


def _leading_zero(value: str) -> bool:
    digits = value.lstrip("+-")
    return len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()


def _from_csv(text: str, source: str,
              global_ids: bool) -> tuple[list[DocumentIn], list[Skip]]:
    """One row per document: a text/body/content column, an optional id column, the rest
    become metadata with the user's values kept as written unless the column is numeric."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = [c for c in (reader.fieldnames or []) if c]
    text_column = next((c for c in _TEXT_COLUMNS if c in columns), None)
    if text_column is None:
        raise _NotReadable(f"CSV needs a column named one of {', '.join(_TEXT_COLUMNS)}")
    id_column = next((c for c in _ID_COLUMNS if c in columns), None)
    try:
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as exc:
        raise _NotReadable(f"not valid CSV ({exc})") from None
    meta_columns = [c for c in columns if c not in (text_column, id_column)]
    types = _column_types([row for _, row in rows], meta_columns)
    documents: list[DocumentIn] = []
    warnings: list[Skip] = []
    taken: dict[str, int] = {}
    for line, row in rows:
        body = row.get(text_column) or ""
        if not body.strip():
            warnings.append(Skip(f"{source}:{line}", "no text"))
            continue
        meta: dict[str, Any] = {name: types.get(name, str)(row[name])
                                for name in meta_columns if row.get(name)}
        meta["row"] = line
        given = row.get(id_column) if id_column else None
        doc_id = _given_id(source, given, global_ids) if given else _row_id(source, row, taken)
        documents.append(DocumentIn(text=body, id=doc_id, meta=meta))
    return documents, warnings


def _html_text(markup: str) -> tuple[str | None, str]:
    try:
        from bs4 import BeautifulSoup
    except ImportError:
        raise _NotReadable(FORMATS_HINT, SkipKind.NEEDS_EXTRA) from None
    soup = BeautifulSoup(markup, "html.parser")
    for hidden in soup(["script", "style", "noscript", "template"]):
        hidden.decompose()
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    if soup.title:
        soup.title.decompose()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    return title or None, "\n".join(line for line in lines if line)


def _docx_text(path: Path) -> tuple[str | None, str]:
    try:
        import docx
    except ImportError:
        raise _NotReadable(FORMATS_HINT, SkipKind.NEEDS_EXTRA) from None
    try:
        document = docx.Document(str(path))
    except Exception as exc:  # python-docx raises many types for a damaged archive
        raise _NotReadable(f"not a readable DOCX ({type(exc).__name__})") from None
    paragraphs = [p.text for p in document.paragraphs if p.text.strip()]
    for table in document.tables:
        for row in table.rows:
            paragraphs.append(" | ".join(cell.text.strip() for cell in row.cells))
    title = document.core_properties.title or None
    return title, "\n\n".join(paragraphs)


def _from_pdf(path: Path, source: str, max_text_bytes: int) -> list[DocumentIn]:
    """One document per page with text (``<file>:p<N>``, ``page`` = N for the citation)."""
    try:
        import pypdf
        from pypdf.errors import PyPdfError
    except ImportError:
        raise _NotReadable(FORMATS_HINT, SkipKind.NEEDS_EXTRA) from None
    try:
        reader = pypdf.PdfReader(path)
        title = (reader.metadata.title if reader.metadata else None) or path.stem
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise _NotReadable(f"not a readable PDF ({exc})") from None
    documents = []
    for number, page_text in enumerate(pages, 1):
        documents.extend(_parts(page_text, f"{source}:p{number}",
                                {"title": title, "page": number, "source": source},
                                max_text_bytes))
    if not documents and pages:
        raise _NotReadable("no text layer (a scanned PDF needs OCR first)")
    return documents
