"""An ASGI answer computed while the client waits: cancelled when the client leaves,
streamed without taking anything back.

:class:`Deferred` runs the request's work (an attempt loop that may take many upstream
calls) as a task and watches the connection beside it: a client that disconnects
cancels the work, and with it the upstream call in flight (its connection is closed;
no task, thread or connection is left behind).

Streams keep one rule: **a client never receives content that a later attempt
contradicts.** The work's content is sent only once it conforms. Until then the stream
holds nothing but what is true whatever happens (the opening event, SSE comments
``: keep-alive`` every ``keepalive_s``). The response's status line waits for the work
up to ``keepalive_s``: a failure found by then is a plain HTTP error (422, 429 ...); one
found later, after the stream has started, is a last ``data: {"error": {...}}`` event
with the same body (OpenAI's clients raise ``APIError`` for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from jsonmode.serve.errors import ServeError

__all__ = ["Deferred", "Rendering", "json_bytes"]

T = TypeVar("T")

log = logging.getLogger("jsonmode.serve")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

KEEPALIVE = b": keep-alive\n\n"
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: pass events on as they come
]


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class Rendering(Generic[T]):
    """How a finished piece of work is written: a JSON body, or SSE events."""

    def body(self, done: T) -> dict[str, Any]:
        """The JSON reply for ``done``."""
        raise NotImplementedError

    def opening(self) -> Sequence[bytes]:
        """Events true whatever the work ends with, sent when a stream starts."""
        return ()

    def events(self, done: T) -> Sequence[bytes]:
        """The stream's events for ``done`` (after the opening ones)."""
        raise NotImplementedError

    def error_event(self, error: ServeError) -> Sequence[bytes]:
        """The events that end a started stream with ``error``."""
        return (b"data: " + json_bytes(error.body()) + b"\n\n",)


class Deferred(Generic[T]):
    """An ASGI app that answers with ``work``'s result, rendered by ``rendering``.

    ``work`` raises :class:`ServeError` for an error answer; anything else it raises is
    a 500 (and is logged by the server). Cost: two tasks per request.
    """

    def __init__(
        self,
        work: Awaitable[T],
        rendering: Rendering[T],
        *,
        stream: bool,
        keepalive_s: float,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        self._work = work
        self._rendering = rendering
        self._stream = stream
        self._keepalive = keepalive_s
        self._headers = list(headers)

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        task: asyncio.Task[T] = asyncio.ensure_future(self._work)
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(receive))
        try:
            if self._stream:
                await self._streamed(task, gone, send)
            else:
                await asyncio.wait(_both(task, gone), return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    await self._whole(task, send)
        finally:
            gone.cancel()
            if not task.done():
                task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _whole(self, task: asyncio.Task[T], send: Send) -> None:
        error = _error(task)
        if error is not None:
            await _send_json(send, error.status, error.body(), _header_pairs(error.headers))
        else:
            await _send_json(send, 200, self._rendering.body(task.result()), self._headers)

    async def _streamed(self, task: asyncio.Task[T], gone: asyncio.Future[Any], send: Send) -> None:
        await asyncio.wait(
            _both(task, gone), timeout=self._keepalive, return_when=asyncio.FIRST_COMPLETED
        )
        if gone.done():
            return
        if task.done() and (error := _error(task)) is not None:
            await _send_json(send, error.status, error.body(), _header_pairs(error.headers))
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + self._headers}
        )
        for event in self._rendering.opening():
            await _body(send, event)
        while not task.done():
            await asyncio.wait(
                _both(task, gone), timeout=self._keepalive, return_when=asyncio.FIRST_COMPLETED
            )
            if gone.done():
                return
            if not task.done():
                await _body(send, KEEPALIVE)
        error = _error(task)
        events = (
            self._rendering.error_event(error)
            if error is not None
            else self._rendering.events(task.result())
        )
        await _body(send, b"".join(events), more=False)


def _both(task: asyncio.Future[Any], gone: asyncio.Future[Any]) -> set[asyncio.Future[Any]]:
    return {task, gone}


def _error(task: asyncio.Task[Any]) -> ServeError | None:
    """The task's ServeError (a 500 for any other exception; re-raised after the answer
    would lose it, so it is turned into one here)."""
    exc = task.exception()
    if exc is None:
        return None
    if isinstance(exc, ServeError):
        return exc
    log.error("a request failed inside the server", exc_info=exc)
    return ServeError(500, f"internal error: {type(exc).__name__}", type="server_error")


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has gone (the request body has been read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _header_pairs(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in headers.items()]


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]]
) -> None:
    data = json_bytes(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _body(send: Send, data: bytes, *, more: bool = True) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": more})
