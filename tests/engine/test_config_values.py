"""Engine settings the engine could not start with are refused where their section is built,
naming the ``rcpkit.toml`` key (as the file wrote it: an old flat name, or ``[table] key``),
instead of failing later in the background (a traceback). Files written before the sections
still load."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from rcpkit.engine import Engine
from rcpkit.engine.config import (
    CONFIG_FILE,
    LEGACY_KEYS,
    SECTIONS,
    DenseConfig,
    EmbedderConfig,
    EngineConfig,
    LexicalConfig,
    StoreConfig,
    load_config,
    record_backend,
)
from rcpkit.engine.errors import ConfigError
from rcpkit.engine.indexes.lexical import IDF_EXPONENT
from rcpkit.engine.store.postgres import PostgresStore
from rcpkit.engine.types import DocumentIn, SearchRequest


@pytest.mark.parametrize(("key", "value", "message"), [
    ("dense_expansion_search", 0, "dense_expansion_search must be at least 1, not 0"),
    ("dense_graph_dtype", "f32", "dense_graph_dtype must be one of f16, bf16, i8, not 'f32'"),
])
def test_a_bad_dense_setting_is_refused_by_name(tmp_path: Path, key: str, value: object,
                                                message: str) -> None:
    _, name = LEGACY_KEYS[key]
    with pytest.raises(ValueError, match=rf"\[dense\] {message.removeprefix('dense_')}"):
        DenseConfig(**{name: value})  # type: ignore[arg-type]
    rendered = f'"{value}"' if isinstance(value, str) else str(value)
    (tmp_path / CONFIG_FILE).write_text(f"[engine]\n{key} = {rendered}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(f"[dense]\n{name} = {rendered}\n")
    with pytest.raises(ConfigError, match=rf"\[dense\] {message.removeprefix('dense_')}"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match=rf"\[dense\] {message.removeprefix('dense_')}"):
        load_config(EngineConfig(), dense={name: value})


def test_good_dense_settings_are_kept(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_text(
        '[engine]\ndense_expansion_search = 300\ndense_graph_dtype = "bf16"\n')
    config = load_config(tmp_path)
    assert (config.dense.expansion_search, config.dense.graph_dtype) == (300, "bf16")


@pytest.mark.parametrize(("toml", "message"), [
    ('[requests]\nmax_k = "many"\n', r"\[requests\] max_k must be an integer, not 'many'"),
    ("[index]\nread_only = 1\n", r"\[index\] read_only must be true or false, not 1"),
    ('[store]\nbackend = "mysql"\n', r"\[store\] backend must be sqlite or postgres, not 'mysql'"),
    ('[embedder]\nname = "bert"\n', r"\[embedder\] name must be minilm, hashing or onnx"),
    ('[embedder]\nname = "onnx"\n', r"embedder 'onnx' needs onnx_model_path"),
    ("[chunking]\nmax_chars = 0\n", r"\[chunking\] max_chars must be at least 1, not 0"),
    ("[lexical]\nidf_exponent = 0\n", r"\[lexical\] idf_exponent must be positive, not 0"),
    ('[index]\ntrust = "root"\n', r"\[index\] trust must be one of trusted, community"),
    ('[poison.source_thresholds]\n"source:x" = "two"\n',
     r"\[poison\] source_thresholds must be a table of an integer values"),
    ('[dense]\ngraph_type = "f16"\n', r"\[dense\] has no setting graph_type \(known: "),
    ("hashing_dim = 8\n", "unknown engine config keys: hashing_dim"),
    ('max_k = 5\n[requests]\nmax_k = 6\n', r"max_k is set twice \(also as \[requests\] max_k\)"),
    ('trust = "root"\n', "trust must be one of trusted, community, untrusted, not 'root'"),
])
def test_each_section_refuses_what_it_cannot_run_with_naming_the_key(
        tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / CONFIG_FILE).write_text(toml)
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path)


def test_a_new_file_sets_every_section_and_paths_become_paths(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_text(
        '[embedder]\nname = "hashing"\nhashing_dimension = 16\ncache = "vectors.sqlite3"\n'
        '[retrieve]\nfusion_alpha = 1\n[retention]\nversions = 3\n'
        '[poison.source_thresholds]\n"written_by:ops" = 0\n[field_types]\nyear = "int"\n')
    config = load_config(tmp_path)
    assert (config.embedder.name, config.embedder.hashing_dimension) == ("hashing", 16)
    assert config.embedder.cache == Path("vectors.sqlite3")
    assert config.retrieve.fusion_alpha == 1.0 and isinstance(config.retrieve.fusion_alpha, float)
    assert (config.retention.versions, config.poison.source_thresholds) == (3, {
        "written_by:ops": 0})
    assert (config.field_types, config.data_dir) == ({"year": "int"}, tmp_path)


def test_every_old_flat_key_is_read_as_its_section_key(tmp_path: Path) -> None:
    """Each old name lands on the setting it became (the value checked there)."""
    defaults = EngineConfig()
    for old, (table, key) in LEGACY_KEYS.items():
        assert key in {item.name for item in dataclasses.fields(SECTIONS[table])}, old
        default = getattr(getattr(defaults, table), key)
        assert EngineConfig.from_mapping({old: default}) == defaults, old


def test_overrides_merge_over_the_file_and_the_environment_gives_the_dsn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / CONFIG_FILE).write_text('backend = "postgres"\nmax_k = 7\n')
    monkeypatch.delenv("RCPKIT_DSN", raising=False)
    assert load_config(tmp_path).store == StoreConfig("postgres", None)  # left to the open
    config = load_config(tmp_path, store={"dsn": "postgresql://db/kb"}, requests={"max_k": None})
    assert (config.store, config.requests.max_k) == (
        StoreConfig("postgres", "postgresql://db/kb"), 7)
    monkeypatch.setenv("RCPKIT_DSN", "postgresql://env/kb")
    assert load_config(tmp_path).store.dsn == "postgresql://env/kb"
    with pytest.raises(ConfigError, match="unknown engine option"):
        load_config(tmp_path, backend="sqlite")


def test_record_backend_writes_a_store_table_an_old_file_still_reads(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_text('embedder = "hashing"\n[store]\npg_recall = "memory"\n')
    assert record_backend(tmp_path, "postgres", "postgresql://db/kb")
    text = (tmp_path / CONFIG_FILE).read_text()
    assert text.startswith('embedder = "hashing"\n[store]\nbackend = "postgres"\n')
    assert load_config(tmp_path).store == StoreConfig("postgres", "postgresql://db/kb", "memory")
    assert not record_backend(tmp_path, "sqlite", None)


def test_a_collection_on_postgres_records_its_store_beside_a_sectioned_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``collection create --dsn`` adds the record's ``[store]`` to the given config, whose
    last table would otherwise swallow bare ``backend``/``dsn`` lines; ``drop`` finds it."""
    from rcpkit.tenancy import collections

    schemas: list[str] = []
    monkeypatch.setattr(collections, "_create_schema", lambda dsn, schema: f"{dsn}?s={schema}")
    monkeypatch.setattr(collections, "_drop_schema", lambda dsn, schema: schemas.append(dsn))
    registry = collections.CollectionRegistry(tmp_path)
    directory = registry.create("kb", '[embedder]\nname = "hashing"\n', dsn="postgresql://db")
    config = load_config(directory)
    assert (config.embedder.name, config.store) == (
        "hashing", StoreConfig("postgres", "postgresql://db?s=rcpkit_kb"))
    with pytest.raises(collections.CollectionError, match="must not set backend or dsn"):
        registry.create("other", '[store]\nbackend = "sqlite"\n', dsn="postgresql://db")
    registry.drop("kb")
    assert schemas == ["postgresql://db?s=rcpkit_kb"]


def test_the_idf_exponent_is_read_at_query_time_by_both_backends(tmp_path: Path) -> None:
    """``[lexical] idf_exponent`` changes the BM25 of an existing data directory on its next
    open (a query-time weight: the saved index is reused); its default is the index's and
    the PostgreSQL store's."""
    assert LexicalConfig().idf_exponent == IDF_EXPONENT
    for constructor in (PostgresStore.__init__, PostgresStore.open):
        assert inspect.signature(constructor).parameters["idf_exponent"].default == IDF_EXPONENT
    texts = ["rare zebra", "common", "common zebra", *["zebra"] * 7]
    documents = [DocumentIn(text, id=f"d{i}") for i, text in enumerate(texts)]
    query = SearchRequest("rare common", k=2, mode="sparse")
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"))
    with Engine.open(config) as engine:
        engine.add(documents)
        assert [hit.doc_id for hit in engine.search(query).hits] == ["d0", "d1"]
    lucene = dataclasses.replace(config, lexical=LexicalConfig(idf_exponent=1.0))
    with Engine.open(lucene) as engine:
        assert engine.indexes is not None and engine.indexes.lexical.count == len(texts)
        assert [hit.doc_id for hit in engine.search(query).hits] == ["d1", "d0"]
