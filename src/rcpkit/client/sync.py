"""``Client``: the blocking facade over :class:`AsyncClient`.

It owns a private event loop running in a daemon thread and delegates every
attribute to the async client generically: a method is called on that loop and a
coroutine it returns is awaited there; an async iterator (such as
``retrieve_stream``'s) becomes a blocking iterator, a :class:`Batch` a
:class:`BlockingBatch`; anything else is returned as is. No method body is
duplicated. Callbacks (``on_progress``, ``log_handler``) run on the loop thread.
Interrupting a blocking call (e.g. Ctrl-C) cancels the request, which sends
``notifications/cancel``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from ..protocol.errors import TransportClosed
from .client import AsyncClient, Batch, connect_http, connect_stdio

__all__ = ["BlockingBatch", "Client"]

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="rcpkit-client",
                                        daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self.loop.is_closed():
            coroutine.close()
            raise TransportClosed("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: abandon the request (§7.14)
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class _Proxy:
    """Blocking access to an object of the async client that lives on ``_loop``."""

    _target: Any
    _loop: _LoopThread

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute
        return _blocking(attribute, self._loop)


class Client(_Proxy):
    """Blocking RCP client: ``Client.connect_stdio([...])`` / ``Client.connect_http(url)``.

    Every :class:`AsyncClient` method and attribute is available with the same
    signature, blocking instead of awaitable.
    """

    def __init__(self, connect: Coroutine[Any, Any, AsyncClient]) -> None:
        self._loop = _LoopThread()
        try:
            self._target = self._loop.run(connect)
        except BaseException:
            self._loop.stop()
            raise

    @classmethod
    def connect_stdio(cls, argv: Any, *args: Any, **kwargs: Any) -> Client:
        """Blocking :func:`rcpkit.client.connect_stdio` (same arguments)."""
        return cls(connect_stdio(argv, *args, **kwargs))

    @classmethod
    def connect_http(cls, url: str, *args: Any, **kwargs: Any) -> Client:
        """Blocking :func:`rcpkit.client.connect_http` (same arguments)."""
        return cls(connect_http(url, *args, **kwargs))

    @property
    def aio(self) -> AsyncClient:
        """The wrapped async client (use it only from the facade's loop)."""
        client: AsyncClient = self._target
        return client

    def close(self) -> None:
        """Close the connection and stop the loop thread."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self.aio.close())
        except concurrent.futures.CancelledError:
            pass
        finally:
            self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class BlockingBatch(_Proxy):
    """:class:`Batch` for the blocking :class:`Client` (§11)::

        with client.batch() as batch:
            hits = batch.retrieve("paris")
            pong = batch.ping()
        print(hits.result().hits, pong.result())

    Each queued call returns a future; read it with ``future.result()`` once the
    batch was sent (leaving the ``with`` block, or ``batch.send()``).
    """

    def __init__(self, batch: Batch, loop: _LoopThread) -> None:
        self._target = batch
        self._loop = loop

    def __len__(self) -> int:
        return len(self._target)

    def __enter__(self) -> BlockingBatch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self._loop.run(self._target.__aexit__(exc_type, *exc_info))


def _blocking(method: Callable[..., Any], loop: _LoopThread) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        result = loop.run(_invoke(method, args, kwargs))
        if isinstance(result, Batch):
            return BlockingBatch(result, loop)
        if isinstance(result, AsyncIterator):
            return _BlockingIterator(result, loop)
        return result
    return call


async def _invoke(method: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
    """Call ``method`` on the loop (a batch makes its futures there); await a coroutine."""
    result = method(*args, **kwargs)
    return await result if inspect.iscoroutine(result) else result


class _BlockingIterator(Iterator[T]):
    """Iterate an async iterator from a blocking caller; other attributes delegate to it."""

    def __init__(self, iterator: AsyncIterator[T], loop: _LoopThread) -> None:
        self._iterator = iterator
        self._loop = loop

    def __next__(self) -> T:
        try:
            return self._loop.run(_next(self._iterator))
        except StopAsyncIteration:
            raise StopIteration from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._iterator, name)


async def _next(iterator: AsyncIterator[T]) -> T:
    return await iterator.__anext__()
