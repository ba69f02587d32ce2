"""A backend that replays scripted replies: for tests, examples and the offline demo."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from jsonmode.backends.base import Completion, Request
from jsonmode.errors import PermanentBackendError

__all__ = ["ScriptedBackend"]

Reply = str | Completion | BaseException | Callable[[Request], str | Completion]


class ScriptedBackend:
    """Replays ``replies`` in order, one per call, and records every request.

    A reply is text, a :class:`Completion`, an exception to raise, or a function of
    the request. When the script runs out it raises :class:`PermanentBackendError`.
    Thread-safe.
    """

    name = "scripted"

    def __init__(self, replies: Iterable[Reply], *, native_schema: bool | None = False) -> None:
        self._replies = list(replies)
        self._lock = threading.Lock()
        self.native_schema = native_schema
        self.requests: list[Request] = []

    def complete(self, request: Request) -> Completion:
        with self._lock:
            self.requests.append(request)
            if not self._replies:
                raise PermanentBackendError("scripted backend has no replies left")
            reply = self._replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            reply = reply(request)
        return reply if isinstance(reply, Completion) else Completion(reply)

    async def acomplete(self, request: Request) -> Completion:
        return self.complete(request)
