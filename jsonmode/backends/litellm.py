"""Any litellm provider as a backend (``"openai/..."``, ``"ollama/..."``, ``"hosted_vllm/..."``).

litellm is imported on first use (it takes seconds; ``prepare()`` does it ahead, and
the façade calls it before a request's clock starts), with its model cost map read
from the package rather than the network. The OpenAI SDK's own retries are turned
off (``max_retries=0``): transport retries are jsonmode's policy, and stacked retry
loops multiply waiting.

The native tier passes the schema as OpenAI-style ``response_format`` ``json_schema``
to every server in the table: OpenAI, Azure, Ollama (litellm maps it to Ollama's
``format``) and vLLM, whose server reads it into its structured outputs. (vLLM removed
the older ``guided_json`` field in 0.12 and ignores it with HTTP 200: tests/with_vllm
checks against a real vLLM server that the schema is honoured, and that a field it
ignores would be caught.) Whether an endpoint takes a schema comes from a small table
here, not from litellm's ``supports_response_schema``, which does not know local
servers.

A grammar (``JsonMode.text``) goes natively only to vLLM (``hosted_vllm/`` models, and
servers running jsonmode's processor, ``vllm_processor=True``), as vLLM's
``structured_outputs`` request field (vLLM >= 0.12; its ``guided_*`` fields are gone):
``{"grammar": GBNF}`` (vLLM hands text holding ``::=`` to xgrammar's GBNF-style EBNF
reader as it is), ``{"regex": PATTERN}`` (the whole output must match, as with
``compile_regex``) or ``{"choice": [...]}``. Other kinds (a grammar with rules bound to
JSON Schemas, the built-ins) and every other provider get the grammar in the prompt.
A grammar vLLM's reader refuses fails the request (HTTP 400: PermanentBackendError).

``native="tools"`` sends it instead as one forced function call, for providers that
take structured output best that way: the schema is the parameters of one tool named
like the schema, ``tool_choice`` forces it, and the reply is that call's arguments
(the call named like the schema when there are several; the message's content when
there is none). Function parameters must be an object: a schema whose root is not
``{"type": "object"}`` travels wrapped as the one property ``value`` of an object
(its ``$defs`` stay at the root), and the reply is unwrapped back to the value's text,
streamed pieces included. (A ``$ref`` to the root itself, ``"#"``, would then point at
the wrapper: such schemas go as ``response_format``.)

Streaming (``stream``, ``astream``): ``stream=True``, and ``stream_options`` asking for
the usage when the caller set none and litellm lists the option for the provider
(OpenAI, Azure, vLLM, Groq ...; others report usage their own way, or not). Text
pieces are yielded as they arrive (with tools: the arguments of the call named like
the schema; a reply that makes no call shows its content only in the final
Completion), then one :class:`~jsonmode.backends.base.Completion` with the whole
reply, its usage when the server reported it (never litellm's estimate) and
``truncated`` when it stopped at the length limit.

Every call runs under one deadline, ``timeout`` (default
:data:`~jsonmode.backends.deadline.DEFAULT_TIMEOUT`, 120 s), for the whole call:
connect, send and the complete reply, a stream read to its end included. litellm's own
``timeout`` is per read (a server sending a byte a second never trips it), so it is
passed the same number only as a backstop; see :mod:`jsonmode.backends.deadline` for
what happens at the deadline. Failures carry the server's ``Retry-After`` as
``retry_after`` for the transport policy, and one clean line as their message: the
exception's class, the HTTP status, the provider's own words
(``RateLimitError (HTTP 429): Rate limit reached``), without the prefixes litellm
repeats. A call that got no response at all (litellm reports it as an HTTP 500) says
what happened and where instead, with no status: ``cannot connect to 127.0.0.1:8000
(connection refused)`` (see :mod:`jsonmode.backends.network`); it stays transient.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from jsonmode.backends import deadline as _deadline
from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.backends.deadline import check_timeout
from jsonmode.backends.network import connection_failure
from jsonmode.errors import (
    BackendError,
    JsonModeError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)
from jsonmode.result import Usage
from jsonmode.retry import parse_retry_after, response_headers
from jsonmode.schema.core import Schema

if TYPE_CHECKING:
    from jsonmode.decoding.grammars import CompiledGrammar

__all__ = [
    "LiteLLMBackend",
    "NativeTransport",
    "describe",
    "import_in_background",
    "map_error",
    "native_schema_for",
    "structured_outputs",
]

#: How the native tier sends the schema: ``response_format`` or one forced tool call.
NativeTransport = Literal["response_format", "tools"]
_TRANSPORTS: tuple[NativeTransport, ...] = ("response_format", "tools")

# provider prefixes whose servers take a JSON Schema as ``response_format``
_NATIVE = frozenset({"openai", "azure", "ollama", "ollama_chat", "hosted_vllm"})
# Statuses worth retrying: timeout, conflict, too early, rate limit, and 5xx.
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_import_lock = threading.Lock()  # held for the whole import: a second user waits on it
_module: ModuleType | None = None
_importer_lock = threading.Lock()
_importer: threading.Thread | None = None


def _litellm() -> ModuleType:
    if _module is not None:  # the common case, without the lock
        return _module
    return _import()


def import_in_background() -> threading.Thread | None:
    """Start importing litellm in a daemon thread, and return at once: the thread, or
    None when litellm is imported already.

    For a program that knows early it will need litellm (the CLI, as soon as it has
    read its arguments): the import (seconds) then runs while the program reads its
    files, and the first use (``prepare()``, a call) waits only for what is left of
    it. Once started, later calls return the same thread. If the import fails in the
    thread, the first use imports it again and raises its error there.

    Start it after the program's own imports: two threads importing the same
    modules at once wait for each other (Python's import locks), and only a circular
    import between them could make one fail. Thread-safe.
    """
    global _importer
    with _importer_lock:
        if _module is not None:
            return None
        if _importer is not None:
            return _importer
        _importer = threading.Thread(
            target=_import_quietly, name="jsonmode-import-litellm", daemon=True
        )
        _importer.start()
        return _importer


def _import_quietly() -> None:
    with contextlib.suppress(BaseException):  # the first use imports again and raises it
        _import()


def _import() -> ModuleType:
    global _module
    with _import_lock:
        if _module is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            os.environ.setdefault("LITELLM_TELEMETRY", "False")
            import litellm

            litellm.suppress_debug_info = True
            litellm.telemetry = False
            _module = litellm
        return _module


def _provider(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else "openai"


def native_schema_for(model: str, api_base: str | None) -> bool | None:
    """Whether the endpoint is known to take a JSON Schema (None: unknown).

    An ``openai/`` model behind a custom ``api_base`` is some OpenAI-compatible
    server whose support is unknown: the caller can still ask for ``tier="native"``.
    """
    provider = _provider(model)
    if provider not in _NATIVE:
        return None
    if provider in ("openai", "azure") and api_base:
        return None
    return True


def structured_outputs(grammar: CompiledGrammar) -> dict[str, Any] | None:
    """vLLM's ``structured_outputs`` field for ``grammar``; None when vLLM cannot take
    its kind as it is (rules bound to JSON Schemas, built-ins)."""
    if grammar.kind == "gbnf" and not grammar.schemas:
        return {"grammar": grammar.source}
    if grammar.kind == "regex":
        return {"regex": grammar.source}
    if grammar.kind == "choice":
        return {"choice": json.loads(grammar.source)}
    return None


@functools.lru_cache(maxsize=64)
def _takes_stream_options(model: str) -> bool:
    """Whether litellm lists ``stream_options`` for the model's provider."""
    litellm = _litellm()
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        supported = litellm.get_supported_openai_params(model=name, custom_llm_provider=provider)
    except Exception:  # an unknown provider: send nothing it might refuse
        return False
    return "stream_options" in (supported or ())


def _openai_strict_ok(schema: Any) -> bool:
    """OpenAI's strict mode needs closed objects with every property required."""
    if isinstance(schema, list):
        return all(_openai_strict_ok(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if "properties" in schema or schema.get("type") == "object":
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required", [])) != set(props):
            return False
    return all(_openai_strict_ok(value) for value in schema.values())


def _schema_arguments(schema: Schema) -> dict[str, Any]:
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": schema.name,
                "schema": schema.json_schema,
                "strict": _openai_strict_ok(schema.json_schema),
            },
        }
    }


