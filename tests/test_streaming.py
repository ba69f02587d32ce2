"""JsonMode.stream / astream / stream_items: partial values, re-asks, items one by one."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ValidationInfo, field_validator

from jsonmode import AttemptsExhaustedError, JsonMode, Schema, events
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.scripted import ScriptedBackend
from jsonmode.errors import PermanentBackendError
from jsonmode.retry import TransportPolicy
from jsonmode.streaming import Final, Partial, Retry


async def _no_sleep(_seconds: float) -> None:
    return None


FAST = TransportPolicy(
    max_retries=2, initial_wait=0, max_wait=0, sleep=lambda _s: None, async_sleep=_no_sleep
)


class Address(BaseModel):
    city: str
    zip: str


class Tag(BaseModel):
    label: str


class Person(BaseModel):
    name: str
    age: int
    address: Address | None = None
    tags: list[Tag] = []


PERSON = {
    "name": "Ada Lovelace",
    "age": 36,
    "address": {"city": "London", "zip": "W1"},
    "tags": [{"label": "math"}, {"label": "poetry"}],
}
DOC = json.dumps(PERSON)
PERSON_SCHEMA = Person.model_json_schema()


def pieces(text: str, size: int = 5) -> tuple[str, ...]:
    return tuple(text[i : i + size] for i in range(0, len(text), size))


def random_pieces(text: str, seed: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        step = rng.randint(1, 9)
        out.append(text[i : i + step])
        i += step
    return tuple(out)


class Recorder:
    """A streaming callable (a generator) replaying one script per call; it records
    how many pieces each call has handed out, and whether its generator was closed."""

    def __init__(self, *scripts: tuple[str, ...] | BaseException | tuple[Any, ...]) -> None:
        self.scripts = list(scripts)
        self.calls = 0
        self.consumed: list[int] = []
        self.closed: list[bool] = []

    @property
    def now(self) -> int:
        """Pieces handed out by the current call."""
        return self.consumed[-1]

    def __call__(self, prompt: str) -> Iterator[str]:
        script = self.scripts[self.calls]
        self.calls += 1
        self.consumed.append(0)
        self.closed.append(False)
        call = len(self.consumed) - 1
        return self._run(script, call)

    def _run(self, script: Any, call: int) -> Iterator[str]:
        try:
            for piece in script:
                if isinstance(piece, BaseException):
                    raise piece
                self.consumed[call] += 1
                yield piece
        finally:
            self.closed[call] = True


class ARecorder(Recorder):
    """Recorder as an async generator callable."""

    async def __call__(self, prompt: str) -> AsyncIterator[str]:  # type: ignore[override]
        script = self.scripts[self.calls]
        self.calls += 1
        self.consumed.append(0)
        self.closed.append(False)
        call = len(self.consumed) - 1
        try:
            for piece in script:
                if isinstance(piece, BaseException):
                    raise piece
                self.consumed[call] += 1
                await asyncio.sleep(0)
                yield piece
        finally:
            self.closed[call] = True


class WholeOnly:
    """A backend that cannot stream: complete / acomplete only."""

    name = "whole-only"
    native_schema = False

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.calls = 0

    def complete(self, request: Request) -> Completion:
        self.calls += 1
        return Completion(self.replies.pop(0))

    async def acomplete(self, request: Request) -> Completion:
        return self.complete(request)


def plain(value: Any) -> Any:
    """A partial value as plain JSON: a partial model's arrived fields (by alias)."""
    if isinstance(value, BaseModel):
        out = {}
        for name in value.model_fields_set:
            field = type(value).model_fields[name]
            out[field.alias or name] = plain(getattr(value, name))
        return out
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def contained(partial: Any, final: Any, *, growing: bool) -> bool:
    """``partial`` holds nothing ``final`` does not: dict keys a subset with values
    contained, lists prefix-wise, a string a prefix (``growing``) or equal."""
    if isinstance(final, dict):
        return isinstance(partial, dict) and all(
            key in final and contained(value, final[key], growing=growing)
            for key, value in partial.items()
        )
    if isinstance(final, list):
        return (
            isinstance(partial, list)
            and len(partial) <= len(final)
            and all(contained(p, f, growing=growing) for p, f in zip(partial, final, strict=False))
        )
    if isinstance(final, str) and growing:
        return isinstance(partial, str) and final.startswith(partial)
    return type(partial) is type(final) and partial == final


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def kinds(stream: Any) -> list[str]:
    return [event.kind for event in stream]


# -- partial values ------------------------------------------------------------------


def test_partials_arrive_while_the_reply_streams():
    fn = Recorder(pieces(DOC))
    seen_at: list[int] = []
    final = None
    for event in JsonMode(fn, transport=FAST).stream("x", Person):
        if event.kind == "partial":
            seen_at.append(fn.now)
        else:
            final = event
    total = len(pieces(DOC))
    assert isinstance(final, Final)
    assert len(seen_at) >= 5
    assert seen_at[0] < total / 2  # the first partial came early
    assert seen_at == sorted(seen_at)
    assert sum(1 for at in seen_at if at < total) >= 4  # before the stream ended
    assert final.partials == len(seen_at)
    assert final.first_partial_s is not None
    assert final.first_partial_s <= final.duration_s


