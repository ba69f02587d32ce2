"""Bounded HTTP error bodies for the OpenAI SDK that litellm drives.

A server's error body can be megabytes (a 400 that echoes the request). litellm runs
its secret-redaction regexes and its error normalisation over the whole text several
times before it raises (about 10 µs a character: a 1 MB body took 8 to 17 s, 5 MB
37 s), so a permanent 400 could outlast a short deadline and be retried as a
"transient" timeout. The clients built here hand the SDK at most
:data:`MAX_ERROR_BODY` bytes of any response with a status of 400 or more: a JSON
error body keeps its shape with its ``error.message`` clipped (head and tail kept, a
marker saying how much was cut), any other body is clipped as text. Successful
responses are not touched.

Reading is bounded too: at most :data:`MAX_ERROR_READ` bytes of an error body are
read; the rest is dropped with the connection. A compressed error body
(``Content-Encoding`` other than identity) is passed through unchanged: its bytes can
only be clipped after decoding, which the SDK does.

Used by :class:`~jsonmode.backends.litellm.LiteLLMBackend` for the ``openai/``
provider when ``api_base`` and ``api_key`` are given (see its module docstring).
Thread-safe: the sync client is shared; an async client belongs to one call.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from jsonmode._text import clip

__all__ = ["MAX_ERROR_BODY", "MAX_ERROR_READ", "async_client", "clip_error_body", "sync_client"]

#: Bytes of an HTTP error body handed on to the SDK and litellm.
MAX_ERROR_BODY = 64_000
#: Bytes of an HTTP error body read at most; the rest is not read.
MAX_ERROR_READ = 16_000_000
# The message kept in a JSON error body (the error itself keeps 2 000 characters).
_MESSAGE_KEPT = 8_000


def clip_error_body(data: bytes) -> bytes:
    """``data`` when at most :data:`MAX_ERROR_BODY` bytes; else a shorter body that says
    the same: an OpenAI-style JSON error (``{"error": {"message": ...}}``) with its
    message clipped, or the text's head and tail around a cut marker. Linear time."""
    if len(data) <= MAX_ERROR_BODY:
        return data
    text = data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            clipped = {**error, "message": clip(error["message"], _MESSAGE_KEPT, tail=400)}
            kept = {"error": {k: v for k, v in clipped.items() if _small(v)}}
            out = json.dumps(kept).encode()
            if len(out) <= MAX_ERROR_BODY:
                return out
    return clip(text, MAX_ERROR_BODY // 4, tail=1_000).encode()


def _small(value: Any) -> bool:
    return len(json.dumps(value)) <= _MESSAGE_KEPT * 2


class _Bounded:
    """An error body read up to :data:`MAX_ERROR_READ` bytes, sans I/O: the sync and the
    async stream below only read the parts and hand them here."""

    def __init__(self) -> None:
        self._got: list[bytes] = []
        self._size = 0

    def add(self, part: bytes) -> bool:
        """Keeps ``part``; True once more than :data:`MAX_ERROR_READ` bytes came (read no more)."""
        self._got.append(part)
        self._size += len(part)
        return self._size > MAX_ERROR_READ

    def body(self) -> bytes:
        """What came, cut at :data:`MAX_ERROR_READ` bytes and clipped (:func:`clip_error_body`)."""
        return clip_error_body(b"".join(self._got)[:MAX_ERROR_READ])


@functools.lru_cache(maxsize=1)
def _httpx() -> Any:
    """The httpx module the installed OpenAI SDK is built on (``httpx`` or ``httpx2``)."""
    import openai

    for base in openai.DefaultHttpxClient.__mro__[1:]:
        root = base.__module__.split(".")[0]
        if root.startswith("httpx"):
            return importlib.import_module(root)
    raise ImportError("cannot tell which httpx the OpenAI SDK uses")  # pragma: no cover


def _encoded(response: Any) -> bool:
    return response.headers.get("content-encoding", "identity").lower() not in ("", "identity")


@functools.lru_cache(maxsize=1)
def _stream_classes() -> tuple[type, type]:
    httpx = _httpx()

    class ClippedStream(httpx.SyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __iter__(self) -> Iterator[bytes]:
            body = _Bounded()
            for part in self._inner:
                if body.add(part):
                    break
            yield body.body()

        def close(self) -> None:
            self._inner.close()

    class AsyncClippedStream(httpx.AsyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            body = _Bounded()
            async for part in self._inner:
                if body.add(part):
                    break
            yield body.body()

        async def aclose(self) -> None:
            await self._inner.aclose()

    return ClippedStream, AsyncClippedStream


def _on_response(response: Any) -> None:
    if response.status_code >= 400 and not _encoded(response):
        response.stream = _stream_classes()[0](response.stream)


async def _on_async_response(response: Any) -> None:
    if response.status_code >= 400 and not _encoded(response):
        response.stream = _stream_classes()[1](response.stream)


@functools.lru_cache(maxsize=8)
def sync_client(verify: bool | str = True) -> Any:
    """A shared SDK HTTP client (``openai.DefaultHttpxClient``) that bounds error bodies.
    Thread-safe (httpx clients are); one per ``verify`` setting."""
    import openai

    return openai.DefaultHttpxClient(verify=verify, event_hooks={"response": [_on_response]})


def async_client(verify: bool | str = True) -> Any:
    """A new async SDK HTTP client that bounds error bodies, for one call (an async
    client's connections belong to one event loop): close it when the call ends."""
    import openai

    return openai.DefaultAsyncHttpxClient(
        verify=verify, event_hooks={"response": [_on_async_response]}
    )
