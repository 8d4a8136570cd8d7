"""The RCP server framework: declare capabilities, register handlers, serve (§6, §7)."""

from .context import Context, ServerSession
from .dispatcher import Dispatcher
from .framework import Handler, Server

__all__ = ["Context", "Dispatcher", "Handler", "Server", "ServerSession"]
