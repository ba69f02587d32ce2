"""Format checks in bounded time: a slow checker can never hold validation.

jsonschema's format checkers are third-party code of every cost. Some are fine on any
input; others are not: ``iri`` and ``iri-reference`` run an Earley parser
(``rfc3987-syntax``) that took 10–35 s on one 50 KB string a model wrote, and
``regex`` compiles the instance with Python's ``re`` parser. :func:`bounded` returns a
copy of a draft's format checker whose every check runs under a deadline
(:mod:`jsonmode._watchdog`: the pure-Python work is interrupted; no thread is left
behind). The deadline is shared by all the format checks of one validation —
:func:`budget` opens it, :class:`~jsonmode.schema.core.Schema` does so around every
check of a value — so a document full of hostile strings costs at most
:data:`FORMAT_TIME_LIMIT` in format checks, not that much per string.

A check that runs out of time raises :class:`FormatUndecided`, which propagates
through jsonschema (a verdict inside ``not`` or ``anyOf`` would turn "undecided" into
a pass): :class:`~jsonmode.schema.core.Schema` makes it the verdict for the whole
value, which does not conform, with one issue (keyword ``format``) saying so. Each
checker is first run once on ``""`` outside any deadline, so that what it imports on
first use is never interrupted. Costs: a few microseconds per checked string (arming
the deadline), nothing for other types. Thread-safe: the budget lives in a context
variable, so threads and tasks each have their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from jsonschema import FormatChecker

from jsonmode._watchdog import DeadlineExceeded, run_until

__all__ = ["FORMAT_TIME_LIMIT", "FormatUndecided", "bounded", "budget"]

#: Seconds all the format checks of one validation may take together.
FORMAT_TIME_LIMIT = 0.5

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "jsonmode_format_deadline", default=None
)


class FormatUndecided(Exception):
    """A format check ran out of its time: the value is treated as not conforming."""

    def __init__(self, format_name: str, instance: str) -> None:
        shown = instance if len(instance) <= 60 else f"{instance[:57]}..."
        super().__init__(
            f"{shown!r} could not be checked as {format_name!r} within the "
            f"{FORMAT_TIME_LIMIT} s given to format checks"
        )


@contextlib.contextmanager
def budget(seconds: float = FORMAT_TIME_LIMIT) -> Iterator[None]:
    """Share one deadline among the format checks made inside (nested: the outer wins)."""
    if _deadline.get() is not None:
        yield
        return
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def _guarded(name: str, check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    warmed = False

    def guarded(instance: Any) -> Any:
        nonlocal warmed
        if not isinstance(instance, str):  # numbers and the like: cheap, and C code
            return check(instance)
        deadline = _deadline.get()
        if not warmed:
            # The first check runs once with no deadline: a checker may import its
            # machinery on first use (rfc3987-syntax compiles its grammar on import,
            # ~1.4 s; see jsonmode/_startup.py), and an import must never be cut short.
            # That one-off time is not taken from the validation's budget.
            with contextlib.suppress(Exception):
                check("")
            warmed = True
            deadline = None
        if deadline is None:
            deadline = time.monotonic() + FORMAT_TIME_LIMIT
        try:
            return run_until(deadline, check, instance)
        except DeadlineExceeded:
            raise FormatUndecided(name, instance) from None

    return guarded


@functools.lru_cache(maxsize=16)
def bounded(checker: FormatChecker) -> FormatChecker:
    """``checker`` with every check run under the validation's format deadline.

    Cached per checker (a draft's ``FORMAT_CHECKER``); the original is not changed.
    """
    copy = FormatChecker(formats=())
    copy.checkers = {
        name: (_guarded(name, check), raises) for name, (check, raises) in checker.checkers.items()
    }
    return copy
