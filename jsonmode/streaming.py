"""Streaming at the façade: watch a value grow, or take a list's items one by one.

``JsonMode.stream`` / ``astream`` run the same validation session as ``run`` (same
tiers, re-asks, repairs, errors, events), but read each backend reply as it streams
and yield a small vocabulary of events::

    for event in jm.stream("Extract: ...", Person):
        if event.kind == "partial":   # Partial: .value (a PartialPerson), .attempt, .text
            show(event.value)
        elif event.kind == "thinking":  # Thinking: .text, the thinking's next piece
            show_thinking(event.text)
        elif event.kind == "retry":   # Retry: the partials so far are void
            clear()                   #   .transport: same request again after a transient
                                      #   failure; else .failed: the Attempt being re-asked
        else:                         # Final: .result, exactly what run() returns
            done(event.result.value)

A partial value is what the finished document will hold so far (see
:mod:`jsonmode.repair.partial`), never validated; for a pydantic model it is the
model's partial twin (:mod:`jsonmode.repair.typed_partial`). In the constrained tier
each partial is read from tokens the decoder allowed, so no later token takes it back
(short of a re-ask, which a ``retry`` event announces). On failure, the error ``run``
would raise is raised in place of the final event. Given a grammar instead of a schema
(as ``run_text`` takes it), each partial value is the reply's text so far, and the final
event holds ``run_text``'s Result.

Thinking (``JsonMode(reasoning=...)``, see :mod:`jsonmode.repair.reasoning`): a
reasoning model's thinking streams as ``thinking`` events, each with the thinking's
next piece, apart from the partial values, which are read from the answer only (a
thinking that drafts a JSON document shows no partial value). A reply whose chat
template pre-filled the start marker is known to be thinking only when its end marker
arrives; partial values read from it before then are superseded by the answer's.
Thinking an API returns apart (``reasoning_content``) is on the final result
(``Result.reasoning``), not streamed as events.

``stream_items`` asks for a list and yields each item as soon as it is complete and
valid on its own (``Schema.check`` of the item schema, pydantic validators included).
An invalid item ends the attempt then and there: the stream is closed and the attempt
is judged a schema violation with the item's issues, so the re-ask starts without
waiting for the rest. Items already yielded are never taken back: a re-asked (or
retried) attempt must repeat them first, and an attempt whose list departs from them
is itself a schema violation (the re-ask shows the items to keep).

Which backends stream: those with ``stream``/``astream``
(:class:`~jsonmode.backends.base.StreamingBackend`: litellm, transformers, LangChain,
callables returning an iterator). Any other backend yields no partials, only the
final event.

Cadence and costs: the reply so far is re-read (one linear pass) after each text
piece that can change its value (one holding a quote, a bracket, a comma, a colon,
whitespace, a digit or the last letter of a literal; every piece with
``partial_strings=True``) while the reply holds at most 1 024 characters: short
replies get a partial value (and ``stream_items`` its items) piece by piece. Past
that, it is re-read only once it has grown by 1/32 (about 3 %) of its length since
the last read, so partials and items come at most ~3 % of the reply late, and an
invalid item ends the attempt at most ~3 % past its end. The end is always read:
the last partial value is what the whole streamed reply holds, and ``stream_items``
reads the complete reply again before judging it (every item is handed out once, in
order; a bad last item still fails the attempt). So all the reads of a reply add up
to at most about 33 passes over it, plus at most 1 KB a piece within its first KB:
linear in its length, whatever the piece sizes. Replies over
:data:`~jsonmode.repair.partial.MAX_PARTIAL_CHARS` give no partials past that length
(their items come with the final result). The time to the first partial value and
the stream's duration are on the final event and in
:class:`~jsonmode.events.StreamFinished` (and so in the metrics).

Thread-safety: each call makes its own iterator; iterate it in one thread (or task).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import aclosing, closing
from dataclasses import dataclass
from typing import Any, Literal

from jsonmode import events
from jsonmode.backends.base import Chunk, Completion
from jsonmode.errors import SchemaViolationError, UsageError
from jsonmode.reasoning import Reasoning
from jsonmode.repair.parse import Mode
from jsonmode.repair.partial import (
    MAX_PARTIAL_CHARS,
    ReadCadence,
    complete_items,
    parse_partial,
)
from jsonmode.repair.reasoning import StreamedSplit, split_reasoning
from jsonmode.repair.typed_partial import typed_partial
from jsonmode.result import Attempt, Result
from jsonmode.schema.core import Schema
from jsonmode.schema.pointer import array_of
from jsonmode.schema.validation import Issue
from jsonmode.session import Prompt, Settings, reasoning_of, schema_session, text_session
from jsonmode.session.grammar_judge import as_grammar, is_grammar
from jsonmode.session.streamed import Start, aevents
from jsonmode.session.streamed import events as streamed_events

__all__ = ["Final", "Partial", "Retry", "StreamEvent", "Thinking"]


@dataclass(frozen=True, slots=True)
class Partial:
    """The value so far, while the reply streams (never validated).

    Attributes:
        value: the partial value (a partial model instance for a pydantic model).
        attempt: the attempt it belongs to (1-based).
        text: the reply text so far (its answer: any thinking split off).
        elapsed_s: seconds since the stream started.
    """

    value: Any
    attempt: int
    text: str
    elapsed_s: float
    kind: Literal["partial"] = "partial"


@dataclass(frozen=True, slots=True)
class Thinking:
    """The next piece of a reasoning model's thinking, while the reply streams (shown
    apart from the partial values, never read for them).

    Attributes:
        text: the thinking's new text (a delta: join them for the whole thinking).
        attempt: the attempt it belongs to (1-based).
        elapsed_s: seconds since the stream started.
    """

    text: str
    attempt: int
    elapsed_s: float
    kind: Literal["thinking"] = "thinking"


@dataclass(frozen=True, slots=True)
class Retry:
    """The output starts over: the partial values shown so far are void.

    Attributes:
        attempt: the attempt that starts now (1-based; unchanged for a transport retry).
        error: why, in one line.
        issues: the failed attempt's issues (empty for a transport retry).
        transport: True when the same request is sent again after a transient backend
            failure; False when the failed attempt is re-asked with its errors.
        failed: the failed attempt's record (None for a transport retry).
    """

    attempt: int
    error: str
    issues: tuple[Issue, ...] = ()
    transport: bool = False
    failed: Attempt | None = None
    kind: Literal["retry"] = "retry"


@dataclass(frozen=True, slots=True)
class Final:
    """The stream's last event: the Result ``run`` would have returned.

    Attributes:
        result: the validated result.
        first_partial_s: seconds from the start to the first partial value (None
            when there was none: a backend that does not stream).
        duration_s: seconds from the start to this event.
        partials: partial values yielded.
    """

    result: Result[Any]
    first_partial_s: float | None
    duration_s: float
    partials: int
    kind: Literal["final"] = "final"


StreamEvent = Partial | Thinking | Retry | Final


@dataclass(frozen=True, slots=True)
class _Item:
    """stream_items' internal event: one validated item."""

    value: Any


