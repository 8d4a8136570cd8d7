"""rcpkit.engine: the retrieval engine, protocol-free (:mod:`rcpkit.binding` serves it).

``Engine``, ``EngineConfig``, ``open_engine`` and ``load_config`` are imported on first use
(PEP 562), so importing a submodule does not load the whole engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcpkit.engine.config import EngineConfig, load_config
    from rcpkit.engine.core import Engine, open_engine

__all__ = ["Engine", "EngineConfig", "load_config", "open_engine"]

_HOMES = {"Engine": "rcpkit.engine.core", "open_engine": "rcpkit.engine.core",
          "EngineConfig": "rcpkit.engine.config", "load_config": "rcpkit.engine.config"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
