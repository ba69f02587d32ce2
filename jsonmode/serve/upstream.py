"""The model behind the server: structured calls through jsonmode's tiers, the rest proxied.

One :class:`Upstream` per worker process. For an OpenAI-compatible upstream
(``openai/...`` and ``hosted_vllm/...`` models) it holds one ``openai.AsyncOpenAI``
client, whose connection pool every request shares, and an ``httpx.AsyncClient`` (the
SDK's own) for requests proxied unchanged. Any other provider goes through litellm,
one call at a time.

Structured requests (:meth:`Upstream.run`) go through a :class:`~jsonmode.JsonMode`
made for the request (its mode and attempts) over :class:`CallBackend`, which sends the
request's own fields (``temperature``, ``max_tokens`` ...) with each attempt: natively
(the schema as ``response_format``; to a vLLM server running jsonmode's processor as
``vllm_xargs.json_schema``, constrained by jsonmode's own decoder) where the upstream
takes a schema, else prompted with repair and re-ask. Each upstream call is a plain
(not streamed) completion: the server streams an attempt only once it conforms.

A model's refusal (``message.refusal``, OpenAI's structured outputs) ends the request
at once: it is passed to the client as the model gave it, not re-asked.

Thread-safety: an Upstream belongs to one event loop (its clients' pools do).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonmode.backends.base import Chunk, Completion, Request
from jsonmode.backends.deadline import acall
from jsonmode.backends.litellm import native_schema_for
from jsonmode.backends.openai_client import map_openai_error
from jsonmode.backends.openai_wire import native_arguments, to_completion
from jsonmode.errors import JsonModeError, PermanentBackendError, UsageError
from jsonmode.facade import JsonMode
from jsonmode.records import Usage
from jsonmode.result import Result
from jsonmode.serve.config import ServeConfig
from jsonmode.serve.errors import from_jsonmode
from jsonmode.serve.wire import Call

__all__ = ["CallBackend", "Outcome", "Refused", "Upstream", "usage_json"]

#: Providers whose servers speak OpenAI's chat completions API at ``api_base``.
OPENAI_COMPATIBLE = ("openai", "hosted_vllm")


class Refused(PermanentBackendError):
    """The model refused (``message.refusal``): passed on, never re-asked."""

    def __init__(self, refusal: str, usage: Usage | None) -> None:
        super().__init__(f"the model refused: {refusal}")
        self.refusal = refusal
        self.usage = usage


@dataclass(frozen=True)
class Outcome:
    """What a structured request produced.

    Attributes:
        text: the conforming JSON text (the content, or the tool call's arguments).
        value: that JSON value.
        tier, mode, attempts, repairs: how (the reply's ``jsonmode`` record).
        usage: token counts summed over every attempt (None: never reported).
        refusal: the model's refusal (then ``text`` is "").
        reasoning: the thinking of the attempt that conformed.
        outcomes: how each attempt ended.
    """

    text: str
    value: Any
    tier: str
    mode: str
    attempts: int
    repairs: tuple[dict[str, Any], ...] = ()
    usage: Usage | None = None
    refusal: str | None = None
    reasoning: str | None = None
    outcomes: tuple[str, ...] = field(default=())

    def record(self) -> dict[str, Any]:
        """The reply's top-level ``jsonmode`` object (contract: ``tier``, ``attempts``,
        ``repairs``)."""
        return {
            "tier": self.tier,
            "mode": self.mode,
            "attempts": self.attempts,
            "repairs": list(self.repairs),
            "outcomes": list(self.outcomes),
        }


def usage_json(usage: Usage | None) -> dict[str, Any] | None:
    """OpenAI's ``usage`` object for ``usage`` (None: not reported)."""
    if usage is None:
        return None
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out


def repair_json(repair: Any) -> dict[str, Any]:
    return {
        "path": repair.path,
        "kind": repair.kind,
        "before": _plain(repair.before),
        "after": _plain(repair.after),
    }


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def outcome_of(result: Result[Any], mode: str) -> Outcome:
    return Outcome(
        text=json.dumps(result.data, ensure_ascii=False),
        value=result.data,
        tier=result.tier,
        mode=mode,
        attempts=len(result.attempts),
        repairs=tuple(repair_json(repair) for repair in result.repairs),
        usage=result.usage,
        reasoning=result.reasoning,
        outcomes=tuple(attempt.outcome for attempt in result.attempts),
    )


def summed(records: Any) -> Usage | None:
    """The usage of ``records`` (attempts, anything with ``usage``) added up (None:
    none reported)."""
    reported = [r.usage for r in records if r.usage is not None]
    total = Usage()
    for usage in reported:
        total = total + usage
    return total if reported else None


class CallBackend:
    """A backend for one request: the shared SDK client, the request's own fields.

    Implements jsonmode's :class:`~jsonmode.backends.Backend` protocol (async only):
    each call sends the attempt's messages with the request's fields; natively the
    schema as ``response_format`` (or ``vllm_xargs.json_schema`` for jsonmode's vLLM
    processor). Raises :class:`Refused` for a refusal, BackendError for the rest.
    """

    def __init__(
        self,
        client: Any,
        model: str,
        params: dict[str, Any],
        *,
        native_schema: bool | None,
        vllm_processor: bool,
        timeout: float,
    ) -> None:
        self._client = client
        self.model = model
        self._params = params
        self.native_schema = native_schema
        self._vllm_processor = vllm_processor
        self._timeout = timeout

    @property
    def name(self) -> str:
        return f"serve:{self.model}"

    def _arguments(self, request: Request) -> tuple[dict[str, Any], Any]:
        extra = dict(self._params)
        arguments: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
            "timeout": self._timeout,
        }
        tool = None
        if request.native and self._vllm_processor:
            xargs = dict(extra.get("vllm_xargs") or {})
            xargs["json_schema"] = json.dumps(request.schema.json_schema)
            extra["vllm_xargs"] = xargs
        elif request.native:
            fields, tool = native_arguments(request.schema, "response_format")
            arguments.update(fields)
        if extra:
            arguments["extra_body"] = extra
        return arguments, tool

    def complete(self, request: Request) -> Completion:
        raise UsageError("the server's backend answers async calls only")

    async def acomplete(self, request: Request) -> Completion:
        arguments, tool = self._arguments(request)
        create = self._client.chat.completions.create

        async def one() -> Completion:
            try:
                response = await create(**arguments)
            except JsonModeError:
                raise
            except Exception as exc:
                raise map_openai_error(exc) from exc
            completion = to_completion(response, tool)
            refusal = _refusal(response)
            if refusal and not completion.text:
                raise Refused(refusal, completion.usage)
            return completion

        return await acall(one, self._timeout, self.name)

    def stream(self, request: Request) -> Iterator[Chunk]:  # pragma: no cover - unused
        raise UsageError("the server streams whole attempts")


