"""The session's records: what a driver sends in, what the session shows it, what its
events carry, and what it needs of the instance that runs it (no I/O, no locks)."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from jsonmode.backends.base import Backend, Completion, Request
from jsonmode.errors import BackendError, OutputError
from jsonmode.reasoning import Reasoning
from jsonmode.repair.parse import Mode
from jsonmode.result import Attempt, Result, Tier
from jsonmode.retry import TransportPolicy

if TYPE_CHECKING:
    from jsonmode.session.schema_warnings import SchemaWarnings

__all__ = ["Context", "Reply", "Session", "Settings", "Trace"]


@dataclass(frozen=True, slots=True)
class Reply:
    """One backend call's outcome, sent into the session.

    ``verdict``: the output was already judged non-conforming while it streamed (an
    item of a streamed list failed its schema); the session records it as is.
    ``repairable``: for such a verdict, whether repair mode would have read the output
    as valid, when the driver knows better than the judge (a streamed list that departs
    from the items already delivered fails in repair mode too); None: the judge says.
    """

    completion: Completion | None
    error: BackendError | None
    latency_s: float
    transport_retries: int
    verdict: OutputError | None = None
    repairable: bool | None = None


#: One request's attempts: yields each :class:`Request`, is sent its :class:`Reply`,
#: returns the Result (or raises the request's error).
Session = Generator[Request, Reply, Result[Any]]


@dataclass(slots=True)
class Trace:
    """What a session shows its driver while it runs: the tier it chose and the
    attempts so far (the streaming driver reports them in its events)."""

    tier: Tier | None = None
    attempts: list[Attempt] = field(default_factory=list)


class Context(NamedTuple):
    """What one request's events carry (see :mod:`jsonmode.events`)."""

    tier: Tier
    mode: Mode
    schema_name: str | None
    started: float  # time.perf_counter() at the request's start
    fallback: bool  # the instance's tier was constrained and this request runs another


class Settings(Protocol):
    """What a session needs of the instance that runs it (``JsonMode`` is one): read at
    each request's start, never stored."""

    backend: Backend
    tier: Tier
    mode: Mode
    max_attempts: int
    schema_name: str | None
    transport: TransportPolicy
    schema_warnings: SchemaWarnings
    #: "auto", None or a Reasoning (see jsonmode.session.attempts.reasoning_of)
    reasoning: Reasoning | str | None

    def prepare(self) -> None:
        """The backend's one-time set-up (cheap after the first call)."""
        ...

    async def aprepare(self) -> None:
        """:meth:`prepare` off the event loop."""
        ...
