"""``POST /v1/responses``: OpenAI's Responses API, over the same tiers as chat completions.

A Responses request is translated into a chat completions body (:func:`chat_body`) and
read by the chat route's own parser, so both routes share every check (schema bounds,
the ``jsonmode`` extension field, sampling fields) and every error shape; an error's
``param`` names the field of the *Responses* body (``text.format.schema``, not
``response_format.json_schema.schema``).

Translation (what a client sends → what the upstream gets):

- ``input``: a string (one user message) or a list of items: messages (``role`` user,
  system, developer or assistant; ``content`` a string or ``input_text`` /
  ``output_text`` / ``refusal`` / ``input_image`` parts), ``function_call`` and
  ``function_call_output`` items (an assistant tool call and its result). ``instructions``
  becomes a first system message; ``developer`` is sent as ``system`` (every
  OpenAI-compatible upstream knows it).
- ``text.format``: ``json_schema`` (``name``, ``schema``, ``strict``, ``description``) →
  ``response_format`` ``json_schema``; ``json_object`` → ``json_object``; ``text`` or none →
  no structure (the request is proxied and its answer converted back).
- ``temperature``, ``top_p`` as they are; ``max_output_tokens`` → ``max_tokens``;
  ``reasoning.effort`` → ``reasoning_effort``; ``user`` / ``safety_identifier`` → ``user``.
- Fields that describe storage or presentation and change nothing in the answer
  (``store``, ``metadata``, ``truncation``, ``include``, ``service_tier``, ...) are accepted
  and ignored. Fields the server cannot honour without state or tools
  (``previous_response_id``, ``conversation``, ``tools``, ``background: true``, ``prompt``)
  are a 400 naming the field; an unknown field is a 400 too (as OpenAI answers).

The reply is a ``response`` object (``output``: one assistant message whose content is one
``output_text`` part, or a ``refusal`` part; a reasoning item first when the upstream
returned its thinking apart), with ``usage`` summed over every attempt and, for a
structured request, the top-level ``jsonmode`` object (``tier``, ``attempts``,
``repairs``). A non-conforming end is the same HTTP 422 as the chat route's.

Streams (``stream: true``) follow the rule of the chat route: nothing is sent that a later
attempt could contradict. The events are OpenAI's, each with its ``sequence_number``:
``response.created``, ``response.in_progress``, then (once the answer conforms)
``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``, ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``, ``response.completed``.
While an attempt runs the stream carries SSE comments (``: keep-alive``). A failure found
before the stream starts is an HTTP error; after it, one ``error`` event (OpenAI's fields
``code``, ``message``, ``param`` plus the chat route's ``error`` body, which the ``openai``
client raises as an ``APIError``) and the stream ends.

Thread-safety: the functions are pure except :func:`responses_reply`'s answer, which
runs on the event loop; the server keeps no state between requests (response ids are random).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, StreamingResponse

from jsonmode.errors import JsonModeError
from jsonmode.serve.config import ServeConfig
from jsonmode.serve.deferred import Deferred, Rendering
from jsonmode.serve.errors import ServeError, from_jsonmode
from jsonmode.serve.upstream import Upstream, usage_json
from jsonmode.serve.wire import Call, read_chat

__all__ = [
    "Answer",
    "Ids",
    "ResponsesRendering",
    "chat_body",
    "completion_parts",
    "response_events",
    "response_object",
    "responses_reply",
    "usage_of",
]

#: The largest upstream reply read for a proxied request (bytes).
MAX_REPLY_BYTES = 16 * 1024 * 1024

#: Fields accepted and ignored: storage, presentation and caching hints that do not
#: change the answer of a stateless server.
IGNORED = frozenset(
    "store metadata truncation include service_tier parallel_tool_calls "
    "prompt_cache_key prompt_cache_retention stream_options top_logprobs "
    "max_tool_calls".split()
)
#: Fields that need state or tools this server does not keep: a 400 when set.
UNSUPPORTED = {
    "previous_response_id": "the server keeps no responses; send the whole conversation in input",
    "conversation": "the server keeps no conversations; send the whole conversation in input",
    "tools": "tools are served on /v1/chat/completions (strict function tools)",
    "prompt": "stored prompts are not available; send the instructions and input",
    "background": "background responses need stored state; call without background",
}
HANDLED = frozenset(
    "model input instructions text temperature top_p max_output_tokens reasoning user "
    "safety_identifier stream tool_choice jsonmode".split()
)
#: Roles of an input message, and what each is sent upstream as.
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
#: Path prefixes of the chat body, and the Responses field each came from.
PARAM_NAMES = (
    ("response_format.json_schema.schema", "text.format.schema"),
    ("response_format.json_schema.name", "text.format.name"),
    ("response_format.json_schema.strict", "text.format.strict"),
    ("response_format.json_schema", "text.format"),
    ("response_format", "text.format"),
    ("max_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning.effort"),
    ("messages", "input"),
)


def _bad(message: str, param: str) -> ServeError:
    return ServeError(400, message, param=param, code="invalid_value")


def chat_body(body: object) -> dict[str, Any]:
    """The chat completions body that asks what the Responses ``body`` asks.

    Cost: linear in the body. Never mutates ``body`` (contents are shared, not copied).

    Raises:
        ServeError: 400 with ``param`` the Responses field at fault (an unknown or
            unsupported field, a malformed input item or text format).
    """
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", "")
    for name in body:
        if name in HANDLED or name in IGNORED:
            continue
        if name in UNSUPPORTED:
            if name == "background" and body[name] in (False, None):
                continue
            if name == "tools" and body[name] in ([], None):
                continue
            raise _bad(f"{name} is not supported by this server: {UNSUPPORTED[name]}", name)
        raise ServeError(400, f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    out: dict[str, Any] = {"model": body.get("model")}
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if "input" not in body:
        raise _bad("input is required", "input")
    messages += _messages(body["input"])
    out["messages"] = messages
    fmt = _format(body.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise _bad("reasoning must be an object", "reasoning")
        if reasoning.get("effort") is not None:
            out["reasoning_effort"] = reasoning["effort"]
    user = body.get("user", body.get("safety_identifier"))
    if user is not None:
        out["user"] = user
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise _bad("tool_choice needs tools, which this route does not take", "tool_choice")
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            raise _bad("stream must be a boolean", "stream")
        out["stream"] = stream
        if stream:
            out["stream_options"] = {"include_usage": True}
    if "jsonmode" in body:
        out["jsonmode"] = body["jsonmode"]
    return out


def _messages(value: object) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _bad("input must be a string or a non-empty list of input items", "input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        at = f"input[{index}]"
        if not isinstance(item, dict):
            raise _bad("an input item must be an object", at)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise _bad(f"role must be one of {', '.join(ROLES)}, not {role!r}", f"{at}.role")
            messages.append({"role": ROLES[role], "content": _content(item.get("content"), at)})
        elif kind == "function_call":
            call = {
                "id": _text(item, "call_id", at),
                "type": "function",
                "function": {
                    "name": _text(item, "name", at),
                    "arguments": _text(item, "arguments", at),
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                output = _content(output, at)
            messages.append(
                {"role": "tool", "tool_call_id": _text(item, "call_id", at), "content": output}
            )
        else:
            raise _bad(
                f"input items of type {kind!r} are not supported (messages, function_call "
                "and function_call_output are)",
                f"{at}.type",
            )
    return messages


def _text(item: Mapping[str, Any], name: str, at: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise _bad(f"{name} must be a string", f"{at}.{name}")
    return value


def _content(value: object, at: str) -> str | list[dict[str, Any]]:
    """A message's content as chat takes it: a string, or text and image parts."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _bad("content must be a string or a list of content parts", f"{at}.content")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(value):
        where = f"{at}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text") and isinstance(part, dict):
            parts.append({"type": "text", "text": _text(part, "text", where)})
        elif kind == "refusal" and isinstance(part, dict):
            parts.append({"type": "text", "text": _text(part, "refusal", where)})
        elif kind == "input_image" and isinstance(part, dict):
            image: dict[str, Any] = {"url": _text(part, "image_url", where)}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _bad(
                f"content parts of type {kind!r} are not supported "
                "(input_text, output_text, refusal and input_image are)",
                f"{where}.type",
            )
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _format(text: object) -> dict[str, Any] | None:
    """``text.format`` as chat's ``response_format`` (None: no structure asked)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("text must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _bad("text.format must be an object", "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec: dict[str, Any] = {"name": fmt.get("name"), "schema": fmt.get("schema")}
        for name in ("strict", "description"):
            if fmt.get(name) is not None:
                spec[name] = fmt[name]
        return {"type": "json_schema", "json_schema": spec}
    raise _bad(
        f"text.format.type must be text, json_object or json_schema, not {kind!r}",
        "text.format.type",
    )


def responses_param(param: str | None) -> str | None:
    """The Responses field a chat body's ``param`` path came from."""
    if not param:
        return param
    for chat, responses in PARAM_NAMES:
        if param == chat or param.startswith((chat + ".", chat + "[", chat + " ")):
            return responses + param[len(chat) :]
    return param


