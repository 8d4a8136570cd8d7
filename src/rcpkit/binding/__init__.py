"""rcpkit.binding: the built-in engine served over RCP.

Between :mod:`rcpkit.engine` (protocol-free) and the wire: capabilities from the engine's
own description (``capabilities``), the single engine-error → §12 mapping (``errors``), the
conversions engine values ⇄ protocol structs (``convert``), and one handler module per §7
surface (``retrieve``, ``index``, ``embed``, ``rerank``, ``feedback``, ``graph``,
``transform``, ``memory``, and ``units`` for the hierarchical ``retrieve`` units).
``server`` composes them: :func:`bind` and :func:`build_server`, and :func:`grant_trust` lets
the operator's grants through to ``index/add``.
"""

from __future__ import annotations

from rcpkit.binding.server import SERVER_NAME, bind, build_server, grant_trust

__all__ = ["SERVER_NAME", "bind", "build_server", "grant_trust"]
