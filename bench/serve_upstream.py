"""A fast scripted OpenAI-compatible upstream for bench/serve.py (asyncio streams, stdlib).

    python bench/serve_upstream.py --port 0 --delay 0.02   # prints "listening on PORT"

``tests/support/openai_server.py`` (threaded, one thread per connection) is the
bottleneck at 200 concurrent clients; this one is a single asyncio process with
keep-alive HTTP/1.1 and a minimal parser (Content-Length bodies only, as the
``openai``, ``httpx`` and ``aiohttp`` clients send them).

``POST /v1/chat/completions`` (or ``/chat/completions``) answers after a fixed delay
(``--delay``, a model's latency) with a document derived from the request id that
the first user message carries as ``rid=<id>``. The reply slips in a known way,
deterministically by that id (:func:`slip_for`): a trailing comma, a markdown code
fence, prose around the JSON (all repairable), a field of the wrong type or a
missing required field (only a re-ask fixes those). A conversation that already
holds an assistant message is a re-ask and gets the clean document. ``"stream":
true`` gets ``chat.completion.chunk`` events (role, the content in four pieces, the
finish reason, the usage when ``stream_options.include_usage``, ``[DONE]``).

``GET /stats`` returns the counts of calls by slip and by attempt (bench/serve.py
reads them before and after a run to report upstream calls per request).
``GET /v1/models`` lists the one model ``bench``.

The pure parts (:func:`slip_for`, :func:`document_for`, :func:`reply_text`) are
imported by bench/serve.py and tests/test_bench_serve.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
import zlib
from collections import Counter
from typing import Any

#: The JSON Schema every bench request asks for (``response_format`` json_schema).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "rid": {"type": "string"},
        "name": {"type": "string"},
        "count": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "ok": {"type": "boolean"},
    },
    "required": ["rid", "name", "count", "tags", "ok"],
    "additionalProperties": False,
}

#: (slip, share in %) — the first slip whose cumulative share exceeds crc32(rid) % 100.
SLIPS: tuple[tuple[str, int], ...] = (
    ("clean", 60),
    ("trailing_comma", 8),
    ("code_fence", 8),
    ("prose", 8),
    ("wrong_type", 8),
    ("missing_field", 8),
)
#: slips that repair alone fixes; the others need a re-ask
REPAIRABLE = frozenset({"clean", "trailing_comma", "code_fence", "prose"})

RID = re.compile(r"rid=([A-Za-z0-9_.-]{1,64})")
TAGS = ("red", "green", "blue", "small", "large", "new", "old")


def slip_for(rid: str) -> str:
    """The slip of the first reply for ``rid`` (pure, deterministic)."""
    bucket = zlib.crc32(rid.encode()) % 100
    edge = 0
    for slip, share in SLIPS:
        edge += share
        if bucket < edge:
            return slip
    return "clean"


def document_for(rid: str) -> dict[str, Any]:
    """The conforming document for ``rid`` (pure, deterministic)."""
    h = zlib.crc32(rid.encode(), 7)
    return {
        "rid": rid,
        "name": f"item {rid}",
        "count": h % 1000,
        "tags": [TAGS[(h >> s) % len(TAGS)] for s in range(0, 3 * (h % 3), 3)],
        "ok": bool(h & 1),
    }


def reply_text(rid: str, attempt: int = 0) -> tuple[str, str]:
    """(slip, content) the upstream answers for ``rid`` at ``attempt`` (0 = first call)."""
    doc = document_for(rid)
    slip = slip_for(rid) if attempt == 0 else "clean"
    if slip == "wrong_type":
        doc["count"] = "many"
    elif slip == "missing_field":
        del doc["ok"]
    text = json.dumps(doc)
    if slip == "trailing_comma":
        text = text[:-1] + ",}"
    elif slip == "code_fence":
        text = f"```json\n{text}\n```"
    elif slip == "prose":
        text = f"Sure! Here is the JSON you asked for:\n{text}\nLet me know if you need more."
    return slip, text


def request_key(body: dict[str, Any]) -> tuple[str | None, int]:
    """(rid from the first user message that carries one, attempt = assistant messages)."""
    rid: str | None = None
    attempt = 0
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            attempt += 1
        elif role == "user" and rid is None:
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(
                    part.get("text", "") for part in content if isinstance(part, dict)
                )
            if isinstance(content, str):
                found = RID.search(content)
                if found:
                    rid = found.group(1)
    return rid, attempt


class Upstream:
    """The server's state: the delay and the call counters (one event loop, no locks)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.by_slip: Counter[str] = Counter()
        self.by_attempt: Counter[int] = Counter()
        self.calls = 0

    def stats(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "by_slip": dict(self.by_slip),
            "by_attempt": {str(k): v for k, v in self.by_attempt.items()},
        }

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                if len(parts) < 2:
                    return
                method, path = parts[0], parts[1].split(b"?", 1)[0]
                length = 0
                close = False
                for line in lines[1:]:
                    key, _, value = line.partition(b":")
                    key = key.strip().lower()
                    if key == b"content-length":
                        length = int(value.strip())
                    elif key == b"connection":
                        close = value.strip().lower() == b"close"
                body = await reader.readexactly(length) if length else b""
                await self.route(method, path, body, writer)
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def route(
        self, method: bytes, path: bytes, body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        if method == b"POST" and path in (b"/v1/chat/completions", b"/chat/completions"):
            await self.chat(body, writer)
        elif method == b"GET" and path == b"/stats":
            send_json(writer, 200, self.stats())
        elif method == b"GET" and path in (b"/v1/models", b"/models"):
            models = {"object": "list", "data": [{"id": "bench", "object": "model"}]}
            send_json(writer, 200, models)
        else:
            send_json(writer, 404, {"error": {"message": "not found", "type": "not_found"}})
        await writer.drain()

    async def chat(self, raw: bytes, writer: asyncio.StreamWriter) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            send_json(writer, 400, {"error": {"message": "bad json", "type": "invalid_request"}})
            return
        rid, attempt = request_key(body)
        if rid is None:
            send_json(writer, 400, {"error": {"message": "no rid=", "type": "invalid_request"}})
            return
        slip, text = reply_text(rid, attempt)
        self.calls += 1
        self.by_slip[slip] += 1
        self.by_attempt[attempt] += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        model = body.get("model", "bench")
        cid = f"chatcmpl-{rid}-{attempt}"
        usage = {"prompt_tokens": 20, "completion_tokens": 30, "total_tokens": 50}
        if not body.get("stream"):
            send_json(
                writer,
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                },
            )
            return
        created = int(time.time())
        events: list[bytes] = []

        def event(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> None:
            chunk: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": []
                if delta is None
                else [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        event({"role": "assistant", "content": ""})
        step = max(1, -(-len(text) // 4))
        for start in range(0, len(text), step):
            event({"content": text[start : start + step]})
        event({}, "stop")
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            event(None, usage=usage)
        events.append(b"data: [DONE]\n\n")
        # One write: each event is its own chunk (and SSE event), the socket sees one send.
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
            + b"0\r\n\r\n"
        )


def send_json(writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"X")
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (status, reason, len(data))
        + data
    )


async def main_async(host: str, port: int, delay: float) -> None:
    upstream = Upstream(delay)
    server = await asyncio.start_server(upstream.handle, host, port, backlog=2048)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on {bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds before each reply")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main_async(args.host, args.port, args.delay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