def _refers_to_root(node: Any) -> bool:
    if isinstance(node, dict):
        if node.get("$ref") == "#":
            return True
        return any(_refers_to_root(value) for value in node.values())
    if isinstance(node, list):
        return any(_refers_to_root(item) for item in node)
    return False


_DEFS = ("$defs", "definitions")


def _tool_parameters(schema: Schema) -> tuple[dict[str, Any], bool]:
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


def _tool_arguments(schema: Schema, parameters: dict[str, Any]) -> dict[str, Any]:
    root = schema.json_schema
    description = root.get("description") if isinstance(root, dict) else None
    function: dict[str, Any] = {
        "name": schema.name,
        "description": description
        if isinstance(description, str) and description
        else f"Give the {schema.name} value as this function's arguments.",
        "parameters": parameters,
    }
    if _openai_strict_ok(parameters):
        function["strict"] = True
    return {
        "tools": [{"type": "function", "function": function}],
        "tool_choice": {"type": "function", "function": {"name": schema.name}},
    }


def map_error(exc: Exception) -> BackendError:
    """A litellm / OpenAI SDK exception as a transient or permanent backend error.

    The message is one line (:func:`describe`). The server's ``Retry-After`` /
    ``retry-after-ms`` header, when it sent a readable one, becomes the error's
    ``retry_after`` (seconds). A call that got no response (refused, no such host, TLS,
    a connection lost before the reply) is transient, without a status code.
    """
    litellm = _litellm()
    if connection_failure(exc) is not None:  # no response: litellm's status 500 is made up
        return TransientBackendError(describe(exc))
    status = _status(exc)
    retry_after = parse_retry_after(response_headers(exc))
    # litellm reports a stream broken off as MidStreamFallbackError (a 503), and a
    # timeout as Timeout (408): both land in the transient set.
    if isinstance(exc, (litellm.Timeout, litellm.APIConnectionError)) or (
        status is not None and (status in _TRANSIENT_STATUS or status >= 500)
    ):
        return TransientBackendError(describe(exc), status_code=status, retry_after=retry_after)
    return PermanentBackendError(describe(exc), status_code=status, retry_after=retry_after)


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


