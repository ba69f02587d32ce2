"""Errors as HTTP answers, in the shape OpenAI's clients read.

Every error body is ``{"error": {"message", "type", "param", "code"}}``; the official
clients raise by status (400 ``BadRequestError``, 401 ``AuthenticationError``, 413,
422 ``UnprocessableEntityError``, 429 ``RateLimitError``, 5xx ``InternalServerError``).

    status  error.type                when
    400     invalid_request_error     malformed JSON, a bad field (``param``: its JSON
                                      path), a schema jsonmode cannot use (``param``
                                      ends in the schema's own path)
    401     authentication_error      missing or wrong ``Authorization: Bearer`` key
    404     not_found_error           no such route
    413     request_too_large         a body over the server's limit
    422     jsonmode_nonconforming    no conforming reply after the last attempt;
                                      ``error.issues`` and ``error.attempts`` say why
    429     rate_limit_error          the upstream kept answering 429 (Retry-After kept)
    502     upstream_error            the upstream failed (5xx, refused connection,
                                      a reply it could not give) or refused our key
    503     upstream_unavailable      the upstream answered 503
    504     upstream_timeout          no complete upstream reply within the deadline
    4xx     upstream_error            the upstream refused the request as the client
                                      sent it (its own 400/404/422, passed on)

Nothing here ever includes the upstream's key or the server's own.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from jsonmode._text import clip
from jsonmode.errors import (
    AttemptsExhaustedError,
    BackendError,
    JsonModeError,
    OutputError,
    SchemaError,
    TransientBackendError,
)
from jsonmode.records import Attempt, Issue

__all__ = ["NONCONFORMING", "ServeError", "error_response", "from_jsonmode", "issue_json"]

#: ``error.type`` of a reply that did not conform after the last attempt (contract).
NONCONFORMING = "jsonmode_nonconforming"

#: The longest raw attempt text an error body repeats (characters).
MAX_RAW = 2_000


class ServeError(Exception):
    """An HTTP error answer: status, OpenAI-style body, extra headers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        top: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.extra = extra or {}
        self.headers = headers or {}
        self.top = top or {}

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {...}}`` plus any top-level fields (``jsonmode``,
        ``usage``)."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return {"error": {**error, **self.extra}, **self.top}


def error_response(error: ServeError) -> JSONResponse:
    """The HTTP answer for ``error``: its status, body and headers."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def issue_json(issue: Issue) -> dict[str, str]:
    return {"path": issue.path, "keyword": issue.keyword, "message": issue.message}


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    """One attempt as the 422 body lists it (its raw text clipped)."""
    return {
        "index": attempt.index,
        "outcome": attempt.outcome,
        "error": attempt.error,
        "issues": [issue_json(issue) for issue in attempt.issues],
        "raw": clip(attempt.raw, MAX_RAW, tail=200),
    }


def from_jsonmode(exc: JsonModeError, *, top: dict[str, Any] | None = None) -> ServeError:
    """The HTTP answer for an error a structured request ended with.

    ``top``: fields for the body's top level (the ``jsonmode`` record, ``usage``).
    """
    if isinstance(exc, (AttemptsExhaustedError, OutputError)):
        last = exc.attempts[-1] if exc.attempts else None
        issues = list(last.issues) if last is not None else list(getattr(exc, "issues", ()))
        return ServeError(
            422,
            exc.message,
            type=NONCONFORMING,
            code="nonconforming",
            extra={
                "issues": [issue_json(issue) for issue in issues],
                "attempts": [attempt_json(attempt) for attempt in exc.attempts],
            },
            top=top,
        )
    if isinstance(exc, SchemaError):
        param = "schema" + (f" at {exc.schema_path}" if exc.schema_path else "")
        return ServeError(400, str(exc), param=param, code="unsupported_schema", top=top)
    if isinstance(exc, BackendError):
        return _backend(exc, top)
    return ServeError(500, str(exc), type="server_error", top=top)


def _backend(exc: BackendError, top: dict[str, Any] | None) -> ServeError:
    status = exc.status_code
    message = f"upstream: {exc.message}"
    headers: dict[str, str] = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if status == 429:
        return ServeError(429, message, type="rate_limit_error", headers=headers, top=top)
    if status == 503:
        return ServeError(503, message, type="upstream_unavailable", headers=headers, top=top)
    if isinstance(exc, TransientBackendError) and status is None and "timeout" in exc.message:
        return ServeError(504, message, type="upstream_timeout", top=top)
    if status in (401, 403):
        # the upstream refused *our* key: the client's request is not at fault
        return ServeError(502, message, type="upstream_error", code="upstream_auth", top=top)
    if status is not None and 400 <= status < 500:
        return ServeError(status, message, type="upstream_error", top=top)
    return ServeError(502, message, type="upstream_error", top=top)
