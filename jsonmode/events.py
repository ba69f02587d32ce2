"""Typed events: what the façade and the decoder report, for whoever listens.

The façade emits :class:`AttemptFinished` after every attempt and
:class:`RequestFinished` when a request returns or raises (then
:class:`StreamFinished` for a streamed one); the transport policy emits
:class:`TransportRetried` before each retry of a backend call; the decoder emits
:class:`CompileFinished` for every schema it actually compiles (cache hits are not
compiles), :class:`MaskTimed` for a sample of decoding steps, and
:class:`MaskCacheUsed` with the mask-cache lookups made since the last report (on
sampled steps and when a generation ends).
:mod:`jsonmode.metrics` is one listener; anything else (a tracer, a log line, a
test) may subscribe too::

    from jsonmode import events

    def show(event: events.Event) -> None:
        if isinstance(event, events.RequestFinished):
            print(event.outcome, event.duration_s)

    unsubscribe = events.subscribe(show)

Cost: with no listener, an emitting site pays one truthiness check of
:data:`listeners`. Listeners run synchronously in the emitting thread (keep them
short); one that raises is logged and never breaks the request. Subscribing and
unsubscribing are thread-safe (the tuple is replaced, never mutated).

This module imports only the standard library: the decoder imports it too.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, get_args

from jsonmode.errors import UsageError

if TYPE_CHECKING:
    from jsonmode.records import Mode
    from jsonmode.result import Attempt, Tier

__all__ = [
    "REQUEST_OUTCOMES",
    "AttemptFinished",
    "CompileFinished",
    "Event",
    "Listener",
    "MaskCacheUsed",
    "MaskTimed",
    "RequestFinished",
    "RequestOutcome",
    "StreamFinished",
    "TransportRetried",
    "check_schema_name",
    "decoder_finished",
    "decoder_step",
    "emit",
    "listeners",
    "request_outcome",
    "step_started",
    "subscribe",
    "unsubscribe",
]

_log = logging.getLogger(__name__)

#: How a request ended. ``first_try``: the first attempt was valid as it came;
#: ``repaired``: the first attempt was valid after repair; ``retried``: a later
#: attempt was valid; ``failed``: no attempt was (or the backend failed).
RequestOutcome = Literal["first_try", "repaired", "retried", "failed"]
REQUEST_OUTCOMES: tuple[RequestOutcome, ...] = get_args(RequestOutcome)


@dataclass(frozen=True, slots=True)
class AttemptFinished:
    """One attempt of a request ended (emitted before the next one starts).

    Attributes:
        tier: the tier that ran it.
        mode: ``strict`` or ``repair``.
        schema_name: the name the caller gave the schema, or None.
        attempt: the attempt (outcome, repairs, issues, usage, latency).
    """

    tier: Tier
    mode: Mode
    schema_name: str | None
    attempt: Attempt


@dataclass(frozen=True, slots=True)
class RequestFinished:
    """A request returned a value or raised.

    Attributes:
        tier: the tier that ran it.
        mode: ``strict`` or ``repair``.
        schema_name: the name the caller gave the schema, or None.
        outcome: see :data:`RequestOutcome`.
        attempts: every attempt, in order (the last one valid unless ``failed``).
        duration_s: wall time of the whole request.
        fallback: the constrained tier was asked for, but the decoder could not
            compile this schema, so the request ran prompted.
    """

    tier: Tier
    mode: Mode
    schema_name: str | None
    outcome: RequestOutcome
    attempts: tuple[Attempt, ...]
    duration_s: float
    fallback: bool = False


@dataclass(frozen=True, slots=True)
class StreamFinished:
    """A streamed request (``JsonMode.stream`` / ``astream``) ended, with a value or not.

    Emitted after its :class:`RequestFinished`. Attributes: ``tier``, ``mode``,
    ``schema_name`` as there; ``ok`` (it returned a value); ``first_partial_s``: seconds
    from the start to the first partial value (None when none was shown); ``duration_s``:
    the whole stream; ``partials``: partial values yielded.
    """

    tier: Tier
    mode: Mode
    schema_name: str | None
    ok: bool
    first_partial_s: float | None
    duration_s: float
    partials: int


@dataclass(frozen=True, slots=True)
class TransportRetried:
    """The transport policy is about to retry a backend call after a transient failure.

    Attributes:
        error: the failure, in one line (its type and message).
        status_code: its HTTP status, when there was one.
        wait_s: seconds the policy waits before the next call (backoff or Retry-After).
        call: the number of the call that failed (1 for the first).
    """

    error: str
    status_code: int | None
    wait_s: float
    call: int


@dataclass(frozen=True, slots=True)
class CompileFinished:
    """``compile_schema`` compiled a schema (not emitted for cache hits)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class MaskTimed:
    """One sampled decoding step: the time the logits processor spent on it
    (advance the matchers, look up or compute the masks, apply them), all rows."""

    seconds: float


