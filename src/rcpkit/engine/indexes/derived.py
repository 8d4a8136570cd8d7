"""The set of derived indexes (lexical, dense, filter columns, the chunks' stored fields) one
process serves from.

They are saved under ``<data_dir>/indexes`` with the write-log position they reflect (the
``CURRENT`` pointer flips last) and reconciled with the record on open: loaded and caught up
from the write log, or rebuilt when they cannot be trusted. Index saves take an exclusive
``flock`` on ``indexes/LOCK`` and loads a shared one, so one process saves at a time and
none deletes a state another is loading. Readers and writers share a readers/writer lock:
a catch-up or a swap happens whole between two reads.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.indexes.columns import FilterColumns
from rcpkit.engine.indexes.lexical import LexicalIndex
from rcpkit.engine.indexes.persist import DamagedFile, bytes_checksum, file_checksum, verify_file
from rcpkit.engine.indexes.records import ChunkFields
from rcpkit.engine.indexes.windows import SentenceWindowIndex, WindowVectors, embed_windows
from rcpkit.engine.lru import Recent
from rcpkit.engine.models.embedding import Embedder, available_cores
from rcpkit.engine.store import ChunkRecord, IndexDelta, IndexSource, RowBatch
from rcpkit.engine.text import Analyzer
from rcpkit.files import PRIVATE_DIR_MODE, atomic_write, locked, private_dir
from rcpkit.protocol.filters import FilterNode

__all__ = ["INDEX_DIR", "STATE_FILE", "BoolMask", "DerivedIndexes", "ReadWriteLock",
           "current_state", "index_lock", "state_problems"]

logger = logging.getLogger(__name__)

_Part = TypeVar("_Part")

BoolMask = npt.NDArray[np.bool_]
INDEX_DIR = "indexes"
STATE_FILE = "state.json"
"""In each saved state: its record, embedder and log position, a checksum of every other
file in the state, and a checksum of itself."""
MAX_BUILD_THREADS = 8
"""Default cap on background HNSW build threads, so that a large machine keeps cores for
the queries served meanwhile."""


class ReadWriteLock:
    """Many readers or one writer; writers do not starve (new readers wait for them)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0
        self._reading = _Reading(self)

    def reading(self) -> AbstractContextManager[None]:
        """Held by every search, twice: one object, entered and left without waiting or
        waking anyone unless a writer is involved."""
        return self._reading

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writing and self._readers == 0)
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class _Reading:
    """The shared side of a :class:`ReadWriteLock`, as a reusable context manager."""

    __slots__ = ("_lock",)

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        lock = self._lock
        with lock._mutex:
            if lock._writing or lock._writers_waiting:
                lock._cond.wait_for(lambda: not lock._writing and not lock._writers_waiting)
            lock._readers += 1

    def __exit__(self, *exc: object) -> None:
        lock = self._lock
        with lock._mutex:
            lock._readers -= 1
            if not lock._readers and lock._writers_waiting:  # only a writer waits for this
                lock._cond.notify_all()


