"""``Client``: the blocking facade over :class:`AsyncClient`.

It owns a private event loop running in a daemon thread. Each method is the
async client's own, made blocking by :func:`_blocking` (same parameters and
docstring; the awaited result is returned): nothing is written twice, and the
types are the async ones, so ``client.retrieve`` is typed and a misspelt
method or option fails a type checker. ``retrieve_stream``'s async iterator
becomes a blocking iterator, a :class:`Batch` a :class:`BlockingBatch`.
Callbacks (``on_progress``, ``log_handler``) run on the loop thread.
Interrupting a blocking call (e.g. Ctrl-C) cancels the request, which sends
``notifications/cancel`` (§7.14).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack

from ..protocol.capabilities import Capabilities
from ..protocol.errors import TransportClosed
from ..protocol.types import InitializeResult, PeerInfo, Query, RetrieveResult
from .client import (
    AsyncClient,
    Batch,
    ProgressEvent,
    RetrieveOptions,
    Stream,
    connect_http,
    connect_stdio,
)
from .memory import connect_memory

__all__ = ["BlockingBatch", "BlockingStream", "Client"]

T = TypeVar("T")
P = ParamSpec("P")


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


def _blocking(method: Callable[Concatenate[AsyncClient, P], Awaitable[T]],
              ) -> Callable[Concatenate[Client, P], T]:
    """``method`` of :class:`AsyncClient`, run on the client's loop and awaited there."""
    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._loop.run(_awaited(method, self.aio, *args, **kwargs))
    return _named_after(call, method, _same)