# What litellm puts before the provider's words, often more than once:
# "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached".
_LITELLM_PREFIX = re.compile(r"litellm\.\w+:\s*")
_CLASS_PREFIX = re.compile(r"([A-Z]\w*):\s*")
_PROVIDER_PREFIX = re.compile(r"\w+Exception\s+-\s+")


def describe(exc: BaseException) -> str:
    """One line for a litellm exception: its class once, the HTTP status when there was a
    response, then the provider's message without litellm's repeated prefixes, e.g.
    ``RateLimitError (HTTP 429): Rate limit reached``.

    A stream that broke off is described by the error that broke it (litellm wraps it
    in ``MidStreamFallbackError``), marked ``mid-stream``. A call that got no response
    is described by :func:`~jsonmode.backends.network.connection_failure`.
    """
    litellm = _litellm()
    source, where = exc, ""
    original = getattr(exc, "original_exception", None)
    broken = getattr(getattr(litellm, "exceptions", None), "MidStreamFallbackError", ())
    if isinstance(exc, broken) and isinstance(original, Exception):
        source = original
        where = "" if getattr(exc, "is_pre_first_chunk", False) else " mid-stream"
    failure = connection_failure(source)
    if failure is not None:
        return failure.replace(" (", f"{where} (", 1) if where else failure
    name = type(source).__name__
    status = _status(source)
    # a connection that failed or timed out had no response: litellm's 500/408 is made up
    shown = (
        None
        if status is None or isinstance(source, (litellm.APIConnectionError, litellm.Timeout))
        else status
    )
    text = str(getattr(source, "message", None) or source)
    text = _strip_prefixes(text, litellm)
    label = f"{name}{where}" + (f" (HTTP {shown})" if shown is not None else "")
    return f"{label}: {text}" if text else label


