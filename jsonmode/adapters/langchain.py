"""LangChain integration (``pip install "jsonmode[langchain]"``, langchain-core ≥ 1.7).

Three pieces, one per way LangChain code is written:

- :class:`JsonModeParser` — an output parser for LCEL: ``prompt | model | parser``.
  ``parse`` reads one output with :func:`jsonmode.parse` (strict, or repair in repair
  mode) and raises LangChain's ``OutputParserException`` carrying the observation (every
  error, worded for the model) and the raw output, so retry and fixing flows work.
  Streamed, it yields partial JSON values as the text grows, then the validated value.
- :class:`LangChainBackend` — any LangChain model (chat model, text LLM, or a runnable
  built from one: ``model.bind(...)``, ``model.with_fallbacks(...)``) as a jsonmode
  backend, streaming included. ``JsonMode(chat_model)`` picks it automatically.
- :func:`jsonmode_runnable` — the whole façade (tiers, validate → repair → re-ask,
  typed errors, events) as one LCEL step: ``prompt | jsonmode_runnable(model, Person)``.

The parser checks one output; the runnable owns the loop and re-asks the model with
its errors. Neither is a second validator: both go through :mod:`jsonmode.reading`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.exceptions import ModelError, OutputParserException
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    BaseMessageChunk,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.output_parsers.transform import BaseCumulativeTransformOutputParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import PrivateAttr

from jsonmode.backends import deadline
from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.errors import (
    JsonModeError,
    OutputError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)
from jsonmode.facade import JsonMode
from jsonmode.prompting import describe_failure, format_instructions
from jsonmode.reading import Mode, check_mode, parse
from jsonmode.repair.partial import parse_partial
from jsonmode.result import Usage
from jsonmode.retry import parse_retry_after, response_headers
from jsonmode.schema.core import Schema

__all__ = ["JsonModeParser", "LangChainBackend", "jsonmode_runnable"]

# Statuses worth retrying: timeout, conflict, too early, rate limit (and 5xx).
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_LENGTH_STOPS = frozenset({"length", "max_tokens", "MAX_TOKENS"})


class JsonModeParser(BaseCumulativeTransformOutputParser[Any]):
    """Parse a model's output into a value that conforms to ``schema``.

    Args:
        schema: a pydantic model, a Python type, a JSON Schema dict or JSON text.
        mode: ``"strict"`` (the output must be exactly one conforming JSON document)
            or ``"repair"`` (fences, prose, syntax slips and wrong types are repaired;
            the repairs are jsonmode's, see :func:`jsonmode.parse`).

    ``invoke``/``parse`` return a model instance for a pydantic model (a typed value
    for a Python type), else the JSON value. A non-conforming output raises
    ``OutputParserException`` with ``observation`` (every error, worded for the model),
    ``llm_output`` (the raw text) and ``send_to_llm=True``; the jsonmode
    :class:`~jsonmode.OutputError` is its ``__cause__``.

    Streaming (``chain.stream``) yields partial JSON values while the text grows, then
    exactly one final item: the validated value (or the exception). Partial values are
    **not validated**: they hold only what the finished document will hold (see
    :func:`jsonmode.repair.partial.parse_partial`), but required fields may be missing.

    Immutable and thread-safe, like every LangChain parser.
    """

    mode: Mode = "strict"
    _spec: Schema = PrivateAttr()
    _source: object = PrivateAttr()

    def __init__(self, schema: object, mode: Mode = "strict", **kwargs: Any) -> None:
        check_mode(mode)
        if kwargs.get("diff"):
            raise UsageError("JsonModeParser streams values, not JSON patches: diff=True")
        super().__init__(**{**kwargs, "mode": mode})
        self._spec = Schema.of(schema)
        self._source = schema

    def __repr__(self) -> str:
        return f"JsonModeParser({self._spec.name!r}, mode={self.mode!r})"

    @property
    def spec(self) -> Schema:
        """The normalised schema."""
        return self._spec

    @property
    def _type(self) -> str:
        return "jsonmode"

    @property
    def OutputType(self) -> type[Any]:
        """The pydantic model or class given as the schema (else ``Any``): LangChain's
        ``get_output_schema`` reports it."""
        if isinstance(self._source, type):
            return self._source
        return super().OutputType

    def get_format_instructions(self) -> str:
        """The output contract and the JSON Schema: the text jsonmode's prompted tier sends."""
        return format_instructions(self._spec)

    def parse(self, text: str) -> Any:
        """Validate (and in repair mode repair) one output; see the class docstring."""
        return self.parse_result([Generation(text=text)])

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> Any:
        """The validated value of ``result[0]``, or with ``partial=True`` the partial
        JSON value its text holds so far (``None`` when there is nothing to show)."""
        generation = result[0]
        text = generation.text
        if partial:
            return parse_partial(text)
        try:
            return parse(text, self._spec, self.mode, truncated=_truncated(generation)).value
        except OutputError as failure:
            raise OutputParserException(
                str(failure),
                observation=describe_failure(failure),
                llm_output=text,
                send_to_llm=True,
            ) from failure

    def _transform(self, input: Iterator[str | BaseMessage]) -> Iterator[Any]:
        text: GenerationChunk | ChatGenerationChunk | None = None
        shown: Any = None
        for chunk in input:
            text = _grow(text, chunk)
            value = self.parse_result([text], partial=True)
            if value is not None and value != shown:
                shown = value
                yield value
        if text is not None:
            yield self.parse_result([text])

    async def _atransform(self, input: AsyncIterator[str | BaseMessage]) -> AsyncIterator[Any]:
        text: GenerationChunk | ChatGenerationChunk | None = None
        shown: Any = None
        async for chunk in input:
            text = _grow(text, chunk)
            value = self.parse_result([text], partial=True)
            if value is not None and value != shown:
                shown = value
                yield value
        if text is not None:
            yield self.parse_result([text])


def _grow(
    text: GenerationChunk | ChatGenerationChunk | None, chunk: str | BaseMessage
) -> GenerationChunk | ChatGenerationChunk:
    """The streamed output so far, with ``chunk`` appended."""
    piece: GenerationChunk | ChatGenerationChunk
    if isinstance(chunk, BaseMessageChunk):
        piece = ChatGenerationChunk(message=chunk)
    elif isinstance(chunk, BaseMessage):
        piece = ChatGenerationChunk(
            message=AIMessageChunk(content=chunk.content, response_metadata=chunk.response_metadata)
        )
    else:
        piece = GenerationChunk(text=chunk)
    if text is None:
        return piece
    if isinstance(text, ChatGenerationChunk) and isinstance(piece, ChatGenerationChunk):
        return text + piece
    if isinstance(text, ChatGenerationChunk) or isinstance(piece, ChatGenerationChunk):
        raise UsageError("a stream mixed text chunks and message chunks")
    return text + piece


def _truncated(generation: Generation) -> bool:
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


def jsonmode_runnable(
    backend: object, schema: object, mode: Mode = "strict", **options: Any
) -> Runnable[Any, Any]:
    """The jsonmode façade as one LCEL step: prompt in, validated value out.

    Args:
        backend: a LangChain model (or anything else ``JsonMode`` takes), or a ready
            :class:`~jsonmode.JsonMode` (then leave ``mode`` and ``options`` out).
        schema: the schema of the answer.
        mode, **options: as for ``JsonMode`` (``max_attempts``, ``tier``, ...).

    Input: a prompt string, a ``PromptValue`` (what a prompt template returns), or a
    list of LangChain messages or message dicts. Output: the value ``generate``
    returns. Failures raise jsonmode's typed errors (``AttemptsExhaustedError`` with
    every attempt), not ``OutputParserException``: the re-asks already happened.
    """
    if isinstance(backend, JsonMode):
        if mode != "strict" or options:
            raise UsageError("pass mode and options to the JsonMode itself")
        jm = backend
    else:
        jm = JsonMode(backend, mode, **options)
    spec = Schema.of(schema)

    def generate(value: Any) -> Any:
        return jm.generate(_prompt(value), spec)

    async def agenerate(value: Any) -> Any:
        return await jm.agenerate(_prompt(value), spec)

    return RunnableLambda(generate, afunc=agenerate, name=f"jsonmode_{spec.name}")


def _prompt(value: object) -> str | list[dict[str, Any]]:
    if isinstance(value, str):
        return value
    if isinstance(value, PromptValue):
        value = value.to_messages()
    if isinstance(value, Sequence) and all(
        isinstance(item, (BaseMessage, Mapping)) for item in value
    ):
        messages = [item if isinstance(item, BaseMessage) else dict(item) for item in value]
        return convert_to_openai_messages(convert_to_messages(messages))
    raise UsageError(
        f"cannot use {type(value).__name__} as a prompt",
        hint="pass a string, a PromptValue or a list of messages",
    )
