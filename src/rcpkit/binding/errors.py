"""The single engine-error → §12 mapping of the RCP binding.

Every handler the binding registers is wrapped by :func:`answering`, so an
:class:`~rcpkit.engine.errors.EngineError` leaves as the §12 error it stands for and the
dispatcher encodes it like any other; engine field names become wire paths on the way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from rcpkit.binding.convert import wire_field
from rcpkit.engine import errors as engine
from rcpkit.protocol import errors as wire

__all__ = ["answering", "wire_error"]

P = ParamSpec("P")
R = TypeVar("R")


def wire_error(exc: engine.EngineError) -> wire.RcpError:
    """The §12 error for an engine error."""
    if isinstance(exc, engine.InvalidInput):
        return wire.InvalidParams(exc.message, field=wire_field(exc.field))
    if isinstance(exc, engine.Unsupported):
        return wire.OptionUnsupported(exc.message, option=exc.option)
    if isinstance(exc, engine.TooLarge):
        return wire.PayloadTooLarge(exc.message)
    if isinstance(exc, engine.UnknownCursor):
        return wire.NotFound(exc.message)
    if isinstance(exc, engine.Cancelled):
        return wire.Cancelled(exc.message)
    if isinstance(exc, engine.Unavailable):
        return wire.BackendUnavailable(
            exc.message, data={"detail": exc.detail} if exc.detail else None)
    if isinstance(exc, engine.SnapshotUnavailable | engine.ConfigError):
        # §7.7.1 names -32010 for a snapshot that cannot be served (§12 also lists -32016;
        # the specific MUST wins).
        return wire.BackendUnavailable(exc.message)
    return wire.InternalError(exc.message)


def answering(handler: Callable[P, R]) -> Callable[P, R]:
    """``handler`` with engine errors raised as their §12 errors."""
    @functools.wraps(handler)
    def answer(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return handler(*args, **kwargs)
        except engine.EngineError as exc:
            raise wire_error(exc) from exc
    return answer
