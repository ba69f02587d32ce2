"""Any LangChain model (or runnable) as a jsonmode backend: :class:`LangChainBackend`.

Other models inside jsonmode (this package's job); jsonmode inside LangChain (the output
parser and the runnable) is :mod:`jsonmode.adapters.langchain`, which re-exports this
class. ``JsonMode(chat_model)`` picks it automatically. Needs ``langchain-core``
(``pip install "jsonmode[langchain]"``); imported only when such a model is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.exceptions import ModelError
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    BaseMessageChunk,
    convert_to_messages,
)
from langchain_core.outputs import ChatGeneration, Generation
from langchain_core.runnables import Runnable

from jsonmode.backends import deadline
from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.errors import (
    JsonModeError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)
from jsonmode.result import Usage
from jsonmode.retry import parse_retry_after, response_headers

__all__ = ["LangChainBackend", "truncated"]

# Statuses worth retrying: timeout, conflict, too early, rate limit (and 5xx).
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_LENGTH_STOPS = frozenset({"length", "max_tokens", "MAX_TOKENS"})


def truncated(generation: Generation) -> bool:
    """Whether the model reported stopping at its length limit."""
    metadata: Mapping[str, Any] = generation.generation_info or {}
    if isinstance(generation, ChatGeneration):
        metadata = {**metadata, **generation.message.response_metadata}
    reason = metadata.get("finish_reason") or metadata.get("stop_reason")
    return reason in _LENGTH_STOPS


class LangChainBackend:
    """A LangChain model as a jsonmode backend (prompted tier).

    Args:
        model: a chat model, a text LLM, or any runnable that takes a list of
            messages and returns a message or text (``model.bind(stop=[...])``,
            ``model.with_fallbacks([...])``, ``model.with_retry()`` ...).
        timeout: seconds one call may take, whole reply included (see
            :mod:`jsonmode.backends.deadline`); past it the call fails with
            :class:`~jsonmode.TransientBackendError`. ``None`` (the default): the model's
            own timeouts apply, as a LangChain model sets its own.
        **invoke_options: passed to every ``invoke``/``ainvoke`` (``config=``, ``stop=``).

    ``JsonMode(model)`` wraps a LangChain runnable in this class without being asked.
    Usage comes from the reply's ``usage_metadata``, truncation from its finish reason.

    ``stream``/``astream`` (``JsonMode.stream``) go through the runnable's own
    ``stream``/``astream`` (a model that cannot stream yields its whole reply once):
    the text of each chunk as it comes, then one :class:`~jsonmode.Completion` of the
    chunks added up (usage when the model reported it, truncation from the finish
    reason). The whole stream falls under ``timeout`` when one is set (see
    :func:`jsonmode.backends.deadline.stream`: a sync stream then runs in a worker
    thread); closing the iterator early closes the runnable's.
    Failures: LangChain's retryable ``ModelError`` s (rate limit, 5xx, connection,
    timeout), ``TimeoutError``/``ConnectionError`` and HTTP 408/409/425/429/5xx become
    :class:`~jsonmode.TransientBackendError` (retried by the transport policy);
    everything else :class:`~jsonmode.PermanentBackendError`, the original as
    ``__cause__``. Thread-safe when the model is.
    """

    native_schema: bool | None = False

    def __init__(
        self, model: Runnable[Any, Any], *, timeout: float | None = None, **invoke_options: Any
    ) -> None:
        if not isinstance(model, Runnable):
            raise UsageError(f"expected a LangChain model or runnable, got {type(model).__name__}")
        self.model = model
        self.timeout = None if timeout is None else deadline.check_timeout(timeout)
        self.invoke_options = invoke_options

    @property
    def name(self) -> str:
        return f"langchain:{type(self.model).__name__}"

    def complete(self, request: Request) -> Completion:
        messages = _messages(request)
        with _mapped_errors():
            reply = deadline.call(
                lambda: self.model.invoke(messages, **self.invoke_options), self.timeout, self.name
            )
        return _completion(reply)

    async def acomplete(self, request: Request) -> Completion:
        messages = _messages(request)
        with _mapped_errors():
            reply = await deadline.acall(
                lambda: self.model.ainvoke(messages, **self.invoke_options), self.timeout, self.name
            )
        return _completion(reply)

    def stream(self, request: Request) -> Iterator[Chunk]:
        """The reply chunk by chunk, then its :class:`Completion` (see the class docstring)."""
        messages = _messages(request)

        def chunks() -> Iterator[Chunk]:
            reply = _Reply()
            with _mapped_errors():
                for chunk in self.model.stream(messages, **self.invoke_options):
                    text = reply.add(chunk)
                    if text:
                        yield text
                yield reply.completion()

        return deadline.stream(chunks, self.timeout, self.name)

    def astream(self, request: Request) -> AsyncIterator[Chunk]:
        """:meth:`stream` for async code, through the runnable's ``astream``."""
        messages = _messages(request)

        async def chunks() -> AsyncIterator[Chunk]:
            reply = _Reply()
            with _mapped_errors():
                async for chunk in self.model.astream(messages, **self.invoke_options):
                    text = reply.add(chunk)
                    if text:
                        yield text
                yield reply.completion()

        return deadline.astream(chunks, self.timeout, self.name)


