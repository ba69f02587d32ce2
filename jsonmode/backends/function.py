"""Any callable as a backend: takes a prompt string or a message list, returns text."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from jsonmode.backends import deadline as _deadline
from jsonmode.backends.base import Completion, Request
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
    may also return a :class:`Completion` to report usage or truncation.

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
        self._takes_prompt = takes == "prompt" or (takes == "auto" and _first_param_is_str(fn))

    @property
    def name(self) -> str:
        return getattr(self._fn, "__qualname__", type(self._fn).__name__)

    def _argument(self, request: Request) -> Any:
        if self._takes_prompt:
            return request.prompt_text()
        return [dict(message) for message in request.messages]

    def complete(self, request: Request) -> Completion:
        if self._is_async:
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
            return _completion(_deadline.call(lambda: self._fn(argument), self.timeout, self.name))

    async def acomplete(self, request: Request) -> Completion:
        argument = self._argument(request)
        with _mapped_errors():
            if self._is_async:
                reply = await _deadline.acall(lambda: self._fn(argument), self.timeout, self.name)
            elif self.timeout is None:
                reply = await asyncio.to_thread(self._fn, argument)
            else:
                reply = await _deadline.acall_sync(
                    lambda: self._fn(argument), self.timeout, self.name
                )
            return _completion(reply)


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


def _completion(reply: Any) -> Completion:
    if isinstance(reply, Completion):
        return reply
    if isinstance(reply, str):
        return Completion(reply)
    raise UsageError(f"backend callable must return str or Completion, got {type(reply).__name__}")


def _first_param_is_str(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        raise UsageError("backend callable must take one argument (a prompt or messages)")
    annotation = params[0].annotation
    return annotation is str or annotation == "str"
