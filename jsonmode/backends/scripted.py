"""A backend that replays scripted replies: for tests, examples and the offline demo."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.errors import PermanentBackendError

__all__ = ["ScriptedBackend"]

Reply = str | Completion | tuple[Chunk, ...] | BaseException | Callable[[Request], str | Completion]


class ScriptedBackend:
    """Replays ``replies`` in order, one per call, and records every request.

    A reply is text, a :class:`Completion`, a tuple of pieces (text, optionally a
    final Completion: streamed piece by piece by ``stream``, joined by ``complete``),
    an exception to raise, or a function of the request. When the script runs out it
    raises :class:`PermanentBackendError`. Thread-safe.
    """

    name = "scripted"

    def __init__(self, replies: Iterable[Reply], *, native_schema: bool | None = False) -> None:
        self._replies = list(replies)
        self._lock = threading.Lock()
        self.native_schema = native_schema
        self.requests: list[Request] = []

    def _next(self, request: Request) -> str | Completion | tuple[Chunk, ...]:
        with self._lock:
            self.requests.append(request)
            if not self._replies:
                raise PermanentBackendError("scripted backend has no replies left")
            reply = self._replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            reply = reply(request)
        return reply

    def complete(self, request: Request) -> Completion:
        reply = self._next(request)
        if isinstance(reply, tuple):
            whole = [piece for piece in reply if isinstance(piece, Completion)]
            return whole[-1] if whole else Completion("".join(map(str, reply)))
        return reply if isinstance(reply, Completion) else Completion(reply)

    async def acomplete(self, request: Request) -> Completion:
        return self.complete(request)

    def stream(self, request: Request) -> Iterator[Chunk]:
        """A tuple reply piece by piece; any other reply as one whole Completion."""
        reply = self._next(request)
        if isinstance(reply, tuple):
            yield from reply
        else:
            yield reply if isinstance(reply, Completion) else Completion(reply)

    async def astream(self, request: Request) -> AsyncIterator[Chunk]:
        for chunk in self.stream(request):
            yield chunk
