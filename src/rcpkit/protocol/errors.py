"""RCP/1 error codes (§12) and the exception tree.

::

    RcpkitError                   base of the two families; ``.code`` where one applies
    UsageError(RcpkitError)       local misuse, refused before any I/O
    RcpError(RcpkitError)         an error that has a wire form (code, message, data)
    ├── ParseError          -32700
    ├── InvalidRequest      -32600
    ├── MethodNotFound      -32601  (reserved; RCP prefers UnknownMethod)
    ├── InvalidParams       -32602  data.field names the offending path (§12.1)
    ├── InternalError       -32603  message never carries internals
    ├── NotInitialized      -32001
    ├── VersionMismatch     -32002
    ├── CapabilityMissing   -32003
    ├── UnknownMethod       -32004
    ├── OptionUnsupported   -32005  data.option names the unadvertised value
    ├── Cancelled           -32006
    ├── BackendUnavailable  -32010
    ├── RateLimited         -32011  data.retryAfterMs
    ├── Unauthorized        -32012
    ├── PayloadTooLarge     -32013
    ├── Timeout             -32014
    ├── NotFound            -32015
    └── Conflict            -32016

Raising any of these inside a handler produces exactly that error on the wire;
the dispatcher turns every other exception into ``InternalError`` with a
generic message (details go to the server log, never to the client).

Local misuse (calling a method the peer did not advertise, bad arguments to a
client method) is a different family: :class:`UsageError`, raised before any
I/O and never sent anywhere; it carries the code the server would have answered
(``-32003``, ``-32005``, ``-32602``) when the refusal has one. Both families share
:class:`RcpkitError`, so one ``except`` handles a refusal from either side. A peer's
reply that breaks the protocol is :class:`ProtocolViolation`.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "CODE_NAMES",
    "BackendUnavailable",
    "Cancelled",
    "CapabilityMissing",
    "Conflict",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "NotFound",
    "NotInitialized",
    "OptionUnsupported",
    "ParseError",
    "PayloadTooLarge",
    "ProtocolViolation",
    "RateLimited",
    "RcpError",
    "RcpkitError",
    "Timeout",
    "TransportClosed",
    "Unauthorized",
    "UnknownMethod",
    "UsageError",
    "VersionMismatch",
    "error_from_wire",
]


class RcpkitError(Exception):
    """Base of every error rcpkit raises to its user; ``code`` is the §12 code, or ``None``
    for a local failure that has none."""

    code: int | None = None
    data: dict[str, Any] | None = None


class RcpError(RcpkitError):
    """An error with a JSON-RPC wire form (§12): ``{code, message, data?}``."""

    code: int = -32603
    default_message: ClassVar[str] = "internal error"

    def __init__(self, message: str | None = None, *, data: dict[str, Any] | None = None,
                 **data_fields: Any) -> None:
        self.message = message or self.default_message
        merged: dict[str, Any] = dict(data or {})
        merged.update({k: v for k, v in data_fields.items() if v is not None})
        self.data: dict[str, Any] | None = merged or None
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"[{self.code} {CODE_NAMES.get(self.code, 'Error')}] {self.message}"

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err

    @property
    def retry_after_ms(self) -> int | None:
        value = (self.data or {}).get("retryAfterMs")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def _kind(name: str, code: int, message: str) -> type[RcpError]:
    cls = type(name, (RcpError,), {"code": code, "default_message": message,
                                   "__doc__": f"``{code}`` {name} (§12)."})
    cls.__module__ = __name__
    return cls


class InvalidParams(RcpError):
    """``-32602``: malformed params. ``field`` is the dotted params path (§12.1)."""

    code = -32602
    default_message = "invalid params"

    def __init__(self, message: str | None = None, *, field: str | None = None,
                 data: dict[str, Any] | None = None, **extra: Any) -> None:
        super().__init__(message, data=data, field=field, **extra)


class OptionUnsupported(RcpError):
    """``-32005``: an option value that the server did not advertise (§12, §7.7)."""

    code = -32005
    default_message = "option not supported"

    def __init__(self, message: str | None = None, *, option: str | None = None,
                 data: dict[str, Any] | None = None, **extra: Any) -> None:
        super().__init__(message, data=data, option=option, **extra)


ParseError = _kind("ParseError", -32700, "parse error")
InvalidRequest = _kind("InvalidRequest", -32600, "invalid request")
MethodNotFound = _kind("MethodNotFound", -32601, "method not found")
InternalError = _kind("InternalError", -32603, "internal error")
NotInitialized = _kind("NotInitialized", -32001, "not initialized: send initialize first")
VersionMismatch = _kind("VersionMismatch", -32002, "no common protocol version")
CapabilityMissing = _kind("CapabilityMissing", -32003, "capability not advertised")
UnknownMethod = _kind("UnknownMethod", -32004, "unknown method")
Cancelled = _kind("Cancelled", -32006, "cancelled")
BackendUnavailable = _kind("BackendUnavailable", -32010, "backend unavailable")
RateLimited = _kind("RateLimited", -32011, "rate limited")
Unauthorized = _kind("Unauthorized", -32012, "unauthorized")
PayloadTooLarge = _kind("PayloadTooLarge", -32013, "payload too large")
Timeout = _kind("Timeout", -32014, "deadline exceeded")
NotFound = _kind("NotFound", -32015, "not found")
Conflict = _kind("Conflict", -32016, "conflict")

_BY_CODE: dict[int, type[RcpError]] = {
    cls.code: cls
    for cls in (ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError,
                NotInitialized, VersionMismatch, CapabilityMissing, UnknownMethod,
                OptionUnsupported, Cancelled, BackendUnavailable, RateLimited,
                Unauthorized, PayloadTooLarge, Timeout, NotFound, Conflict)
}

CODE_NAMES: dict[int, str] = {code: cls.__name__ for code, cls in _BY_CODE.items()}


def error_from_wire(error: Any) -> RcpError:
    """Build the matching exception from a received ``error`` member.

    An unrecognised code stays a plain :class:`RcpError` carrying that code
    (§12: unknown codes are generic failures, never a reason to reject a frame).
    """
    if not isinstance(error, dict):
        return ProtocolViolation("error member is not an object")
    code = error.get("code")
    message = error.get("message")
    data = error.get("data")
    if not isinstance(message, str):
        message = ""
    data_dict = data if isinstance(data, dict) else ({"value": data} if data is not None else None)
    if isinstance(code, int) and not isinstance(code, bool) and code in _BY_CODE:
        exc = _BY_CODE[code].__new__(_BY_CODE[code])
    else:
        exc = RcpError.__new__(RcpError)
    RcpError.__init__(exc, message or None, data=data_dict)
    if isinstance(code, int) and code not in _BY_CODE:
        exc.code = code
    return exc


class UsageError(RcpkitError):
    """Local misuse detected before any I/O (e.g. calling an unadvertised method); ``code``
    and ``data`` are those of the error the refusal stands for, when it stands for one."""

    def __init__(self, message: str, *, code: int | None = None,
                 data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class ProtocolViolation(RcpError):
    """The peer sent something the protocol does not allow (client side)."""

    code = -32603
    default_message = "protocol violation by peer"


class TransportClosed(RcpError):
    """The transport died with the request in flight (§13.1); outcome unknown."""

    code = -32010
    default_message = "transport closed; the request may or may not have taken effect"