# Characters after which the partial value may have changed (growing strings aside).
_TRIGGERS = frozenset('"{}[],: \t\r\nel0123456789')


class _Items:
    """stream_items' bookkeeping: items delivered so far, across attempts."""

    def __init__(self, item_spec: Schema, mode: str, context: Any) -> None:
        self.spec = item_spec
        self.strict = mode == "strict"
        self.context = context
        self.delivered: list[Any] = []  # JSON data of the items yielded
        self.checked = 0  # items of the current attempt already looked at
        # The current attempt departs from the items delivered: repair mode would fail
        # it the same way (it checks the items as written), so it is not repairable.
        self.departed = False

    def restart(self) -> None:
        self.checked = 0
        self.departed = False

    def check(self, text: str) -> tuple[list[_Item], SchemaViolationError | None]:
        """The newly complete valid items of ``text`` (now counted as delivered), and
        the violation that ends the attempt, if any: an item that departs from one
        already delivered, a closed list shorter than those, or (strict mode) an item
        that fails its schema."""
        found = complete_items(text)
        if found is None:
            return [], None
        items, closed = found
        new: list[_Item] = []
        while self.checked < len(items):
            index = self.checked
            data = items[index]
            if index < len(self.delivered):
                if not _same(data, self.delivered[index]):
                    return new, self._departed(text, index, data)
                self.checked += 1
                continue
            checked = self.spec.check(data, context=self.context)
            if not checked.ok:
                if not self.strict:
                    return new, None  # repair mode: the whole reply is judged at the end
                issues = [_under(index, issue) for issue in checked.issues]
                return new, _violation(text, issues, data)
            self.checked += 1
            self.delivered.append(data)
            new.append(_Item(checked.value))
        if closed and len(items) < len(self.delivered):
            return new, self._departed(text, len(items), _MISSING)
        return new, None

    def _departed(self, text: str, index: int, data: Any) -> SchemaViolationError:
        self.departed = True
        shown = json.dumps(self.delivered[index], ensure_ascii=False)
        issue = Issue(
            f"$[{index}]",
            "const",
            f"item {index} was already delivered as {shown[:300]}; "
            "repeat the items already given, unchanged, then continue",
        )
        return _violation(text, [issue], None if data is _MISSING else data)


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _under(index: int, issue: Issue) -> Issue:
    return Issue(f"$[{index}]{issue.path[1:]}", issue.keyword, issue.message)