def _queued(method: Callable[Concatenate[Batch, P], Awaitable[T]],
            ) -> Callable[Concatenate[BlockingBatch, P], asyncio.Future[T]]:
    """``method`` of :class:`Batch`: queued on the loop; the future is read after sending."""
    def call(self: BlockingBatch, /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        return self._loop.run(_queue(method, self.aio, *args, **kwargs))
    return _named_after(call, method, _future_of)


async def _awaited(method: Callable[Concatenate[AsyncClient, P], Awaitable[T]],
                   client: AsyncClient, *args: P.args, **kwargs: P.kwargs) -> T:
    return await method(client, *args, **kwargs)


async def _queue(method: Callable[Concatenate[Batch, P], Awaitable[T]], batch: Batch,
                 *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
    """Queue on the loop (a batch makes its futures there)."""
    future = method(batch, *args, **kwargs)
    assert isinstance(future, asyncio.Future)  # what Batch._dispatch returns
    return future


def _named_after(call: Callable[..., Any], method: Callable[..., Any],
                 returns: Callable[[Any], Any]) -> Any:
    """``call`` presented as ``method`` (name, docstring, parameters) but returning
    ``returns(what awaiting method's result gives)``: ``help()``, ``inspect.signature`` and
    ``typing.get_type_hints`` show what the blocking call gives back, not an awaitable."""
    call.__name__ = method.__name__
    call.__qualname__ = method.__qualname__
    call.__doc__ = method.__doc__
    hints = typing.get_type_hints(method)
    awaitable = hints.get("return")
    hints["return"] = returns(awaitable if inspect.iscoroutinefunction(method)
                              else typing.get_args(awaitable)[-1])
    call.__signature__ = inspect.signature(method).replace(  # type: ignore[attr-defined]
        return_annotation=hints["return"])
    call.__annotations__ = hints
    return call


def _same(result: Any) -> Any:
    return result


def _future_of(result: Any) -> Any:
    return asyncio.Future[result]


def _connector(connect: Callable[P, Coroutine[Any, Any, AsyncClient]],
               ) -> Callable[P, Client]:
    """A blocking ``connect_*``: same arguments, returns a :class:`Client`."""
    def open_client(*args: P.args, **kwargs: P.kwargs) -> Client:
        return Client(connect(*args, **kwargs))
    return _named_after(open_client, connect, lambda _: "Client")


class Client:
    """Blocking RCP client: ``Client.connect_stdio([...])`` / ``Client.connect_http(url)`` /
    ``Client.connect_memory(server)``.

    Every :class:`AsyncClient` method, with the same signature, blocking
    instead of awaitable.
    """

    def __init__(self, connect: Coroutine[Any, Any, AsyncClient]) -> None:
        self._loop = _LoopThread()
        try:
            self.aio: AsyncClient = self._loop.run(connect)
            """The wrapped async client (use it only from the facade's loop)."""
        except BaseException:
            self._loop.stop()
            raise

    connect_stdio = staticmethod(_connector(connect_stdio))
    connect_http = staticmethod(_connector(connect_http))
    connect_memory = staticmethod(_connector(connect_memory))

    # ── identity ─────────────────────────────────────────────────────────────

    @property
    def capabilities(self) -> Capabilities:
        return self.aio.capabilities

    @property
    def init_result(self) -> InitializeResult | None:
        return self.aio.init_result

    @property
    def server(self) -> PeerInfo:
        return self.aio.server

    @property
    def protocol_version(self) -> int:
        return self.aio.protocol_version

    @property
    def conformance(self) -> str | None:
        return self.aio.conformance

    @property
    def is_closed(self) -> bool:
        return self.aio.is_closed

    # ── the §7 methods ───────────────────────────────────────────────────────

    call = _blocking(AsyncClient.call)
    info = _blocking(AsyncClient.info)
    ping = _blocking(AsyncClient.ping)
    shutdown = _blocking(AsyncClient.shutdown)
    embed = _blocking(AsyncClient.embed)
    embed_sparse = _blocking(AsyncClient.embed_sparse)
    embed_multi = _blocking(AsyncClient.embed_multi)
    rerank = _blocking(AsyncClient.rerank)
    retrieve = _blocking(AsyncClient.retrieve)
    transform = _blocking(AsyncClient.transform)
    graph = _blocking(AsyncClient.graph)
    index_add = _blocking(AsyncClient.index_add)
    index_delete = _blocking(AsyncClient.index_delete)
    catalog_list = _blocking(AsyncClient.catalog_list)
    feedback = _blocking(AsyncClient.feedback)
    memory_build = _blocking(AsyncClient.memory_build)
    memory_recall = _blocking(AsyncClient.memory_recall)
    notify = _blocking(AsyncClient.notify)

    def retrieve_stream(self, query: Query, k: int = 10, *, deadline_ms: int | None = None,
                        **options: Unpack[RetrieveOptions]) -> BlockingStream[RetrieveResult]:
        """§9: ``for event in client.retrieve_stream(q)`` then ``stream.result``."""
        return BlockingStream(self.aio.retrieve_stream(query, k, deadline_ms=deadline_ms,
                                                       **options), self._loop)

    def batch(self, *, deadline_ms: int | None = None) -> BlockingBatch:
        """Queue calls for one JSON-RPC batch frame (§11); see :class:`BlockingBatch`."""
        return BlockingBatch(self.aio.batch(deadline_ms=deadline_ms), self._loop)

    # ── lifecycle ────────────────────────────────────────────────────────────

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


class BlockingBatch:
    """:class:`Batch` for the blocking :class:`Client` (§11)::

        with client.batch() as batch:
            hits = batch.retrieve("paris")
            pong = batch.ping()
        print(hits.result().hits, pong.result())

    Each queued call returns a future; read it with ``future.result()`` once the
    batch was sent (leaving the ``with`` block, or ``batch.send()``).
    """

    def __init__(self, batch: Batch, loop: _LoopThread) -> None:
        self.aio = batch
        self._loop = loop

    call = _queued(Batch.call)
    info = _queued(Batch.info)
    ping = _queued(Batch.ping)
    shutdown = _queued(Batch.shutdown)
    embed = _queued(Batch.embed)
    embed_sparse = _queued(Batch.embed_sparse)
    embed_multi = _queued(Batch.embed_multi)
    rerank = _queued(Batch.rerank)
    retrieve = _queued(Batch.retrieve)
    transform = _queued(Batch.transform)
    graph = _queued(Batch.graph)
    index_add = _queued(Batch.index_add)
    index_delete = _queued(Batch.index_delete)
    catalog_list = _queued(Batch.catalog_list)
    feedback = _queued(Batch.feedback)
    memory_build = _queued(Batch.memory_build)
    memory_recall = _queued(Batch.memory_recall)

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Queue a notification (§4.5)."""
        self.aio.notify(method, params)

    def send(self) -> None:
        """Send the queued members as one frame and settle every future (§11)."""
        self._loop.run(self.aio.send())

    def __len__(self) -> int:
        return len(self.aio)

    def __enter__(self) -> BlockingBatch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self._loop.run(self.aio.__aexit__(exc_type, *exc_info))


class BlockingStream(Iterator[ProgressEvent], Generic[T]):
    """A :class:`Stream` iterated from a blocking caller: progress events, then ``result``."""

    def __init__(self, stream: Stream[T], loop: _LoopThread) -> None:
        self._stream = stream
        self._loop = loop

    def __next__(self) -> ProgressEvent:
        try:
            return self._loop.run(_next(self._stream))
        except StopAsyncIteration:
            raise StopIteration from None

    @property
    def result(self) -> T:
        """The final result (§9), once the stream was iterated to its end."""
        return self._stream.result

    def close(self) -> None:
        """Abandon the request (``notifications/cancel`` when it is in flight)."""
        self._loop.run(self._stream.aclose())


async def _next(iterator: AsyncIterator[T]) -> T:
    return await iterator.__anext__()