def _strip_prefixes(text: str, litellm: ModuleType) -> str:
    text = " ".join(text.split())
    while True:
        match = (
            _LITELLM_PREFIX.match(text)
            or _PROVIDER_PREFIX.match(text)
            or _exception_name(_CLASS_PREFIX.match(text), litellm)
        )
        if match is None or not match.end():
            return text
        text = text[match.end() :]


def _exception_name(match: re.Match[str] | None, litellm: ModuleType) -> re.Match[str] | None:
    """``match`` when it names an exception class of litellm or the OpenAI SDK."""
    if match is None:
        return None
    found = getattr(litellm, match.group(1), None)
    if found is None:
        openai = getattr(litellm, "openai", None)
        found = getattr(openai, match.group(1), None)
    return match if isinstance(found, type) and issubclass(found, BaseException) else None


class LiteLLMBackend:
    """Completes requests with ``litellm.completion`` / ``litellm.acompletion``; streams them.

    Args:
        model: a litellm model string, provider first (``"openai/gpt-4o-mini"``).
        timeout: seconds one call may take, whole reply included (default
            :data:`~jsonmode.backends.deadline.DEFAULT_TIMEOUT`, 120 s); past it the
            call fails with TransientBackendError (retried by the transport policy).
            A positive, finite number; None means the default. A stream falls under
            one such deadline, whole.
        native: how the native tier sends the schema: ``"response_format"`` (the
            default) or ``"tools"`` (one forced function call; see the module
            docstring). Other tiers are not affected.
        vllm_processor: the server is a vLLM server running jsonmode's logits
            processor (README, "Serving with vLLM"): the native tier sends the schema
            to it, as the per-request argument ``vllm_xargs.json_schema``, instead of
            ``response_format`` (vLLM's own grammar), and ``tier="auto"`` picks native.
            Not with ``native="tools"``: the processor would get no schema.
        **options: passed to litellm as is (``api_base``, ``api_key``,
            ``temperature``, ``max_tokens``, ``stream`` ...). ``max_retries`` defaults
            to 0. With ``stream=True`` ``complete`` reads the events and joins them
            into one reply.

    Raises UsageError for a timeout that is not a positive, finite number, a
    ``native`` that is neither transport, ``native="tools"`` with ``vllm_processor``
    or with ``tools`` / ``tool_choice`` among the options.

    Thread-safe: holds no per-request state. A sync call (or stream) runs in a worker
    thread so that it can be given up at its deadline; an async one is cancelled there.
    """

    def __init__(
        self,
        model: str,
        *,
        timeout: float | None = None,
        native: NativeTransport = "response_format",
        vllm_processor: bool = False,
        **options: Any,
    ) -> None:
        if native not in _TRANSPORTS:
            raise UsageError(
                f"native must be 'response_format' or 'tools', not {native!r}",
                hint="native='tools' sends the schema as one forced function call",
            )
        if native == "tools" and vllm_processor:
            raise UsageError(
                "native='tools' cannot be combined with vllm_processor=True",
                hint="jsonmode's vLLM processor reads the schema from vllm_xargs, not a tool",
            )
        if native == "tools" and {"tools", "tool_choice"} & set(options):
            raise UsageError(
                "native='tools' sends its own tools and tool_choice; leave them out",
            )
        self.model = model
        self.native = native
        self.vllm_processor = vllm_processor
        # read at construction, so a test (or a program) may change the module default
        self.timeout: float = check_timeout(
            _deadline.DEFAULT_TIMEOUT if timeout is None else timeout
        )
        # litellm's timeout is per read: the same number, as a backstop for abandoned calls
        self._options = {"max_retries": 0, **options, "timeout": self.timeout}
        self.native_schema = (
            True if vllm_processor else native_schema_for(model, options.get("api_base"))
        )

    @property
    def name(self) -> str:
        return f"litellm:{self.model}"

    def prepare(self) -> None:
        """Import litellm now (seconds, once per process), not in the first timed call.

        Thread-safe; costs a global read once done.
        """
        _litellm()

    def native_grammar(self, grammar: CompiledGrammar) -> bool:
        """Whether the native tier can send ``grammar``: a vLLM endpoint, and a kind it
        takes (see :func:`structured_outputs`)."""
        vllm = self.vllm_processor or _provider(self.model) == "hosted_vllm"
        return vllm and structured_outputs(grammar) is not None

    def _arguments(
        self, request: Request, *, stream: bool = False
    ) -> tuple[dict[str, Any], _Tool | None]:
        """litellm's keyword arguments, and the tool whose arguments are the reply."""
        arguments: dict[str, Any] = {
            **self._options,
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
        }
        if stream:
            arguments["stream"] = True
        tool: _Tool | None = None
        if request.grammar is not None:
            field = structured_outputs(request.grammar) if request.native else None
            if field is not None:
                body = dict(arguments.get("extra_body") or {})
                field = {**(body.get("structured_outputs") or {}), **field}
                arguments["extra_body"] = {**body, "structured_outputs": field}
        elif request.native and self.vllm_processor:
            body = dict(arguments.get("extra_body") or {})
            schema_text = json.dumps(request.schema.json_schema)
            xargs = {**(body.get("vllm_xargs") or {}), "json_schema": schema_text}
            arguments["extra_body"] = {**body, "vllm_xargs": xargs}
        elif (
            request.native
            and self.native == "tools"
            and not _refers_to_root(request.schema.json_schema)
        ):
            parameters, wrapped = _tool_parameters(request.schema)
            arguments.update(_tool_arguments(request.schema, parameters))
            tool = _Tool(request.schema.name, wrapped)
        elif request.native:
            arguments.update(_schema_arguments(request.schema))
        if (
            arguments.get("stream")
            and "stream_options" not in arguments
            and _takes_stream_options(self.model)
        ):
            arguments["stream_options"] = {"include_usage": True}
        return arguments, tool

    def complete(self, request: Request) -> Completion:
        """One call, ended by ``timeout`` (TransientBackendError past it)."""
        litellm = _litellm()  # imported before the deadline starts: the import takes seconds
        arguments, tool = self._arguments(request)

        def call() -> Completion:
            try:
                response = litellm.completion(**arguments)
                if arguments.get("stream"):
                    reader = _Reader(tool)
                    for chunk in response:
                        reader.add(chunk)
                    return reader.completion()
            except JsonModeError:
                raise
            except Exception as exc:
                raise map_error(exc) from exc
            return _to_completion(response, tool)

        return _deadline.call(call, self.timeout, self.name)

    async def acomplete(self, request: Request) -> Completion:
        """One call, cancelled at ``timeout`` (TransientBackendError)."""
        litellm = _litellm()
        arguments, tool = self._arguments(request)

        async def call() -> Completion:
            try:
                response = await litellm.acompletion(**arguments)
                if arguments.get("stream"):
                    reader = _Reader(tool)
                    async for chunk in response:
                        reader.add(chunk)
                    return reader.completion()
            except JsonModeError:
                raise
            except Exception as exc:
                raise map_error(exc) from exc
            return _to_completion(response, tool)

        return await _deadline.acall(call, self.timeout, self.name)

    def stream(self, request: Request) -> Iterator[Chunk]:
        """The reply as it arrives: text pieces, then one :class:`Completion` (whole text,
        usage when reported, truncation). All of it within ``timeout``, in a worker
        thread (see :func:`jsonmode.backends.deadline.stream`); failures as
        ``complete``'s, at any point. Closing the iterator early stops the worker and
        closes the connection when its next event arrives."""
        litellm = _litellm()
        arguments, tool = self._arguments(request, stream=True)

        def chunks() -> Iterator[Chunk]:
            try:
                response = litellm.completion(**arguments)
                try:
                    reader = _Reader(tool)
                    for event in response:
                        piece = reader.add(event)
                        if piece:
                            yield piece
                finally:
                    response.close()
                streamed = reader.completion()
                if _nothing(streamed):  # the server ignored "stream" (see _unstreamed)
                    streamed = _to_completion(litellm.completion(**_unstreamed(arguments)), tool)
                yield streamed
            except JsonModeError:
                raise
            except Exception as exc:
                raise map_error(exc) from exc

        return _deadline.stream(chunks, self.timeout, self.name)

    def astream(self, request: Request) -> AsyncIterator[Chunk]:
        """:meth:`stream` for async code: each step is awaited under what is left of
        ``timeout`` and cancelled at it; closing the iterator closes the connection."""
        litellm = _litellm()
        arguments, tool = self._arguments(request, stream=True)

        async def chunks() -> AsyncIterator[Chunk]:
            try:
                response = await litellm.acompletion(**arguments)
                try:
                    reader = _Reader(tool)
                    async for event in response:
                        piece = reader.add(event)
                        if piece:
                            yield piece
                finally:
                    await response.aclose()
                streamed = reader.completion()
                if _nothing(streamed):  # the server ignored "stream" (see _unstreamed)
                    whole = await litellm.acompletion(**_unstreamed(arguments))
                    streamed = _to_completion(whole, tool)
                yield streamed
            except JsonModeError:
                raise
            except Exception as exc:
                raise map_error(exc) from exc

        return _deadline.astream(chunks, self.timeout, self.name)