def _violation(text: str, issues: list[Issue], value: Any) -> SchemaViolationError:
    count = len(issues)
    return SchemaViolationError(
        f"output violates the schema ({count} issue{'s' * (count != 1)}): {issues[0]}",
        raw=text,
        issues=issues,
        value=value,
    )


class _Reader:
    """Reads one backend reply as it streams: the text, partial values, items.

    The text so far is re-read (see the module docstring's cadence) after a piece
    that can change what it holds (``unread``), at every such piece while the reply
    is short, then once it has grown enough since the last read (a
    :class:`~jsonmode.repair.partial.ReadCadence`): the reads add up to linear work
    over the whole reply."""

    def __init__(
        self,
        attempt: int,
        started: float,
        shape: Callable[[Any], Any] | None,
        growing: bool,
        items: _Items | None,
        raw: bool = False,
        markers: tuple[Reasoning, ...] = (),
    ) -> None:
        self.attempt = attempt
        self.markers = markers
        self.split = StreamedSplit(markers) if markers else None
        self.whole: list[str] = []  # the whole reply (the pieces below are its answer)
        self.started = started
        self.shape = shape
        self.growing = growing or raw
        self.items = items
        self.raw = raw  # the partial value is the text itself (a grammar's text)
        self.pieces: list[str] = []  # the answer's, joined into one at each read
        self.size = 0  # characters received
        self.cadence = ReadCadence()
        self.unread = False  # a piece that can change the value came since then
        self.completion: Completion | None = None
        self.last: Any = None
        if items is not None:
            items.restart()

    @property
    def answer(self) -> str:
        """The reply's answer so far (the whole reply when no thinking is split off)."""
        if len(self.pieces) > 1:
            self.pieces = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""

    @property
    def text(self) -> str:
        """The whole reply so far, thinking included."""
        if self.split is None:
            return self.answer
        if len(self.whole) > 1:
            self.whole = ["".join(self.whole)]
        return self.whole[0] if self.whole else ""

    def feed(self, chunk: Chunk) -> Iterator[Partial | Thinking | _Item]:
        """Events for one chunk; raises SchemaViolationError (stream_items) to end the
        attempt early."""
        if isinstance(chunk, Completion):
            self.completion = chunk
            return
        if not isinstance(chunk, str) or not chunk:
            return
        if self.split is not None:
            self.whole.append(chunk)
            thinking, chunk, restart = self.split.feed(chunk)
            if restart:  # the answer so far was a thinking whose start was pre-filled
                self.pieces, self.size, self.cadence, self.last = [], 0, ReadCadence(), None
            if thinking:
                yield Thinking(thinking, self.attempt, time.perf_counter() - self.started)
        yield from self._answer(chunk)

    def _answer(self, chunk: str) -> Iterator[Partial | _Item]:
        if not chunk:
            return
        self.pieces.append(chunk)
        self.size += len(chunk)
        if self.growing or not _TRIGGERS.isdisjoint(chunk):
            self.unread = True
        size = self.size
        if self.unread and self.cadence.due(size):
            yield from self._read()

    def flush(self) -> Iterator[Partial | Thinking]:
        """The thinking held back, and the last partial value, when the cadence left
        the reply's end unread (the items are read from the whole reply by
        :meth:`finish`)."""
        if self.split is not None:
            thinking, answer = self.split.finish()
            if thinking:
                yield Thinking(thinking, self.attempt, time.perf_counter() - self.started)
            if answer:
                self.pieces.append(answer)
                self.size += len(answer)
                self.unread = True
        if self.unread and self.items is None:
            for event in self._read():
                assert isinstance(event, Partial)
                yield event

    def _read(self) -> Iterator[Partial | _Item]:
        self.unread = False
        self.cadence.read(self.size)
        if self.size > MAX_PARTIAL_CHARS:
            return  # too long to show (its items come with the final result)
        text = self.answer
        if self.items is not None:
            found, verdict = self.items.check(text)
            yield from found
            if verdict is not None:
                raise verdict
        if self.shape is None:
            return
        value = text if self.raw else parse_partial(text, growing_strings=self.growing)
        if value is not None and value != self.last:
            self.last = value
            elapsed = time.perf_counter() - self.started
            yield Partial(self.shape(value), self.attempt, text, elapsed)

    def finish(self) -> tuple[Completion, list[_Item], SchemaViolationError | None]:
        """The whole reply, the items it completes (not yet handed out: all of them are
        read again from the whole text), and the violation that ends the attempt
        (stream_items), if any."""
        completion = self.completion or Completion(self.text)
        if self.items is None:
            return completion, [], None
        answer = split_reasoning(completion.text, self.markers).answer
        found, verdict = self.items.check(answer)
        return completion, found, verdict


