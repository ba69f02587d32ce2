"""The transport retry policy: transient backend failures, retried with backoff.

Separate from validation retries (``JsonMode(max_attempts=...)``): a rate limit or a
refused connection retries the *same* request and never spends a validation
attempt; a non-conforming output is re-asked with its errors and never waits for
backoff. Permanent failures (400/401/403/404 ...) are never retried.

A server that says when to come back (``Retry-After``, in seconds or as an HTTP date,
or ``retry-after-ms``) is waited for; :func:`parse_retry_after` reads those headers
and backends put the result on :attr:`~jsonmode.errors.BackendError.retry_after`.

Before every retry sleep the policy emits :class:`~jsonmode.events.TransportRetried`
(the failure in one line, its status, the wait, the number of the call that failed),
when anyone listens (``jsonmode.events.listeners``); nothing is built otherwise.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import tenacity

from jsonmode import events
from jsonmode.errors import BackendError, JsonModeError, TransientBackendError, UsageError

__all__ = ["TransportPolicy", "describe_failure", "parse_retry_after", "response_headers"]

_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_retry_after(
    headers: Mapping[str, Any] | None, *, now: datetime | None = None
) -> float | None:
    """Seconds a response asks the client to wait, or None when it does not say (readably).

    Reads ``retry-after-ms`` (milliseconds, as OpenAI and Azure send it) first, then
    ``Retry-After``: delta-seconds (a decimal fraction is taken too) or an HTTP date
    (a date in the past means 0). Header names are matched in any case. Anything else
    (negative, ``nan``, ``inf``, ``1e3``, a list) is ignored: None. A number too large
    to represent is infinity, which is longer than any budget.
    """
    if not headers:
        return None
    lowered: dict[str, str] = {}
    try:
        for name, value in headers.items():
            if isinstance(name, str) and isinstance(value, str):
                lowered.setdefault(name.lower(), value)
    except (AttributeError, TypeError, ValueError):  # not a mapping of header pairs
        return None
    millis = lowered.get("retry-after-ms", "").strip()
    if _SECONDS.fullmatch(millis):
        return float(millis) / 1000.0
    text = lowered.get("retry-after", "").strip()
    if _SECONDS.fullmatch(text):
        return float(text)
    if not text or len(text) > 64:
        return None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, per RFC 5322
        when = when.replace(tzinfo=timezone.utc)
    delay = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, delay) if math.isfinite(delay) else None


def response_headers(exc: BaseException) -> Mapping[str, Any] | None:
    """The HTTP response headers an exception carries, if any: litellm's, the OpenAI
    SDK's and httpx's (``headers``, ``litellm_response_headers``, ``response.headers``)."""
    for source in ("headers", "litellm_response_headers", "response"):
        try:
            found = getattr(exc, source, None)
            if source == "response":
                found = getattr(found, "headers", None)
        except Exception:  # a property that cannot answer
            continue
        if (isinstance(found, Mapping) or hasattr(found, "items")) and found:
            return found
    return None


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, JsonModeError) and exc.retryable


def _asked(state: tenacity.RetryCallState) -> float | None:
    """The Retry-After carried by the failure that ended this call, if any."""
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None and outcome.failed else None
    return exc.retry_after if isinstance(exc, BackendError) else None


_TYPE_PREFIX = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*): ")


def describe_failure(exc: BaseException) -> str:
    """``exc`` in one line: ``Type: message``, without repeating a type name.

    Line breaks become spaces. Leading ``Name: `` prefixes of the message that name a
    type already said (``litellm.RateLimitError: RateLimitError: ...`` after
    ``RateLimitError``, or the exception's own type) are dropped, so a wrapped error
    reads ``TransientBackendError: RateLimitError: <the server's words>``.
    """
    name = type(exc).__name__
    message = exc.message if isinstance(exc, JsonModeError) else str(exc)
    message = " ".join(message.split())
    said = {name}
    kept: list[str] = []
    while True:
        prefix = _TYPE_PREFIX.match(message)
        if prefix is None:
            break
        word = prefix.group(1).rsplit(".", 1)[-1]
        if word not in said:
            said.add(word)
            kept.append(prefix.group(1))
        message = message[prefix.end() :]
    return ": ".join([name, *kept, message] if message else [name, *kept])


def _announce(state: tenacity.RetryCallState) -> None:
    """tenacity's ``before_sleep``: emit TransportRetried for the call that just failed.

    Cheap when nobody listens (one tuple test); never raises (events.emit guards the
    listeners, and the event is built from what the failure carries)."""
    if not events.listeners:
        return
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None and outcome.failed else None
    if exc is None:
        return
    action = state.next_action
    wait = float(action.sleep) if action is not None else 0.0
    events.emit(
        events.TransportRetried(
            error=describe_failure(exc),
            status_code=exc.status_code if isinstance(exc, BackendError) else None,
            wait_s=wait,
            call=state.attempt_number,
        )
    )


class _StopWhen(tenacity.stop.stop_base):
    def __init__(self, predicate: Callable[[tenacity.RetryCallState], bool]) -> None:
        self._predicate = predicate

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._predicate(retry_state)


class _Unshared:
    """Stands in for a tenacity controller's ``threading.local`` (attributes set at
    will), for a controller used by one thread at a time, not always the same."""


@dataclass(frozen=True)
class TransportPolicy:
    """Exponential backoff with full jitter for transient backend failures.

    Between two calls the policy waits its own backoff, or what the server asked for
    (``Retry-After``) when that is longer, even past ``max_wait``. It never sleeps past
    ``max_delay``: a server that asks for longer than the time left is not waited for,
    and the call fails at once with a TransientBackendError that says so. A call in
    flight is not cut by ``max_delay`` (its own deadline is the backend's ``timeout``),
    so the transport part of one attempt lasts at most about ``max_delay`` plus one
    backend timeout.

    Attributes:
        max_retries: retries after the first call (default 4: five calls at most).
        initial_wait: scale of the first backoff, seconds (default 0.5).
        max_wait: cap on one backoff of the policy's own, seconds (default 8).
        max_delay: give up once this many seconds have passed since the first call
            (default 60); no wait goes past it.
        sleep / async_sleep: injectable for tests.
    """

    max_retries: int = 4
    initial_wait: float = 0.5
    max_wait: float = 8.0
    max_delay: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.initial_wait < 0 or self.max_wait < 0 or self.max_delay < 0:
            raise UsageError("transport policy values must not be negative")

    def _left(self, state: tenacity.RetryCallState) -> float:
        return self.max_delay - (state.seconds_since_start or 0.0)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        backoff = tenacity.wait_random_exponential(multiplier=self.initial_wait, max=self.max_wait)
        wait = backoff(state)
        asked = _asked(state)
        if asked is not None:
            wait = max(wait, asked)
        return max(0.0, min(wait, self._left(state)))

    def _asks_too_long(self, state: tenacity.RetryCallState) -> bool:
        asked = _asked(state)
        return asked is not None and asked > max(0.0, self._left(state))

    def _give_up(self, state: tenacity.RetryCallState) -> Any:
        """Raise the last failure; say so when a Retry-After outlasted the budget."""
        outcome = state.outcome
        assert outcome is not None
        exc = outcome.exception()
        if isinstance(exc, BackendError) and self._asks_too_long(state):
            left = max(0.0, self._left(state))
            raise TransientBackendError(
                f"{exc.message}; no further retry: the server asked to wait {exc.retry_after:g} s "
                f"(Retry-After), longer than the {left:.3g} s left of the transport "
                f"policy's max_delay ({self.max_delay:g} s)",
                status_code=exc.status_code,
                retry_after=exc.retry_after,
                hint="try later, or raise TransportPolicy(max_delay=...)",
            ) from exc
        return outcome.result()  # raises the last failure as it was

    def _options(self) -> dict[str, object]:
        return {
            "stop": tenacity.stop_any(
                tenacity.stop_after_attempt(self.max_retries + 1),
                tenacity.stop_after_delay(self.max_delay),
                _StopWhen(self._asks_too_long),
            ),
            "wait": self._wait,
            "retry": tenacity.retry_if_exception(_retryable),
            "retry_error_callback": self._give_up,
            "before_sleep": _announce,
        }

    def retrying(self) -> tenacity.Retrying:
        """A fresh tenacity controller for one synchronous call.

        ``controller.statistics["attempt_number"]`` is the number of calls it made.
        """
        return tenacity.Retrying(sleep=self.sleep, **self._options())  # type: ignore[arg-type]

    def moving_retrying(self) -> tenacity.Retrying:
        """:meth:`retrying` for a call sequence that moves between threads (one thread
        at a time: ``map``'s jobs, see :mod:`jsonmode.session.pool`), driven by iterating
        it. tenacity keeps a controller's state (statistics, the pending actions) in a
        ``threading.local``, which a job resumed by another thread would not find; this
        controller keeps it in a plain object instead."""
        controller = self.retrying()
        controller._local = _Unshared()  # type: ignore[assignment]
        return controller

    def aretrying(self) -> tenacity.AsyncRetrying:
        """A fresh tenacity controller for one asynchronous call."""
        return tenacity.AsyncRetrying(sleep=self.async_sleep, **self._options())  # type: ignore[arg-type]
