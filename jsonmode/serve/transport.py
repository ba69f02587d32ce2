"""HTTP to an OpenAI-compatible upstream: one aiohttp connection pool per worker.

Every upstream call of a worker (the attempts of structured requests, strict tools'
calls, requests proxied unchanged) goes through one :class:`UpstreamHTTP`: an
``aiohttp`` session with a bounded pool of kept-alive connections. The body is
serialised once with :mod:`json` and the reply read as a plain dict: no client SDK,
whose request transform, response models and per-request pool scan cost ~13 ms of CPU
a call at 200 concurrent requests on a 2-core machine, against ~0.6 ms here (the
profile is in bench/README.md, "Serve").

Failures are jsonmode's backend errors, as the transport policy reads them:

    refused connection, reset, timeout, 408/409/425/429, 5xx   TransientBackendError
    any other 4xx                                              PermanentBackendError
    a 2xx reply that is not a JSON object, or over the limit   TransientBackendError

each with the HTTP status, the server's own words (``error.message`` of its body,
at most :data:`MAX_ERROR_BYTES` of which are read) and its ``Retry-After``. The
upstream's key is sent as ``Authorization: Bearer`` and never appears in a message.

Thread-safety: one event loop (the worker's); cost: one pooled connection per
concurrent call, reused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from jsonmode._text import clip
from jsonmode.backends.deadline import timed_out
from jsonmode.backends.openai_wire import TRANSIENT_STATUS
from jsonmode.errors import BackendError, PermanentBackendError, TransientBackendError
from jsonmode.retry import parse_retry_after

__all__ = ["MAX_ERROR_BYTES", "MAX_REPLY_BYTES", "UpstreamHTTP", "http_failure"]

#: The most of an error body read (the message is taken from it).
MAX_ERROR_BYTES = 64 * 1024
#: The largest reply read from the upstream.
MAX_REPLY_BYTES = 16 * 1024 * 1024


def http_failure(status: int, headers: Mapping[str, str], data: bytes) -> BackendError:
    """The backend error for an upstream's non-2xx answer (see the module docstring)."""
    words = data[:2000].decode("utf-8", "replace").strip()
    try:
        body = json.loads(data)
        inner = body.get("error", body) if isinstance(body, dict) else None
        said = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(said, str) and said:
            words = said
    except (ValueError, RecursionError):
        pass
    message = f"HTTP {status}: {clip(' '.join(words.split()), 1000)}" if words else f"HTTP {status}"
    retry_after = parse_retry_after(dict(headers))
    if status in TRANSIENT_STATUS or status >= 500:
        return TransientBackendError(message, status_code=status, retry_after=retry_after)
    return PermanentBackendError(message, status_code=status, retry_after=retry_after)


class UpstreamHTTP:
    """The pooled HTTP client of one worker to ``base_url`` (``…/v1``).

    Args:
        base_url: the upstream's base URL.
        api_key: sent as ``Authorization: Bearer`` (None: no header).
        timeout: seconds for one whole call (connect, send, the complete reply).
        max_connections: the pool's bound (concurrent calls beyond it wait).

    Make it inside the worker's event loop; :meth:`close` at shutdown.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float,
        max_connections: int = 1000,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        self._where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        self.timeout = timeout
        headers = {"content-type": "application/json", "accept": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, limit_per_host=0),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(timeout, 30.0)),
            json_serialize=json.dumps,
            auto_decompress=True,
        )

    async def close(self) -> None:
        await self._session.close()

    def _failure(self, exc: BaseException) -> BackendError:
        if isinstance(exc, aiohttp.ClientConnectorError):
            return TransientBackendError(f"cannot connect to {self._where} ({exc.strerror or exc})")
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return TransientBackendError(f"{self._where} closed the connection without a reply")
        return TransientBackendError(f"upstream {self._where}: {type(exc).__name__}: {exc}")

    async def complete(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``path`` and read the JSON object it answers, within
        ``timeout``.

        Raises:
            BackendError: see the module docstring.
        """
        body = json.dumps(payload).encode()

        async def exchange() -> bytes:
            async with self._session.post(self.base_url + path, data=body) as response:
                if response.status >= 300:
                    data = await response.content.read(MAX_ERROR_BYTES)
                    raise http_failure(response.status, response.headers, data)
                return await _read_all(response, MAX_REPLY_BYTES)

        try:
            data = await asyncio.wait_for(exchange(), self.timeout)
        except BackendError:
            raise
        except asyncio.TimeoutError:
            raise timed_out(f"upstream {self._where}", self.timeout) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise self._failure(exc) from exc
        try:
            reply = json.loads(data)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            raise TransientBackendError(
                f"upstream {self._where} answered with something not a JSON object"
            )
        return reply

    async def open(
        self, path: str, payload: Mapping[str, Any]
    ) -> tuple[int, dict[str, str], AsyncIterator[bytes]]:
        """POST ``payload`` and hand back the answer as it comes: (status, the headers a
        proxy passes on, the body's pieces). Closing the iterator, or reading it to its
        end, releases the connection; a client that goes away closes it.

        Raises:
            BackendError: no answer at all (refused connection, timeout before the
                status line).
        """
        body = json.dumps(payload).encode()
        try:
            response = await asyncio.wait_for(
                self._session.post(self.base_url + path, data=body), self.timeout
            )
        except asyncio.TimeoutError:
            raise timed_out(f"upstream {self._where}", self.timeout) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise self._failure(exc) from exc
        kept = {
            key.lower(): value
            for key, value in response.headers.items()
            if key.lower() in ("content-type", "retry-after", "retry-after-ms", "x-request-id")
        }

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in response.content.iter_any():
                    yield piece
            finally:
                response.release()

        return response.status, kept, pieces()


async def _read_all(response: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for piece in response.content.iter_any():
        size += len(piece)
        if size > limit:
            raise PermanentBackendError(f"the upstream's reply is over {limit} bytes")
        chunks.append(piece)
    return b"".join(chunks)