@dataclass
class _Run:
    """What one streamed request needs and counts: the session's
    :class:`~jsonmode.session.streamed.Watcher`, with this module's events."""

    mode: Mode
    started: float
    schema_name: str | None
    shape: Callable[[Any], Any] | None  # None: no partial values (stream_items)
    growing: bool
    items: _Items | None
    raw: bool = False  # partial values are the reply's text (a grammar's)
    markers: tuple[Reasoning, ...] = ()  # thinking split off by these (reasoning=)
    partials: int = 0
    first_partial_s: float | None = None

    def saw(self, event: StreamEvent | _Item) -> None:
        if isinstance(event, Partial):
            self.partials += 1
            if self.first_partial_s is None:
                self.first_partial_s = event.elapsed_s

    def final(self, result: Result[Any]) -> Final:
        duration = time.perf_counter() - self.started
        if events.listeners:
            self.finished(result.tier, True, duration)
        return Final(result, self.first_partial_s, duration, self.partials)

    def finished(self, tier: Any, ok: bool, duration: float | None = None) -> None:
        if duration is None:
            duration = time.perf_counter() - self.started
        events.emit(
            events.StreamFinished(
                tier,
                self.mode,
                self.schema_name,
                ok,
                self.first_partial_s,
                duration,
                self.partials,
            )
        )

    def reader(self, attempt: int) -> _Reader:
        return _Reader(
            attempt, self.started, self.shape, self.growing, self.items, self.raw, self.markers
        )

    def repairable(self) -> bool | None:
        """What the reply of an attempt that failed as it streamed says about repair:
        False when repair mode would fail it the same way (its items depart from
        those delivered); None when the judge is to say (see ``Reply.repairable``)."""
        return False if self.items is not None and self.items.departed else None

    def transport_retry(self, attempt: int, error: BaseException | None) -> Retry:
        return Retry(attempt, f"transport: {error}" if error else "transport retry", transport=True)

    def reask(self, attempt: int, failed: Attempt | None) -> Retry:
        if failed is None:  # pragma: no cover - a session re-asks only after an attempt
            return Retry(attempt, "re-ask")
        return Retry(attempt, f"{failed.outcome}: {failed.error}", failed.issues, False, failed)


def _name(jm: Settings, schema_name: str | None) -> str | None:
    """The schema name the request's events carry (checked by the session)."""
    return jm.schema_name if schema_name is None else schema_name


def _shape_for(source: object) -> Callable[[Any], Any]:
    return lambda value: typed_partial(value, source)


# -- the drivers -------------------------------------------------------------------


def stream(
    jm: Settings,
    prompt: Prompt,
    schema: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any,
    partial_strings: bool,
) -> Iterator[StreamEvent]:
    """JsonMode.stream's body (see the module docstring)."""
    start, raw = _start(jm, prompt, schema, examples, schema_name, context)
    jm.prepare()  # before the clock starts
    run = _streamed_run(jm, schema, schema_name, partial_strings, raw)
    with closing(streamed_events(run, start, jm.backend, jm.transport)) as all_:
        for event in all_:
            if not isinstance(event, _Item):
                yield event


