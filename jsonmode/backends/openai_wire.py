"""The OpenAI chat-completions wire format, shared by the backends that speak it
(:mod:`.litellm`, :mod:`.openai_client`): the request fields that carry a schema in the
native tier, and reading a reply, whole or streamed, into a
:class:`~jsonmode.backends.base.Completion`.

Native transports: ``response_format`` (a ``json_schema`` object, marked ``strict``
when OpenAI's strict mode can take the schema) or ``tools`` (one forced function
call: the schema is the parameters of one tool named like the schema, ``tool_choice``
forces it, and the reply is that call's arguments). Function parameters must be an
object: a schema whose root is not ``{"type": "object"}`` travels wrapped as the one
property ``value`` of an object (its ``$defs`` stay at the root), and the reply is
unwrapped back to the value's text, streamed pieces included. (A ``$ref`` to the root
itself, ``"#"``, would then point at the wrapper: :func:`refers_to_root` says when a
schema must go as ``response_format``.)

A reply that calls another function than the one forced is not taken as the value:
its :class:`~jsonmode.backends.base.Completion` carries a ``problem`` saying so, and
the façade counts the attempt as failed and re-asks. A reply that makes no call at
all is read from its content.

A streamed reply is read once for sync and async code: :func:`stream_steps` is its
logic without I/O (a generator that asks for each request and event it needs), and
:func:`run_stream` / :func:`arun_stream` drive it, each doing only the I/O, blocking or
awaited, through the callables it is given.

Pure functions, per-reply readers and the two drivers: nothing here does I/O of its own
or holds shared state.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Sequence
from typing import Any, Final, Literal, NamedTuple

from jsonmode.backends.base import Chunk, Completion
from jsonmode.errors import TransientBackendError
from jsonmode.result import Usage
from jsonmode.schema.core import Schema

__all__ = [
    "END",
    "NEXT_EVENT",
    "TRANSIENT_STATUS",
    "TRANSPORTS",
    "Ask",
    "NativeTransport",
    "Reader",
    "Tool",
    "arun_stream",
    "native_arguments",
    "nothing_streamed",
    "openai_strict_ok",
    "reasoning_of",
    "refers_to_root",
    "run_stream",
    "schema_arguments",
    "stream_steps",
    "to_completion",
    "tool_arguments",
    "tool_parameters",
    "unstreamed",
    "usage_of",
]

#: How the native tier sends the schema: ``response_format`` or one forced tool call.
NativeTransport = Literal["response_format", "tools"]
TRANSPORTS: tuple[NativeTransport, ...] = ("response_format", "tools")

#: HTTP statuses worth retrying besides every 5xx: timeout, conflict, too early, rate limit.
TRANSIENT_STATUS = frozenset({408, 409, 425, 429})


def openai_strict_ok(schema: Any) -> bool:
    """OpenAI's strict mode needs closed objects with every property required."""
    if isinstance(schema, list):
        return all(openai_strict_ok(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if "properties" in schema or schema.get("type") == "object":
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required", [])) != set(props):
            return False
    return all(openai_strict_ok(value) for value in schema.values())


def schema_arguments(schema: Schema) -> dict[str, Any]:
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": schema.name,
                "schema": schema.json_schema,
                "strict": openai_strict_ok(schema.json_schema),
            },
        }
    }


def refers_to_root(node: Any) -> bool:
    if isinstance(node, dict):
        if node.get("$ref") == "#":
            return True
        return any(refers_to_root(value) for value in node.values())
    if isinstance(node, list):
        return any(refers_to_root(item) for item in node)
    return False


_DEFS = ("$defs", "definitions")


def tool_parameters(schema: Schema) -> tuple[dict[str, Any], bool]:
    """The function parameters for ``schema``, and whether the value is wrapped in them."""
    root = schema.json_schema
    if isinstance(root, dict) and root.get("type") == "object":
        return root, False
    inner: dict[str, Any] | bool = root
    defs: dict[str, Any] = {}
    if isinstance(root, dict):
        inner = {key: value for key, value in root.items() if key not in _DEFS}
        defs = {key: root[key] for key in _DEFS if key in root}
    wrapper: dict[str, Any] = {
        "type": "object",
        "properties": {"value": inner},
        "required": ["value"],
        "additionalProperties": False,
        **defs,
    }
    return wrapper, True