class _Tool:
    """The tool a native ``tools`` request forces: its name, and whether the value is
    wrapped as its one property ``value``."""

    __slots__ = ("name", "wrapped")

    def __init__(self, name: str, wrapped: bool) -> None:
        self.name = name
        self.wrapped = wrapped

    def text(self, calls: Sequence[tuple[str | None, str]], content: str) -> str:
        """The reply's text: the arguments of the call named like the tool (else of the
        first call), unwrapped; the content when there was no call."""
        if not calls:
            return content
        arguments = next((args for name, args in calls if name == self.name), calls[0][1])
        return self.unwrap(arguments)

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


class _Reader:
    """Reads a streamed reply's events: the pieces to show, then the whole Completion."""

    def __init__(self, tool: _Tool | None) -> None:
        self._tool = tool
        self._content: list[str] = []
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
        usage = _usage(getattr(event, "usage", None))
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
        if self._tool is None:
            text = content
        else:
            calls = [(holder[0], "".join(pieces)) for holder, pieces in self._calls.values()]
            text = self._tool.text(calls, content)
        return Completion(text, self._usage, truncated=self._finish_reason == "length")


def _nothing(streamed: Completion) -> bool:
    """A streamed reply with no text and no usage: no event came (litellm adds only its
    own closing chunk). A server that does not stream sends a plain JSON body, which
    the event-stream reader skips whole."""
    return not streamed.text and streamed.usage is None


def _unstreamed(arguments: dict[str, Any]) -> dict[str, Any]:
    """The same request, not streamed: asked again when a streamed one brought nothing
    (:func:`_nothing`). Costs a server that does not stream a second request (and a
    streamed reply that was truly empty, without usage, one more); a server that
    streams text never gets one."""
    return {
        key: value for key, value in arguments.items() if key not in ("stream", "stream_options")
    }


def _usage(usage: Any) -> Usage | None:
    """Token counts the server reported (None when it did not)."""
    if usage is None or getattr(usage, "prompt_tokens", None) is None:
        return None
    return Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0))


def _to_completion(response: Any, tool: _Tool | None) -> Completion:
    try:
        choice = response.choices[0]
    except (AttributeError, IndexError, TypeError):
        raise TransientBackendError("backend returned no choices") from None
    text = getattr(choice.message, "content", None) or ""
    if tool is not None:
        calls = [
            (getattr(call.function, "name", None), getattr(call.function, "arguments", None) or "")
            for call in getattr(choice.message, "tool_calls", None) or ()
        ]
        text = tool.text(calls, text)
    usage = _usage(getattr(response, "usage", None))
    return Completion(text, usage, truncated=choice.finish_reason == "length")