async def astream(
    jm: Settings,
    prompt: Prompt,
    schema: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any,
    partial_strings: bool,
) -> AsyncIterator[StreamEvent]:
    """JsonMode.astream's body."""
    start, raw = _start(jm, prompt, schema, examples, schema_name, context)
    await jm.aprepare()
    run = _streamed_run(jm, schema, schema_name, partial_strings, raw)
    async with aclosing(aevents(run, start, jm.backend, jm.transport)) as all_:
        async for event in all_:
            if not isinstance(event, _Item):
                yield event


def _streamed_run(
    jm: Settings, target: object, schema_name: str | None, partial_strings: bool, raw: bool
) -> _Run:
    name = _name(jm, schema_name)
    shape = _same_text if raw else _shape_for(target)
    markers = _markers(jm)
    return _Run(jm.mode, time.perf_counter(), name, shape, partial_strings, None, raw, markers)


def _markers(jm: Settings) -> tuple[Reasoning, ...]:
    """The markers the instance splits thinking by (see ``reasoning_of``)."""
    return reasoning_of(getattr(jm, "reasoning", "auto"), jm.backend)[0]


def _same_text(text: Any) -> Any:
    return text


def stream_items(
    jm: Settings,
    prompt: Prompt,
    item_schema: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any,
) -> Iterator[Any]:
    """JsonMode.stream_items' body (see the module docstring)."""
    jm.prepare()  # before the clock starts
    run, whole = _items_run(jm, item_schema, schema_name, context)
    assert run.items is not None
    start = _items_start(jm, prompt, whole, examples, schema_name, context)
    with closing(streamed_events(run, start, jm.backend, jm.transport)) as all_:
        for event in all_:
            if isinstance(event, _Item):
                yield event.value
            elif isinstance(event, Final):
                yield from _rest(event.result, run.items)


async def astream_items(
    jm: Settings,
    prompt: Prompt,
    item_schema: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any,
) -> AsyncIterator[Any]:
    """JsonMode.astream_items' body."""
    await jm.aprepare()
    run, whole = _items_run(jm, item_schema, schema_name, context)
    assert run.items is not None
    start = _items_start(jm, prompt, whole, examples, schema_name, context)
    async with aclosing(aevents(run, start, jm.backend, jm.transport)) as all_:
        async for event in all_:
            if isinstance(event, _Item):
                yield event.value
            elif isinstance(event, Final):
                for value in _rest(event.result, run.items):
                    yield value


def _items_start(
    jm: Settings,
    prompt: Prompt,
    whole: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any,
) -> Start:
    """The session of ``stream_items``: for the list ``whole``, its warnings already
    emitted for the item schema (see :func:`_items_run`)."""
    return lambda trace: schema_session(
        jm, prompt, whole, examples, schema_name, context, trace, warn=False
    )


def _items_run(
    jm: Settings, item_schema: object, schema_name: str | None, context: Any
) -> tuple[_Run, object]:
    item_spec = Schema.of(item_schema)
    jm.schema_warnings.emit(item_spec)  # (the item schema's, as the caller wrote it)
    items = _Items(item_spec, jm.mode, context)
    name = _name(jm, schema_name)
    run = _Run(jm.mode, time.perf_counter(), name, None, False, items, markers=_markers(jm))
    if isinstance(item_schema, type) or item_spec.is_typed:
        whole: object = list[item_schema]  # type: ignore[valid-type]
    else:
        whole = array_of(item_spec.json_schema)
    return run, whole


def _rest(result: Result[Any], items: _Items) -> Iterator[Any]:
    """The final list's items not yet yielded (repair mode, or a backend that did not
    stream)."""
    values = list(result.value)
    for index in range(len(items.delivered), len(values)):
        items.delivered.append(result.data[index])
        yield values[index]


def _start(
    jm: Settings,
    prompt: Prompt,
    target: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any,
) -> tuple[Start, bool]:
    """How to start the session for ``target`` (a schema, or a grammar as
    ``JsonMode.run_text`` takes it: see :func:`jsonmode.texts.is_grammar`), and whether
    it is a grammar (partial values are then the text)."""
    if not is_grammar(target):
        return (
            lambda trace: schema_session(jm, prompt, target, examples, schema_name, context, trace),
            False,
        )
    if context is not None:
        raise UsageError("context is for pydantic validators: a grammar has none")
    grammar = as_grammar(target)
    return lambda trace: text_session(jm, prompt, grammar, examples, schema_name, trace), True
