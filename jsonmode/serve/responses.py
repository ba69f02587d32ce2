"""``POST /v1/responses``: OpenAI's Responses API, over the same tiers as chat completions.

A Responses request is translated into a chat completions body
(:mod:`jsonmode.serve.responses_wire`) and read by the chat route's parser: both routes
share every check and every error shape, with ``param`` naming the Responses field.

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

import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import StreamingResponse

from jsonmode.errors import JsonModeError
from jsonmode.serve.config import ServeConfig
from jsonmode.serve.deferred import Deferred, Rendering
from jsonmode.serve.errors import ServeError, error_response, from_jsonmode
from jsonmode.serve.responses_wire import chat_body, responses_param
from jsonmode.serve.transport import MAX_ERROR_BYTES, MAX_REPLY_BYTES, http_failure
from jsonmode.serve.upstream import Upstream, usage_json
from jsonmode.serve.wire import Call, read_chat

__all__ = [
    "Answer",
    "Ids",
    "ResponsesRendering",
    "completion_parts",
    "response_events",
    "response_object",
    "responses_reply",
    "usage_of",
]

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


async def _proxied(chat: dict[str, Any], upstream: Upstream) -> Answer:
    try:
        completion = await upstream.complete(chat)
    except JsonModeError as exc:
        raise from_jsonmode(exc) from exc
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
            await error_response(from_jsonmode(exc))(scope, receive, send)
            return
        if status != 200:
            data = await _read_all(pieces, MAX_ERROR_BYTES)
            error = from_jsonmode(http_failure(status, headers, data))
            await error_response(error)(scope, receive, send)
            return
        events = _relayed(rendering, pieces)
        await StreamingResponse(events, headers=_STREAM_HEADERS)(scope, receive, send)

    return app


_STREAM_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}


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


async def _read_all(pieces: AsyncIterator[bytes], limit: int) -> bytes:
    """At most ``limit`` bytes of ``pieces`` (an error body: the rest is not needed);
    the stream is closed."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for piece in pieces:
            chunks.append(piece)
            size += len(piece)
            if size >= limit:
                break
    finally:
        await _close(pieces)
    return b"".join(chunks)[:limit]


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
