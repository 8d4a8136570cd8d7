"""``rcpkit inspect``: a local web app that shows and drives any RCP server (docs/inspector.md)."""

from .app import create_app
from .session import Inspector, TargetSpec

__all__ = ["Inspector", "TargetSpec", "create_app"]
