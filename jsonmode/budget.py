"""The compile deadline, checked while compiling rather than once at the end.

:func:`~jsonmode.decoding.compiled.compile_schema` owns one :class:`Deadline` per
compile (``max_compile_seconds``) and makes it current with :func:`deadline`; the
loops that can run long on hostile input (enum and const expansion, subset
construction, minimisation, product automata, object rules, grammar building) call
:func:`checkpoint` as they go, so an over-budget compile stops within a few
milliseconds of its deadline with a :class:`~jsonmode.errors.BudgetExceededError`
naming the budget, instead of running to the end and being refused then.

The current deadline lives in a :class:`contextvars.ContextVar`: each thread (and
each asyncio task) compiling at the same time sees its own, and code run outside a
compile (a regex compiled for post-validation, a test building an automaton by hand)
sees none and is never interrupted.

Checking a text against a compiled constraint runs under a deadline of the same kind,
worded as its own budget (:func:`jsonmode.decoding.textcheck.checking`): the walk and
the nesting headroom it may work out call :func:`checkpoint` too.

Cost: :func:`checkpoint` is a context-variable read and a clock read (~0.1 µs);
the hot loops call it once per automaton state or per schema node, not per edge.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from jsonmode._watchdog import DeadlineExceeded, run_until
from jsonmode.errors import BudgetExceededError

T = TypeVar("T")

__all__ = [
    "DEFAULT_SECONDS",
    "checkpoint",
    "deadline",
    "ensure_deadline",
    "run_within",
]

#: The name :class:`~jsonmode.errors.BudgetExceededError` gives the time budget.
TIME_BUDGET = "compile time (seconds)"
#: The default budget: ``CompileOptions.max_compile_seconds``, and the deadline a
#: schema is read under when no compile is under way (``parse``, ``Schema.of``).
DEFAULT_SECONDS = 10.0


class Deadline:
    """A point in time (``time.perf_counter``) after which compiling gives up.

    Immutable once made; cheap to check. ``seconds`` is the budget it was made from;
    ``budget``, ``doing`` and ``hint`` word the error (None: the error's defaults).
    """

    __slots__ = ("budget", "doing", "ends", "hint", "seconds")

    def __init__(
        self,
        seconds: float,
        budget: str = TIME_BUDGET,
        doing: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.seconds = seconds
        self.ends = time.perf_counter() + seconds
        self.budget = budget
        self.doing = doing
        self.hint = hint

    def exceeded(self) -> BudgetExceededError:
        """The error for this deadline having passed."""
        if self.doing is None:
            return BudgetExceededError(self.budget, self.seconds, hint=self.hint)
        return BudgetExceededError(self.budget, self.seconds, hint=self.hint, doing=self.doing)


_current: ContextVar[Deadline | None] = ContextVar("jsonmode_compile_deadline", default=None)


@contextlib.contextmanager
def deadline(
    seconds: float,
    budget: str = TIME_BUDGET,
    *,
    doing: str | None = None,
    hint: str | None = None,
) -> Iterator[None]:
    """Make a deadline ``seconds`` from now current for the ``with`` block (nested
    blocks restore the outer deadline on exit). ``budget``, ``doing`` and ``hint`` word
    the error (defaults: the compile time budget's). Thread-safe: per context."""
    token = _current.set(Deadline(seconds, budget, doing, hint))
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.contextmanager
def ensure_deadline(seconds: float | None = None) -> Iterator[None]:
    """The current deadline for the ``with`` block when there is one (a compile under
    way keeps its own budget), else a new one ``seconds`` from now (None:
    :data:`DEFAULT_SECONDS`, read at each call). Thread-safe."""
    if _current.get() is not None:
        yield
        return
    with deadline(DEFAULT_SECONDS if seconds is None else seconds):
        yield


def checkpoint() -> None:
    """Raise :class:`~jsonmode.errors.BudgetExceededError` when the current compile's
    deadline has passed; nothing outside a compile. Cost: ~0.1 µs."""
    current = _current.get()
    if current is not None and time.perf_counter() > current.ends:
        raise current.exceeded()


def run_within(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``, stopped at the current deadline with a
    :class:`~jsonmode.errors.BudgetExceededError` (interrupted by
    :func:`jsonmode._watchdog.run_until`, so only for foreign pure-Python work that
    holds no locks: Python's ``re`` compiling a schema's pattern); a plain call outside
    a compile. Cost: a few microseconds beyond ``work``."""
    current = _current.get()
    if current is None:
        return work(*args)
    left = current.ends - time.perf_counter()
    if left <= 0:
        raise current.exceeded()
    try:
        return run_until(time.monotonic() + left, work, *args)
    except DeadlineExceeded:
        raise current.exceeded() from None
