"""``POST /v1/chat/completions``: structured requests through jsonmode, the rest proxied.

A request with ``response_format`` ``json_schema`` or ``json_object`` runs through
:meth:`Upstream.run <jsonmode.serve.upstream.Upstream.run>`; its reply is a
``chat.completion`` (or, with ``stream``, ``chat.completion.chunk`` events) whose
content conforms, with ``usage`` summed over every attempt and the top-level
``jsonmode`` record (``tier``, ``mode``, ``attempts``, ``repairs``, ``outcomes``). A
streamed reply carries ``usage`` in its last chunk when ``stream_options.include_usage``
asked for it, and the ``jsonmode`` record in the chunk that ends the choice. A request
with ``tools`` marked ``strict`` goes to :mod:`jsonmode.serve.tools`. Anything else is
proxied to the upstream unchanged (the model's name aside), streamed as it comes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

from jsonmode.records import Usage
from jsonmode.serve.deferred import Deferred, Rendering, json_bytes
from jsonmode.serve.upstream import Outcome, Upstream, usage_json
from jsonmode.serve.wire import Call

__all__ = ["ChatRendering", "ChunkedReply", "completion_id", "event", "structured_reply"]


T = TypeVar("T")


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


class ChunkedReply(Rendering[T]):
    """What every chat completions answer shares: its id and time, the opening chunk,
    and the chunks that close a stream (the finish reason with the ``jsonmode`` record,
    the usage chunk when ``stream_options.include_usage`` asked, ``[DONE]``)."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.id = completion_id()
        self.created = int(time.time())

    def completion(
        self, message: dict[str, Any], finish: str, usage: Usage | None, record: dict[str, Any]
    ) -> dict[str, Any]:
        """The ``chat.completion`` object."""
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.call.model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": usage_json(usage),
            "jsonmode": record,
        }

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        """One ``chat.completion.chunk`` object."""
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.call.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def opening(self) -> Sequence[bytes]:
        return (event(self.chunk({"role": "assistant", "content": ""})),)

    def closing(self, finish: str, usage: Usage | None, record: dict[str, Any]) -> list[bytes]:
        """The events that end a stream."""
        last = self.chunk({}, finish)
        last["jsonmode"] = record
        events = [event(last)]
        if self.call.include_usage:
            tail = self.chunk({})
            tail["choices"] = []
            tail["usage"] = usage_json(usage)
            tail["jsonmode"] = record
            events.append(event(tail))
        events.append(b"data: [DONE]\n\n")
        return events


class ChatRendering(ChunkedReply[Outcome]):
    """A structured call's Outcome as a ``chat.completion`` or its chunks."""

    def _message(self, done: Outcome) -> dict[str, Any]:
        if done.refusal is not None:
            return {"role": "assistant", "content": None, "refusal": done.refusal}
        message: dict[str, Any] = {"role": "assistant", "content": done.text, "refusal": None}
        if done.reasoning is not None:
            message["reasoning_content"] = done.reasoning
        return message

    def body(self, done: Outcome) -> dict[str, Any]:
        return self.completion(self._message(done), "stop", done.usage, done.record())

    def events(self, done: Outcome) -> Sequence[bytes]:
        message = self._message(done)
        delta = {
            key: message[key]
            for key in ("content", "refusal", "reasoning_content")
            if message.get(key) is not None
        }
        return [event(self.chunk(delta)), *self.closing("stop", done.usage, done.record())]


def event(payload: dict[str, Any]) -> bytes:
    """One SSE ``data:`` event."""
    return b"data: " + json_bytes(payload) + b"\n\n"


def structured_reply(call: Call, upstream: Upstream, keepalive_s: float) -> Deferred[Outcome]:
    """The ASGI answer to a structured chat call."""
    return Deferred(
        upstream.run(call), ChatRendering(call), stream=call.stream, keepalive_s=keepalive_s
    )
