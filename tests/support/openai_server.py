"""A scripted OpenAI-compatible chat completions server on 127.0.0.1, stdlib only.

Each request to ``POST /v1/chat/completions`` (or ``/chat/completions``) consumes the
next action of the script:

    Reply("...")            a chat.completion with that content (finish_reason, usage;
                            ``reasoning``: thinking returned apart as reasoning_content;
                            ``refusal``: the model refuses, content null; not streamed)
    ToolReply("f", "{...}") a chat.completion whose message calls the tool ``f`` with
                            those arguments (``others``: more calls, sent first)
    HttpError(429)          an OpenAI-style JSON error body with that status (``headers``:
                            e.g. ``{"Retry-After": "2"}``)
    Delay(5.0, Reply(...))  answer only after the delay (longer than the client's timeout)
    Drop()                  close the connection without answering

A request with ``"stream": true`` gets a Reply or ToolReply as server-sent
``chat.completion.chunk`` events (``Transfer-Encoding: chunked``): a first event with the
role (and for a tool call its id and name), the content or the arguments in ``pieces``
(by default split in up to four), an event with the finish reason, an event with only
the usage when the request asked ``stream_options.include_usage``, then ``[DONE]``.
``every`` seconds pass before each piece; ``cut_after=n`` drops the connection after n
pieces, mid-body, as a crashed server would.

Every request body (parsed JSON) and its headers are recorded. A request that finds
the script exhausted gets a 418 that no client retries, so a test that makes more
requests than it scripted fails loudly instead of hanging.

    with OpenAIServer([Reply('{"a": 1}')]) as server:
        ...  # point the client at server.base_url
        assert server.request_count == 1
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Delay", "Drop", "HttpError", "OpenAIServer", "Reply", "ToolReply"]

PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class Reply:
    content: str
    finish_reason: str = "stop"
    prompt_tokens: int = 10
    completion_tokens: int = 5
    #: streamed only: the content's pieces (None: split in up to four)
    pieces: tuple[str, ...] | None = None
    #: streamed only: seconds before each piece
    every: float = 0.0
    #: streamed only: drop the connection after this many pieces
    cut_after: int | None = None
    #: thinking returned apart (``reasoning_content``; streamed in up to four deltas
    #: before the content), and the usage's ``completion_tokens_details.reasoning_tokens``
    reasoning: str | None = None
    reasoning_tokens: int | None = None
    #: the model refuses (OpenAI's structured outputs): ``message.refusal``, content null
    refusal: str | None = None


@dataclass(frozen=True)
class ToolReply:
    """The assistant calls the tool ``name`` with ``arguments`` (JSON text, as OpenAI sends)."""

    name: str
    arguments: str
    content: str | None = None
    #: other calls (name, arguments) in the same message, before this one
    others: tuple[tuple[str, str], ...] = ()
    finish_reason: str = "tool_calls"
    prompt_tokens: int = 10
    completion_tokens: int = 5
    pieces: tuple[str, ...] | None = None
    every: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class HttpError:
    status: int
    message: str = "scripted error"
    type: str = "invalid_request_error"
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delay:
    seconds: float
    then: Reply | ToolReply = field(default_factory=lambda: Reply("{}"))


@dataclass(frozen=True)
class Drop:
    """Close the connection without sending a response."""


Action = Reply | ToolReply | HttpError | Delay | Drop


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


def _usage(reply: Reply | ToolReply) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }
    if isinstance(reply, Reply) and reply.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    return usage


def _calls(reply: ToolReply) -> list[tuple[str, str]]:
    return [*reply.others, (reply.name, reply.arguments)]


def completion_object(reply: Reply | ToolReply, model: str, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if isinstance(reply, Reply) and reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    if isinstance(reply, Reply) and reply.refusal is not None:
        message["content"] = None
        message["refusal"] = reply.refusal
    if isinstance(reply, ToolReply):
        message["tool_calls"] = [
            {
                "id": f"call_{number}_{index}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for index, (name, arguments) in enumerate(_calls(reply))
        ]
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": _usage(reply),
    }


def split(text: str, parts: int = 4) -> tuple[str, ...]:
    """``text`` in up to ``parts`` non-empty pieces of about equal length."""
    size = max(1, -(-len(text) // parts))
    return tuple(text[start : start + size] for start in range(0, len(text), size))


def chunk_events(
    reply: Reply | ToolReply, model: str, number: int, include_usage: bool
) -> Iterator[tuple[dict[str, Any], bool]]:
    """The ``chat.completion.chunk`` events of a streamed reply, each with whether it is
    a piece of the content or the arguments (what ``every`` and ``cut_after`` count)."""

    def event(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    if isinstance(reply, ToolReply):
        yield event({"role": "assistant", "content": reply.content}), False
        calls = _calls(reply)
        for index, (name, arguments) in enumerate(calls):
            opening = {
                "index": index,
                "id": f"call_{number}_{index}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            yield event({"tool_calls": [opening]}), False
            last = index == len(calls) - 1
            pieces = reply.pieces if last and reply.pieces is not None else split(arguments)
            for piece in pieces:
                call = {"index": index, "function": {"arguments": piece}}
                yield event({"tool_calls": [call]}), last
    else:
        yield event({"role": "assistant", "content": ""}), False
        for piece in split(reply.reasoning) if reply.reasoning is not None else ():
            yield event({"reasoning_content": piece}), False
        for piece in reply.pieces if reply.pieces is not None else split(reply.content):
            yield event({"content": piece}), True
    yield event({}, reply.finish_reason), False
    if include_usage:
        yield {**event({}), "choices": [], "usage": _usage(reply)}, False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # answer at once: headers and body go in separate writes, which Nagle would hold
    # for the client's delayed ACK (40 ms a reply)
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?", 1)[0] not in PATHS:
            self._send_json(404, _error_body(f"no route {self.path}", "not_found", None))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        action, number = self.server.owner._record(Recorded(self.path, _lower(self.headers), body))
        model = body.get("model", "unknown") if isinstance(body, dict) else "unknown"
        if isinstance(action, Drop):
            self.close_connection = True
            return
        if isinstance(action, Delay):
            if self.server.stopping.wait(action.seconds):
                self.close_connection = True
                return
            action = action.then
        if isinstance(action, HttpError):
            body_ = _error_body(action.message, action.type, action.code)
            self._send_json(action.status, body_, action.headers)
        elif isinstance(body, dict) and body.get("stream") is True:
            options = body.get("stream_options") or {}
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            self._send_events(action, chunk_events(action, model, number, include_usage))
        else:
            self._send_json(200, completion_object(action, model, number))

    def _send_events(
        self, reply: Reply | ToolReply, events: Iterable[tuple[dict[str, Any], bool]]
    ) -> None:
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            sent = 0
            for payload, piece in events:
                if piece:
                    if reply.cut_after is not None and sent >= reply.cut_after:
                        self.wfile.flush()
                        return  # mid-body: no closing chunk, the connection just ends
                    if reply.every and self.server.stopping.wait(reply.every):
                        return
                    sent += 1
                self._send_chunk(f"data: {json.dumps(payload)}\n\n".encode())
            self._send_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up before the end

    def _send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            # One request per connection: no pooled connection can go stale between
            # requests, so every request reaches a handler and is counted.
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timed out) before the answer came
        self.close_connection = True


def _error_body(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: OpenAIServer
    stopping: threading.Event


class OpenAIServer:
    """A started server that answers with ``script``, one action per request."""

    def __init__(self, script: Iterable[Action] = ()) -> None:
        self._script = list(script)
        self._lock = threading.Lock()
        self.recorded: list[Recorded] = []
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._httpd.stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[Any]:
        """Every request body received, parsed, in order."""
        with self._lock:
            return [item.body for item in self.recorded]

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.recorded)

    def rescript(self, script: Iterable[Action]) -> None:
        """Answer the next requests with ``script`` (what is left of the old one is
        dropped) and forget the requests recorded so far: one server for many tests."""
        with self._lock:
            self._script = list(script)
            self.recorded = []

    @property
    def remaining(self) -> int:
        """Scripted actions not consumed yet."""
        with self._lock:
            return len(self._script)

    def add(self, *actions: Action) -> None:
        """Append ``actions`` to the script (a server shared by several tests, each
        scripting what it asks for)."""
        with self._lock:
            self._script.extend(actions)

    def _record(self, item: Recorded) -> tuple[Action, int]:
        with self._lock:
            self.recorded.append(item)
            number = len(self.recorded)
            if self._script:
                return self._script.pop(0), number
        return HttpError(418, "openai_server: script exhausted", "script_exhausted"), number

    def close(self) -> None:
        self._httpd.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}
