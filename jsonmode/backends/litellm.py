"""Any litellm provider as a backend (``"openai/..."``, ``"ollama/..."``, ``"hosted_vllm/..."``).

litellm is imported on first use (it takes seconds; ``prepare()`` does it ahead, and
the façade calls it before a request's clock starts), with its model cost map read
from the package rather than the network. The OpenAI SDK's own retries are turned
off (``max_retries=0``): transport retries are jsonmode's policy, and stacked retry
loops multiply waiting (so ``max_retries`` and litellm's ``num_retries`` are refused
as options). Every other option is checked against what litellm takes for the model
before the first request (:func:`litellm_options`): litellm sends a name it does not
know to the provider as a body field, so a misspelt one would travel unnoticed.
Provider fields litellm does not know go explicitly in ``extra_body``.

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
there is none; a reply calling only other functions is a failed attempt, re-asked).
Wrapping, strictness and reading: :mod:`jsonmode.backends.openai_wire`.

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

What jsonmode sets in litellm, and why. When jsonmode is the first to import litellm
(nobody could have set its switches yet), ``litellm.disable_streaming_logging = True``:
litellm otherwise submits a task to its logging thread pool for every streamed chunk
(an event loop and the success handler each), which made a stream of many tiny chunks
several times slower and grew the pool to its 100 threads, left running; success
callbacks still get the whole reply once at the end of the stream. A program that
imported litellm first keeps its own setting (set it there for the same effect); set it
back to False after jsonmode's import to get per-chunk logging. ``suppress_debug_info``
and ``telemetry`` are set as before.

Error bodies: for an ``openai/`` model with ``api_base`` and ``api_key`` given (and no
``client`` option), litellm gets an OpenAI SDK client of jsonmode's
(:mod:`jsonmode.backends.error_bodies`) built with those same values, ``max_retries=0``
and ``organization`` when given, whose HTTP client hands on at most 64 KB of an error
body: litellm runs its secret-redaction regexes over the whole body several times
(about 10 µs a character), so a 1 MB 400 took 8 to 17 s to raise and a permanent error
could outlast a short deadline and be retried as a timeout. ``litellm.ssl_verify`` is
read at each call. Other providers use litellm's own clients.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from jsonmode.backends import deadline as _deadline
from jsonmode.backends import error_bodies
from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.backends.deadline import check_timeout
from jsonmode.backends.network import connection_failure
from jsonmode.backends.openai_wire import (
    TRANSPORTS,
    NativeTransport,
    Reader,
    Tool,
    arun_stream,
    native_arguments,
    run_stream,
    stream_steps,
    to_completion,
)
from jsonmode.backends.options import (
    FACADE_OPTIONS,
    check_spelling,
    refuse_retry_options,
    refuse_unknown,
)
from jsonmode.errors import (
    BackendError,
    JsonModeError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)
from jsonmode.retry import parse_retry_after, response_headers

if TYPE_CHECKING:
    from jsonmode.decoding.grammars.compiled import CompiledGrammar

__all__ = [
    "LiteLLMBackend",
    "NativeTransport",
    "describe",
    "import_in_background",
    "litellm_options",
    "map_error",
    "native_schema_for",
    "structured_outputs",
]


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
            first = "litellm" not in sys.modules  # nobody could have set its switches yet
            import litellm

            litellm.suppress_debug_info = True
            litellm.telemetry = False
            if first:
                litellm.disable_streaming_logging = True
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


# Options litellm.completion reads by name from its **kwargs without listing them in
# its signature, OPENAI_CHAT_COMPLETION_PARAMS or all_litellm_params.
_LITELLM_READS = ("extra_body", "drop_params", "additional_drop_params")
# The backend's own options (the rest go to litellm).
_OWN_OPTIONS = ("timeout", "native", "vllm_processor")


@functools.lru_cache(maxsize=64)
def litellm_options(model: str) -> frozenset[str]:
    """Every keyword ``litellm.completion`` takes for ``model``: the parameters it names,
    the OpenAI chat parameters and litellm's own options it keeps out of the request
    (``api_base``, ``metadata``, ``drop_params`` ...), and the OpenAI parameters
    litellm lists for the model's provider (``get_supported_openai_params``). litellm
    sends any other keyword to the provider as a body field, unchecked.

    Imports litellm (seconds, once); then well under a millisecond, cached per model.
    A named OpenAI parameter the provider does not take (``logit_bias`` for Ollama)
    is in the set: litellm itself refuses it before sending anything.
    """
    litellm = _litellm()
    names = {
        name
        for name, parameter in inspect.signature(litellm.completion).parameters.items()
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD
    }
    names.update(getattr(litellm, "OPENAI_CHAT_COMPLETION_PARAMS", ()))
    names.update(getattr(litellm, "all_litellm_params", ()))
    names.update(_LITELLM_READS)
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        names.update(
            litellm.get_supported_openai_params(model=name, custom_llm_provider=provider) or ()
        )
    except Exception:  # a provider litellm does not know: its generic names only
        pass
    return frozenset(names)


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
            ``temperature``, ``max_tokens``, ``stream``, ``extra_body`` ...), once
            known to be options litellm takes for the model (:func:`litellm_options`,
            checked at :meth:`prepare` or the first call): litellm would send any
            other name to the provider as a body field. Fields the provider takes
            and litellm does not know go in ``extra_body={...}``, which litellm
            merges into the request body. The SDK's ``max_retries`` is 0 and not an
            option (nor litellm's ``num_retries``): see the module docstring. With
            ``stream=True`` ``complete`` reads the events and joins them into one
            reply.

    Raises UsageError for a timeout that is not a positive, finite number, a
    ``native`` that is neither transport, ``max_retries``/``num_retries`` or
    ``messages`` among the options, an option misspelt (close to ``timeout``,
    ``native`` or ``vllm_processor``), ``native="tools"`` with ``vllm_processor``
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
        if native not in TRANSPORTS:
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
        refuse_retry_options(options)
        if "messages" in options:
            raise UsageError("'messages' is not an option: jsonmode sends each request's own")
        check_spelling(options, _OWN_OPTIONS, "the litellm backend")
        self._given = tuple(options)
        self._options_checked = False
        self.model = model
        self.native = native
        self.vllm_processor = vllm_processor
        # read at construction, so a test (or a program) may change the module default
        self.timeout: float = check_timeout(
            _deadline.DEFAULT_TIMEOUT if timeout is None else timeout
        )
        # litellm's timeout is per read: the same number, as a backstop for abandoned calls
        self._options = {"max_retries": 0, **options, "timeout": self.timeout}
        self._sdk_clients: dict[bool | str, Any] = {}  # see _sdk_client
        self.native_schema = (
            True if vllm_processor else native_schema_for(model, options.get("api_base"))
        )

    @property
    def name(self) -> str:
        return f"litellm:{self.model}"

    def prepare(self) -> None:
        """Import litellm now (seconds, once per process), not in the first timed call,
        and check the options against what litellm takes for the model
        (:func:`litellm_options`).

        Raises:
            UsageError: an option litellm does not take for this model (it would
                travel to the provider as a body field), naming the closest one.

        Thread-safe; costs a global read once done.
        """
        _litellm()
        self._check_options()

    def _check_options(self) -> None:
        """Refuse the options litellm does not know (once; every call checks, so no
        request leaves with one, prepared or not)."""
        if self._options_checked:
            return
        refuse_unknown(
            self._given,
            litellm_options(self.model),
            f"litellm model {self.model!r}",
            suggest=(*_OWN_OPTIONS, *FACADE_OPTIONS),
            hint="jsonmode passes litellm only the options it takes for this provider; "
            "send other fields in the request body with extra_body={...}",
        )
        self._options_checked = True

    def native_grammar(self, grammar: CompiledGrammar) -> bool:
        """Whether the native tier can send ``grammar``: a vLLM endpoint, and a kind it
        takes (see :func:`structured_outputs`)."""
        vllm = self.vllm_processor or _provider(self.model) == "hosted_vllm"
        return vllm and structured_outputs(grammar) is not None

    def _arguments(
        self, request: Request, *, stream: bool = False
    ) -> tuple[dict[str, Any], Tool | None]:
        """litellm's keyword arguments, and the tool whose arguments are the reply."""
        self._check_options()
        arguments: dict[str, Any] = {
            **self._options,
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
        }
        if stream:
            arguments["stream"] = True
        tool: Tool | None = None
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
        elif request.native:
            fields, tool = native_arguments(request.schema, self.native)
            arguments.update(fields)
        if (
            arguments.get("stream")
            and "stream_options" not in arguments
            and _takes_stream_options(self.model)
        ):
            arguments["stream_options"] = {"include_usage": True}
        return arguments, tool

    def _bounds_error_bodies(self) -> bool:
        """Whether calls go through an SDK client of ours that bounds error bodies: an
        ``openai/`` model with ``api_base`` and ``api_key`` given (what litellm would
        use as they are) and no ``client`` of the caller's."""
        options = self._options
        return (
            self.model.startswith("openai/")
            and isinstance(options.get("api_base"), str)
            and isinstance(options.get("api_key"), str)
            and options.get("client") is None
        )

    def _sdk_client(self, litellm: ModuleType, *, is_async: bool) -> Any:
        """The OpenAI SDK client litellm would build, on an HTTP client that hands it
        at most :data:`~jsonmode.backends.error_bodies.MAX_ERROR_BODY` bytes of an
        error body. Sync: shared per backend; async: new, for one call."""
        import openai

        verify = getattr(litellm, "ssl_verify", True)
        if not isinstance(verify, (bool, str)):
            verify = True
        fields = {
            "api_key": self._options["api_key"],
            "base_url": self._options["api_base"],
            "organization": self._options.get("organization"),
            "max_retries": 0,
            "timeout": self.timeout,
        }
        if is_async:
            return openai.AsyncOpenAI(**fields, http_client=error_bodies.async_client(verify))
        key = verify
        client = self._sdk_clients.get(key)
        if client is None:
            client = openai.OpenAI(**fields, http_client=error_bodies.sync_client(verify))
            self._sdk_clients[key] = client
        return client

    def _sync_arguments(
        self, litellm: ModuleType, request: Request, *, stream: bool = False
    ) -> tuple[dict[str, Any], Tool | None]:
        arguments, tool = self._arguments(request, stream=stream)
        if self._bounds_error_bodies():
            arguments["client"] = self._sdk_client(litellm, is_async=False)
        return arguments, tool

    def _async_arguments(
        self, litellm: ModuleType, request: Request, *, stream: bool = False
    ) -> tuple[dict[str, Any], Tool | None, Any]:
        """The arguments, and the SDK client made for this call (None: litellm's own),
        which the caller closes when the call ends."""
        arguments, tool = self._arguments(request, stream=stream)
        client = None
        if self._bounds_error_bodies():
            client = arguments["client"] = self._sdk_client(litellm, is_async=True)
        return arguments, tool, client

    def complete(self, request: Request) -> Completion:
        """One call, ended by ``timeout`` (TransientBackendError past it)."""
        litellm = _litellm()  # imported before the deadline starts: the import takes seconds
        arguments, tool = self._sync_arguments(litellm, request)

        def call() -> Completion:
            with _mapped():
                response = litellm.completion(**arguments)
                if arguments.get("stream"):
                    reader = Reader(tool)
                    for chunk in response:
                        reader.add(chunk)
                    return reader.completion()
            return to_completion(response, tool)

        return _deadline.call(call, self.timeout, self.name)

    async def acomplete(self, request: Request) -> Completion:
        """One call, cancelled at ``timeout`` (TransientBackendError)."""
        litellm = _litellm()
        arguments, tool, client = self._async_arguments(litellm, request)

        async def call() -> Completion:
            try:
                with _mapped():
                    response = await litellm.acompletion(**arguments)
                    if arguments.get("stream"):
                        reader = Reader(tool)
                        async for chunk in response:
                            reader.add(chunk)
                        return reader.completion()
            finally:
                if client is not None:
                    await client.close()
            return to_completion(response, tool)

        return await _deadline.acall(call, self.timeout, self.name)

    def stream(self, request: Request) -> Iterator[Chunk]:
        """The reply as it arrives: text pieces, then one :class:`Completion` (whole text,
        usage when reported, truncation). All of it within ``timeout``, in a worker
        thread (see :func:`jsonmode.backends.deadline.stream`); failures as
        ``complete``'s, at any point. Closing the iterator early stops the worker and
        closes the connection when its next event arrives. The reply is read by
        :func:`~jsonmode.backends.openai_wire.stream_steps`, as :meth:`astream`'s."""
        litellm = _litellm()
        arguments, tool = self._sync_arguments(litellm, request, stream=True)

        def chunks() -> Iterator[Chunk]:
            with _mapped():
                yield from run_stream(stream_steps(arguments, tool), litellm.completion)

        return _deadline.stream(chunks, self.timeout, self.name)

    def astream(self, request: Request) -> AsyncIterator[Chunk]:
        """:meth:`stream` for async code: each step is awaited under what is left of
        ``timeout`` and cancelled at it; closing the iterator closes the connection."""
        litellm = _litellm()
        arguments, tool, client = self._async_arguments(litellm, request, stream=True)

        async def chunks() -> AsyncIterator[Chunk]:
            try:
                with _mapped():
                    steps = stream_steps(arguments, tool)
                    run = arun_stream(steps, litellm.acompletion, aiter, _aclose)
                    async with contextlib.aclosing(run):
                        async for chunk in run:
                            yield chunk
            finally:
                if client is not None:
                    await client.close()

        return _deadline.astream(chunks, self.timeout, self.name)


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """litellm's (and the SDK's) exceptions as jsonmode's (:func:`map_error`); jsonmode's
    own pass as they are."""
    try:
        yield
    except JsonModeError:
        raise
    except Exception as exc:
        raise map_error(exc) from exc


async def _aclose(response: Any) -> None:
    await response.aclose()