def _refusal(response: Any) -> str | None:
    try:
        refusal = response.choices[0].message.refusal
    except (AttributeError, IndexError, TypeError):
        return None
    return refusal if isinstance(refusal, str) and refusal else None


class Upstream:
    """The model behind one worker's app. See the module docstring.

    Args:
        config: the server's settings.

    ``aclose`` releases the connection pools (at shutdown).
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        provider, _, name = config.upstream.partition("/")
        self.provider = provider
        self.compatible = provider in OPENAI_COMPATIBLE
        self.model_name = name if self.compatible else config.upstream
        if config.vllm_processor:
            self.native_schema: bool | None = True
        elif config.tier == "native":
            self.native_schema = True
        elif config.tier == "prompted":
            self.native_schema = False
        else:
            self.native_schema = native_schema_for(config.upstream, config.api_base)
        self._client: Any = None
        self._http: Any = None
        if self.compatible:
            import httpx
            import openai

            # one pool for every request of this worker: the SDK's calls and the proxied ones
            self._http = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
                timeout=config.timeout_s,
            )
            self._client = openai.AsyncOpenAI(
                api_key=config.upstream_api_key or "none",
                base_url=config.api_base,
                max_retries=0,
                timeout=config.timeout_s,
                http_client=self._http,
            )

    async def aclose(self) -> None:
        """Close the connection pool (at shutdown)."""
        if self._http is not None:
            await self._http.aclose()

    def _backend(self, call: Call) -> Any:
        if self.compatible:
            return CallBackend(
                self._client,
                self.model_name,
                call.params,
                native_schema=self.native_schema,
                vllm_processor=self.config.vllm_processor,
                timeout=self.config.timeout_s,
            )
        from jsonmode.backends.litellm import LiteLLMBackend

        options = dict(call.params)
        if self.config.api_base:
            options["api_base"] = self.config.api_base
        if self.config.upstream_api_key:
            options["api_key"] = self.config.upstream_api_key
        return LiteLLMBackend(self.config.upstream, timeout=self.config.timeout_s, **options)

    async def run(self, call: Call) -> Outcome:
        """Answer a structured call through jsonmode's tiers.

        Raises:
            ServeError: 422 (no conforming reply: every attempt listed), the upstream's
                failure past the transport policy (429/502/503/504, see
                :mod:`jsonmode.serve.errors`), 400 (a field litellm does not take for
                this provider); each with the ``jsonmode`` record and the usage.
        """
        options = call.options
        tier: Literal["native", "prompted"] = "native" if self.native_schema else "prompted"
        jm = JsonMode(
            self._backend(call),
            options.mode,
            options.max_attempts,
            tier=tier,
            reasoning=options.reasoning,
        )
        try:
            result = await jm.arun(list(call.messages), call.schema, schema_name=call.schema_name)
        except Refused as refused:
            return self._refused(refused, tier, options.mode)
        except JsonModeError as exc:
            record = {
                "tier": tier,
                "mode": options.mode,
                "attempts": len(exc.attempts),
                "repairs": [],
                "outcomes": [a.outcome for a in exc.attempts],
            }
            top = {"jsonmode": record, "usage": usage_json(summed(exc.attempts))}
            raise from_jsonmode(exc, top=top) from exc
        return outcome_of(result, options.mode)

    @staticmethod
    def _refused(refused: Refused, tier: str, mode: str) -> Outcome:
        attempts = refused.attempts
        return Outcome(
            text="",
            value=None,
            tier=tier,
            mode=mode,
            attempts=len(attempts),
            # the refusing call's attempt is a backend_error, which carries no usage
            usage=summed([*attempts, refused]),
            refusal=refused.refusal,
            outcomes=(*(a.outcome for a in attempts[:-1]), "refused"),
        )

    # ---- requests without structure ------------------------------------------------

    def proxy_url(self, path: str) -> str:
        base = (self.config.api_base or "https://api.openai.com/v1").rstrip("/")
        return f"{base}/{path.lstrip('/')}"

    async def proxy(self, body: dict[str, Any]) -> tuple[int, dict[str, str], AsyncIterator[bytes]]:
        """Send ``body`` (a chat completions request without structure) upstream as it
        came, but for the model's name: (status, headers, the body's bytes as they
        arrive). Closing the iterator closes the upstream connection.

        Raises:
            BackendError: no answer (refused connection, timeout), as a transient one.
        """
        if not self.compatible:
            return await self._proxy_litellm(body)
        payload = {**body, "model": self.model_name}
        client = self._http
        headers = {"content-type": "application/json"}
        if self.config.upstream_api_key:
            headers["authorization"] = f"Bearer {self.config.upstream_api_key}"
        request = client.build_request(
            "POST",
            self.proxy_url("chat/completions"),
            content=json.dumps(payload).encode(),
            headers=headers,
            timeout=self.config.timeout_s,
        )
        try:
            response = await client.send(request, stream=True)
        except Exception as exc:
            raise map_openai_error(_as_connection_error(exc, request)) from exc
        kept = {
            key: value
            for key, value in response.headers.items()
            if key.lower() in ("content-type", "retry-after", "x-request-id")
        }

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in response.aiter_raw():
                    yield piece
            finally:
                await response.aclose()

        return response.status_code, kept, pieces()

    async def _proxy_litellm(
        self, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], AsyncIterator[bytes]]:
        from jsonmode.backends.litellm import LiteLLMBackend, map_error

        backend = LiteLLMBackend(self.config.upstream, timeout=self.config.timeout_s)
        backend.prepare()
        import litellm

        arguments = {k: v for k, v in body.items() if k not in ("model", "jsonmode")}
        if self.config.api_base:
            arguments["api_base"] = self.config.api_base
        if self.config.upstream_api_key:
            arguments["api_key"] = self.config.upstream_api_key
        try:
            response = await litellm.acompletion(model=self.config.upstream, **arguments)
        except Exception as exc:
            raise map_error(exc) from exc
        if body.get("stream"):

            async def events() -> AsyncIterator[bytes]:
                async for chunk in response:
                    yield b"data: " + chunk.model_dump_json().encode() + b"\n\n"
                yield b"data: [DONE]\n\n"

            return 200, {"content-type": "text/event-stream"}, events()

        async def whole() -> AsyncIterator[bytes]:
            yield response.model_dump_json().encode()

        return 200, {"content-type": "application/json"}, whole()


def _as_connection_error(exc: Exception, request: Any) -> Exception:
    """An httpx failure as the SDK's connection error (for one error mapping)."""
    import httpx
    import openai

    if isinstance(exc, httpx.TimeoutException):
        return openai.APITimeoutError(request=request)
    if isinstance(exc, httpx.HTTPError):
        return openai.APIConnectionError(message=str(exc) or type(exc).__name__, request=request)
    return exc


def now() -> int:
    return int(time.time())