# -- the reply -------------------------------------------------------------------------


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def usage_of(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Chat ``usage`` (summed over attempts) in the Responses API's names."""
    if usage is None:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached), "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": int(reasoning)},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def completion_parts(completion: Mapping[str, Any]) -> dict[str, Any]:
    """What a proxied ``chat.completion`` answered, as :func:`response_object` takes it:
    ``text``, ``refusal``, ``reasoning``, ``finish_reason``, ``usage``, ``model``.

    Raises:
        ServeError: 502 when the upstream's reply is not a chat completion.
    """
    try:
        choice = completion["choices"][0]
        message = choice["message"]
        return {
            "text": message.get("content") or "",
            "refusal": message.get("refusal"),
            "reasoning": message.get("reasoning_content") or message.get("reasoning"),
            "finish_reason": choice.get("finish_reason") or "stop",
            "usage": completion.get("usage"),
            "model": completion.get("model"),
        }
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ServeError(
            502, "the upstream's reply is not a chat completion", type="upstream_error"
        ) from None


class Ids:
    """The ids of one response: the response, its message item, its reasoning item."""

    def __init__(self) -> None:
        self.response = _new_id("resp")
        self.message = _new_id("msg")
        self.reasoning = _new_id("rs")
        self.created_at = int(time.time())


