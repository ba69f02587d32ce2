"""An OpenAI SDK client as a backend: ``JsonMode(openai.OpenAI(...), model="gpt-4o-mini")``.

Takes ``openai.OpenAI`` and ``openai.AsyncOpenAI`` (and Azure's ``AzureOpenAI`` /
``AsyncAzureOpenAI``, or a subclass of any): calls go through the client's own
``chat.completions.create``, so its ``base_url``, API key, organization, default
headers and HTTP client apply. openai is imported only when such a client is passed
(the caller has imported it already); ``import jsonmode`` never imports it.

Retries: the client's ``max_retries`` (the SDK's default is 2) is set to 0 for
jsonmode's calls, on a copy (``client.with_options(max_retries=0)``, which shares the
client's connection pool; the caller's client is not changed). Transient failures are
retried by jsonmode's transport policy alone (``transport=TransportPolicy(...)``),
which honours ``Retry-After``, records every retry in ``Attempt.transport_retries`` and
in the events, and bounds the waiting; the SDK's loop under it would multiply the
calls (3 SDK calls per policy call by default) and hide them from those records.

Every call runs under one deadline, ``timeout`` (default
:data:`~jsonmode.backends.deadline.DEFAULT_TIMEOUT`), for the whole call, a stream read
to its end included; it is also passed to the SDK as its per-request timeout, a
backstop. The native tier sends the schema as ``response_format`` (``json_schema``) or,
with ``native="tools"``, as one forced function call (see
:mod:`jsonmode.backends.openai_wire`, shared with the litellm backend). Streaming asks
for the usage (``stream_options.include_usage``) unless the caller set
``stream_options``.

A sync client serves every call; the async ones run it in a worker thread. An async
client serves the async calls only (``arun``, ``agenerate``, ``astream``, ``amap``): a
sync call raises UsageError (its connection pool belongs to the event loop it runs
on).

Failures: a refused connection or a timeout, HTTP 408/409/425/429 and 5xx are
:class:`~jsonmode.errors.TransientBackendError` (with the server's ``Retry-After``),
any other HTTP status a :class:`~jsonmode.errors.PermanentBackendError`; the message is
one line: the exception's class, the HTTP status and the server's own words.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from jsonmode.backends import deadline as _deadline
from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.backends.openai_wire import (
    TRANSIENT_STATUS,
    TRANSPORTS,
    NativeTransport,
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

__all__ = ["OpenAIClientBackend", "map_openai_error"]

_OWN_OPTIONS = ("model", "timeout", "native")
# create()'s parameters that jsonmode sets itself
_SET_HERE = ("messages", "model", "stream", "timeout")


class OpenAIClientBackend:
    """Completes requests with an OpenAI SDK client's ``chat.completions.create``.

    Args:
        client: an ``openai.OpenAI`` or ``openai.AsyncOpenAI`` (or Azure) client.
        model: the model (or Azure deployment) name, required.
        timeout: seconds one call may take, whole reply included (default
            :data:`~jsonmode.backends.deadline.DEFAULT_TIMEOUT`); past it the call
            fails with TransientBackendError. A positive, finite number.
        native: how the native tier sends the schema, ``"response_format"`` (default)
            or ``"tools"``.
        **options: passed to ``create`` (``temperature``, ``max_tokens``, ``seed``,
            ``extra_body`` ...): only names ``create`` takes; fields it does not know
            go in ``extra_body={...}``.

    Raises:
        UsageError: no ``model``, an option ``create`` does not take (naming the
            closest), ``max_retries`` (see the module docstring), a bad ``native``,
            ``native="tools"`` with ``tools``/``tool_choice``, a bad timeout.

    ``native_schema`` is True for OpenAI's own endpoint (``api.openai.com``), unknown
    (None) for any other ``base_url``: ``tier="native"`` or ``native=`` asks for it.
    Thread-safe as the client is (the SDK's clients are); holds no per-request state.
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str | None = None,
        timeout: float | None = None,
        native: NativeTransport = "response_format",
        **options: Any,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(
                "an OpenAI client needs the model to call",
                hint='JsonMode(client, model="gpt-4o-mini")',
            )
        if native not in TRANSPORTS:
            raise UsageError(f"native must be 'response_format' or 'tools', not {native!r}")
        refuse_retry_options(options)
        check_spelling(options, _OWN_OPTIONS, "an OpenAI client")
        create = client.chat.completions.create
        taken = {
            name
            for name, parameter in inspect.signature(create).parameters.items()
            if parameter.kind is not inspect.Parameter.VAR_KEYWORD
        } - set(_SET_HERE)
        for name in _SET_HERE:
            if name in options:
                raise UsageError(f"{name!r} is not an option here: jsonmode sets it per call")
        refuse_unknown(
            options,
            taken,
            "an OpenAI client's chat.completions.create",
            suggest=(*_OWN_OPTIONS, *FACADE_OPTIONS),
            hint="send other fields in the request body with extra_body={...}",
        )
        if native == "tools" and {"tools", "tool_choice"} & set(options):
            raise UsageError("native='tools' sends its own tools and tool_choice; leave them out")
        self.model = model
        self.native: NativeTransport = native
        self.timeout: float = _deadline.check_timeout(
            _deadline.DEFAULT_TIMEOUT if timeout is None else timeout
        )
        self._client = client.with_options(max_retries=0)
        import openai  # the caller made the client: openai is imported already

        self._async = isinstance(client, openai.AsyncOpenAI)  # Azure's async one included
        self._options = dict(options)
        host = urlsplit(str(getattr(client, "base_url", ""))).hostname
        self.native_schema: bool | None = True if host == "api.openai.com" else None

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    def _arguments(
        self, request: Request, *, stream: bool = False
    ) -> tuple[dict[str, Any], Tool | None]:
        arguments: dict[str, Any] = {
            **self._options,
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
            "timeout": self.timeout,
        }
        tool: Tool | None = None
        if request.native and request.grammar is None:
            fields, tool = native_arguments(request.schema, self.native)
            arguments.update(fields)
        if stream:
            arguments["stream"] = True
            arguments.setdefault("stream_options", {"include_usage": True})
        return arguments, tool

    def _sync_only(self) -> None:
        if self._async:
            raise UsageError(
                "an AsyncOpenAI client answers async calls only",
                hint="use arun()/agenerate()/astream()/amap(), or pass an openai.OpenAI client",
            )

    def _blocking(self, request: Request) -> Callable[[], Completion]:
        """One blocking call of a sync client for ``request``, its errors mapped
        (``complete``'s, and ``acomplete``'s in a worker thread)."""
        arguments, tool = self._arguments(request)

        def call() -> Completion:
            with _mapped():
                return to_completion(self._client.chat.completions.create(**arguments), tool)

        return call

    def complete(self, request: Request) -> Completion:
        """One call, ended by ``timeout`` (TransientBackendError past it)."""
        self._sync_only()
        return _deadline.call(self._blocking(request), self.timeout, self.name)

    async def acomplete(self, request: Request) -> Completion:
        """One call, cancelled at ``timeout`` (a sync client's in a worker thread)."""
        if not self._async:
            return await _deadline.acall_sync(self._blocking(request), self.timeout, self.name)
        arguments, tool = self._arguments(request)
        create = self._client.chat.completions.create

        async def acall() -> Completion:
            with _mapped():
                return to_completion(await create(**arguments), tool)

        return await _deadline.acall(acall, self.timeout, self.name)

    def stream(self, request: Request) -> Iterator[Chunk]:
        """The reply as it arrives: text pieces, then one whole :class:`Completion`,
        within ``timeout`` in a worker thread. Closing the iterator closes the stream."""
        self._sync_only()
        arguments, tool = self._arguments(request, stream=True)
        create = self._client.chat.completions.create

        def chunks() -> Iterator[Chunk]:
            with _mapped():
                yield from run_stream(stream_steps(arguments, tool), create)

        return _deadline.stream(chunks, self.timeout, self.name)

    def astream(self, request: Request) -> AsyncIterator[Chunk]:
        """:meth:`stream` for async code, each step awaited under what is left of
        ``timeout`` (a sync client's steps in worker threads)."""
        arguments, tool = self._arguments(request, stream=True)
        create = self._client.chat.completions.create
        events_of: Callable[[Any], AsyncIterator[Any]]
        if self._async:
            acreate, events_of = create, aiter
        else:
            acreate = functools.partial(asyncio.to_thread, create)
            events_of = _threaded

        async def chunks() -> AsyncIterator[Chunk]:
            with _mapped():
                run = arun_stream(stream_steps(arguments, tool), acreate, events_of, _close)
                async with contextlib.aclosing(run):
                    async for chunk in run:
                        yield chunk

        return _deadline.astream(chunks, self.timeout, self.name)


async def _threaded(response: Any) -> AsyncIterator[Any]:
    """A sync stream's events, each fetched in a worker thread."""
    events = iter(response)
    done = object()
    while (event := await asyncio.to_thread(next, events, done)) is not done:
        yield event


async def _close(response: Any) -> None:
    """Close a stream, a sync client's (``close()``) or an async one's (awaited)."""
    closed = response.close()
    if inspect.isawaitable(closed):
        await closed


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except JsonModeError:
        raise
    except Exception as exc:
        raise map_openai_error(exc) from exc


def map_openai_error(exc: Exception) -> BackendError:
    """An OpenAI SDK exception as a transient or permanent backend error (one line:
    class, HTTP status, the server's message), with the server's ``Retry-After``."""
    import openai  # a client was passed: openai is imported already

    status = getattr(exc, "status_code", None) if isinstance(exc, openai.APIStatusError) else None
    retry_after = parse_retry_after(response_headers(exc))
    label = type(exc).__name__ + (f" (HTTP {status})" if status is not None else "")
    text = " ".join(_server_words(exc).split())
    message = f"{label}: {text}" if text else label
    transient = isinstance(exc, openai.APIConnectionError) or (
        status is not None and (status in TRANSIENT_STATUS or status >= 500)
    )
    kind = TransientBackendError if transient else PermanentBackendError
    return kind(message, status_code=status, retry_after=retry_after)


def _server_words(exc: Exception) -> str:
    """The message the server put in its error body, else the exception's own."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        said = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(said, str) and said:
            return said
    return str(getattr(exc, "message", None) or exc)