def tool_arguments(schema: Schema, parameters: dict[str, Any]) -> dict[str, Any]:
    root = schema.json_schema
    description = root.get("description") if isinstance(root, dict) else None
    function: dict[str, Any] = {
        "name": schema.name,
        "description": description
        if isinstance(description, str) and description
        else f"Give the {schema.name} value as this function's arguments.",
        "parameters": parameters,
    }
    if openai_strict_ok(parameters):
        function["strict"] = True
    return {
        "tools": [{"type": "function", "function": function}],
        "tool_choice": {"type": "function", "function": {"name": schema.name}},
    }


class Tool:
    """The tool a native ``tools`` request forces: its name, and whether the value is
    wrapped as its one property ``value``."""

    __slots__ = ("name", "wrapped")

    def __init__(self, name: str, wrapped: bool) -> None:
        self.name = name
        self.wrapped = wrapped

    def read(self, calls: Sequence[tuple[str | None, str]], content: str) -> tuple[str, str | None]:
        """The reply's text, and what is wrong with its form (None: nothing).

        The arguments of the call named like the tool, unwrapped; the content when
        there was no call. A reply whose calls all name other functions gives the
        first call's arguments as they are, with a problem that names the functions
        called and the one to call (the façade re-asks with it)."""
        if not calls:
            return content, None
        for name, arguments in calls:
            if name == self.name:
                return self.unwrap(arguments), None
        called = ", ".join(sorted({repr(name or "") for name, _ in calls}))
        problem = (
            f"the reply called the function {called}, not {self.name!r}: call {self.name!r} "
            "(the one function offered) with the value as its arguments"
        )
        return calls[0][1], problem

    def unwrap(self, arguments: str) -> str:
        if not self.wrapped:
            return arguments
        unwrapper = _Unwrapper()
        return unwrapper.feed(arguments) + unwrapper.finish()


_WRAPPER_OPENING = '{"value":'
_WRAPPER_OPENING_RE = re.compile(r'\s*\{\s*"value"\s*:\s*')
_WRAPPER_CLOSING = "}\t\n\r "


class _Unwrapper:
    """``{"value": X}`` in, ``X`` out, piece by piece.

    The opening is held until it is certain; a tail of closing braces and blanks is held
    until more text comes (the last brace is the wrapper's). Text that does not open
    like the wrapper passes through as it is (the façade then reports what is wrong).
    """

    def __init__(self) -> None:
        self._head = ""
        self._opened: bool | None = None
        self._held = ""

    def feed(self, piece: str) -> str:
        if self._opened is None:
            self._head += piece
            squeezed = "".join(self._head.split())
            if _WRAPPER_OPENING.startswith(squeezed):
                return ""  # maybe the opening: wait for more
            match = _WRAPPER_OPENING_RE.match(self._head)
            self._opened = match is not None
            piece = self._head[match.end() :] if match is not None else self._head
            self._head = ""
        if not self._opened:
            return piece
        text = self._held + piece
        kept = len(text.rstrip(_WRAPPER_CLOSING))
        self._held = text[kept:]
        return text[:kept]

    def finish(self) -> str:
        """What is left at the end: the held tail without the wrapper's brace."""
        if self._opened is None:
            return self._head
        held, self._held = self._held, ""
        if not self._opened:
            return held
        brace = held.rfind("}")
        return held if brace < 0 else held[:brace].rstrip()


