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
from typing import Any

from jsonmode.serve.deferred import Deferred, Rendering, json_bytes
from jsonmode.serve.upstream import Outcome, Upstream, usage_json
from jsonmode.serve.wire import Call

__all__ = ["ChatRendering", "completion_id", "structured_reply"]


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


class ChatRendering(Rendering[Outcome]):
    """A structured call's Outcome as a ``chat.completion`` or its chunks."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.id = completion_id()
        self.created = int(time.time())

    def _message(self, done: Outcome) -> dict[str, Any]:
        if done.refusal is not None:
            return {"role": "assistant", "content": None, "refusal": done.refusal}
        message: dict[str, Any] = {"role": "assistant", "content": done.text, "refusal": None}
        if done.reasoning is not None:
            message["reasoning_content"] = done.reasoning
        return message

    def body(self, done: Outcome) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.call.model,
            "choices": [
                {
                    "index": 0,
                    "message": self._message(done),
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage_json(done.usage),
            "jsonmode": done.record(),
        }

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.call.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def opening(self) -> Sequence[bytes]:
        return (_event(self._chunk({"role": "assistant", "content": ""})),)

    def events(self, done: Outcome) -> Sequence[bytes]:
        message = self._message(done)
        delta = {
            key: message[key]
            for key in ("content", "refusal", "reasoning_content")
            if message.get(key) is not None
        }
        events = [_event(self._chunk(delta))]
        last = self._chunk({}, "stop")
        last["jsonmode"] = done.record()
        events.append(_event(last))
        if self.call.include_usage:
            tail = self._chunk({})
            tail["choices"] = []
            tail["usage"] = usage_json(done.usage)
            tail["jsonmode"] = done.record()
            events.append(_event(tail))
        events.append(b"data: [DONE]\n\n")
        return events


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json_bytes(payload) + b"\n\n"


def structured_reply(call: Call, upstream: Upstream, keepalive_s: float) -> Deferred[Outcome]:
    """The ASGI answer to a structured chat call."""
    return Deferred(
        upstream.run(call), ChatRendering(call), stream=call.stream, keepalive_s=keepalive_s
    )
