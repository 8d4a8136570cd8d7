"""``feedback`` (§7.16): untrusted advice recorded durably (§15.2)."""

from __future__ import annotations

from typing import Any

from rcpkit.binding.convert import feedback_signals, reply
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.protocol.types import FeedbackParams, FeedbackResult
from rcpkit.server import Context, Server

__all__ = ["register"]


def register(server: Server, engine: Engine) -> None:
    def feedback(params: FeedbackParams, ctx: Context) -> dict[str, Any]:
        accepted = engine.feedback(feedback_signals(params.signals),
                                   session_id=params.session_id, query=params.query)
        return reply(FeedbackResult(accepted=accepted))

    server.add_method("feedback", answering(feedback))
