"""A scripted OpenAI-compatible chat completions server on 127.0.0.1, stdlib only.

Each request to ``POST /v1/chat/completions`` (or ``/chat/completions``) consumes the
next action of the script:

    Reply("...")            a chat.completion with that content (finish_reason, usage)
    HttpError(429)          an OpenAI-style JSON error body with that status
    Delay(5.0, Reply(...))  answer only after the delay (longer than the client's timeout)
    Drop()                  close the connection without answering

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Delay", "Drop", "HttpError", "OpenAIServer", "Reply"]

PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class Reply:
    content: str
    finish_reason: str = "stop"
    prompt_tokens: int = 10
    completion_tokens: int = 5


@dataclass(frozen=True)
class HttpError:
    status: int
    message: str = "scripted error"
    type: str = "invalid_request_error"
    code: str | None = None


@dataclass(frozen=True)
class Delay:
    seconds: float
    then: Reply = field(default_factory=lambda: Reply("{}"))


@dataclass(frozen=True)
class Drop:
    """Close the connection without sending a response."""


Action = Reply | HttpError | Delay | Drop


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


def completion_object(reply: Reply, model: str, number: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
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
            self._send_json(action.status, _error_body(action.message, action.type, action.code))
        else:
            self._send_json(200, completion_object(action, model, number))

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
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

    @property
    def remaining(self) -> int:
        """Scripted actions not consumed yet."""
        with self._lock:
            return len(self._script)

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