@pytest.mark.parametrize("schema", [Person, PERSON_SCHEMA], ids=["pydantic", "dict"])
@pytest.mark.parametrize("seed", range(4))
def test_without_partial_strings_strings_appear_only_once_closed(schema, seed):
    backend = ScriptedBackend([random_pieces(DOC, seed)])
    partials = [
        plain(event.value)
        for event in JsonMode(backend).stream("x", schema)
        if isinstance(event, Partial)
    ]
    assert partials
    for value in partials:
        assert contained(value, PERSON, growing=False), value
        assert set(strings(value)) <= set(strings(PERSON)), value


@pytest.mark.parametrize("seed", range(4))
def test_with_partial_strings_strings_grow(seed):
    backend = ScriptedBackend([random_pieces(DOC, seed)])
    stream = JsonMode(backend).stream("x", PERSON_SCHEMA, partial_strings=True)
    partials = [event.value for event in stream if isinstance(event, Partial)]
    assert all(contained(value, PERSON, growing=True) for value in partials)
    shown = {text for value in partials for text in strings(value)}
    unfinished = shown - set(strings(PERSON))
    assert unfinished  # some string was shown before its closing quote
    assert all(any(whole.startswith(text) for whole in strings(PERSON)) for text in unfinished)


@pytest.mark.parametrize("growing", [False, True])
def test_partials_only_grow_and_end_at_the_final_value(growing):
    backend = ScriptedBackend([pieces(DOC, 1)])  # one character at a time
    events_ = list(JsonMode(backend).stream("x", PERSON_SCHEMA, partial_strings=growing))
    partials = [event.value for event in events_ if isinstance(event, Partial)]
    for before, after in itertools.pairwise(partials):
        assert contained(before, after, growing=True)
        assert before != after  # an unchanged value is not yielded again
    assert partials[-1] == PERSON
    assert events_[-1].result.data == PERSON


def test_a_pydantic_schema_gives_partial_model_instances():
    backend = ScriptedBackend([pieces(DOC, 3)])
    values = [
        event.value for event in JsonMode(backend).stream("x", Person) if event.kind == "partial"
    ]
    assert values
    assert all(type(value).__name__ == "PartialPerson" for value in values)
    assert not any(isinstance(value, Person) for value in values)
    first = values[0]
    assert first.name is None  # every field optional: nothing had arrived
    with_address = next(value for value in values if value.address is not None)
    assert type(with_address.address).__name__ == "PartialAddress"
    with_tags = next(value for value in values if value.tags)
    assert all(type(tag).__name__ == "PartialTag" for tag in with_tags.tags)


def test_a_dict_schema_gives_plain_json():
    backend = ScriptedBackend([pieces(DOC, 3)])
    values = [
        event.value
        for event in JsonMode(backend).stream("x", PERSON_SCHEMA)
        if event.kind == "partial"
    ]
    assert values
    assert all(type(value) is dict for value in values)


def test_partial_event_text_is_the_reply_so_far():
    script = pieces(DOC, 4)
    stream = JsonMode(ScriptedBackend([script])).stream("x", Person)
    texts = [event.text for event in stream if isinstance(event, Partial)]
    assert texts
    assert all(DOC.startswith(text) for text in texts)
    assert texts == sorted(texts, key=len)


# -- the final event and errors ------------------------------------------------------------


def _script() -> list[Any]:
    return [
        ('{"name": "Ada"', ', "age": "old"}'),  # a schema violation: re-asked
        pieces(DOC, 6),
    ]


def test_the_final_result_is_what_run_returns():
    ran = JsonMode(ScriptedBackend(_script())).run("x", Person)
    *_, last = JsonMode(ScriptedBackend(_script())).stream("x", Person)
    assert isinstance(last, Final)
    streamed = last.result
    assert streamed.value == ran.value
    assert isinstance(streamed.value, Person)
    assert streamed.data == ran.data
    assert (streamed.tier, streamed.mode) == (ran.tier, ran.mode)
    assert [a.outcome for a in streamed.attempts] == ["schema_violation", "valid"]
    assert [a.outcome for a in streamed.attempts] == [a.outcome for a in ran.attempts]
    assert [a.raw for a in streamed.attempts] == [a.raw for a in ran.attempts]
    assert [a.issues for a in streamed.attempts] == [a.issues for a in ran.attempts]


def test_the_reask_sees_the_same_messages_as_in_run():
    runs, streams = ScriptedBackend(_script()), ScriptedBackend(_script())
    JsonMode(runs).run("x", Person)
    list(JsonMode(streams).stream("x", Person))
    assert [r.messages for r in streams.requests] == [r.messages for r in runs.requests]


def _until_raised(stream: Iterator[Any], seen: list[Any]) -> list[Any]:
    """Drain ``stream`` into ``seen`` (kept when it raises)."""
    for event in stream:
        seen.append(event)
    return []


