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
its errors. Neither is a second validator: both go through :mod:`jsonmode.repair.parse`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import (
    AIMessageChunk,
    BaseMessage,
    BaseMessageChunk,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.output_parsers.transform import BaseCumulativeTransformOutputParser
from langchain_core.outputs import ChatGenerationChunk, Generation, GenerationChunk
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import PrivateAttr

from jsonmode.backends.langchain import LangChainBackend, truncated
from jsonmode.errors import (
    OutputError,
    UsageError,
)
from jsonmode.facade import JsonMode
from jsonmode.repair.parse import Mode, check_mode, parse
from jsonmode.repair.partial import ReadCadence, parse_partial
from jsonmode.schema.core import Schema
from jsonmode.session.prompts import describe_failure, format_instructions

__all__ = ["JsonModeParser", "LangChainBackend", "jsonmode_runnable"]


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

    Streaming (``chain.stream``) yields partial JSON values while the text grows (after
    every chunk while it is short, then every ~3 % of growth, so a long output costs
    linear time: :class:`~jsonmode.repair.partial.ReadCadence`), then exactly one final
    item: the validated value (or the exception). Partial values are **not validated**:
    they hold only what the finished document will hold (see
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
            return parse(text, self._spec, self.mode, truncated=truncated(generation)).value
        except OutputError as failure:
            raise OutputParserException(
                str(failure),
                observation=describe_failure(failure),
                llm_output=text,
                send_to_llm=True,
            ) from failure

    def _transform(self, input: Iterator[str | BaseMessage]) -> Iterator[Any]:
        partials = _Partials(self)
        for chunk in input:
            value = partials.add(chunk)
            if value is not None:
                yield value
        yield from partials.end()

    async def _atransform(self, input: AsyncIterator[str | BaseMessage]) -> AsyncIterator[Any]:
        partials = _Partials(self)
        async for chunk in input:
            value = partials.add(chunk)
            if value is not None:
                yield value
        for value in partials.end():
            yield value


class _Partials:
    """The partial values of one stream, read at a :class:`ReadCadence` (every chunk
    while the text is short, then every ~3 % of growth: linear work in all, where a
    read per chunk cost quadratic time over a long output); each new one once. Sans
    I/O: ``_transform`` and ``_atransform`` only read the chunks and hand them here."""

    def __init__(self, parser: JsonModeParser) -> None:
        self.parser = parser
        self.stream = _Chunks()
        self.cadence = ReadCadence()
        self.shown: Any = None

    def add(self, chunk: str | BaseMessage) -> Any:
        """Takes the next chunk; a new partial value of the stream so far, or None."""
        stream = self.stream
        stream.add(chunk)
        size = stream.size
        if not self.cadence.due(size):
            return None
        self.cadence.read(size)
        value = self.parser.parse_result([stream.whole()], partial=True)
        if value is None or value == self.shown:
            return None
        self.shown = value
        return value

    def end(self) -> list[Any]:
        """After the last chunk: the validated value, when any chunk came (the parser's
        OutputParserException when it is not valid)."""
        if not self.stream:
            return []
        return [self.parser.parse_result([self.stream.whole()])]


class _Chunks:
    """The chunks of one stream so far, merged only when read.

    LangChain merges two chunks by copying both (``a + b``), so merging each chunk
    into the output so far costs quadratic time over a long stream (1 MB of
    ``AIMessageChunk`` s took 40 s). Chunks wait in a list instead; :meth:`whole`
    merges the waiting ones with one call (text chunks: one join), which a
    :class:`ReadCadence` calls a bounded number of times per doubling of the text:
    linear work in all. Not thread-safe (one per stream)."""

    def __init__(self) -> None:
        self.size = 0  # characters of text so far
        self._text = ""  # a text stream: what whole() joined so far
        self._texts: list[str] = []  # text chunks waiting
        self._messages: list[BaseMessageChunk] = []  # a message stream: merged so far, waiting
        self._chat: bool | None = None  # None until the first chunk

    def __bool__(self) -> bool:
        return self._chat is not None

    def add(self, chunk: str | BaseMessage) -> None:
        """Append ``chunk``; UsageError when a stream mixes text and messages."""
        chat = isinstance(chunk, BaseMessage)
        if self._chat is None:
            self._chat = chat
        elif self._chat != chat:
            raise UsageError("a stream mixed text chunks and message chunks")
        if isinstance(chunk, BaseMessage):
            message = _message_chunk(chunk)
            self._messages.append(message)
            content = message.content
            self.size += len(content) if isinstance(content, str) else len(message.text)
        else:
            self._texts.append(chunk)
            self.size += len(chunk)

    def whole(self) -> GenerationChunk | ChatGenerationChunk:
        """The stream so far as one chunk (call after at least one :meth:`add`)."""
        if not self._chat:
            self._text += "".join(self._texts)
            self._texts = []
            return GenerationChunk(text=self._text)
        first, *rest = self._messages
        if rest:
            first = _merged(first, rest)
            self._messages = [first]
        return ChatGenerationChunk(message=first)


def _message_chunk(message: BaseMessage) -> BaseMessageChunk:
    """``message`` as a chunk that merges (a whole message keeps its content and metadata)."""
    if isinstance(message, BaseMessageChunk):
        return message
    return AIMessageChunk(content=message.content, response_metadata=message.response_metadata)


def _merged(first: BaseMessageChunk, rest: list[BaseMessageChunk]) -> BaseMessageChunk:
    """``first + rest[0] + rest[1] ...``: one merge for AI message chunks (LangChain
    adds a list of them at once), else one pair at a time."""
    if isinstance(first, AIMessageChunk) and all(isinstance(m, AIMessageChunk) for m in rest):
        return first + rest
    for message in rest:
        first = first + message
    return first


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
