"""Format checks in bounded time: a slow checker can never hold validation.

jsonschema's format checkers are third-party code of every cost. Some are fine on any
input; others are not: ``iri`` and ``iri-reference`` run an Earley parser
(``rfc3987-syntax``) that took 10–35 s on one 50 KB string a model wrote, and
``regex`` compiles the instance with Python's ``re`` parser. :func:`bounded` returns a
copy of a draft's format checker whose every check runs under a CPU budget
(:class:`jsonmode._watchdog.CpuBudget`: the pure-Python work is interrupted; no thread
is left behind). The budget is shared by all the format checks of one validation —
:func:`budget` opens it, :class:`~jsonmode.schema.core.Schema` does so around every
check of a value — so a document full of hostile strings costs at most
:data:`FORMAT_TIME_LIMIT` in format checks, not that much per string. It counts the
checking thread's own CPU time, not the clock on the wall: a valid IRI checked while
other threads hold the GIL (a batch, a server) or while a garbage collection runs took
2 s of waiting and was called undecided, so not conforming; now the verdict depends
on the string alone.

:func:`bounded` (and :func:`tolerant`, the same without deadlines, for checking a
schema against its metaschema) also counts as "does not conform" what a checker raises
for a malformed instance beyond what jsonschema declares for it
(:data:`ALSO_MALFORMED`): Python's ``re`` refuses a repetition count of 2**32 or more
(``"a{99999999999}"``) with ``OverflowError``, where jsonschema's ``regex`` checker
expects only ``re.error``; the string is not a regular expression ``re`` can compile,
so it is not a ``regex``, never a crash.

A check that runs out of time raises :class:`FormatUndecided`, which propagates
through jsonschema (a verdict inside ``not`` or ``anyOf`` would turn "undecided" into
a pass): :class:`~jsonmode.schema.core.Schema` makes it the verdict for the whole
value, which does not conform, with one issue (keyword ``format``) saying so. Each
checker is first run once on ``""`` outside any budget, so that what it imports on
first use is never interrupted. Costs: a few microseconds per checked string (arming
the budget, reading the thread's CPU clock), nothing for other types. Thread-safe: the
budget lives in a context variable, so threads and tasks each have their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

from jsonschema import FormatChecker

from jsonmode import limits
from jsonmode._watchdog import CpuBudget, DeadlineExceeded
from jsonmode.budget import run_within

__all__ = [
    "ALSO_MALFORMED",
    "FORMAT_TIME_LIMIT",
    "FormatUndecided",
    "bounded",
    "budget",
    "tolerant",
]

#: CPU seconds all the format checks of one validation may take together.
FORMAT_TIME_LIMIT = 0.5

#: By format: what its checker may raise for a malformed instance beyond the
#: exceptions jsonschema declares for it (counted as "does not conform" alike). Only
#: errors that depend on the instance alone belong here: a RecursionError, say, may
#: come from how deep the validation already is, and calling that "not a regex" would
#: turn ``not: {format: regex}`` into a pass.
ALSO_MALFORMED: dict[str, tuple[type[Exception], ...]] = {"regex": (OverflowError,)}

_budget: contextvars.ContextVar[CpuBudget | None] = contextvars.ContextVar(
    "jsonmode_format_budget", default=None
)


class FormatUndecided(Exception):
    """A format check ran out of its time: the value is treated as not conforming."""

    def __init__(self, format_name: str, instance: str) -> None:
        shown = instance if len(instance) <= 60 else f"{instance[:57]}..."
        super().__init__(
            f"{shown!r} could not be checked as {format_name!r} within the "
            f"{FORMAT_TIME_LIMIT} CPU seconds given to format checks"
        )


@contextlib.contextmanager
def budget(seconds: float = FORMAT_TIME_LIMIT) -> Iterator[None]:
    """Share one budget among the format checks made inside (nested: the outer wins)."""
    if _budget.get() is not None:
        yield
        return
    token = _budget.set(CpuBudget(seconds))
    try:
        yield
    finally:
        _budget.reset(token)


def _guarded(name: str, check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    warmed = False

    def guarded(instance: Any) -> Any:
        nonlocal warmed
        if not isinstance(instance, str):  # numbers and the like: cheap, and C code
            return check(instance)
        if not warmed:
            # The first check runs once outside any budget: a checker may import its
            # machinery on first use (rfc3987-syntax compiles its grammar on import,
            # ~1.4 s; see jsonmode/_startup.py), and an import must never be cut short.
            # That one-off time is not taken from the validation's budget.
            with contextlib.suppress(Exception):
                check("")
            warmed = True
        spend = _budget.get() or CpuBudget(FORMAT_TIME_LIMIT)
        try:
            return spend.run(check, instance)
        except DeadlineExceeded:
            raise FormatUndecided(name, instance) from None

    return guarded


def _malformed(name: str, raises: Any) -> Any:
    """The exceptions that mean "not a ``name``": jsonschema's ``raises`` (one
    exception class or a tuple of them) and :data:`ALSO_MALFORMED`'s."""
    extra = ALSO_MALFORMED.get(name, ())
    if not extra:
        return raises
    declared = raises if isinstance(raises, tuple) else (raises,)
    return (*declared, *extra)


@functools.lru_cache(maxsize=16)
def bounded(checker: FormatChecker) -> FormatChecker:
    """``checker`` with every check run under the validation's format budget, and
    what :data:`ALSO_MALFORMED` lists counted as not conforming.

    Cached per checker (a draft's ``FORMAT_CHECKER``); the original is not changed.
    """
    return _rebuilt(checker, deadline=True)


@functools.lru_cache(maxsize=16)
def tolerant(checker: FormatChecker) -> FormatChecker:
    """``checker`` with what :data:`ALSO_MALFORMED` lists counted as not conforming
    (no format budget: for checking a schema against its metaschema, where a
    schema's own ``pattern`` is checked as a ``regex``: that check is capped and runs
    under the compile deadline instead, see :func:`_capped`).

    Cached per checker (a draft's ``FORMAT_CHECKER``); the original is not changed.
    """
    return _rebuilt(checker, deadline=False)


def _rebuilt(checker: FormatChecker, *, deadline: bool) -> FormatChecker:
    """A copy of ``checker`` whose checks also count :data:`ALSO_MALFORMED` as not
    conforming, each run under the format deadline when ``deadline``."""
    copy = FormatChecker(formats=())
    copy.checkers = {
        name: (
            _guarded(name, check) if deadline else _capped(check) if name == "regex" else check,
            _malformed(name, raises),
        )
        for name, (check, raises) in checker.checkers.items()
    }
    return copy


def _capped(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The metaschema's ``regex`` check (Python's ``re`` compiling a schema's
    pattern: ~4 µs a character) within the bounds of reading a schema: a string over
    :data:`~jsonmode.limits.MAX_PATTERN_CHARS` is refused unread, and the compile is
    interrupted at the current compile deadline (:func:`~jsonmode.budget.run_within`);
    both are :class:`~jsonmode.errors.BudgetExceededError`."""

    def capped(instance: Any) -> Any:
        if not isinstance(instance, str):
            return check(instance)
        limits.check_pattern(instance)
        return run_within(check, instance)

    return capped
