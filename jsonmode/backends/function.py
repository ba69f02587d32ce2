"""Any callable as a backend: takes a prompt string or a message list, returns text.

The callable may also stream: return an iterator (a generator) or an async iterator
of text pieces (an ``async def`` generator works), optionally ending with a
:class:`Completion`. ``complete`` joins the pieces; ``stream``/``astream`` hand them
on as they come (``JsonMode.stream``). A callable returning plain text streams as one
final piece.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from contextlib import aclosing, contextmanager
from typing import Any, Literal

from jsonmode.backends import deadline as _deadline
from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.errors import (
    JsonModeError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)

__all__ = ["FunctionBackend"]

Takes = Literal["auto", "prompt", "messages"]


class FunctionBackend:
    """Wrap ``fn(prompt_or_messages) -> str`` (sync or async) as a backend.

    ``takes="auto"`` passes a prompt string when the first parameter is annotated
    ``str``, else a list of message dicts (fresh copies on every call). The callable
    may also return a :class:`Completion` to report usage or truncation. A reply (or a
    streamed piece) that is neither ``str`` nor a Completion with ``str`` text raises
    :class:`UsageError`.

    Exceptions from the callable: ``TimeoutError``/``ConnectionError`` become
    :class:`TransientBackendError`, jsonmode's own errors pass through, anything else
    becomes :class:`PermanentBackendError` (with the original as ``__cause__``).

    ``timeout`` (seconds, positive and finite) bounds one call; past it the call fails
    with TransientBackendError. An async callable is cancelled at the deadline. A sync
    callable cannot be interrupted: it runs in a worker thread and the caller stops
    waiting at the deadline, while the callable runs on to its end and its result is
    dropped (at most :data:`~jsonmode.backends.deadline.MAX_ABANDONED` such threads at
    once; see :mod:`jsonmode.backends.deadline`). The default, None, sets no deadline
    and calls a sync callable in the caller's own thread, as a plain function call:
    the callable is the caller's code, it may use thread-bound resources (a sqlite
    connection, a torch model, thread-locals), and only the caller knows how long it
    may take.
    """

    native_schema: bool | None = False

    def __init__(
        self, fn: Callable[..., Any], *, takes: Takes = "auto", timeout: float | None = None
    ) -> None:
        if not callable(fn):
            raise UsageError(f"backend must be callable, got {type(fn).__name__}")
        if takes not in ("auto", "prompt", "messages"):
            raise UsageError(f"takes must be 'auto', 'prompt' or 'messages', not {takes!r}")
        self.timeout = None if timeout is None else _deadline.check_timeout(timeout)
        self._fn = fn
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )
        self._is_async_gen = inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(
            getattr(fn, "__call__", None)  # noqa: B004
        )
        self._takes_prompt = takes == "prompt" or (takes == "auto" and _first_param_is_str(fn))

    @property
    def name(self) -> str:
        return getattr(self._fn, "__qualname__", type(self._fn).__name__)

    def _argument(self, request: Request) -> Any:
        if self._takes_prompt:
            return request.prompt_text()
        return [dict(message) for message in request.messages]

    def complete(self, request: Request) -> Completion:
        if self._is_async or self._is_async_gen:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(self.acomplete(request))
            raise UsageError(
                "an async backend cannot be called from sync code inside a running event loop",
                hint="use agenerate()/arun()",
            )
        argument = self._argument(request)
        with _mapped_errors():
            return _completion(
                _deadline.call(lambda: _joined(self._fn(argument)), self.timeout, self.name)
            )

    async def acomplete(self, request: Request) -> Completion:
        argument = self._argument(request)
        with _mapped_errors():
            if self._is_async or self._is_async_gen:
                reply = await _deadline.acall(
                    lambda: _ajoined(self._fn(argument)), self.timeout, self.name
                )
            elif self.timeout is None:
                reply = await asyncio.to_thread(lambda: _joined(self._fn(argument)))
            else:
                reply = await _deadline.acall_sync(
                    lambda: _joined(self._fn(argument)), self.timeout, self.name
                )
            return _completion(reply)

    def stream(self, request: Request) -> Iterator[Chunk]:
        """The callable's pieces as it yields them (one Completion for plain text).

        An async callable is driven on a private event loop (not from inside a running
        one: use ``astream`` there). ``timeout`` bounds the whole stream."""
        if self._is_async or self._is_async_gen:
            yield from self._stream_async_from_sync(request)
            return
        argument = self._argument(request)
        with _mapped_errors():
            yield from _deadline.stream(
                lambda: _pieces(self._fn(argument)), self.timeout, self.name
            )

    def astream(self, request: Request) -> AsyncIterator[Chunk]:
        """Async :meth:`stream`; a sync callable (and a sync iterator it returns) runs
        in a worker thread, one piece at a time."""
        return self._agen(request)

    async def _agen(self, request: Request) -> AsyncGenerator[Chunk, None]:
        argument = self._argument(request)
        with _mapped_errors():
            if self._is_async or self._is_async_gen:
                make = lambda: _apieces(self._fn(argument))  # noqa: E731
            else:
                make = lambda: _threaded_pieces(lambda: self._fn(argument))  # noqa: E731
            async with aclosing(_deadline.astream(make, self.timeout, self.name)) as chunks:
                async for chunk in chunks:
                    yield chunk

    def _stream_async_from_sync(self, request: Request) -> Iterator[Chunk]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UsageError(
                "an async backend cannot be streamed from sync code inside a running event loop",
                hint="use astream()",
            )
        loop = asyncio.new_event_loop()
        pieces = self._agen(request)
        try:
            while True:
                try:
                    yield loop.run_until_complete(pieces.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            loop.run_until_complete(pieces.aclose())
            loop.close()


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except JsonModeError:
        raise
    except (TimeoutError, ConnectionError) as exc:
        raise TransientBackendError(f"backend callable failed: {exc!r}") from exc
    except Exception as exc:
        raise PermanentBackendError(f"backend callable failed: {exc!r}") from exc


def _pieces(reply: Any) -> Generator[Chunk, None, None]:
    """A callable's reply as chunks: plain text is one whole Completion."""
    if not isinstance(reply, Iterator):
        yield _completion(reply)  # text, a Completion, or the UsageError
        return
    try:
        for piece in reply:
            yield _chunk(piece)
    finally:
        close = getattr(reply, "close", None)
        if callable(close):
            close()