def _message_item(text: str, refusal: str | None, ids: Ids, status: str) -> dict[str, Any]:
    part: dict[str, Any]
    if refusal:
        part = {"type": "refusal", "refusal": refusal}
    else:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": ids.message,
        "status": status,
        "role": "assistant",
        "content": [part],
    }


def _reasoning_item(reasoning: str, ids: Ids) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": ids.reasoning,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": reasoning}],
        "status": "completed",
    }


def _echo(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's settings as a response object repeats them."""
    text = body.get("text") if isinstance(body.get("text"), dict) else None
    return {
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": [],
        "text": text or {"format": {"type": "text"}},
        "store": False,
        "background": False,
        "previous_response_id": None,
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "truncation": body.get("truncation") or "disabled",
        "user": body.get("user"),
    }


def response_object(
    body: Mapping[str, Any],
    ids: Ids,
    *,
    status: str = "completed",
    model: str | None = None,
    parts: Mapping[str, Any] | None = None,
    jsonmode: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``response`` object: in progress (``parts`` None: no output yet) or finished.

    ``parts`` as :func:`completion_parts` gives them; a ``length`` finish makes the
    response ``incomplete`` (reason ``max_output_tokens``).
    """
    output: list[dict[str, Any]] = []
    usage = None
    incomplete = None
    if parts is not None:
        if parts.get("reasoning"):
            output.append(_reasoning_item(parts["reasoning"], ids))
        if parts.get("finish_reason") == "length":
            status = "incomplete"
            incomplete = {"reason": "max_output_tokens"}
        item_status = "completed" if status == "completed" else "incomplete"
        output.append(_message_item(parts["text"], parts.get("refusal"), ids, item_status))
        usage = usage_of(parts.get("usage"))
    reply: dict[str, Any] = {
        "id": ids.response,
        "object": "response",
        "created_at": ids.created_at,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "model": model or body.get("model"),
        "output": output,
        "usage": usage,
        **_echo(body),
    }
    if status in ("completed", "incomplete"):
        reply["completed_at"] = int(time.time())
    if jsonmode is not None:
        reply["jsonmode"] = dict(jsonmode)
    return reply


def response_events(
    body: Mapping[str, Any],
    ids: Ids,
    parts: Mapping[str, Any],
    *,
    model: str | None,
    jsonmode: Mapping[str, Any] | None,
    first: int,
) -> list[dict[str, Any]]:
    """The events after ``response.in_progress`` for a finished answer, numbered from
    ``first``: the output items, their content and ``response.completed``."""
    final = response_object(body, ids, model=model, parts=parts, jsonmode=jsonmode)
    events: list[dict[str, Any]] = []
    for index, item in enumerate(final["output"]):
        added = {**item, "status": "in_progress"}
        if item["type"] == "message":
            added["content"] = []
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        if item["type"] == "message":
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            if part["type"] == "refusal":
                empty = {"type": "refusal", "refusal": ""}
                events += [
                    {"type": "response.content_part.added", **where, "part": empty},
                    {"type": "response.refusal.delta", **where, "delta": part["refusal"]},
                    {"type": "response.refusal.done", **where, "refusal": part["refusal"]},
                ]
            else:
                empty = {**part, "text": ""}
                events.append({"type": "response.content_part.added", **where, "part": empty})
                if part["text"]:
                    events.append(
                        {
                            "type": "response.output_text.delta",
                            **where,
                            "delta": part["text"],
                            "logprobs": [],
                        }
                    )
                events.append(
                    {
                        "type": "response.output_text.done",
                        **where,
                        "text": part["text"],
                        "logprobs": [],
                    }
                )
            events.append({"type": "response.content_part.done", **where, "part": part})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
    events.append({"type": kind, "response": final})
    for number, event in enumerate(events, start=first):
        event["sequence_number"] = number
    return events


def _sse(event: Mapping[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _error_event(error: Mapping[str, Any], number: int) -> dict[str, Any]:
    return {
        "type": "error",
        "code": error.get("code") or error.get("type"),
        "message": error.get("message", "the request failed"),
        "param": error.get("param"),
        "sequence_number": number,
        "error": dict(error),
    }


# -- the route -------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """A finished answer: its parts (as :func:`completion_parts` gives them) and the
    ``jsonmode`` record (None for a proxied request)."""

    parts: dict[str, Any]
    record: dict[str, Any] | None


class ResponsesRendering(Rendering[Answer]):
    """An :class:`Answer` as a ``response`` object, or as the Responses API's events."""

    def __init__(self, body: Mapping[str, Any], model: str) -> None:
        self.request = body
        self.model = model
        self.ids = Ids()

    def body(self, done: Answer) -> dict[str, Any]:
        return response_object(
            self.request, self.ids, model=self.model, parts=done.parts, jsonmode=done.record
        )

    def opening(self) -> Sequence[bytes]:
        return _opening(self.request, self.ids, self.model)

    def events(self, done: Answer) -> Sequence[bytes]:
        events = response_events(
            self.request, self.ids, done.parts, model=self.model, jsonmode=done.record, first=2
        )
        return [_sse(event) for event in events]

    def error_event(self, error: ServeError) -> Sequence[bytes]:
        return (_sse(_error_event(error.body()["error"], 2)),)


def responses_reply(body: Mapping[str, Any], config: ServeConfig, upstream: Upstream) -> Any:
    """The ASGI answer to one ``POST /v1/responses`` body (already read as a JSON
    object): structured requests through ``upstream.run`` (jsonmode's tiers), the rest
    proxied as chat completions and converted back. A client that disconnects cancels
    the upstream call.

    Raises:
        ServeError: 400 for the request (``param``: the Responses field at fault),
            before the upstream is touched. Later failures are answered, not raised:
            422 ``jsonmode_nonconforming``, 429/502/503/504 for the upstream.
    """
    chat = chat_body(body)
    try:
        call = read_chat(chat, config)
    except ServeError as exc:
        exc.param = responses_param(exc.param)
        raise
    rendering = ResponsesRendering(body, call.model)
    if call.kind is None:
        chat.pop("jsonmode", None)
        if call.stream:
            return _proxied_stream(chat, rendering, upstream)
        return Deferred(
            _proxied(chat, upstream), rendering, stream=False, keepalive_s=config.keepalive_s
        )
    return Deferred(
        _structured(call, upstream), rendering, stream=call.stream, keepalive_s=config.keepalive_s
    )


async def _structured(call: Call, upstream: Upstream) -> Answer:
    outcome = await upstream.run(call)
    parts = {
        "text": outcome.text,
        "refusal": outcome.refusal,
        "reasoning": outcome.reasoning,
        "finish_reason": "stop",
        "usage": usage_json(outcome.usage),
    }
    return Answer(parts, outcome.record())


def _upstream_error(status: int, data: bytes, headers: Mapping[str, str]) -> ServeError:
    """The upstream's own error answer, passed on with its status."""
    error: Any = None
    with contextlib.suppress(ValueError, AttributeError):
        error = json.loads(data).get("error")
    if not isinstance(error, dict):
        error = {"message": data[:2000].decode("utf-8", "replace"), "type": "upstream_error"}
    kept = {k: v for k, v in headers.items() if k.lower() == "retry-after"}
    return ServeError(
        status,
        str(error.get("message") or "the upstream failed"),
        type=str(error.get("type") or "upstream_error"),
        param=error.get("param"),
        code=error.get("code"),
        headers=kept,
    )


async def _proxied(chat: dict[str, Any], upstream: Upstream) -> Answer:
    try:
        status, headers, pieces = await upstream.proxy(chat)
    except JsonModeError as exc:
        raise from_jsonmode(exc) from exc
    data = await _read_all(pieces)
    if status != 200:
        raise _upstream_error(status, data, headers)
    try:
        completion = json.loads(data)
    except ValueError:
        completion = None
    if not isinstance(completion, dict):
        raise ServeError(502, "upstream: the reply is not a chat completion", type="upstream_error")
    return Answer(completion_parts(completion), None)


def _proxied_stream(chat: dict[str, Any], rendering: ResponsesRendering, upstream: Upstream) -> Any:
    """A stream without structure: the upstream's deltas passed on as they come (there
    is nothing to take back). An upstream error before its first byte is an HTTP error;
    after it, an ``error`` event."""
    chat["stream_options"] = {"include_usage": True}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            status, headers, pieces = await upstream.proxy(chat)
        except JsonModeError as exc:
            await error_json(from_jsonmode(exc))(scope, receive, send)
            return
        if status != 200:
            data = await _read_all(pieces)
            await error_json(_upstream_error(status, data, headers))(scope, receive, send)
            return
        events = _relayed(rendering, pieces)
        await StreamingResponse(events, headers=_STREAM_HEADERS)(scope, receive, send)

    return app


_STREAM_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}


def error_json(exc: ServeError) -> JSONResponse:
    """The HTTP answer for ``exc`` (OpenAI's error shape, its headers)."""
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _relayed(
    rendering: ResponsesRendering, pieces: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    ids, body, model = rendering.ids, rendering.request, rendering.model
    text: list[str] = []
    parts: dict[str, Any] = {"text": "", "finish_reason": "stop", "usage": None}
    where = {"item_id": ids.message, "output_index": 0, "content_index": 0}
    number = 1
    try:
        for line in rendering.opening():
            yield line
        item = {**_message_item("", None, ids, "in_progress"), "content": []}
        number += 1
        yield _sse(_numbered("response.output_item.added", number, output_index=0, item=item))
        empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        number += 1
        yield _sse(_numbered("response.content_part.added", number, **where, part=empty))
        async for chunk in _chunks(pieces):
            if "error" in chunk:
                error = chunk["error"] if isinstance(chunk["error"], dict) else {}
                number += 1
                yield _sse(_error_event(error, number))
                return
            if chunk.get("usage"):
                parts["usage"] = chunk["usage"]
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                if choice.get("finish_reason"):
                    parts["finish_reason"] = choice["finish_reason"]
                if delta.get("content"):
                    text.append(delta["content"])
                    number += 1
                    yield _sse(
                        _numbered(
                            "response.output_text.delta",
                            number,
                            **where,
                            delta=delta["content"],
                            logprobs=[],
                        )
                    )
        parts["text"] = "".join(text)
        closing = [
            event
            for event in response_events(body, ids, parts, model=model, jsonmode=None, first=0)
            if event["type"].endswith((".done", ".completed", ".incomplete"))
        ]
        for event in closing:
            number += 1
            yield _sse({**event, "sequence_number": number})
    finally:
        await _close(pieces)


async def _close(pieces: AsyncIterator[bytes]) -> None:
    closing = getattr(pieces, "aclose", None)
    if closing is not None:
        await closing()


def _opening(body: Mapping[str, Any], ids: Ids, model: str) -> list[bytes]:
    created = response_object(body, ids, status="in_progress", model=model)
    return [
        _sse({"type": "response.created", "sequence_number": 0, "response": created}),
        _sse({"type": "response.in_progress", "sequence_number": 1, "response": created}),
    ]


def _numbered(kind: str, number: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **fields, "sequence_number": number}


async def _read_all(pieces: AsyncIterator[bytes]) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        async for piece in pieces:
            size += len(piece)
            if size > MAX_REPLY_BYTES:
                raise ServeError(
                    502,
                    f"upstream: the reply is over {MAX_REPLY_BYTES} bytes",
                    type="upstream_error",
                )
            chunks.append(piece)
    finally:
        await _close(pieces)
    return b"".join(chunks)


async def _chunks(pieces: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of an upstream SSE stream (``[DONE]`` ends it). Bounded: a line
    over :data:`MAX_REPLY_BYTES` ends it with an error event."""
    buffer = b""
    async for piece in pieces:
        buffer += piece
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event
        if len(buffer) > MAX_REPLY_BYTES:
            yield {"error": {"message": "upstream: an event is too long", "type": "upstream_error"}}
            return
