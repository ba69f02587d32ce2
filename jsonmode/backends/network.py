"""What went wrong on the network, in words: a call that never got an HTTP response.

HTTP client libraries wrap a network failure several times over before it reaches
the caller. litellm reports a refused connection as ``InternalServerError`` with a
made-up status 500 and the message ``Connection error.``; the cause is at the bottom
of its ``__cause__`` / ``__context__`` chain::

    litellm.InternalServerError (status 500, made up)
      OpenAIError (status 500, made up)
        openai.APIConnectionError ("Connection error.")
          httpx.ConnectError
            ConnectionRefusedError ("[Errno 111] Connection refused")

:func:`connection_failure` walks that chain and says what happened and where:
``cannot connect to 127.0.0.1:8000 (connection refused)``. A chain that holds an HTTP
response (``openai.APIStatusError`` from the SDK itself, ``httpx.HTTPStatusError``) is
a server that answered, whatever its status: that is not a connection failure.

Costs a walk of at most :data:`MAX_CHAIN` exceptions; pure (thread-safe); imports
nothing that is not already imported (httpx and openai are looked up in
``sys.modules``).
"""

from __future__ import annotations

import re
import socket
import ssl
import sys
from collections.abc import Iterator

__all__ = ["MAX_CHAIN", "connection_failure"]

#: Exceptions of one chain read at most (a chain is a handful long; a cycle ends it too).
MAX_CHAIN = 32

_SSL_NOISE = re.compile(r"^\[[A-Z0-9_: ]+\]\s*|\s*\(_ssl\.c:\d+\)$")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < MAX_CHAIN:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _classes(exc: BaseException) -> set[str]:
    """``module.Name`` of every class ``exc`` is an instance of (``httpx2``, the httpx
    fork newer OpenAI SDKs are built on, read as ``httpx``)."""
    return {
        f"{_HTTPX2.sub('httpx', cls.__module__)}.{cls.__qualname__}" for cls in type(exc).__mro__
    }


_HTTPX2 = re.compile(r"^httpx2(?=\.|$)")


# A node that says "a response came": the SDK's and httpx's own status errors (litellm's
# wrappers subclass the SDK's, with made-up statuses: they are skipped by module).
_ANSWERED = ("openai.APIStatusError", "httpx.HTTPStatusError")
# A node that says "no response came".
_UNANSWERED = ("openai.APIConnectionError", "httpx.TransportError")
# The connection itself failed (nothing was sent), as opposed to one lost later.
_CONNECTING = (
    "httpx.ConnectError",
    "httpx.ConnectTimeout",
    "aiohttp.client_exceptions.ClientConnectorError",
)


def _is(exc: BaseException, names: tuple[str, ...]) -> bool:
    module = type(exc).__module__
    if module.startswith("litellm"):  # litellm's wrappers say nothing of their own
        return False
    classes = _classes(exc)
    return any(name in classes for name in names)


def connection_failure(exc: BaseException) -> str | None:
    """``exc`` in words when it is a call that got no HTTP response, else None.

    ``cannot connect to HOST:PORT (REASON)`` when the connection could not be made
    (REASON: ``connection refused``, ``host name not found: ...``, ``TLS handshake
    failed: ...``, ``timed out``, or the system's words), ``lost the connection to
    HOST:PORT (REASON)`` when it was made and then broke before the reply
    (``the server closed it without answering``, ``connection reset by peer`` ...).
    HOST:PORT comes from the request the failure carries (the scheme's default port
    when the URL names none); ``the server`` when none does.
    """
    chain = list(_chain(exc))
    decided = False
    for node in chain:
        if _is(node, _ANSWERED):
            return None
        if _is(node, _UNANSWERED):
            decided = True
            break
    if not decided:
        return None
    connecting = any(_is(node, _CONNECTING) for node in chain)
    reason, at_connect = _reason(chain)
    if connecting or at_connect:
        return f"cannot connect to {_where(chain)} ({reason})"
    return f"lost the connection to {_where(chain)} ({reason})"


def _reason(chain: list[BaseException]) -> tuple[str, bool]:
    """What the deepest telling exception of the chain says happened, and whether that
    happens only while connecting (a refusal, a name not found, a TLS handshake)."""
    for node in reversed(chain):
        found = _reason_of(node)
        if found is not None:
            return found
    return "connection error", False


def _reason_of(node: BaseException) -> tuple[str, bool] | None:
    if isinstance(node, ssl.SSLCertVerificationError):
        detail = node.verify_message or _ssl_words(node)
        return f"TLS handshake failed: certificate verify failed: {detail}", True
    if isinstance(node, ssl.SSLError):
        return f"TLS handshake failed: {_ssl_words(node)}", True
    if isinstance(node, socket.gaierror):
        return f"host name not found: {node.strerror or node}", True
    if isinstance(node, ConnectionRefusedError):
        return "connection refused", True
    if isinstance(node, ConnectionResetError):
        return "connection reset by peer", False
    if isinstance(node, (ConnectionAbortedError, BrokenPipeError)):
        return "the connection was closed while sending", False
    if isinstance(node, TimeoutError) or _is(node, ("httpx.TimeoutException",)):
        return "timed out", False
    classes = _classes(node)
    # httpx says which in words; aiohttp: disconnected before a response, or in its body
    if "aiohttp.client_exceptions.ServerDisconnectedError" in classes or (
        "httpx.RemoteProtocolError" in classes and "without sending a response" in str(node)
    ):
        return "the server closed it without answering", False
    if (
        "httpx.RemoteProtocolError" in classes
        or "aiohttp.client_exceptions.ClientPayloadError" in classes
    ):
        return "the server closed it before the reply ended", False
    if isinstance(node, OSError) and node.strerror:
        return node.strerror, False
    return None


def _ssl_words(error: ssl.SSLError) -> str:
    text = str(error.args[1]) if len(error.args) > 1 else str(error)
    return _SSL_NOISE.sub("", text).strip() or error.reason or "TLS error"


def _where(chain: list[BaseException]) -> str:
    """``host:port`` of the request the chain carries (``[v6]:port``)."""
    for node in reversed(chain):
        found = _host_port(node)
        if found is not None:
            host, port = found
            host = f"[{host}]" if ":" in host else host
            return f"{host}:{port}" if port is not None else host
    return "the server"


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(node: BaseException) -> tuple[str, int | None] | None:
    if _is(node, ("aiohttp.client_exceptions.ClientConnectorError",)):
        host, port = getattr(node, "host", None), getattr(node, "port", None)
        if isinstance(host, str) and host:
            return host, port if isinstance(port, int) else None
    if type(node).__module__.startswith("litellm"):  # litellm fills in placeholder URLs
        return None
    try:
        request = getattr(node, "request", None)  # httpx's raises when it was never set
    except Exception:
        return None
    requests = tuple(
        module.Request for name in ("httpx", "httpx2") if (module := sys.modules.get(name))
    )
    if not requests or not isinstance(request, requests):
        return None
    url = request.url
    if not url.host:
        return None
    return url.host, url.port if url.port is not None else _DEFAULT_PORTS.get(url.scheme)