@pytest.mark.parametrize(
    ("script", "error"),
    [
        (["nope", '{"name": "Ada"}'], AttemptsExhaustedError),
        ([("{", '"name": ', '"Ada"}'), "nope"], AttemptsExhaustedError),
        ([PermanentBackendError("refused")], PermanentBackendError),
    ],
)
def test_a_failure_raises_what_run_raises(script, error):
    jm = JsonMode(ScriptedBackend(list(script)), max_attempts=2, transport=FAST)
    with pytest.raises(error) as ran:
        jm.run("x", Person)
    jm = JsonMode(ScriptedBackend(list(script)), max_attempts=2, transport=FAST)
    got: list[Any] = []
    with pytest.raises(error) as streamed:
        got.extend(_until_raised(jm.stream("x", Person), got))
    assert not any(isinstance(event, Final) for event in got)
    assert type(streamed.value) is type(ran.value)
    assert [a.outcome for a in streamed.value.attempts] == [a.outcome for a in ran.value.attempts]
    assert len(streamed.value.attempts) == len(ran.value.attempts) >= 1


def test_a_reask_is_one_retry_event_and_later_partials_belong_to_attempt_2():
    stream = list(JsonMode(ScriptedBackend(_script())).stream("x", Person))
    retries = [event for event in stream if isinstance(event, Retry)]
    assert len(retries) == 1
    retry = retries[0]
    assert retry.kind == "retry"
    assert retry.transport is False
    assert retry.attempt == 2
    assert retry.failed is not None
    assert retry.failed.index == 1
    assert retry.failed.outcome == "schema_violation"
    assert retry.issues == retry.failed.issues
    assert retry.issues
    assert retry.issues[0].path == "$.age"
    at = stream.index(retry)
    before = [e.attempt for e in stream[:at] if isinstance(e, Partial)]
    after = [e.attempt for e in stream[at:] if isinstance(e, Partial)]
    assert before
    assert set(before) == {1}
    assert after
    assert set(after) == {2}
    assert isinstance(stream[-1], Final)
    assert stream[-1].result.attempts[-1].index == 2


def test_a_transient_failure_mid_stream_retries_the_call():
    fn = Recorder(
        (*pieces(DOC)[:5], ConnectionError("reset")),
        pieces(DOC),
    )
    stream = list(JsonMode(fn, transport=FAST).stream("x", Person))
    retries = [event for event in stream if isinstance(event, Retry)]
    assert len(retries) == 1
    retry = retries[0]
    assert retry.transport is True
    assert retry.failed is None
    assert retry.issues == ()
    assert retry.attempt == 1  # the same attempt goes on
    assert "reset" in retry.error
    at = stream.index(retry)
    assert any(isinstance(e, Partial) for e in stream[:at])  # the first call streamed
    assert any(isinstance(e, Partial) for e in stream[at:])  # and so did the second
    assert fn.calls == 2
    assert fn.consumed == [5, len(pieces(DOC))]
    final = stream[-1]
    assert isinstance(final, Final)
    assert final.result.data == PERSON
    assert [a.outcome for a in final.result.attempts] == ["valid"]
    assert final.result.attempts[0].transport_retries == 1


def test_transient_failures_past_the_policy_raise_what_run_raises():
    from jsonmode.errors import TransientBackendError

    fn = Recorder(*[(pieces(DOC)[0], ConnectionError("down"))] * 3)
    with pytest.raises(TransientBackendError) as info:
        list(JsonMode(fn, transport=FAST).stream("x", Person))
    assert fn.calls == 3
    assert [a.outcome for a in info.value.attempts] == ["backend_error"]
    assert info.value.attempts[0].transport_retries == 2


def test_a_backend_that_cannot_stream_yields_only_the_final_event():
    backend = WholeOnly(DOC)
    stream = list(JsonMode(backend).stream("x", Person))
    assert kinds(stream) == ["final"]
    assert stream[0].result.data == PERSON
    assert stream[0].first_partial_s is None
    assert stream[0].partials == 0
    astream = asyncio.run(_collect(JsonMode(WholeOnly(DOC)).astream("x", Person)))
    assert kinds(astream) == ["final"]


def test_a_callable_returning_plain_text_yields_no_partials():
    stream = list(JsonMode(lambda prompt: DOC).stream("x", Person))
    assert kinds(stream) == ["final"]
    assert stream[0].result.data == PERSON


def test_a_streamed_final_completion_is_the_authoritative_reply():
    from jsonmode.result import Usage

    script = (*pieces(DOC), Completion(DOC, Usage(3, 7)))
    stream = list(JsonMode(ScriptedBackend([script])).stream("x", Person))
    assert stream[-1].result.attempts[0].usage == Usage(3, 7)
    assert any(isinstance(e, Partial) for e in stream)


def test_closing_the_stream_closes_the_backends_generator():
    fn = Recorder(pieces(DOC))
    stream = JsonMode(fn).stream("x", Person)
    assert next(stream).kind == "partial"
    assert fn.closed == [False]
    stream.close()
    assert fn.closed == [True]
    assert fn.now < len(pieces(DOC))


def test_breaking_out_of_the_loop_closes_the_backends_generator():
    fn = Recorder(pieces(DOC))
    for event in JsonMode(fn).stream("x", Person):
        if event.kind == "partial":
            break
    del event
    assert fn.closed == [True]
    assert fn.now < len(pieces(DOC))


