"""Engine settings the dense index could not start with are refused when the configuration
is read, naming the key, instead of failing later in the background (a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rcpkit.engine.config import CONFIG_FILE, EngineConfig, load_config
from rcpkit.engine.errors import ConfigError


@pytest.mark.parametrize(("key", "value", "message"), [
    ("dense_expansion_search", 0, "dense_expansion_search must be at least 1, not 0"),
    ("dense_graph_dtype", "f32", "dense_graph_dtype must be one of f16, bf16, i8, not 'f32'"),
])
def test_a_bad_dense_setting_is_refused_by_name(tmp_path: Path, key: str, value: object,
                                                message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(**{key: value})  # type: ignore[arg-type]
    rendered = f'"{value}"' if isinstance(value, str) else str(value)
    (tmp_path / CONFIG_FILE).write_text(f"[engine]\n{key} = {rendered}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match=message):
        load_config(EngineConfig(), **{key: value})


def test_good_dense_settings_are_kept(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_text(
        '[engine]\ndense_expansion_search = 300\ndense_graph_dtype = "bf16"\n')
    config = load_config(tmp_path)
    assert (config.dense.expansion_search, config.dense.graph_dtype) == (300, "bf16")
