"""The server's own key: ``Authorization: Bearer <key>`` on every request but ``/healthz``.

Compared in constant time (``hmac.compare_digest`` over the bytes), so the time of a
refusal says nothing about how much of a guessed key was right. A missing or wrong key
is a 401 in OpenAI's shape (the official clients raise ``AuthenticationError``),
answered before the body is read: the upstream never sees the request. The key is never
logged nor echoed.
"""

from __future__ import annotations

import hmac
from typing import Any

from jsonmode.serve.deferred import Receive, Send, json_bytes

__all__ = ["OPEN_PATHS", "BearerAuth"]

#: Paths answered without a key (a load balancer's health check).
OPEN_PATHS = frozenset({"/healthz"})

_BODY = json_bytes(
    {
        "error": {
            "message": "missing or wrong API key: send it as 'Authorization: Bearer <key>'",
            "type": "authentication_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
)


class BearerAuth:
    """ASGI middleware: lets a request through only with the right bearer key."""

    def __init__(self, app: Any, key: str) -> None:
        self.app = app
        self._expected = b"Bearer " + key.encode()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                given = value
                break
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(_BODY)).encode()),
                    (b"www-authenticate", b'Bearer realm="jsonmode"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _BODY})