def test_stream_finished_is_emitted_with_its_timings():
    seen: list[Any] = []
    events.subscribe(seen.append)
    try:
        *_, final = JsonMode(ScriptedBackend([pieces(DOC)]), schema_name="person").stream(
            "x", Person
        )
        with pytest.raises(AttemptsExhaustedError):
            list(JsonMode(ScriptedBackend([("no", "pe")]), max_attempts=1).stream("x", Person))
    finally:
        events.unsubscribe(seen.append)
    finished = [e for e in seen if isinstance(e, events.StreamFinished)]
    assert len(finished) == 2
    ok, failed = finished
    assert ok.ok is True
    assert ok.tier == "prompted"
    assert ok.mode == "strict"
    assert ok.schema_name == "person"
    assert ok.partials == final.partials > 0
    assert ok.first_partial_s == final.first_partial_s
    assert 0 < ok.first_partial_s <= ok.duration_s
    assert failed.ok is False
    assert failed.partials == 0
    assert failed.first_partial_s is None
    # after RequestFinished
    order = [type(e).__name__ for e in seen]
    assert order.index("RequestFinished") < order.index("StreamFinished")


def test_a_stream_closed_early_reports_no_outcome():
    """An abandoned stream has no outcome: neither RequestFinished nor StreamFinished
    (the metrics would count it as a failure)."""
    seen: list[Any] = []
    events.subscribe(seen.append)
    try:
        stream = JsonMode(ScriptedBackend([pieces(DOC)])).stream("x", Person)
        assert next(stream).kind == "partial"
        stream.close()

        async def abandon() -> None:
            astream = JsonMode(ScriptedBackend([pieces(DOC)])).astream("x", Person)
            assert (await astream.__anext__()).kind == "partial"
            await astream.aclose()

        asyncio.run(abandon())
    finally:
        events.unsubscribe(seen.append)
    finished = (events.StreamFinished, events.RequestFinished)
    assert [e for e in seen if isinstance(e, finished)] == []


# -- async -------------------------------------------------------------------------------


async def _collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in stream]


def test_astream_with_an_async_generator_callable():
    fn = ARecorder(pieces(DOC))
    seen_at: list[int] = []

    async def main() -> Any:
        last = None
        async for event in JsonMode(fn, transport=FAST).astream("x", Person):
            if event.kind == "partial":
                seen_at.append(fn.now)
            last = event
        return last

    final = asyncio.run(main())
    assert isinstance(final, Final)
    assert final.result.data == PERSON
    assert seen_at
    assert seen_at[0] < len(pieces(DOC))
    assert fn.closed == [True]


def test_astream_reasks_and_retries_like_stream():
    fn = ARecorder(
        ('{"name": "Ada"', ConnectionError("reset")),
        ('{"name": "Ada"', ', "age": "old"}'),
        pieces(DOC),
    )
    stream = asyncio.run(_collect(JsonMode(fn, transport=FAST).astream("x", Person)))
    retries = [event for event in stream if isinstance(event, Retry)]
    assert [(r.transport, r.attempt) for r in retries] == [(True, 1), (False, 2)]
    assert stream[-1].result.data == PERSON
    assert [a.outcome for a in stream[-1].result.attempts] == ["schema_violation", "valid"]


def test_astream_with_an_async_callable_returning_text():
    async def fn(prompt: str) -> str:
        await asyncio.sleep(0)
        return DOC

    stream = asyncio.run(_collect(JsonMode(fn).astream("x", Person)))
    assert kinds(stream) == ["final"]
    assert stream[0].result.data == PERSON


def test_astream_with_a_sync_generator_callable():
    fn = Recorder(pieces(DOC))
    stream = asyncio.run(_collect(JsonMode(fn).astream("x", Person)))
    assert "partial" in kinds(stream)
    assert stream[-1].result.data == PERSON


def test_astream_failure_raises_what_arun_raises():
    async def main() -> None:
        jm = JsonMode(ScriptedBackend(["nope", "nope"]), max_attempts=2)
        await _collect(jm.astream("x", Person))

    with pytest.raises(AttemptsExhaustedError) as info:
        asyncio.run(main())
    assert len(info.value.attempts) == 2


def test_closing_an_astream_closes_the_backends_async_generator():
    fn = ARecorder(pieces(DOC))

    async def main() -> None:
        stream = JsonMode(fn).astream("x", Person)
        first = await stream.__anext__()
        assert first.kind == "partial"
        await stream.aclose()
        assert fn.closed == [True]  # at once, not when the loop shuts down

    asyncio.run(main())
    assert fn.now < len(pieces(DOC))


def test_a_sync_stream_of_an_async_callable():
    fn = ARecorder(pieces(DOC))
    stream = list(JsonMode(fn).stream("x", Person))
    assert "partial" in kinds(stream)
    assert stream[-1].result.data == PERSON


# -- the constrained tier ---------------------------------------------------------------


@pytest.fixture(scope="module")
def local():
    pytest.importorskip("torch")
    from jsonmode.demo import random_local_model

    return random_local_model(seed=1)


SMALL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "n", "tags", "ok"],
    "additionalProperties": False,
}