class DerivedIndexes:
    """Lexical, dense and filter-column indexes and the chunks' stored fields (but text) at
    one write-log position of ``store``."""

    def __init__(self, config: EngineConfig, store: IndexSource, embedder: Embedder) -> None:
        self._config = config
        self._store = store
        self._embedder = embedder
        self._dimension = embedder.dimension
        self._embedder_identity = embedder.identity
        self.lock = ReadWriteLock()
        self.lexical = self._new_lexical_index()
        self.dense = self._new_dense_index()
        self.columns = FilterColumns()
        self.fields = ChunkFields()
        self.position = 0
        self.saved_position = 0
        """Log position of the newest index state known to be saved in ``data_dir``."""
        self._saved_state_partial = False
        """The saved state at this process's position lacked a part (rebuilt here from the
        record): the next save rewrites it even though no write moved the position."""
        self.writes_since_save = 0
        self._masks: Recent[int, BoolMask] = Recent(8)
        self._filtered: Recent[tuple[int, str, tuple[str, ...]], BoolMask] = Recent(64)
        """Visible-and-selected masks of recent (version, filter) pairs: a filter repeated at
        a version (an agent's fixed scope) is not evaluated over every row again."""

    def _new_lexical_index(self) -> LexicalIndex:
        return LexicalIndex(Analyzer(), title_repeat=self._config.lexical.title_repeat,
                            idf_exponent=self._config.lexical.idf_exponent)

    def _new_dense_index(self) -> SentenceWindowIndex:
        return SentenceWindowIndex.create(self._dimension,
                                          enabled=self._config.dense.sentence_windows,
                                          mix=self._config.dense.window_mix,
                                          exact_threshold=self._config.dense.exact_threshold,
                                          build_threads=self._build_threads(),
                                          graph_dtype=self._config.dense.graph_dtype,
                                          expansion_search=self._config.dense.expansion_search)

    def _build_threads(self) -> int:
        """Background HNSW build threads: as configured, or one per usable core (up to 8)."""
        return self._config.dense.build_threads or min(available_cores(), MAX_BUILD_THREADS)

    def _window_vectors(self, batch: RowBatch) -> WindowVectors | None:
        """The sentence-window vectors of ``batch`` when the dense index keeps them (runs the
        encoder: call without holding the index lock)."""
        if not self._config.dense.sentence_windows:
            return None
        return embed_windows(batch.rowids, batch.texts,
                             lambda texts: self._embedder.embed(texts, "document"),
                             self._dimension)

    def _index_dir(self) -> Path:
        return Path(self._config.data_dir) / INDEX_DIR

    def load(self) -> None:
        """Load persisted indexes and catch up from the write log; rebuild when they cannot
        be trusted (missing, corrupt, foreign, ahead of the record, or below its pruned
        log). Also how a process that fell below the pruned log starts over."""
        try:
            with self._locked(exclusive=False):
                saved = self._saved_state()
                if saved is not None:  # else none yet, or another record's / embedder's
                    if saved[1] > self._store.log_position():
                        raise ValueError("persisted indexes do not belong to this record")
                    if saved[1] < self._store.log_floor():
                        raise ValueError("the write log no longer reaches the saved indexes")
                    state_dir, position, state = saved
                    # Every file, manifests included: a manifest altered into other valid
                    # JSON (a BM25 parameter, a term) passes its part's own checks. A part
                    # rebuilt alone from the record (columns, fields) is left to it.
                    damage = _damage_by_part(state_problems(state_dir, state))
                    if set(damage) - set(_REBUILT_ALONE):
                        raise DamagedFile("; ".join(p for ps in damage.values() for p in ps))
                    lexical = LexicalIndex.load(state_dir / "lexical")
                    if lexical.title_repeat != self._config.lexical.title_repeat:
                        raise ValueError("the lexical index was saved with another title weight")
                    lexical.idf_exponent = self._config.lexical.idf_exponent  # query time
                    dense = SentenceWindowIndex.load(
                        state_dir / "dense", enabled=self._config.dense.sentence_windows,
                        mix=self._config.dense.window_mix,
                        build_threads=self._build_threads(),
                        vectors=self._store.stored_vectors,
                        graph_dtype=self._config.dense.graph_dtype,
                        expansion_search=self._config.dense.expansion_search)
                    columns = _saved_part(FilterColumns.load, state_dir / "columns",
                                          "filter columns", damage.get("columns"))
                    fields = _saved_part(ChunkFields.load, state_dir / "fields", "chunk fields",
                                         damage.get("fields"))
        except Exception as exc:  # any unreadable state means: rebuild from the record
            logger.warning("saved indexes are unusable (%s: %s); rebuilding them from the "
                           "store", type(exc).__name__, exc)
            saved = None
        if saved is None:
            self._rebuild()
            return
        self.saved_position = position
        if columns is None or fields is None:
            columns, fields = self._from_store(columns, fields)
            self._saved_state_partial = True
        if dense.whole.saved_graph_unused:  # rebuilt in the background for the configured dtype
            self._saved_state_partial = True
        # Caught up before the swap: a running process must not serve the older state.
        delta = self._store.delta_since(position)
        if delta is None:  # pruned past the state while it was loading
            self._rebuild()
            return
        self._delta_applier(delta)(lexical, dense, columns, fields)
        self._install(lexical, dense, columns, fields, delta.position)

    def _locked(self, *, exclusive: bool) -> AbstractContextManager[None]:
        return index_lock(Path(self._config.data_dir), exclusive=exclusive)

    def _saved_state(self) -> tuple[Path, int, dict[str, Any]] | None:
        """The persisted state directory, its log position and its ``state.json``, if it is
        one of this record's and embedder's (call with the index lock held)."""
        try:
            state_dir, state = current_state(Path(self._config.data_dir))
        except (OSError, ValueError):
            return None
        if (state.get("database_id") != self._store.database_id
                or state.get("embedder") != self._embedder_identity):
            return None
        return state_dir, int(state["position"]), state

    def _from_store(self, columns: FilterColumns | None, fields: ChunkFields | None
                    ) -> tuple[FilterColumns, ChunkFields]:
        """The filter columns and chunk fields a saved state lacked (None), over every stored
        row: they already hold what a catch-up adds (a re-added row is a no-op), and removing
        a row they never held is one too."""
        missing_columns, missing_fields = columns is None, fields is None
        columns = FilterColumns() if columns is None else columns
        fields = ChunkFields() if fields is None else fields
        for batch in self._store.iter_rows():
            records = self._records(batch.rowids)
            if missing_columns:
                _add_columns(columns, records)
            if missing_fields:
                fields.add(records)
        return columns, fields

    def _rebuild(self) -> None:
        lexical = self._new_lexical_index()
        dense = self._new_dense_index()
        columns = FilterColumns()
        fields = ChunkFields()
        position = self._store.log_position()
        self._saved_state_partial = True
        for batch in self._store.iter_rows():
            rowids = np.asarray(batch.rowids, dtype=np.int64)
            lexical.add(rowids, batch.texts)
            dense.add(rowids, batch.vectors, self._window_vectors(batch))
            records = self._records(batch.rowids)
            _add_columns(columns, records)
            fields.add(records)
        self._install(lexical, dense, columns, fields, position)

    def _install(self, lexical: LexicalIndex, dense: SentenceWindowIndex, columns: FilterColumns,
                 fields: ChunkFields, position: int) -> None:
        """Swap in a whole set of derived indexes at ``position``: a read sees the old set or
        the new one, never a mix; the replaced dense index stops its background build."""
        with self.lock.writing():
            replaced = self.dense
            self.lexical, self.dense, self.columns, self.fields = (lexical, dense, columns,
                                                                  fields)
            self.position = position
        replaced.close()
        self._masks.clear()
        self._filtered.clear()

    def catch_up(self) -> None:
        """Apply the write log after this process's position to the live indexes; below the
        pruned log, start over from the saved state (or the rows)."""
        delta = self._store.delta_since(self.position)
        if delta is None:
            self.load()
            return
        apply = self._delta_applier(delta)
        with self.lock.writing():
            apply(self.lexical, self.dense, self.columns, self.fields)
            self.position = delta.position
        self._masks.clear()
        self._filtered.clear()

    def _delta_applier(self, delta: IndexDelta) -> Callable[
            [LexicalIndex, SentenceWindowIndex, FilterColumns, ChunkFields], None]:
        """Read the rows ``delta`` adds now (no lock held) and return what applies the whole
        delta to a set of indexes (quickly, under the caller's lock if they are live)."""
        batches = list(self._store.iter_rows(delta.added)) if delta.added else []
        batch_records = [self._records(batch.rowids) for batch in batches]
        windows = [self._window_vectors(batch) for batch in batches]
        removed = np.asarray(delta.removed, dtype=np.int64)

        def apply(lexical: LexicalIndex, dense: SentenceWindowIndex, columns: FilterColumns,
                  fields: ChunkFields) -> None:
            if len(removed):
                lexical.remove(removed)
                dense.remove(removed)
                columns.remove(removed)
                fields.remove(removed)
            for batch, records, extra in zip(batches, batch_records, windows, strict=True):
                rowids = np.asarray(batch.rowids, dtype=np.int64)
                lexical.add(rowids, batch.texts)
                dense.add(rowids, batch.vectors, extra)
                _add_columns(columns, records)
                fields.add(records)

        return apply

    def _records(self, rowids: Sequence[int]) -> list[ChunkRecord]:
        """The stored records of ``rowids``, in order, for the filter columns and the chunk
        fields (rows collected in the meantime are left out)."""
        records = self._store.chunks(rowids)
        return [records[rowid] for rowid in rowids if rowid in records]

    def save(self) -> None:
        """Persist the derived indexes with the log position they reflect; ``CURRENT`` flips
        last. Skipped when another process already saved a state at least as recent, unless
        the one at this position was partial."""
        with self._locked(exclusive=True):
            saved = self._saved_state()
            if (saved is None or saved[1] < self.position
                    or (self._saved_state_partial and saved[1] == self.position)):
                root = self._index_dir()
                try:
                    self._write_state(root)
                except BaseException:
                    # A half-written state (a full disk) must not keep the space it took.
                    _keep_only(root, saved[0].name if saved is not None else None)
                    raise
                self.saved_position = self.position
            else:
                self.saved_position = saved[1]
        self.writes_since_save = 0
        self._saved_state_partial = False

    def _write_state(self, root: Path) -> None:
        name = f"state-{self.position}-{uuid.uuid4().hex[:8]}"
        target = root / name
        target.mkdir(mode=PRIVATE_DIR_MODE)
        self.lexical.save(target / "lexical")
        self.dense.save(target / "dense", vectors=self._config.dense.save_vectors)
        self.columns.save(target / "columns")
        self.fields.save(target / "fields")
        files = {path.relative_to(target).as_posix(): file_checksum(path)
                 for path in sorted(target.rglob("*")) if path.is_file()}
        state = {"database_id": self._store.database_id, "embedder": self._embedder_identity,
                 "position": self.position, "files": files}
        # Written last in ``target``: its directory fsync also makes the parts' entries durable.
        atomic_write(target / STATE_FILE,
                     json.dumps({**state, "checksum": _state_checksum(state)}))
        atomic_write(root / "CURRENT", name)
        _keep_only(root, name)

    def visible_mask(self, seq: int) -> BoolMask:
        """The indexed rowids visible at version ``seq`` as a mask (cached for recent
        versions): the rows held here minus the few the store says ``seq`` hides, so that
        a first query after opening a large store does not read every rowid from it (the
        rows not held here cannot be found anyway)."""
        cached = self._masks.get(seq)
        if cached is not None:
            return cached
        mask = self.lexical.held_mask()
        hidden = self._store.hidden_rowids(seq)
        mask[hidden[hidden < len(mask)]] = False
        self._masks.put(seq, mask)
        return mask

    def filtered_mask(self, seq: int, tree: FilterNode, schema: Mapping[str, str]) -> BoolMask:
        """Rowids visible at ``seq`` that the §8 filter ``tree`` selects (cached like
        :meth:`visible_mask`; the columns change only where both caches are cleared). The
        key is the tree's ``repr``: equal trees of different value types (``1``, ``1.0``,
        ``True``) compare equal but may not select the same rows."""
        key = (seq, repr(tree), tuple(schema))
        cached = self._filtered.get(key)
        if cached is None:
            mask = self.visible_mask(seq)
            cached = mask & self.columns.mask(tree, len(mask), schema)
            cached.flags.writeable = False  # shared by every request with this filter
            self._filtered.put(key, cached)
        return cached

    def close(self) -> None:
        """Stop background work (the dense graph build)."""
        self.dense.close()