class Reader:
    """Reads a streamed reply's events: the pieces to show, then the whole Completion."""

    def __init__(self, tool: Tool | None) -> None:
        self._tool = tool
        self._content: list[str] = []
        self._reasoning: list[str] = []  # thinking returned apart (reasoning_content)
        # tool calls by index: [name, argument pieces]
        self._calls: dict[int, tuple[list[str | None], list[str]]] = {}
        self._shown: int | None = None  # the index of the call whose arguments are shown
        self._unwrapper = _Unwrapper()
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._events = 0

    def add(self, event: Any) -> str:
        """Takes one ``chat.completion.chunk``; returns the text to show now ("" none)."""
        self._events += 1
        usage = usage_of(getattr(event, "usage", None))
        if usage is not None:
            self._usage = usage
        choices = getattr(event, "choices", None) or ()
        if not choices:
            return ""
        choice = choices[0]
        if getattr(choice, "finish_reason", None):
            self._finish_reason = choice.finish_reason
        delta = getattr(choice, "delta", None)
        if delta is None:
            return ""
        shown = []
        thinking = reasoning_of(delta)
        if thinking:
            self._reasoning.append(thinking)
        content = getattr(delta, "content", None)
        if content:
            self._content.append(content)
            if self._tool is None:
                shown.append(content)
        for call in getattr(delta, "tool_calls", None) or ():
            shown.append(self._add_call(call))
        return "".join(shown)

    def _add_call(self, call: Any) -> str:
        index = getattr(call, "index", None)
        index = index if isinstance(index, int) else len(self._calls)
        name_holder, pieces = self._calls.setdefault(index, ([None], []))
        function = getattr(call, "function", None)
        name = getattr(function, "name", None)
        if name:
            name_holder[0] = name
        arguments = getattr(function, "arguments", None) or ""
        pieces.append(arguments)
        tool = self._tool
        if tool is None or not arguments:
            return ""
        if self._shown is None and name_holder[0] == tool.name:
            self._shown = index
        if self._shown != index:
            return ""
        return self._unwrapper.feed(arguments) if tool.wrapped else arguments

    def completion(self) -> Completion:
        if not self._events:
            raise TransientBackendError("the stream ended without a single event")
        content = "".join(self._content)
        problem: str | None = None
        if self._tool is None:
            text = content
        else:
            calls = [(holder[0], "".join(pieces)) for holder, pieces in self._calls.values()]
            text, problem = self._tool.read(calls, content)
        return Completion(
            text,
            self._usage,
            truncated=self._finish_reason == "length",
            problem=problem,
            reasoning="".join(self._reasoning) or None,
        )


def nothing_streamed(streamed: Completion) -> bool:
    """A streamed reply with no text and no usage: no event came (litellm adds only its
    own closing chunk). A server that does not stream sends a plain JSON body, which
    the event-stream reader skips whole."""
    return not streamed.text and streamed.usage is None


def unstreamed(arguments: dict[str, Any]) -> dict[str, Any]:
    """The same request, not streamed: asked again when a streamed one brought nothing
    (:func:`nothing_streamed`). Costs a server that does not stream a second request (and a
    streamed reply that was truly empty, without usage, one more); a server that
    streams text never gets one."""
    return {
        key: value for key, value in arguments.items() if key not in ("stream", "stream_options")
    }


def usage_of(usage: Any) -> Usage | None:
    """Token counts the server reported (None when it did not)."""
    if usage is None or getattr(usage, "prompt_tokens", None) is None:
        return None
    details = getattr(usage, "completion_tokens_details", None)
    if isinstance(details, dict):
        thinking = details.get("reasoning_tokens")
    else:
        thinking = getattr(details, "reasoning_tokens", None)
    # litellm fills in 0 where the server said nothing: 0 reads as "not reported"
    counted = isinstance(thinking, int) and not isinstance(thinking, bool) and thinking > 0
    reasoning = thinking if counted else None
    return Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0), reasoning)


def to_completion(response: Any, tool: Tool | None) -> Completion:
    """A whole ``chat.completion`` as a Completion (its tool call read when ``tool``)."""
    try:
        choice = response.choices[0]
    except (AttributeError, IndexError, TypeError):
        raise TransientBackendError("backend returned no choices") from None
    text = getattr(choice.message, "content", None) or ""
    problem: str | None = None
    if tool is not None:
        calls = [
            (getattr(call.function, "name", None), getattr(call.function, "arguments", None) or "")
            for call in getattr(choice.message, "tool_calls", None) or ()
        ]
        text, problem = tool.read(calls, text)
    usage = usage_of(getattr(response, "usage", None))
    return Completion(
        text,
        usage,
        truncated=choice.finish_reason == "length",
        problem=problem,
        reasoning=reasoning_of(choice.message),
    )


