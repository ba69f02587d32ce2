"""The transport retry policy: transient backend failures, retried with backoff.

Separate from validation retries (``JsonMode(max_attempts=...)``): a rate limit or a
refused connection retries the *same* request and never spends a validation
attempt; a non-conforming output is re-asked with its errors and never waits for
backoff. Permanent failures (400/401/403/404 ...) are never retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import tenacity

from jsonmode.errors import JsonModeError, UsageError

__all__ = ["TransportPolicy"]


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, JsonModeError) and exc.retryable


@dataclass(frozen=True)
class TransportPolicy:
    """Exponential backoff with full jitter for transient backend failures.

    Attributes:
        max_retries: retries after the first call (default 4: five calls at most).
        initial_wait: scale of the first backoff, seconds (default 0.5).
        max_wait: cap on one backoff, seconds (default 8).
        max_delay: give up once this many seconds have passed since the first call
            (default 60).
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

    def _options(self) -> dict[str, object]:
        return {
            "stop": tenacity.stop_after_attempt(self.max_retries + 1)
            | tenacity.stop_after_delay(self.max_delay),
            "wait": tenacity.wait_random_exponential(
                multiplier=self.initial_wait, max=self.max_wait
            ),
            "retry": tenacity.retry_if_exception(_retryable),
            "reraise": True,
        }

    def retrying(self) -> tenacity.Retrying:
        """A fresh tenacity controller for one synchronous call."""
        return tenacity.Retrying(sleep=self.sleep, **self._options())  # type: ignore[arg-type]

    def aretrying(self) -> tenacity.AsyncRetrying:
        """A fresh tenacity controller for one asynchronous call."""
        return tenacity.AsyncRetrying(sleep=self.async_sleep, **self._options())  # type: ignore[arg-type]
