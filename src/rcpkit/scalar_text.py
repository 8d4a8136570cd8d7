"""Whether text is a sequence of Unicode scalar values (§4.6: strings are UTF-8).

A Python ``str`` may hold a lone surrogate, which no UTF-8 store or encoder can take;
both the wire decoder and the engine's document checks refuse such text.
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_scalar_text", "non_scalar_path"]


def is_scalar_text(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def non_scalar_path(value: Any, path: str = "") -> str | None:
    """The path (``documents[0].meta.source``) of the first string or object key in
    ``value`` that is not a sequence of Unicode scalar values — it holds a lone
    surrogate, which no UTF-8 store or encoder can take (§4.6: strings are UTF-8)."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if not is_scalar_text(item):
                return where
        elif isinstance(item, dict):
            for key, member in item.items():
                if not is_scalar_text(key):
                    return where
                stack.append((f"{where}.{key}" if where else key, member))
        elif isinstance(item, list):
            stack.extend((f"{where}[{index}]", member) for index, member in enumerate(item))
    return None
