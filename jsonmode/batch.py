"""Batches at the façade: ``JsonMode.map`` / ``amap``.

::

    results = jm.map(prompts, Person, concurrency=8)   # a progress bar on a terminal
    texts = jm.map(prompts, compile_regex(r"[A-Z]{3}"))  # or a grammar: Results like run_text
    print(results.summary)     # 200 prompts: 197 conformed (190 first try, ...), 3 failed ...
    for prompt, entry in zip(prompts, results):
        if isinstance(entry, jsonmode.JsonModeError): ...   # that prompt's typed error
        else: entry.value                                   # its Result

What a batch guarantees:

- **Order and nothing lost**: entry *i* is prompt *i*'s :class:`~jsonmode.Result` or
  the :class:`~jsonmode.JsonModeError` ``run`` would have raised for it (its
  ``attempts`` included); one failure never costs another prompt its result. An error
  that is not a ``JsonModeError`` (a bug, ``KeyboardInterrupt``, an error raised by
  ``on_result``) stops the batch and propagates at once: requests not yet started are
  never sent, and those in flight are abandoned (``map``'s worker threads are daemon
  threads, so they never hold up the interpreter's exit; each ends at its next backend
  call, and its entry is dropped: ``on_result`` is never called after the batch
  stopped).
- **Schema or grammar**: the target is what :meth:`JsonMode.run` takes (a JSON Schema,
  a pydantic model ...) or what :meth:`JsonMode.run_text` takes (a
  :class:`~jsonmode.CompiledGrammar`, or GBNF text); each entry is then a Result like
  ``run_text``'s (the text as ``value`` and ``data``). A string is JSON Schema text
  when its first non-blank character is ``{`` (or it is ``true``/``false``), GBNF
  text otherwise.
- **Bounded concurrency**: at most ``concurrency`` requests in flight (threads for
  ``map``, tasks on the running loop for ``amap``). ``map`` runs at most ``concurrency``
  worker threads plus one that watches the calls' deadlines: each backend call runs in
  its worker (:func:`jsonmode.backends.deadline.inline`), and a call past its timeout is
  given up, its prompt going on (a transport retry) in another worker. A thread that
  cannot start (an address-space or pid limit) leaves ``map`` running with the threads
  it has, or in the caller's thread: no result is lost (see :mod:`jsonmode.session.pool`).
  For a local model that exposes ``complete_batch`` (the transformers backend) in the
  constrained tier, ``map`` instead generates ``concurrency`` prompts per ``generate``
  call, a matcher per row, the first requests of prompts not started before re-asks and
  transport retries (up to the policy's ``max_retries``, without its waits: a local
  model has no server to wait for), which join a later batch.
- **Shared backpressure** (:class:`Gate`): a ``Retry-After`` received by one request
  holds every request of the batch until it has passed (each request still runs its
  own transport policy); and when the backend fails :attr:`Gate.give_up_after` calls in
  a row with transient errors and no success in between, the requests not yet sent
  fail at once with a TransientBackendError saying so (and quoting the last failure,
  e.g. ``...; the last: cannot connect to ...``), instead of each waiting out its own
  retries against a backend that is down: a prompt not started yet fails without a
  call (its one ``backend_error`` attempt records why).
- **Memory**: ``map`` returns every entry, so it holds them all; :func:`stream` (what
  ``jsonmode batch`` uses) pulls the prompts as it goes and hands each entry out in
  order, then drops it: memory bounded whatever the input's size.
- **Progress**: a tqdm bar on stderr (``progress=None``: only when stderr is a
  terminal), and :attr:`BatchResults.summary`.

Cost: what the requests cost, plus one schema normalisation (or grammar compilation)
up front (a bad schema or grammar raises at once, before any request).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, Union

from jsonmode import events
from jsonmode.backends.base import CompletesBatch, Completion, Request
from jsonmode.errors import BackendError, JsonModeError, TransientBackendError, UsageError
from jsonmode.result import Result, Usage
from jsonmode.schema.core import Schema
from jsonmode.session import (
    Lockstep,
    Prompt,
    Session,
    Settings,
    adrive,
    refused,
    schema_session,
    steps,
    text_session,
)
from jsonmode.session.grammar_judge import GrammarJudge, as_grammar, is_grammar
from jsonmode.session.judges import checked_examples
from jsonmode.session.pool import Job, Ordered

if TYPE_CHECKING:
    from jsonmode.decoding.grammars.compiled import CompiledGrammar

__all__ = ["BatchResults", "BatchSummary", "Gate", "Options", "Progress", "Tally", "stream"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - an input item
Entry = Result[Any] | JsonModeError
Target = Union[Schema, "CompiledGrammar"]  # what each prompt's session is judged against


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """What happened to a batch.

    Attributes:
        total: prompts.
        conformed: prompts with a Result (``first_try + repaired + retried``).
        first_try: valid on the first attempt, unrepaired.
        repaired: valid on the first attempt after repair.
        retried: valid on a later attempt.
        failed: prompts whose entry is an error.
        usage: tokens of every attempt, failed ones included (when reported).
        duration_s: wall time of the whole batch, from its first request to its last
            entry (the backend's one-time set-up, ``JsonMode.prepare``, not included).
    """

    total: int
    conformed: int
    first_try: int
    repaired: int
    retried: int
    failed: int
    usage: Usage
    duration_s: float

    def __str__(self) -> str:
        return (
            f"{self.total} prompts: {self.conformed} conformed ({self.first_try} first try, "
            f"{self.repaired} repaired, {self.retried} retried), {self.failed} failed; "
            f"{self.usage.total_tokens:,} tokens; {self.duration_s:.1f} s"
        )


class BatchResults(list[Entry]):
    """The entries of a batch, in input order (a plain list), and its :attr:`summary`."""

    def __init__(self, entries: Iterable[Entry], duration_s: float) -> None:
        super().__init__(entries)
        self.duration_s = duration_s

    @property
    def summary(self) -> BatchSummary:
        """Counts over the entries (computed on each access)."""
        tally = Tally()
        for entry in self:
            tally.add(entry)
        return tally.summary(self.duration_s)


class Tally:
    """A :class:`BatchSummary`'s counts, kept as entries come (a few integers: what a
    batch that drops its entries keeps). Not thread-safe: one caller at a time."""

    def __init__(self) -> None:
        self.total = 0
        self.outcomes = {"first_try": 0, "repaired": 0, "retried": 0}
        self.failed = 0
        self.backend_failed = 0  # entries that are a BackendError
        self.usage = Usage()

    def add(self, entry: Entry) -> None:
        self.total += 1
        attempts = entry.attempts
        for attempt in attempts:
            if attempt.usage is not None:
                self.usage = self.usage + attempt.usage
        if isinstance(entry, Result):
            self.outcomes[events.request_outcome(attempts, True)] += 1
        else:
            self.failed += 1
            self.backend_failed += isinstance(entry, BackendError)

    def summary(self, duration_s: float) -> BatchSummary:
        return BatchSummary(
            self.total,
            self.total - self.failed,
            self.outcomes["first_try"],
            self.outcomes["repaired"],
            self.outcomes["retried"],
            self.failed,
            self.usage,
            duration_s,
        )


class Gate:
    """Backpressure shared by the requests of one batch (see the module docstring).

    Thread-safe; usable from threads (:meth:`wrap`) and from tasks of one event loop
    (:meth:`awrap`). ``sleep``/``async_sleep`` are injectable for tests.
    """

    #: Transient failures in a row, with no success between, after which the requests
    #: not yet sent fail fast.
    give_up_after: int

    def __init__(
        self,
        give_up_after: int = 16,
        *,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.give_up_after = give_up_after
        self._sleep = sleep
        self._async_sleep = async_sleep
        self._lock = threading.Lock()
        self._not_before = 0.0  # time.monotonic()
        self._failures = 0
        self._last = ""  # the message of the last transient failure
        self._stopped = False

    def refused(self) -> TransientBackendError | None:
        """The error a call would fail with now, without being sent: the backend failed
        :attr:`give_up_after` calls in a row (the message quotes the last failure), or
        the batch was stopped (:meth:`stop`); None while calls go through."""
        with self._lock:
            if self._stopped:
                return TransientBackendError("the batch was stopped before this request")
            if self._failures < self.give_up_after:
                return None
            last = f"; the last: {self._last}" if self._last else ""
            return TransientBackendError(
                f"the batch stopped sending: the backend failed {self._failures} calls "
                f"in a row with transient errors{last}",
                hint="check the backend, then run the failed prompts again",
            )

    def stop(self) -> None:
        """Refuse every later call (the batch is over: Ctrl-C, a bug)."""
        with self._lock:
            self._stopped = True

    def _delay(self) -> float:
        refusal = self.refused()
        if refusal is not None:
            raise refusal
        with self._lock:
            return self._not_before - time.monotonic()

    def _record(self, error: BaseException | None) -> None:
        with self._lock:
            if error is None:
                self._failures = 0
            elif isinstance(error, TransientBackendError):
                self._failures += 1
                self._last = " ".join(error.message.split())
                if error.retry_after is not None and error.retry_after > 0:
                    until = time.monotonic() + min(error.retry_after, 3600.0)
                    self._not_before = max(self._not_before, until)

    def wrap(self, complete: Callable[[Request], Completion]) -> Callable[[Request], Completion]:
        """``complete``, gated: waits out a shared Retry-After, records the outcome."""

        def gated(request: Request) -> Completion:
            while (delay := self._delay()) > 0:
                self._sleep(delay)
            try:
                completion = complete(request)
            except BackendError as error:
                self._record(error)
                raise
            self._record(None)
            return completion

        return gated

    def awrap(
        self, acomplete: Callable[[Request], Awaitable[Completion]]
    ) -> Callable[[Request], Awaitable[Completion]]:
        """Async :meth:`wrap`."""

        async def gated(request: Request) -> Completion:
            while (delay := self._delay()) > 0:
                await self._async_sleep(delay)
            try:
                completion = await acomplete(request)
            except BackendError as error:
                self._record(error)
                raise
            self._record(None)
            return completion

        return gated


class Progress:
    """A tqdm bar on stderr, or nothing (``show``: None for "when stderr is a
    terminal"). ``initial`` entries count as done from the start, ``failed`` of them
    failed (a command's lines it did not need to send). Not thread-safe: one caller
    at a time (``map`` calls it under its lock)."""

    def __init__(self, total: int, show: bool | None, *, initial: int = 0, failed: int = 0) -> None:
        if show is None:
            show = _is_terminal()
        self._bar: Any = None
        self._failed = failed
        if show:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total, initial=initial, desc="jsonmode", unit="prompt", file=sys.stderr
            )
            if failed:
                self._bar.set_postfix(failed=failed)

    def done(self, entry: Entry) -> None:
        """One more entry finished."""
        if self._bar is None:
            return
        if not isinstance(entry, Result):
            self._failed += 1
            self._bar.set_postfix(failed=self._failed, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class Options:
    """A batch's options (see ``JsonMode.map``); checked on construction."""

    concurrency: int
    progress: bool | None
    examples: Sequence[tuple[str, Any]]
    schema_name: str | None
    context: Any
    on_result: Callable[[int, Entry], object] | None

    def __post_init__(self) -> None:
        concurrency = self.concurrency
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise UsageError(f"concurrency must be a positive integer, not {concurrency!r}")
        if self.progress is not None and not isinstance(self.progress, bool):
            raise UsageError(f"progress must be True, False or None (auto), not {self.progress!r}")
        if self.on_result is not None and not callable(self.on_result):
            raise UsageError("on_result must be callable: on_result(index, entry)")

    def session(self, jm: Settings, prompt: Prompt, target: Target) -> Session:
        """One prompt's session: a JSON value under a Schema, or a text under a grammar."""
        if isinstance(target, Schema):
            return schema_session(jm, prompt, target, self.examples, self.schema_name, self.context)
        return text_session(jm, prompt, target, self.examples, self.schema_name)


class _Finish:
    """Records each prompt's entry once: the list, the bar, the caller's callback (one
    call at a time, in the order the prompts finish). Once stopped (the batch ended
    early), entries that still come are dropped."""

    def __init__(self, total: int, options: Options) -> None:
        self.entries: list[Entry | None] = [None] * total
        self.bar = Progress(total, options.progress)
        self.on_result = options.on_result
        self.lock = threading.Lock()
        self.stopped = False

    def __call__(self, index: int, entry: Entry) -> None:
        with self.lock:
            if self.stopped:
                return
            self.entries[index] = entry
            self.bar.done(entry)
            if self.on_result is not None:
                self.on_result(index, entry)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True

    def results(self, started: float) -> BatchResults:
        return BatchResults(
            [entry for entry in self.entries if entry is not None],
            time.perf_counter() - started,
        )


def _check_once(
    jm: Settings,
    target: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any,
) -> Target:
    """What every request of the batch would refuse alike raises once, up front: a
    bad schema or grammar (a schema with warnings under ``strict_schema``), examples,
    or schema name. Returns the compiled target."""
    events.check_schema_name(schema_name)
    if is_grammar(target):
        if context is not None:
            raise UsageError("context is for a schema's validators, not a grammar")
        grammar = as_grammar(target)
        GrammarJudge(grammar, "strict").first_messages((), examples)  # checks the examples
        return grammar
    spec = Schema.of(target)
    jm.schema_warnings.check(spec)
    checked_examples(spec, examples)
    return spec


def run_map(
    jm: Settings, prompts: Iterable[Prompt], schema: object, options: Options
) -> BatchResults:
    """JsonMode.map's body (see the module docstring)."""
    items = list(prompts)
    target = _check_once(jm, schema, options.examples, options.schema_name, options.context)
    jm.prepare()
    started = time.perf_counter()  # after prepare: no duration includes importing litellm
    finish = _Finish(len(items), options)
    try:
        backend = jm.backend
        if jm.tier == "constrained" and isinstance(backend, CompletesBatch):
            lockstep = Lockstep(
                backend,
                jm.transport,
                items,
                lambda prompt: options.session(jm, prompt, target),
                options.concurrency,
                None,
                lambda index, _, entry: finish(index, entry),
            )
            for _ in lockstep:
                pass
        else:
            _threaded(jm, items, target, options, finish)
    except BaseException:
        finish.stop()
        raise
    finally:
        finish.bar.close()
    return finish.results(started)


def _job(jm: Settings, session: Session, gate: Gate) -> Job:
    """One prompt's :data:`~jsonmode.session.pool.Job`: its session under the transport
    policy, or at once its refusal when the gate refuses calls."""
    refusal = gate.refused()
    if refusal is not None:
        return refused(session, refusal)
    return (yield from steps(session, jm.transport))


def _pool(
    jm: Settings,
    items: Iterable[I],
    prompt: Callable[[I], Prompt],
    target: Target,
    options: Options,
    finished: Callable[[int, I, Entry], None],
    window: int | None,
) -> Ordered[I]:
    """The prompts of ``items`` on :class:`~jsonmode.session.pool.Ordered`'s worker threads
    (at most ``concurrency``), one :class:`Gate` for all; ``prompt(item)`` may raise a
    JsonModeError, the item's entry."""
    gate = Gate()
    return Ordered(
        items,
        lambda item: _job(jm, options.session(jm, prompt(item), target), gate),
        gate.wrap(jm.backend.complete),
        concurrency=options.concurrency,
        window=window,
        finished=finished,
        expired=lambda error: gate._record(error),
        stopped=gate.stop,
    )


def _threaded(
    jm: Settings, items: list[Prompt], target: Target, options: Options, finish: _Finish
) -> None:
    """``map`` on worker threads (see :mod:`jsonmode.session.pool`); the first error that is
    not a JsonModeError (or Ctrl-C in the caller's thread) stops them."""
    run = _pool(
        jm, items, lambda prompt: prompt, target, options, lambda i, _, e: finish(i, e), None
    )
    try:
        for _ in run:
            pass
    finally:
        run.close()


def stream(
    jm: Settings,
    items: Iterable[I],
    prompt: Callable[[I], Prompt],
    schema: object,
    *,
    concurrency: int,
    finished: Callable[[int, I, Entry], None],
) -> Ordered[I] | Lockstep[I]:
    """``map`` for an input of any size (``jsonmode batch``): ``(item, entry)`` in input
    order, each handed out as soon as the entries before it are, and dropped then.

    ``items`` is pulled one at a time as there is room (from worker threads, one at a
    time: an error it raises stops the batch); ``prompt(item)`` is the item's prompt,
    or raises a JsonModeError, the item's entry. ``finished(index, item, entry)`` is
    called as each item ends (in finish order, one call at a time). At most
    ``2 * concurrency`` items are taken and not handed out, so memory stays bounded
    whatever the input's size: a slow item holds the ones after it back. Iterate it in
    one thread, then ``close()`` it (which stops it early: Ctrl-C); ``ready()`` tells
    whether the next entry is known. The target is checked once (bad: raised here);
    the backend is prepared here.
    """
    target = _check_once(jm, schema, (), None, None)
    options = Options(concurrency, False, (), None, None, None)
    jm.prepare()
    window = 2 * concurrency
    backend = jm.backend
    if jm.tier == "constrained" and isinstance(backend, CompletesBatch):
        return Lockstep(
            backend,
            jm.transport,
            items,
            lambda item: options.session(jm, prompt(item), target),
            concurrency,
            window,
            finished,
        )
    return _pool(jm, items, prompt, target, options, finished, window)


async def run_amap(
    jm: Settings, prompts: Iterable[Prompt], schema: object, options: Options
) -> BatchResults:
    """JsonMode.amap's body (see the module docstring)."""
    items = list(prompts)
    target = _check_once(jm, schema, options.examples, options.schema_name, options.context)
    await jm.aprepare()
    started = time.perf_counter()  # after prepare: no duration includes importing litellm
    gate = Gate()
    gated = gate.awrap(jm.backend.acomplete)
    limit = asyncio.Semaphore(options.concurrency)
    finish = _Finish(len(items), options)

    async def one(index: int) -> None:
        async with limit:
            try:
                session = options.session(jm, items[index], target)
                refusal = gate.refused()
                entry = (
                    refused(session, refusal)
                    if refusal
                    else await adrive(session, jm.transport, gated)
                )
            except JsonModeError as error:
                entry = error
        finish(index, entry)

    try:
        tasks = [asyncio.ensure_future(one(index)) for index in range(len(items))]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            finish.stop()
            gate.stop()
            for task in tasks:
                task.cancel()
            raise
    finally:
        finish.bar.close()
    return finish.results(started)
