"""The model behind the server: structured calls through jsonmode's tiers, the rest proxied.

One :class:`Upstream` per worker process. For an OpenAI-compatible upstream
(``openai/...`` and ``hosted_vllm/...`` models) it holds one pooled HTTP client
(:class:`~jsonmode.serve.transport.UpstreamHTTP`) that every upstream call of the
worker shares: structured attempts, strict tools' calls, requests proxied unchanged.
Any other provider goes through litellm, one call at a time.

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
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonmode.backends.base import Completion, Request
from jsonmode.backends.litellm import native_schema_for
from jsonmode.backends.openai_wire import native_arguments
from jsonmode.errors import JsonModeError, PermanentBackendError, TransientBackendError, UsageError
from jsonmode.facade import JsonMode
from jsonmode.records import Usage
from jsonmode.result import Result
from jsonmode.retry import TransportPolicy
from jsonmode.schema import Schema
from jsonmode.serve.config import ServeConfig
from jsonmode.serve.errors import from_jsonmode
from jsonmode.serve.transport import UpstreamHTTP
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
        """The reply's top-level ``jsonmode`` object."""
        return jsonmode_record(self.tier, self.mode, self.attempts, self.repairs, self.outcomes)


def jsonmode_record(
    tier: str, mode: str, attempts: int, repairs: Any, outcomes: Any
) -> dict[str, Any]:
    """The top-level ``jsonmode`` object of a structured reply (contract: ``tier``,
    ``attempts``, ``repairs``; also ``mode`` and each attempt's outcome)."""
    return {
        "tier": tier,
        "mode": mode,
        "attempts": attempts,
        "repairs": list(repairs),
        "outcomes": list(outcomes),
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
    """A :class:`~jsonmode.Repair` as the ``jsonmode.repairs`` entries show it."""
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


def outcome_of(result: Result[Any], mode: str, *, constrained_upstream: bool = False) -> Outcome:
    """The Outcome of a Result. ``constrained_upstream``: the native tier ran on a vLLM
    server under jsonmode's own processor, so the tier reported is ``constrained``."""
    tier = "constrained" if constrained_upstream and result.tier == "native" else result.tier
    return Outcome(
        text=json.dumps(result.data, ensure_ascii=False),
        value=result.data,
        tier=tier,
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
    return total_usage(record.usage for record in records)


def total_usage(usages: Iterable[Usage | None]) -> Usage | None:
    """``usages`` added up (None: none reported)."""
    reported = [usage for usage in usages if usage is not None]
    total = Usage()
    for usage in reported:
        total = total + usage
    return total if reported else None


class CallBackend:
    """A backend for one request: the worker's pooled HTTP client, the request's own
    fields.

    Implements jsonmode's :class:`~jsonmode.backends.Backend` protocol (async only):
    each call sends the attempt's messages with the request's fields; natively the
    schema as ``response_format`` (or ``vllm_xargs.json_schema`` for jsonmode's vLLM
    processor). Raises :class:`Refused` for a refusal, BackendError for the rest.
    """

    def __init__(
        self,
        http: UpstreamHTTP,
        model: str,
        params: dict[str, Any],
        *,
        native_schema: bool | None,
        vllm_processor: bool,
    ) -> None:
        self._http = http
        self.model = model
        self._params = params
        self.native_schema = native_schema
        self._vllm_processor = vllm_processor

    @property
    def name(self) -> str:
        return f"serve:{self.model}"

    def payload(self, request: Request) -> dict[str, Any]:
        """The chat completions body for ``request``: the client's fields, the
        attempt's messages, the schema when native."""
        body: dict[str, Any] = {
            **self._params,
            "model": self.model,
            "messages": [dict(message) for message in request.messages],
        }
        if request.native and self._vllm_processor:
            xargs = dict(body.get("vllm_xargs") or {})
            xargs["json_schema"] = json.dumps(request.schema.json_schema)
            body["vllm_xargs"] = xargs
        elif request.native:
            fields, _ = native_arguments(request.schema, "response_format")
            body.update(fields)
        return body

    def complete(self, request: Request) -> Completion:
        raise UsageError("the server's backend answers async calls only")

    async def acomplete(self, request: Request) -> Completion:
        reply = await self._http.complete("/chat/completions", self.payload(request))
        completion, refusal = completion_of(reply)
        if refusal and not completion.text:
            raise Refused(refusal, completion.usage)
        return completion


def completion_of(reply: dict[str, Any]) -> tuple[Completion, str | None]:
    """A ``chat.completion`` (as JSON) as a Completion, and the model's refusal.

    Raises:
        TransientBackendError: a reply without a first choice.
    """
    choices = reply.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        raise TransientBackendError("the upstream returned no choices")
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    content = message.get("content")
    thinking = message.get("reasoning_content") or message.get("reasoning")
    refusal = message.get("refusal")
    completion = Completion(
        content if isinstance(content, str) else "",
        usage_from(reply.get("usage")),
        truncated=choice.get("finish_reason") == "length",
        reasoning=thinking if isinstance(thinking, str) and thinking else None,
    )
    return completion, refusal if isinstance(refusal, str) and refusal else None


def usage_from(usage: Any) -> Usage | None:
    """The Usage of a ``usage`` object (None when the upstream reported none)."""
    if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
        return None
    details = usage.get("completion_tokens_details")
    thinking = details.get("reasoning_tokens") if isinstance(details, dict) else None
    counted = isinstance(thinking, int) and not isinstance(thinking, bool) and thinking > 0
    completion = usage.get("completion_tokens")
    return Usage(
        usage["prompt_tokens"],
        completion if isinstance(completion, int) else 0,
        thinking if counted else None,
    )


class Upstream:
    """The model behind one worker's app. See the module docstring.

    Args:
        config: the server's settings.

    ``aclose`` releases the connection pools (at shutdown).
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        provider, _, name = config.upstream.partition("/")
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
        self.transport = TransportPolicy(
            max_retries=config.transport_retries, max_delay=config.max_retry_wait_s
        )
        self.http: UpstreamHTTP | None = None
        if not self.compatible:
            from jsonmode.backends.litellm import LiteLLMBackend

            # litellm's import takes seconds: at startup, not inside the first request
            LiteLLMBackend(config.upstream).prepare()
        else:
            # one pool for every upstream call of this worker
            self.http = UpstreamHTTP(
                config.api_base or "https://api.openai.com/v1",
                config.upstream_api_key,
                timeout=config.timeout_s,
            )

    async def aclose(self) -> None:
        """Close the connection pool (at shutdown)."""
        if self.http is not None:
            await self.http.close()

    def _backend(self, call: Call) -> Any:
        if self.http is not None:
            return CallBackend(
                self.http,
                self.model_name,
                call.params,
                native_schema=self.native_schema,
                vllm_processor=self.config.vllm_processor,
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
            transport=self.transport,
            reasoning=options.reasoning,
        )
        try:
            # the client's name goes to a native API with the schema, never to a
            # metric label (client text)
            schema = (
                Schema.of(call.schema, name=call.schema_name) if call.schema_name else call.schema
            )
            result = await jm.arun(list(call.messages), schema)
        except Refused as refused:
            return self._refused(refused, tier, options.mode)
        except JsonModeError as exc:
            outcomes = [a.outcome for a in exc.attempts]
            record = jsonmode_record(tier, options.mode, len(exc.attempts), (), outcomes)
            top = {"jsonmode": record, "usage": usage_json(summed(exc.attempts))}
            raise from_jsonmode(exc, top=top) from exc
        return outcome_of(result, options.mode, constrained_upstream=self.config.vllm_processor)

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

    async def proxy(self, body: dict[str, Any]) -> tuple[int, dict[str, str], AsyncIterator[bytes]]:
        """Send ``body`` (a chat completions request without structure) upstream as it
        came, but for the model's name: (status, headers, the body's bytes as they
        arrive). Closing the iterator closes the upstream connection.

        Raises:
            BackendError: no answer (refused connection, timeout), as a transient one.
        """
        if self.http is None:
            return await self._proxy_litellm(body)
        return await self.http.open("/chat/completions", {**body, "model": self.model_name})

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completions call with ``body`` (not streamed; the model's name
        replaced by the upstream's), its reply as JSON.

        Raises:
            BackendError: the upstream failed (see :mod:`jsonmode.serve.transport`).
        """
        if self.http is not None:
            return await self.http.complete("/chat/completions", {**body, "model": self.model_name})
        import litellm  # imported at startup (see __init__)

        from jsonmode.backends.litellm import map_error

        arguments = self._litellm_arguments({**body, "stream": False})
        try:
            response = await litellm.acompletion(model=self.config.upstream, **arguments)
        except Exception as exc:
            raise map_error(exc) from exc
        reply: dict[str, Any] = response.model_dump()
        return reply

    def _litellm_arguments(self, body: dict[str, Any]) -> dict[str, Any]:
        arguments = {k: v for k, v in body.items() if k not in ("model", "jsonmode")}
        if self.config.api_base:
            arguments["api_base"] = self.config.api_base
        if self.config.upstream_api_key:
            arguments["api_key"] = self.config.upstream_api_key
        return arguments

    async def _proxy_litellm(
        self, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], AsyncIterator[bytes]]:
        import litellm  # imported at startup (see __init__)

        from jsonmode.backends.litellm import map_error

        arguments = self._litellm_arguments(body)
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