@contextmanager
def index_lock(data_dir: Path, *, exclusive: bool) -> Iterator[None]:
    """``flock`` on ``indexes/LOCK`` across processes: saves exclusive, loads (and backups)
    shared, so no save replaces or deletes a state while another process reads it."""
    with locked(private_dir(data_dir / INDEX_DIR) / "LOCK", exclusive=exclusive):
        yield


def _state_checksum(state: Mapping[str, object]) -> str:
    return bytes_checksum(json.dumps(state, sort_keys=True).encode())


def current_state(data_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The directory of the saved state ``CURRENT`` names and its ``state.json`` (call with
    the index lock held); ``OSError``/``ValueError`` when there is none or it is unreadable,
    :class:`DamagedFile` when ``state.json`` does not match its own checksum."""
    root = data_dir / INDEX_DIR
    name = (root / "CURRENT").read_text().strip()
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"CURRENT names no saved state ({name!r})")
    state_dir = root / name
    state = json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8"))
    if not isinstance(state, dict):
        raise ValueError(f"{STATE_FILE} is not an object")
    recorded = state.pop("checksum", None)
    if recorded is not None and recorded != _state_checksum(state):
        raise DamagedFile(f"{STATE_FILE}: checksum mismatch (damaged on disk)")
    return state_dir, state


def state_problems(state_dir: Path, state: Mapping[str, Any]) -> list[str]:
    """Files of a saved state missing, damaged or not listed in its ``state.json`` (a state
    saved before the listing is checked through its parts' own manifests only)."""
    files = state.get("files")
    if not isinstance(files, dict):
        return []
    problems = []
    for name, checksum in files.items():
        try:
            verify_file(state_dir / name, checksum)
        except FileNotFoundError:
            problems.append(f"{name}: missing")
        except DamagedFile as exc:
            problems.append(str(exc).replace(Path(name).name, name, 1))
    problems.extend(f"{path.relative_to(state_dir).as_posix()}: not in {STATE_FILE}"
                    for path in sorted(state_dir.rglob("*"))
                    if path.is_file() and path.name != STATE_FILE
                    and path.relative_to(state_dir).as_posix() not in files)
    return problems


def _add_columns(columns: FilterColumns, records: Sequence[ChunkRecord]) -> None:
    columns.add([record.rowid for record in records],
                [record.filter_meta for record in records])


_REBUILT_ALONE = ("columns", "fields")
"""Parts of a saved state rebuilt by themselves from the record when unusable."""


def _damage_by_part(problems: Sequence[str]) -> dict[str, list[str]]:
    """:func:`state_problems` grouped by the part (the state's subdirectory) they are in."""
    grouped: dict[str, list[str]] = {}
    for problem in problems:
        grouped.setdefault(problem.split("/", 1)[0].split(":", 1)[0], []).append(problem)
    return grouped


def _saved_part(load: Callable[[Path], _Part], directory: Path, what: str,
                damage: Sequence[str] | None) -> _Part | None:
    """A part of a saved state that can be rebuilt from the record (the filter columns, the
    chunk fields), or ``None`` (logged) when it cannot be read or ``damage`` was found in
    its files — a state saved before the part was kept, or a damaged file: the caller
    rebuilds it."""
    try:
        if damage:
            raise DamagedFile("; ".join(damage))
        return load(directory)
    except Exception as exc:  # whatever is unreadable is rebuilt from the record
        logger.warning("saved %s in %s are unusable (%s: %s); rebuilding them from the store",
                       what, directory, type(exc).__name__, exc)
        return None


def _keep_only(root: Path, state: str | None) -> None:
    """Remove every state directory under ``root`` but ``state``."""
    for stale in root.iterdir():
        if stale.is_dir() and stale.name != state:
            shutil.rmtree(stale, ignore_errors=True)