@dataclass(frozen=True, slots=True)
class MaskCacheUsed:
    """Mask-cache lookups of one mask engine since its previous report."""

    hits: int
    misses: int


Event = (
    AttemptFinished
    | RequestFinished
    | StreamFinished
    | TransportRetried
    | CompileFinished
    | MaskTimed
    | MaskCacheUsed
)
Listener = Callable[[Event], object]

#: The current listeners. Read it (``if events.listeners:``) to skip building events
#: nobody wants; change it only through :func:`subscribe` / :func:`unsubscribe`.
listeners: tuple[Listener, ...] = ()
_subscribe_lock = threading.Lock()


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(event)`` for every event from now on; returns the unsubscriber.

    Subscribing the same listener twice is a no-op.
    """
    global listeners
    with _subscribe_lock:
        if listener not in listeners:
            listeners = (*listeners, listener)
    return lambda: unsubscribe(listener)


def unsubscribe(listener: Listener) -> None:
    """Stop calling ``listener``; a listener not subscribed is ignored."""
    global listeners
    with _subscribe_lock:
        listeners = tuple(known for known in listeners if known != listener)


def emit(event: Event) -> None:
    """Hand ``event`` to every listener, in subscription order, in this thread."""
    for listener in listeners:
        try:
            listener(event)
        except Exception:
            _log.exception(
                "jsonmode event listener %r failed on %s", listener, type(event).__name__
            )


def request_outcome(attempts: tuple[Attempt, ...], ok: bool) -> RequestOutcome:
    """Classify a finished request from its attempts (``ok``: it returned a value)."""
    if not ok or not attempts:
        return "failed"
    if len(attempts) > 1:
        return "retried"
    return "repaired" if attempts[0].repairs else "first_try"


_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")


def check_schema_name(name: str | None) -> str | None:
    """Return ``name`` if it may label metrics, else raise :class:`UsageError`.

    A schema name is an identifier the developer chooses (``invoice``,
    ``support.ticket``): 1-64 characters, letters, digits and ``_ . : -``, starting
    with a letter or ``_``. Never pass user text: every distinct name is a time series.
    """
    if name is None:
        return None
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        raise UsageError(
            f"schema_name must be an identifier of 1-64 characters, not {name!r}",
            hint="letters, digits and _ . : - (e.g. 'invoice'); it becomes a metric label",
        )
    return name


# -- decoder steps ---------------------------------------------------------------------

#: One decoding step in this many is timed into a :class:`MaskTimed` event and reports
#: the mask cache; the others cost one counter increment. Set to 1 to time every step.
mask_sample_every = 8
_steps = itertools.count()


class _CacheCounters(Protocol):
    hits: int
    misses: int


# Per mask engine, the (hits, misses) already reported: engines are shared by
# concurrent requests, so deltas are taken against one watermark under a lock.
_reported: weakref.WeakKeyDictionary[_CacheCounters, tuple[int, int]] = weakref.WeakKeyDictionary()
_reported_lock = threading.Lock()


def step_started() -> float:
    """``time.perf_counter()`` if this decoding step is one to time, else ``0.0``.

    The logits processor calls it at the start of every step when there are
    listeners, and :func:`decoder_step` at the end of the steps it returned a time for.
    """
    return time.perf_counter() if next(_steps) % max(1, mask_sample_every) == 0 else 0.0


def decoder_step(engine: _CacheCounters, started: float) -> None:
    """Report a sampled decoding step that began at ``started``: emits
    :class:`MaskTimed`, and :class:`MaskCacheUsed` for ``engine``'s lookups since
    its last report."""
    elapsed = time.perf_counter() - started
    decoder_finished(engine)
    emit(MaskTimed(elapsed))


def decoder_finished(engine: _CacheCounters) -> None:
    """Report ``engine``'s mask-cache lookups since its last report (a generation
    ended; sampled steps report too, so totals lag by a few steps at most)."""
    with _reported_lock:
        hits, misses = engine.hits, engine.misses
        seen_hits, seen_misses = _reported.get(engine, (0, 0))
        _reported[engine] = (hits, misses)
    if hits > seen_hits or misses > seen_misses:
        emit(MaskCacheUsed(max(0, hits - seen_hits), max(0, misses - seen_misses)))