class _Reply:
    """A streamed reply added up: message chunks (or text) as they come."""

    def __init__(self) -> None:
        self._message: BaseMessageChunk | None = None
        self._text: list[str] | None = None

    def add(self, chunk: object) -> str:
        """Takes one chunk of the runnable's stream; returns its text."""
        if isinstance(chunk, str):
            if self._message is not None:
                raise UsageError("the LangChain runnable streamed both text and messages")
            if self._text is None:
                self._text = []
            self._text.append(chunk)
            return chunk
        if not isinstance(chunk, BaseMessage):
            raise _not_text(chunk)
        if self._text is not None:
            raise UsageError("the LangChain runnable streamed both text and messages")
        piece = chunk if isinstance(chunk, BaseMessageChunk) else _as_chunk(chunk)
        self._message = piece if self._message is None else self._message + piece
        return str(piece.text)

    def completion(self) -> Completion:
        if self._message is not None:
            return _completion(self._message)
        return Completion("".join(self._text or ()))


def _as_chunk(message: BaseMessage) -> AIMessageChunk:
    """A whole message (from a runnable that does not stream) as one chunk."""
    usage = message.usage_metadata if isinstance(message, AIMessage) else None
    return AIMessageChunk(
        content=message.content,
        response_metadata=message.response_metadata,
        usage_metadata=usage,
    )


def _messages(request: Request) -> list[BaseMessage]:
    return convert_to_messages([dict(message) for message in request.messages])


def _completion(reply: object) -> Completion:
    if isinstance(reply, BaseMessage):
        usage = None
        if isinstance(reply, AIMessage) and reply.usage_metadata:
            usage = Usage(
                reply.usage_metadata.get("input_tokens", 0),
                reply.usage_metadata.get("output_tokens", 0),
            )
        reason = reply.response_metadata.get("finish_reason") or reply.response_metadata.get(
            "stop_reason"
        )
        return Completion(str(reply.text), usage, reason in _LENGTH_STOPS)
    if isinstance(reply, str):
        return Completion(reply)
    raise _not_text(reply)


def _not_text(reply: object) -> UsageError:
    return UsageError(
        f"the LangChain runnable returned {type(reply).__name__}, not a message or text",
        hint="pass the model itself, not a chain that ends in a parser",
    )


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except JsonModeError:
        raise
    except Exception as exc:
        status = _status_code(exc)
        transient = (
            (isinstance(exc, ModelError) and exc.is_retryable)
            or isinstance(exc, (TimeoutError, ConnectionError))
            or (status is not None and (status in _TRANSIENT_STATUS or status >= 500))
        )
        kind = TransientBackendError if transient else PermanentBackendError
        raise kind(
            f"LangChain model failed: {exc!r}",
            status_code=status,
            retry_after=parse_retry_after(response_headers(exc)),
        ) from exc


def _status_code(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int):
            return status
    return None
