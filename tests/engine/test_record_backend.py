"""``index add --backend postgres --data DIR`` leaves ``DIR/rcpkit.toml`` naming the backend
(issue 33): the file written, merged with what was there, private, and read back by
:func:`load_config` as every later ``--data DIR`` command reads it. No PostgreSQL needed:
the real round trip is tests/engine/postgres/test_pg_folders_cli.py."""

from __future__ import annotations

from pathlib import Path

from rcpkit.engine.config import load_config, record_backend

DSN = 'postgresql://rcp:s3cr"et@127.0.0.1:5432/kb'


def test_a_new_directory_gets_backend_and_dsn_privately(tmp_path: Path) -> None:
    data = tmp_path / "kb-pg"
    assert record_backend(data, "postgres", DSN)
    config = load_config(data)
    assert (config.store.backend, config.store.dsn) == ("postgres", DSN)
    assert (data / "rcpkit.toml").stat().st_mode & 0o777 == 0o600
    assert not record_backend(data, "postgres", "postgresql://elsewhere/db")  # already named
    assert load_config(data).store.dsn == DSN


def test_existing_settings_are_kept_top_level_or_in_an_engine_table(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "rcpkit.toml").write_text('embedder = "hashing"\n\n[poison]\nthreshold = 3\n')
    assert record_backend(flat, "postgres", None)  # a DSN from $RCPKIT_DSN stays out
    config = load_config(flat)
    assert (config.store.backend, config.embedder.name, config.poison.threshold) == \
        ("postgres", "hashing", 3)
    assert "dsn" not in (flat / "rcpkit.toml").read_text()

    table = tmp_path / "table"
    table.mkdir()
    (table / "rcpkit.toml").write_text('# mine\n[engine]\nembedder = "hashing"\n')
    assert record_backend(table, "postgres", DSN)
    config = load_config(table)
    assert (config.store.backend, config.store.dsn, config.embedder.name) == \
        ("postgres", DSN, "hashing")
    assert (table / "rcpkit.toml").read_text().startswith("# mine\n[engine]\n")
