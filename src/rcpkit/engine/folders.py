"""Reading a user's folder into documents for ``rcpkit index add|sync`` (§7.10).

One bad file never stops a run: each file is read on its own and either yields documents or
becomes a :class:`Skip` with a reason. Text is decoded as UTF-8 (with or without a BOM, or
UTF-16 with one), then as the legacy encoding ``charset-normalizer`` detects; what is still
not text is skipped. Ids are stable: a file's id is its path relative to the indexed root
(after an optional prefix), whatever the current directory, and a JSONL/CSV row without an id
gets ``<file>:<content hash>``, so re-reading an unchanged folder writes nothing.

Every document records ``source`` (its file, as ids spell it) and ``source_root`` (the
absolute root it was read from) in its metadata: ``index sync`` deletes only documents of its
own root whose files are gone. Symbolic links that resolve outside the root are not followed
unless asked (a link to ``/etc/passwd`` must not end up served to every client); links inside
the root are skipped as duplicates of their target.

PDF (text layer, one document per page, ``page`` in the citation), HTML and DOCX need the
``formats`` extra; without it such files are skipped with the ``pip install`` to run.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import charset_normalizer

from rcpkit.engine.types import DocumentIn

__all__ = ["FORMAT_SUFFIXES", "SUFFIXES", "Folder", "Skip", "SourceFile", "read_folder",
           "split_text"]

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst")
FORMAT_SUFFIXES = (".pdf", ".html", ".htm", ".docx")
SUFFIXES = (*TEXT_SUFFIXES, ".jsonl", ".csv", *FORMAT_SUFFIXES)
FORMATS_HINT = "needs pip install 'rcpkit[formats]'"
MAX_FILE_BYTES = 64 * 2**20
"""Larger files are skipped: reading them whole would cost more memory than they are worth."""

_TEXT_COLUMNS = ("text", "body", "content")
_ID_COLUMNS = ("id", "_id", "doc_id")
_INTEGER = re.compile(r"[+-]?(?:0|[1-9][0-9]*)\Z")
_DECIMAL = re.compile(r"[+-]?(?:0|[1-9][0-9]*)?(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_CHAOS_TIE = 0.1
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Skip:
    """A file (or ``file:line`` row) not indexed, and why."""

    source: str
    reason: str


@dataclass(slots=True)
class SourceFile:
    """One file's documents; ``warnings`` are row-level problems that did not stop it."""

    source: str
    documents: list[DocumentIn]
    warnings: list[Skip] = field(default_factory=list)


@dataclass(slots=True)
class Folder:
    """What :func:`read_folder` found: files with documents, skipped files, and the roots."""

    files: list[SourceFile] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)


class _NotReadable(Exception):
    """A file that is not indexed; the message is the reason shown to the user."""


# ── walking ────────────────────────────────────────────────────────────────

def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _walk(root: Path, follow_links: bool, skipped: list[Skip]) -> Iterator[Path]:
    """Supported files under ``root`` in a stable order; hidden entries are ignored.

    A link is judged by where it resolves: outside the root it is skipped unless
    ``follow_links``; inside, it is a second name for a file indexed anyway."""
    seen_dirs = {root}
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(Skip(_relative(Path(directory), root) or ".",
                                f"cannot list: {exc.strerror}"))
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            shown = _relative(path, root)
            if entry.is_symlink():
                target = path.resolve()
                if not target.exists():
                    skipped.append(Skip(shown, "broken symbolic link"))
                    continue
                if _within(target, root):
                    skipped.append(Skip(shown, "symbolic link to "
                                        f"{_relative(target, root) or '.'}, indexed there"))
                    continue
                if not follow_links:
                    skipped.append(Skip(shown, "symbolic link out of the folder "
                                        "(--follow-links to index it)"))
                    continue
                if target.is_dir():
                    if target not in seen_dirs:
                        seen_dirs.add(target)
                        subdirs.append(path)
                    continue
            elif entry.is_dir(follow_symlinks=False):
                subdirs.append(path)
                continue
            if path.suffix.lower() in SUFFIXES:
                yield path
            elif path.is_file():
                skipped.append(Skip(shown, _unsupported(path)))
        pending.extend(reversed(subdirs))


def _unsupported(path: Path) -> str:
    return f"unsupported file type {path.suffix or '(none)'} (use {' '.join(SUFFIXES)})"


def _relative(path: Path, root: Path) -> str:
    """``path`` below ``root`` in POSIX form, without resolving the last link."""
    return Path(os.path.relpath(path, root)).as_posix() if path != root else ""