def reasoning_of(message: Any) -> str | None:
    """The thinking a message (or a streamed delta) carries apart from its content:
    ``reasoning_content`` (litellm, DeepSeek, vLLM) or ``reasoning`` (OpenRouter,
    newer vLLM); None when it carries none."""
    for name in ("reasoning_content", "reasoning"):
        thinking = getattr(message, name, None)
        if isinstance(thinking, str) and thinking:
            return thinking
    return None


def native_arguments(
    schema: Schema, transport: NativeTransport
) -> tuple[dict[str, Any], Tool | None]:
    """The request fields that send ``schema`` natively by ``transport``, and the tool
    whose arguments are the reply (None: the reply is the message's content). A schema
    that refers to its own root goes as ``response_format`` whatever the transport."""
    if transport == "tools" and not refers_to_root(schema.json_schema):
        parameters, wrapped = tool_parameters(schema)
        return tool_arguments(schema, parameters), Tool(schema.name, wrapped)
    return schema_arguments(schema), None


class Ask(NamedTuple):
    """A step of :func:`stream_steps`: send one request with ``arguments``; the driver
    answers with the response. ``stream``: the response is an event stream, which the
    driver holds open, reads at each :data:`NEXT_EVENT` and closes when it ends, fails
    or the consumer stops."""

    arguments: dict[str, Any]
    stream: bool = False


#: A step of :func:`stream_steps`: the open stream's next event (answered with it, or
#: with :data:`END`, once it has ended and been closed).
NEXT_EVENT: Final = object()
END: Final = object()

#: Steps: :class:`Ask` or :data:`NEXT_EVENT` (I/O for the driver), or a Chunk for the
#: consumer (answered with None).
Steps = Generator[Any, Any, None]


def stream_steps(arguments: dict[str, Any], tool: Tool | None) -> Steps:
    """A streamed reply's logic, without I/O: ask with ``arguments`` (streamed), yield
    the text pieces of its events as they come, then the whole Completion; asked again
    unstreamed (:func:`unstreamed`) when no event brought anything
    (:func:`nothing_streamed`). Driven by :func:`run_stream` or :func:`arun_stream`."""
    yield Ask(arguments, stream=True)
    reader = Reader(tool)
    while (event := (yield NEXT_EVENT)) is not END:
        piece = reader.add(event)
        if piece:
            yield piece
    streamed = reader.completion()
    if nothing_streamed(streamed):  # the server ignored "stream" (see unstreamed)
        streamed = to_completion((yield Ask(unstreamed(arguments))), tool)
    yield streamed


def run_stream(steps: Steps, create: Callable[..., Any]) -> Generator[Chunk, None, None]:
    """The chunks of ``steps`` (:func:`stream_steps`), its I/O blocking: ``create(**arguments)``
    sends a request, a stream is read with ``next`` and closed with its ``close()``
    (once it ends, or when anything fails or the consumer stops). Errors of ``create``
    and of the stream are raised as they are."""
    opened: Any = None
    events: Any = None
    answer: Any = None
    try:
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            answer = None
            if isinstance(step, Ask):
                answer = create(**step.arguments)
                if step.stream:
                    opened, events = answer, iter(answer)
            elif step is NEXT_EVENT:
                answer = next(events, END)
                if answer is END:
                    closing, opened = opened, None
                    closing.close()
            else:
                yield step
    finally:
        steps.close()
        if opened is not None:
            opened.close()


async def arun_stream(
    steps: Steps,
    create: Callable[..., Awaitable[Any]],
    events_of: Callable[[Any], AsyncIterator[Any]],
    close: Callable[[Any], Awaitable[object]],
) -> AsyncGenerator[Chunk, None]:
    """:func:`run_stream` awaited: ``await create(**arguments)`` sends a request, a
    stream's events are ``events_of(response)`` and it is closed with ``await
    close(response)``. Close it (``aclose``) when the consumer stops early: that
    closes the stream."""
    opened: Any = None
    events: Any = None
    answer: Any = None
    try:
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            answer = None
            if isinstance(step, Ask):
                answer = await create(**step.arguments)
                if step.stream:
                    opened, events = answer, events_of(answer)
            elif step is NEXT_EVENT:
                answer = await anext(events, END)
                if answer is END:
                    closing, opened = opened, None
                    await close(closing)
            else:
                yield step
    finally:
        steps.close()
        if opened is not None:
            await close(opened)