def test_constrained_stream_partials_are_prefixes_the_decoder_allowed(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=96)
    stream = list(jm.stream("Extract the record.", SMALL, partial_strings=True))
    assert not any(isinstance(event, Retry) for event in stream)
    final = stream[-1]
    assert isinstance(final, Final)
    result = final.result
    assert result.tier == "constrained"
    assert [a.outcome for a in result.attempts] == ["valid"]
    assert Schema.of(SMALL).conforms(result.data)
    raw = result.attempts[0].raw
    partials = [event for event in stream if isinstance(event, Partial)]
    assert len(partials) >= 3
    assert final.first_partial_s is not None
    for event in partials:
        assert raw.startswith(event.text)
        assert contained(event.value, result.data, growing=True)
    # greedy decoding: the same value as run()
    assert jm.run("Extract the record.", SMALL).data == result.data


def test_constrained_astream_and_early_close(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=96)
    stream = asyncio.run(_collect(jm.astream("Extract the record.", SMALL)))
    assert stream[-1].result.tier == "constrained"
    assert any(isinstance(event, Partial) for event in stream)
    events_ = jm.stream("Extract the record.", SMALL)
    assert next(events_).kind == "partial"
    events_.close()  # stops the generation thread (it joins it)


# -- stream_items ---------------------------------------------------------------------------


