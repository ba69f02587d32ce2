"""A loopback HTTP server that writes raw bytes: hostile answers a well-behaved server never gives.

Each connection reads one request (head and ``Content-Length`` body), is counted, and
consumes the next action of the script:

    Send(b"HTTP/1.1 ...")            write these bytes, then close
    Trickle(b"HTTP/1.1 ...", 0.2)    write them one byte every 0.2 s (a slow-loris server),
                                     closing after ``for_at_most`` seconds in any case
    Silent()                         accept, read the request, never answer

``response(...)``, ``completion(...)`` and ``events(...)`` build the bytes. A request
that finds the script exhausted gets a 418 that no client retries.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["RawServer", "Send", "Silent", "Trickle", "completion", "events", "response"]

_REASONS = {200: "OK", 400: "Bad Request", 418: "I'm a teapot", 429: "Too Many Requests"}


@dataclass(frozen=True)
class Send:
    data: bytes


@dataclass(frozen=True)
class Trickle:
    data: bytes
    every: float = 1.0
    #: sent at once before the trickle starts (e.g. a complete head, to trickle only the body)
    head: bytes = b""
    for_at_most: float = 20.0


@dataclass(frozen=True)
class Silent:
    """Read the request and never answer (until the server closes)."""


Action = Send | Trickle | Silent


def response(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> bytes:
    """A complete HTTP/1.1 response that closes its connection."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    all_headers["Content-Length"] = str(len(body))
    all_headers["Connection"] = "close"
    lines += [f"{name}: {value}" for name, value in all_headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def error_body(message: str, type_: str = "rate_limit_exceeded") -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": type_, "param": None, "code": None}}
    ).encode()


def completion(content: str, status: int = 200, headers: Mapping[str, str] | None = None) -> bytes:
    """A chat.completion answer with ``content``."""
    body = {
        "id": "chatcmpl-raw",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return response(status, json.dumps(body).encode(), headers)


def events(pieces: Iterable[str]) -> tuple[bytes, bytes]:
    """A streamed chat completion: (head, body) of a ``text/event-stream`` answer."""
    chunks = []
    for piece in pieces:
        chunk = {
            "id": "chatcmpl-raw",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": "test-model",
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
        }
        chunks.append(f"data: {json.dumps(chunk)}\n\n")
    last = {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "test-model",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    chunks.append(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n")
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    return head, "".join(chunks).encode()


class RawServer:
    """A started server answering with ``script``, one action per connection."""

    def __init__(self, script: Iterable[Action] = ()) -> None:
        self._script = list(script)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: list[socket.socket] = []
        self.request_count = 0
        #: per connection: when the client closed it early (None: it did not, or not yet)
        self.closed_by_client: list[float | None] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _next(self) -> tuple[Action, int]:
        with self._lock:
            self.request_count += 1
            self.closed_by_client.append(None)
            index = self.request_count - 1
            if self._script:
                return self._script.pop(0), index
        return Send(response(418, error_body("raw_http: script exhausted", "teapot"))), index

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            if not _read_request(conn):
                return
            action, index = self._next()
            try:
                if isinstance(action, Send):
                    conn.sendall(action.data)
                elif isinstance(action, Trickle):
                    conn.sendall(action.head)
                    ends = time.monotonic() + action.for_at_most
                    for byte in action.data:
                        if self._stopping.wait(action.every) or time.monotonic() > ends:
                            return
                        conn.sendall(bytes([byte]))
                else:
                    self._stopping.wait()
            except OSError:  # the client gave up and closed the connection
                with self._lock:
                    self.closed_by_client[index] = time.monotonic()

    def close(self) -> None:
        self._stopping.set()
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


def _read_request(conn: socket.socket) -> bool:
    data = b""
    conn.settimeout(10)
    try:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            body += chunk
    except OSError:
        return False
    conn.settimeout(None)
    return True