async def _apieces(reply: Any) -> AsyncIterator[Chunk]:
    if inspect.isawaitable(reply):
        reply = await reply
    if isinstance(reply, AsyncIterator):
        try:
            async for piece in reply:
                yield _chunk(piece)
        finally:
            close = getattr(reply, "aclose", None)
            if callable(close):
                await close()
        return
    for chunk in _pieces(reply):
        yield chunk


async def _threaded_pieces(call: Callable[[], Any]) -> AsyncIterator[Chunk]:
    """A sync callable's chunks, each produced in a worker thread."""
    reply = await asyncio.to_thread(call)
    pieces = _pieces(reply)
    done = object()
    try:
        while (chunk := await asyncio.to_thread(next, pieces, done)) is not done:
            yield chunk  # type: ignore[misc]
    finally:
        pieces.close()


def _chunk(piece: Any) -> Chunk:
    """A streamed piece, checked: text, or a Completion whose text is text.

    Raises:
        UsageError: anything else.
    """
    if isinstance(piece, str):
        return piece
    if isinstance(piece, Completion):
        return _checked(piece)
    raise UsageError(
        f"a streaming backend callable must yield str (or a final Completion), "
        f"got {type(piece).__name__}"
    )


def _joined(reply: Any) -> Any:
    """A reply that is an iterator of pieces, joined (anything else as is)."""
    if not isinstance(reply, Iterator):
        return reply
    return _whole(list(_pieces(reply)))


async def _ajoined(reply: Any) -> Any:
    """:func:`_joined` for an async callable's reply: awaited, async pieces joined."""
    if inspect.isawaitable(reply):
        reply = await reply
    if not isinstance(reply, AsyncIterator):
        return _joined(reply)
    return _whole([chunk async for chunk in _apieces(reply)])


def _whole(chunks: list[Chunk]) -> Completion:
    """Chunks as one Completion: a final Completion wins, else the pieces joined."""
    for chunk in reversed(chunks):
        if isinstance(chunk, Completion):
            return chunk
    return Completion("".join(chunk for chunk in chunks if isinstance(chunk, str)))


def _completion(reply: Any) -> Completion:
    """A callable's whole reply as a Completion.

    Raises:
        UsageError: the reply is neither ``str`` nor a Completion whose text is a
            ``str``.
    """
    if isinstance(reply, Completion):
        return _checked(reply)
    if isinstance(reply, str):
        return Completion(reply)
    raise UsageError(f"backend callable must return str or Completion, got {type(reply).__name__}")


def _checked(completion: Completion) -> Completion:
    """``completion``, once its text is known to be a ``str`` (a dataclass does not
    check its field types: ``Completion(None)`` is constructed without complaint).

    Raises:
        UsageError: ``completion.text`` is not a ``str``.
    """
    if not isinstance(completion.text, str):
        raise UsageError(
            f"backend callable returned a Completion whose text is "
            f"{type(completion.text).__name__}: Completion.text must be a str",
            hint='return Completion("") for no content',
        )
    return completion


def _first_param_is_str(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        raise UsageError("backend callable must take one argument (a prompt or messages)")
    annotation = params[0].annotation
    return annotation is str or annotation == "str"