class Item(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("n must not be negative")
        return value


def test_items_are_yielded_while_the_list_streams():
    script = ('[{"n": 1}', ", ", '{"n": 2}', ", ", '{"n": 3}', "]")
    fn = Recorder(script)
    got: list[tuple[Any, int]] = []
    for item in JsonMode(fn).stream_items("x", Item):
        got.append((item, fn.now))
    assert [item for item, _ in got] == [Item(n=1), Item(n=2), Item(n=3)]
    assert all(isinstance(item, Item) for item, _ in got)
    assert [at for _, at in got] == [1, 3, 5]  # each as soon as its closing brace came


def test_an_invalid_item_ends_the_attempt_and_is_reasked():
    fn = Recorder(
        ('[{"n": 1}', ", ", '{"n": -1}', ", ", '{"n": 3}', "]"),
        ('[{"n": 1}, ', '{"n": 2}, ', '{"n": 3}]'),
    )
    jm = JsonMode(fn, transport=FAST)
    got: list[Any] = []
    prompts: list[Any] = []
    original = fn.__call__

    def spy(prompt: Any) -> Iterator[str]:
        prompts.append(prompt)
        return original(prompt)

    jm.backend._fn = spy  # type: ignore[attr-defined]
    for item in jm.stream_items("x", Item):
        got.append(item)
    assert got == [Item(n=1), Item(n=2), Item(n=3)]  # item 1 once, not again
    assert fn.consumed[0] == 3  # the pieces after the bad item were never read
    assert fn.closed == [True, True]
    reask = prompts[1]
    assert "$[1].n" in reask
    assert "n must not be negative" in reask


def test_an_invalid_item_is_a_schema_violation_of_the_attempt():
    backend = ScriptedBackend([('[{"n": -1}', "]"), '[{"n": 1}]'])
    jm = JsonMode(backend)
    assert list(jm.stream_items("x", Item)) == [Item(n=1)]
    issues = backend.requests[1].messages[-1]["content"]
    assert "$[0].n" in issues


def test_an_invalid_item_raises_attempts_exhausted_with_its_issues():
    backend = ScriptedBackend([('[{"n": -1}', ', {"n": 2}]')] * 2)
    with pytest.raises(AttemptsExhaustedError) as info:
        list(JsonMode(backend, max_attempts=2).stream_items("x", Item))
    attempts = info.value.attempts
    assert [a.outcome for a in attempts] == ["schema_violation", "schema_violation"]
    assert attempts[0].issues[0].path == "$[0].n"


def test_an_attempt_that_changes_a_delivered_item_is_reasked():
    backend = ScriptedBackend(
        [
            ('[{"n": 1}, ', '{"n": -1}]'),
            ('[{"n": 5}, ', '{"n": 2}]'),  # item 0 was delivered as {"n": 1}
            ('[{"n": 1}, ', '{"n": 2}]'),
        ]
    )
    got = list(JsonMode(backend, max_attempts=3).stream_items("x", Item))
    assert got == [Item(n=1), Item(n=2)]
    assert len(backend.requests) == 3
    third = backend.requests[2].messages[-1]["content"]
    assert "already delivered" in third
    assert "$[0]" in third


def test_stream_items_repair_mode_yields_the_repaired_items():
    script = ("```json\n[", '{"n": 1}, ', "{'n': 2},", "]\n```")
    fn = Recorder(script)
    got: list[tuple[Any, int]] = []
    for item in JsonMode(fn, mode="repair").stream_items("x", Item):
        got.append((item, fn.now))
    assert [item for item, _ in got] == [Item(n=1), Item(n=2)]
    assert got[0][1] == 2  # a valid item still comes as soon as it is complete
    assert got[1][1] == len(script)  # the repaired one once the whole reply is read


def test_stream_items_repair_mode_judges_an_invalid_item_at_the_end():
    fn = Recorder(
        ('[{"n": 1}, ', '{"n": -5}', ", ", '{"n": 3}]'),
        ('[{"n": 1}, {"n": 2}]',),
    )
    got = list(JsonMode(fn, mode="repair", transport=FAST).stream_items("x", Item))
    assert got == [Item(n=1), Item(n=2)]
    assert fn.consumed == [4, 1]  # repair mode reads the whole reply before judging it


def test_stream_items_from_a_backend_that_cannot_stream():
    backend = WholeOnly('[{"n": 1}, {"n": 2}]')
    got = list(JsonMode(backend).stream_items("x", Item))
    assert got == [Item(n=1), Item(n=2)]
    assert backend.calls == 1


def test_stream_items_from_a_backend_that_cannot_stream_reasks_a_bad_item():
    backend = WholeOnly('[{"n": 1}, {"n": -2}]', '[{"n": 1}, {"n": 2}]')
    got = list(JsonMode(backend).stream_items("x", Item))
    assert got == [Item(n=1), Item(n=2)]
    assert backend.calls == 2


def test_stream_items_of_a_reply_streamed_in_one_piece_reasks_a_bad_item():
    # a plain-text scripted reply streams as one whole Completion: items are read at
    # the end of the stream, and the valid ones before the bad one must not be lost
    backend = ScriptedBackend(['[{"n": 1}, {"n": -2}]', '[{"n": 1}, {"n": 2}]'])
    got = list(JsonMode(backend).stream_items("x", Item))
    assert got == [Item(n=1), Item(n=2)]
    assert len(backend.requests) == 2


def test_an_attempt_that_drops_delivered_items_is_reasked():
    backend = ScriptedBackend(
        [
            ('[{"n": 1}, ', '{"n": 2}, ', '{"n": -3}]'),
            '[{"n": 1}]',  # valid, but item 1 was delivered and is missing now
            '[{"n": 1}, {"n": 2}, {"n": 3}]',
        ]
    )
    got = list(JsonMode(backend, max_attempts=3).stream_items("x", Item))
    assert got == [Item(n=1), Item(n=2), Item(n=3)]
    assert len(backend.requests) == 3
    assert "already delivered" in backend.requests[2].messages[-1]["content"]


def test_a_callable_yielding_something_else_than_text_is_a_usage_error():
    from jsonmode.errors import UsageError

    def fn(prompt: str) -> Iterator[Any]:
        yield '{"a": '
        yield 5

    with pytest.raises(UsageError):
        JsonMode(fn).run("x", PERSON_SCHEMA)
    with pytest.raises(UsageError):
        list(JsonMode(fn).stream("x", PERSON_SCHEMA))


def test_stream_items_with_a_json_schema_item_using_defs_and_refs():
    item = {
        "$defs": {"N": {"type": "integer", "minimum": 0}},
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/N"}},
        "required": ["n"],
    }
    backend = ScriptedBackend([('[{"n": 1}, ', '{"n": -1}]'), '[{"n": 1}, {"n": 2}]'])
    got = list(JsonMode(backend).stream_items("x", item))
    assert got == [{"n": 1}, {"n": 2}]
    assert "$[1].n" in backend.requests[1].messages[-1]["content"]


def test_stream_items_with_a_recursive_json_schema_item():
    item = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.com/node.json",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kids": {"type": "array", "items": {"$ref": "#"}},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    backend = ScriptedBackend(
        [
            ('[{"name": "a", "kids": [{"name": "b"}]}, ', '{"name": "c", "kids": [{"nom": 1}]}]'),
            '[{"name": "a", "kids": [{"name": "b"}]}, {"name": "c"}]',
        ]
    )
    got = list(JsonMode(backend).stream_items("x", item))
    assert got == [{"name": "a", "kids": [{"name": "b"}]}, {"name": "c"}]
    assert "$[1].kids[0]" in backend.requests[1].messages[-1]["content"]


def test_stream_items_of_plain_values():
    fn = Recorder(("[1", ", 2", ", 3", "]"))
    got = [(item, fn.now) for item in JsonMode(fn).stream_items("x", int)]
    assert got == [(1, 2), (2, 3), (3, 4)]  # a number once something follows it


def test_stream_items_a_transport_retry_does_not_deliver_twice():
    fn = Recorder(
        ('[{"n": 1}, ', '{"n": 2', ConnectionError("reset")),
        ('[{"n": 1}, ', '{"n": 2}, ', '{"n": 3}]'),
    )
    got = list(JsonMode(fn, transport=FAST).stream_items("x", Item))
    assert got == [Item(n=1), Item(n=2), Item(n=3)]


def test_astream_items():
    fn = ARecorder(
        ('[{"n": 1}', ", ", '{"n": -1}', ", ", '{"n": 3}', "]"),
        ('[{"n": 1}, ', '{"n": 2}, ', '{"n": 3}]'),
    )

    async def main() -> list[Any]:
        return [item async for item in JsonMode(fn).astream_items("x", Item)]

    assert asyncio.run(main()) == [Item(n=1), Item(n=2), Item(n=3)]
    assert fn.consumed[0] == 3


# -- façade bits: repairable, context, prepare ----------------------------------------------


def test_strict_unrepairable_output_is_not_called_repairable():
    with pytest.raises(AttemptsExhaustedError) as info:
        JsonMode(ScriptedBackend(["nope"]), max_attempts=1).run("x", Person)
    assert info.value.repairable is False
    assert info.value.hint is None


def test_strict_repairable_output_says_repair_would_help():
    fenced = f"```json\n{DOC}\n```"
    with pytest.raises(AttemptsExhaustedError) as info:
        JsonMode(ScriptedBackend([fenced]), max_attempts=1).run("x", Person)
    assert info.value.repairable is True
    assert info.value.hint is not None
    assert "repair" in info.value.hint


def test_repair_mode_errors_are_never_called_repairable():
    with pytest.raises(AttemptsExhaustedError) as info:
        JsonMode(ScriptedBackend(["nope"]), mode="repair", max_attempts=1).run("x", Person)
    assert info.value.repairable is False


class Scaled(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def scale(cls, value: int, info: ValidationInfo) -> int:
        context = info.context or {}
        if value > context.get("limit", 10**9):
            raise ValueError(f"n over the limit {context['limit']}")
        return value * context.get("factor", 1)


def test_context_reaches_pydantic_validators_in_run():
    jm = JsonMode(ScriptedBackend(['{"n": 2}']))
    assert jm.run("x", Scaled, context={"factor": 10}).value.n == 20
    jm = JsonMode(ScriptedBackend(['{"n": 2}']))
    assert jm.run("x", Scaled).value.n == 2


def test_context_makes_an_attempt_fail_and_be_reasked():
    backend = ScriptedBackend(['{"n": 50}', '{"n": 5}'])
    result = JsonMode(backend).run("x", Scaled, context={"limit": 10})
    assert [a.outcome for a in result.attempts] == ["schema_violation", "valid"]
    assert "limit 10" in result.attempts[0].issues[0].message


def test_context_reaches_validators_in_stream_and_stream_items():
    jm = JsonMode(ScriptedBackend([('{"n"', ": 2}")]))
    *_, final = jm.stream("x", Scaled, context={"factor": 3})
    assert final.result.value.n == 6
    backend = ScriptedBackend([('[{"n": 1}, ', '{"n": 50}]'), '[{"n": 1}, {"n": 2}]'])
    got = list(JsonMode(backend).stream_items("x", Scaled, context={"limit": 10, "factor": 3}))
    assert [item.n for item in got] == [3, 6]
    assert len(backend.requests) == 2  # the item over the limit was re-asked

    async def main() -> Any:
        jm = JsonMode(ScriptedBackend(['{"n": 2}']))
        return await _collect(jm.astream("x", Scaled, context={"factor": 4}))

    assert asyncio.run(main())[-1].result.value.n == 8


class SlowPrepare:
    """A backend whose one-time set-up takes 0.3 s."""

    name = "slow-prepare"
    native_schema = False

    def __init__(self, reply: str | tuple[str, ...]) -> None:
        self.reply = reply
        self.log: list[str] = []

    def prepare(self) -> None:
        if "prepare" not in self.log:
            time.sleep(0.3)
        self.log.append("prepare")

    def complete(self, request: Request) -> Completion:
        self.log.append("complete")
        text = self.reply if isinstance(self.reply, str) else "".join(self.reply)
        return Completion(text)

    async def acomplete(self, request: Request) -> Completion:
        return self.complete(request)

    def stream(self, request: Request) -> Iterator[str]:
        self.log.append("stream")
        yield from self.reply

    async def astream(self, request: Request) -> AsyncIterator[str]:
        for piece in self.stream(request):
            yield piece


def _slow(run: Callable[[JsonMode], Any], reply: str | tuple[str, ...] = DOC) -> Any:
    backend = SlowPrepare(reply)
    out = run(JsonMode(backend))
    assert backend.log[0] == "prepare"  # before any call (it may be called again: cheap)
    assert {"complete", "stream"} & set(backend.log)
    return out


def test_a_slow_prepare_is_outside_the_clock_in_run():
    result = _slow(lambda jm: jm.run("x", Person))
    assert result.attempts[0].latency_s < 0.3
    assert result.duration_s < 0.3


def test_a_slow_prepare_is_outside_the_clock_in_arun():
    result = _slow(lambda jm: asyncio.run(jm.arun("x", Person)))
    assert result.attempts[0].latency_s < 0.3
    assert result.duration_s < 0.3


@pytest.mark.parametrize("driver", ["stream", "astream"])
def test_a_slow_prepare_is_outside_the_clock_in_streams(driver):
    def go(jm: JsonMode) -> list[Any]:
        if driver == "stream":
            return list(jm.stream("x", Person))
        return asyncio.run(_collect(jm.astream("x", Person)))

    stream = _slow(go, pieces(DOC))
    final = stream[-1]
    assert final.result.attempts[0].latency_s < 0.3
    assert final.result.duration_s < 0.3
    assert final.duration_s < 0.3
    assert final.first_partial_s is not None
    assert final.first_partial_s < 0.3


def test_stream_finished_carries_the_calls_schema_name():
    seen: list[Any] = []
    events.subscribe(seen.append)
    try:
        list(JsonMode(ScriptedBackend([pieces(DOC)])).stream("x", Person, schema_name="call"))
        list(
            JsonMode(ScriptedBackend([pieces("[" + DOC + "]")]), schema_name="mine").stream_items(
                "x", Person
            )
        )
    finally:
        events.unsubscribe(seen.append)
    names = [e.schema_name for e in seen if isinstance(e, events.StreamFinished)]
    assert names == ["call", "mine"]


# -- the re-reading cadence: a long reply costs linear time ---------------------------------

# About 40 KB each: a list of strings, and a list of objects holding one.
LONG = json.dumps([f"line {i}: lorem ipsum dolor sit amet, consectetur" for i in range(780)])
LINES = json.dumps([{"text": f"line {i}: lorem ipsum dolor sit amet, consec"} for i in range(700)])


class Line(BaseModel):
    text: str


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """The length of every text handed to ``jsonmode.streaming``'s ``name``
    (``parse_partial`` or ``complete_items``), in order."""
    import jsonmode.streaming as streaming

    real = getattr(streaming, name)
    seen: list[int] = []

    def counted(text: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(streaming, name, counted)
    return seen


def _item_ends(text: str) -> list[int]:
    """Where each item of a list of flat objects ends (just past its ``}``)."""
    return [i + 1 for i, char in enumerate(text) if char == "}"]


@pytest.mark.parametrize("driver", ["stream", "astream"])
@pytest.mark.parametrize("growing", [False, True])
def test_a_long_reply_is_re_read_in_linear_total_work(monkeypatch, driver, growing):
    read = _counting(monkeypatch, "parse_partial")
    jm = JsonMode(ScriptedBackend([pieces(LONG, 4)]))  # about one token a piece
    if driver == "stream":
        stream = list(jm.stream("x", {"type": "array"}, partial_strings=growing))
    else:
        stream = asyncio.run(_collect(jm.astream("x", {"type": "array"}, partial_strings=growing)))
    assert len(LONG) > 40_000
    assert sum(read) <= 40 * len(LONG)  # re-reading after every piece: about len²/8
    assert read == sorted(read)
    for before, after in itertools.pairwise(read):
        if after > 1024:  # past the first KB: once the reply grew by 1/32 of its length
            assert after - before <= after // 32 + 4 + 12  # (+ a piece, + pieces without triggers)
    partials = [event for event in stream if isinstance(event, Partial)]
    assert len(partials) > 100  # they still come while the reply streams
    assert partials[-1].value == json.loads(LONG) == stream[-1].result.data  # the end is read
    assert partials[-1].text == LONG


def test_a_short_reply_is_re_read_after_every_piece(monkeypatch):
    read = _counting(monkeypatch, "parse_partial")
    text = "[" + ",".join(["1"] * 500) + "]"  # 1 001 characters: under 1 KB
    script = pieces(text, 4)  # each piece holds a comma: each can change the value
    stream = list(JsonMode(ScriptedBackend([script])).stream("x", {"type": "array"}))
    ends = list(itertools.accumulate(len(piece) for piece in script))
    assert read == ends
    partials = [event for event in stream if isinstance(event, Partial)]
    assert [len(event.text) for event in partials] == ends  # a new value after every piece
    assert stream[-1].partials == len(script)


def test_stream_items_of_a_long_reply_reads_it_in_linear_total_work(monkeypatch):
    read = _counting(monkeypatch, "complete_items")
    fn = Recorder(pieces(LINES, 4))
    got = [(item, fn.now) for item in JsonMode(fn).stream_items("x", Line)]
    assert len(LINES) > 40_000
    assert sum(read) <= 40 * len(LINES)  # re-reading after every piece: about len²/8
    assert [item for item, _ in got] == [Line(**data) for data in json.loads(LINES)]
    # each item comes once the reply has grown by at most 1/31 past its end (+ a piece)
    for (_, at), end in zip(got, _item_ends(LINES), strict=True):
        assert end <= min(4 * at, len(LINES)) <= end * 32 / 31 + 4


@pytest.mark.parametrize("seed", range(3))
def test_stream_items_of_a_long_reply_in_small_pieces_yields_each_item_once(seed):
    data = json.loads(LINES)
    script = random_pieces(LINES, seed)
    got = list(JsonMode(ScriptedBackend([script])).stream_items("x", Line))
    assert got == [Line(**item) for item in data]
    plain_items = list(
        JsonMode(ScriptedBackend([random_pieces(LONG, seed)])).stream_items("x", str)
    )
    assert plain_items == json.loads(LONG)


@pytest.mark.parametrize("bad", [500, 699], ids=["mid-reply", "last item"])
def test_an_invalid_item_in_a_long_reply_still_ends_the_attempt(bad):
    data = json.loads(LINES)
    wrong = [*data[:bad], {"text": 5}, *data[bad + 1 :]]
    text = json.dumps(wrong)
    fn = Recorder(pieces(text, 4), pieces(LINES, 4))
    got = list(JsonMode(fn, transport=FAST).stream_items("x", Line))
    assert got == [Line(**item) for item in data]  # each once, in order
    assert fn.calls == 2  # the attempt was judged by the bad item and re-asked
    end = _item_ends(text)[bad]
    assert end <= 4 * fn.consumed[0] <= end * 32 / 31 + 4  # read up to ~3% past it