def read_folder(paths: Sequence[Path], *, prefix: str = "", follow_links: bool = False,
                max_text_bytes: int = 1_000_000,
                on_file: Callable[[str], None] | None = None) -> Folder:
    """Documents from files and directories. A directory is its own root; a file given by
    name has its directory as root. ``on_file(source)`` is told each file as it is read."""
    folder = Folder()
    for given in paths:
        if given.is_dir():
            root = given.resolve()
            files = list(_walk(root, follow_links, folder.skipped))
        elif given.is_file():
            root = given.absolute().parent.resolve()
            if given.suffix.lower() not in SUFFIXES:
                folder.skipped.append(Skip(given.name, _unsupported(given)))
                continue
            files = [given.absolute()]
        else:
            folder.skipped.append(Skip(given.as_posix(), "no such file or directory"))
            continue
        if root not in folder.roots:
            folder.roots.append(root)
        for path in files:
            source = prefix + (_relative(path, root) or path.name)
            if on_file is not None:
                on_file(source)
            try:
                documents, warnings = _read(path, source, max_text_bytes)
            except _NotReadable as exc:
                folder.skipped.append(Skip(source, str(exc)))
                continue
            except OSError as exc:
                folder.skipped.append(Skip(source, f"cannot read: {exc.strerror or exc}"))
                continue
            stamped = [_stamp(doc, source, root) for doc in documents]
            if not stamped and not warnings:
                folder.skipped.append(Skip(source, "empty (no text to index)"))
                continue
            folder.files.append(SourceFile(source, stamped, warnings))
    return folder


def _stamp(document: DocumentIn, source: str, root: Path) -> DocumentIn:
    meta = dict(document.meta or {})
    meta.setdefault("source", source)
    meta["source_root"] = root.as_posix()
    return DocumentIn(text=document.text, id=document.id, meta=meta)


# ── decoding ───────────────────────────────────────────────────────────────

def _decode(data: bytes) -> str:
    """Text of a file's bytes, or :class:`_NotReadable` when they are not text."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise _NotReadable("not text (invalid UTF-16)") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        if b"\x00" in data:
            raise _NotReadable("binary content, not text") from None
        text = _legacy_text(data)
    if "\x00" in text or len(_CONTROL.findall(text[:65536])) > len(text[:65536]) // 100:
        raise _NotReadable("binary content, not text")
    return text


def _legacy_text(data: bytes) -> str:
    """The detected legacy decoding. Short samples fit several code pages about equally;
    then Windows-1252 — what Western desktop tools wrote for decades — wins ties."""
    matches = charset_normalizer.from_bytes(data)
    best = matches.best()
    if best is None:
        raise _NotReadable("not text (no encoding fits)")
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

def _read(path: Path, source: str, max_text_bytes: int) -> tuple[list[DocumentIn], list[Skip]]:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise _NotReadable(f"too large ({size} bytes; the limit is {MAX_FILE_BYTES})")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _from_jsonl(_decode(path.read_bytes()), source)
    if suffix == ".csv":
        return _from_csv(_decode(path.read_bytes()), source)
    if suffix == ".pdf":
        return _from_pdf(path, source, max_text_bytes), []
    if suffix in (".html", ".htm"):
        title, text = _html_text(_decode(path.read_bytes()))
    elif suffix == ".docx":
        title, text = _docx_text(path)
    else:
        text = _decode(path.read_bytes())
        title = _markdown_title(text) if suffix in (".md", ".markdown") else None
    return _parts(text, source, {"title": title or path.stem}, max_text_bytes), []


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


def _markdown_title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
    return None


def _row_id(source: str, record: Any, taken: dict[str, int]) -> str:
    """``<file>:<hash of the row>``; a repeated identical row gets ``-2``, ``-3``…"""
    digest = hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False)
                            .encode()).hexdigest()[:16]
    base = f"{source}:{digest}"
    taken[base] = taken.get(base, 0) + 1
    return base if taken[base] == 1 else f"{base}-{taken[base]}"


def _from_jsonl(text: str, source: str) -> tuple[list[DocumentIn], list[Skip]]:
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
        doc_id = str(given) if given not in (None, "") else _row_id(source, record, taken)
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


def _from_csv(text: str, source: str) -> tuple[list[DocumentIn], list[Skip]]:
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
        doc_id = given or _row_id(source, row, taken)
        documents.append(DocumentIn(text=body, id=doc_id, meta=meta))
    return documents, warnings


def _html_text(markup: str) -> tuple[str | None, str]:
    try:
        from bs4 import BeautifulSoup
    except ImportError:
        raise _NotReadable(FORMATS_HINT) from None
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
        raise _NotReadable(FORMATS_HINT) from None
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
        raise _NotReadable(FORMATS_HINT) from None
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
