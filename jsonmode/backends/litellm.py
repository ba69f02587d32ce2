"""Any litellm provider as a backend (``"openai/..."``, ``"ollama/..."``, ``"hosted_vllm/..."``).

litellm is imported on first use (it takes seconds), with its model cost map read
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

Every call runs under one deadline, ``timeout`` (default
:data:`~jsonmode.backends.deadline.DEFAULT_TIMEOUT`, 120 s), for the whole call:
connect, send and the complete reply, a ``stream=True`` reply read to its end
included. litellm's own ``timeout`` is per read (a server sending a byte a second
never trips it), so it is passed the same number only as a backstop; see
:mod:`jsonmode.backends.deadline` for what happens at the deadline. Failures carry
the server's ``Retry-After`` as ``retry_after`` for the transport policy.
"""

from __future__ import annotations

import json
import os
import threading
from types import ModuleType
from typing import Any

from jsonmode.backends import deadline as _deadline
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.deadline import check_timeout
from jsonmode.errors import BackendError, PermanentBackendError, TransientBackendError
from jsonmode.result import Usage
from jsonmode.retry import parse_retry_after, response_headers
from jsonmode.schema.core import Schema

__all__ = ["LiteLLMBackend", "native_schema_for"]

# provider prefixes whose servers take a JSON Schema as ``response_format``
_NATIVE = frozenset({"openai", "azure", "ollama", "ollama_chat", "hosted_vllm"})
# Statuses worth retrying: timeout, conflict, too early, rate limit, and 5xx.
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_import_lock = threading.Lock()
_module: ModuleType | None = None


def _litellm() -> ModuleType:
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


def map_error(exc: Exception) -> BackendError:
    """A litellm / OpenAI SDK exception as a transient or permanent backend error.

    The server's ``Retry-After`` / ``retry-after-ms`` header, when it sent a readable
    one, becomes the error's ``retry_after`` (seconds).
    """
    litellm = _litellm()
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    message = f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
    retry_after = parse_retry_after(response_headers(exc))
    # litellm reports a refused connection as InternalServerError / APIConnectionError
    # (status 500), and a timeout as Timeout (408): both land in the transient set.
    if isinstance(exc, (litellm.Timeout, litellm.APIConnectionError)) or (
        status is not None and (status in _TRANSIENT_STATUS or status >= 500)
    ):
        return TransientBackendError(message, status_code=status, retry_after=retry_after)
    return PermanentBackendError(message, status_code=status, retry_after=retry_after)


class LiteLLMBackend:
    """Completes requests with ``litellm.completion`` / ``litellm.acompletion``.

    Args:
        model: a litellm model string, provider first (``"openai/gpt-4o-mini"``).
        timeout: seconds one call may take, whole reply included (default
            :data:`~jsonmode.backends.deadline.DEFAULT_TIMEOUT`, 120 s); past it the
            call fails with TransientBackendError (retried by the transport policy).
            A positive, finite number; None means the default.
        vllm_processor: the server is a vLLM server running jsonmode's logits
            processor (README, "Serving with vLLM"): the native tier sends the schema
            to it, as the per-request argument ``vllm_xargs.json_schema``, instead of
            ``response_format`` (vLLM's own grammar), and ``tier="auto"`` picks native.
        **options: passed to litellm as is (``api_base``, ``api_key``,
            ``temperature``, ``max_tokens``, ``stream`` ...). ``max_retries`` defaults
            to 0. With ``stream=True`` the events are read and joined into one reply.

    Raises UsageError for a timeout that is not a positive, finite number.

    Thread-safe: holds no per-request state. A sync call runs in a worker thread so
    that it can be given up at its deadline; an async call is cancelled there.
    """

    def __init__(
        self,
        model: str,
        *,
        timeout: float | None = None,
        vllm_processor: bool = False,
        **options: Any,
    ) -> None:
        self.model = model
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

    def _arguments(self, request: Request) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            **self._options,
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
        }
        if request.native and self.vllm_processor:
            body = dict(arguments.get("extra_body") or {})
            schema_text = json.dumps(request.schema.json_schema)
            xargs = {**(body.get("vllm_xargs") or {}), "json_schema": schema_text}
            arguments["extra_body"] = {**body, "vllm_xargs": xargs}
        elif request.native:
            arguments.update(_schema_arguments(request.schema))
        return arguments

    def complete(self, request: Request) -> Completion:
        """One call, ended by ``timeout`` (TransientBackendError past it)."""
        litellm = _litellm()  # imported before the deadline starts: the import takes seconds
        arguments = self._arguments(request)

        def call() -> Completion:
            try:
                response = litellm.completion(**arguments)
                if arguments.get("stream"):
                    response = _joined(litellm, list(response), arguments["messages"])
            except Exception as exc:
                raise map_error(exc) from exc
            return _to_completion(response)

        return _deadline.call(call, self.timeout, self.name)

    async def acomplete(self, request: Request) -> Completion:
        """One call, cancelled at ``timeout`` (TransientBackendError)."""
        litellm = _litellm()
        arguments = self._arguments(request)

        async def call() -> Completion:
            try:
                response = await litellm.acompletion(**arguments)
                if arguments.get("stream"):
                    chunks = [chunk async for chunk in response]
                    response = _joined(litellm, chunks, arguments["messages"])
            except Exception as exc:
                raise map_error(exc) from exc
            return _to_completion(response)

        return await _deadline.acall(call, self.timeout, self.name)


def _joined(litellm: ModuleType, chunks: list[Any], messages: list[Any]) -> Any:
    """The events of a streamed reply as one response (None when there were none)."""
    if not chunks:
        return None
    return litellm.stream_chunk_builder(chunks, messages=messages)


def _to_completion(response: Any) -> Completion:
    try:
        choice = response.choices[0]
    except (AttributeError, IndexError, TypeError):
        raise TransientBackendError("backend returned no choices") from None
    text = getattr(choice.message, "content", None) or ""
    usage = getattr(response, "usage", None)
    reported = (
        Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0))
        if usage is not None and getattr(usage, "prompt_tokens", None) is not None
        else None
    )
    return Completion(text, reported, truncated=choice.finish_reason == "length")
