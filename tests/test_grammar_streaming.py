"""Streams of a text under a grammar (``jm.stream(prompt, grammar)``), and the repair
hint of ``stream_items`` (issue 38)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, field_validator

from jsonmode import (
    AttemptsExhaustedError,
    InvalidGrammarError,
    JsonMode,
    TransportPolicy,
    UsageError,
    compile_choice,
    compile_regex,
)
from jsonmode.backends import ScriptedBackend
from jsonmode.streaming import Final, Partial, Retry

FAST = TransportPolicy(sleep=lambda _: None)
MOVES = 'root ::= move (" " move)*\nmove ::= [a-h] [1-8]\n'


def scripted(*replies: Any, **options: Any) -> tuple[JsonMode, ScriptedBackend]:
    backend = ScriptedBackend(replies)
    return JsonMode(backend, transport=FAST, **options), backend


def test_a_grammar_streams_the_text_so_far_then_run_texts_result():
    pieces = ("e4", " e", "5 ", "d4")
    jm, _ = scripted(pieces, "e4 e5 d4")
    events = list(jm.stream("Three moves.", MOVES))
    *partials, final = events
    assert all(isinstance(event, Partial) for event in partials)
    assert [event.value for event in partials] == ["e4", "e4 e", "e4 e5 ", "e4 e5 d4"]
    assert all(event.value == event.text and event.attempt == 1 for event in partials)
    assert isinstance(final, Final)
    assert final.partials == 4
    result = final.result
    expected = jm.run_text("Three moves.", MOVES)  # the same reply, not streamed
    assert (result.value, result.data, result.raw, result.tier, result.mode) == (
        expected.value,
        expected.data,
        expected.raw,
        expected.tier,
        expected.mode,
    )
    assert [a.outcome for a in result.attempts] == ["valid"]


def test_a_compiled_grammar_streams_and_a_mismatch_is_reasked_with_a_retry_event():
    jm, backend = scripted(("2024", "-13"), ("2024", "-12"))
    events = list(jm.stream("A month.", compile_regex(r"\d{4}-(0[1-9]|1[0-2])")))
    kinds = [event.kind for event in events]
    assert kinds == ["partial", "partial", "retry", "partial", "partial", "final"]
    retry = events[2]
    assert isinstance(retry, Retry)
    assert (retry.attempt, retry.transport) == (2, False)
    assert retry.issues[0].keyword == "grammar"
    assert [e.value for e in events if isinstance(e, Partial) and e.attempt == 2] == [
        "2024",
        "2024-12",
    ]
    final = events[-1]
    assert isinstance(final, Final)
    assert final.result.value == "2024-12"
    assert [a.outcome for a in final.result.attempts] == ["schema_violation", "valid"]
    # the re-ask is run_text's: it says where the text stopped matching
    assert "byte 6" in backend.requests[1].messages[-1]["content"]


def test_a_grammar_stream_that_never_matches_raises_what_run_text_raises():
    jm, _ = scripted(("may", "be"), "maybe", max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as info:
        list(jm.stream("?", compile_choice(["yes", "no"])))
    assert info.value.message.startswith("no text matching any of the choices after 2 attempt(s)")


def test_repair_mode_final_text_drops_the_fence_the_partials_showed():
    jm, _ = scripted(("```\n", "yes", "\n```"), mode="repair")
    events = list(jm.stream("?", compile_choice(["yes", "no"])))
    final = events[-1]
    assert isinstance(final, Final)
    assert final.result.value == "yes"
    assert [r.kind for r in final.result.repairs] == ["extract"]
    assert events[-2].value == "```\nyes\n```"


def test_astream_takes_a_grammar():
    jm, _ = scripted(("e2", " e4"))

    async def collect() -> list[Any]:
        return [event async for event in jm.astream("x", MOVES)]

    events = asyncio.run(collect())
    assert [event.kind for event in events] == ["partial", "partial", "final"]
    assert [e.value for e in events[:2]] == ["e2", "e2 e4"]
    assert events[-1].result.value == "e2 e4"


def test_json_schema_text_still_streams_json():
    jm, _ = scripted(('{"a": ', "1}"))
    events = list(jm.stream("x", '  {"type": "object"}'))
    assert events[-1].result.value == {"a": 1}
    assert all(not isinstance(e.value, str) for e in events if isinstance(e, Partial))


def test_a_grammar_with_a_context_or_bad_gbnf_is_refused_before_any_request():
    jm, backend = scripted("e4")
    with pytest.raises(UsageError, match="context"):
        list(jm.stream("x", MOVES, context={"a": 1}))
    with pytest.raises(InvalidGrammarError):
        list(jm.stream("x", "root ::= [a-"))
    assert backend.requests == []


# -- stream_items: the repair hint --------------------------------------------------------


class Item(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("n must not be negative")
        return value


def test_stream_items_does_not_suggest_repair_when_repair_fails_the_same_way():
    # Attempt 2 changes item 0, already delivered: repair mode refuses it just the same.
    script = [('[{"n": 1}, ', '{"n": -1}]'), ('[{"n": 5}, {"n": 2}]',)]
    for mode in ("strict", "repair"):
        jm = JsonMode(ScriptedBackend(list(script)), mode=mode, max_attempts=2)
        with pytest.raises(AttemptsExhaustedError) as info:
            list(jm.stream_items("x", Item))
        assert "already delivered" in info.value.attempts[-1].error
        assert info.value.repairable is False
        assert info.value.hint is None


def test_stream_items_suggests_repair_when_repair_mode_would_pass():
    fenced = ('```json\n[{"n": 1}', ', {"n": 2}]\n```')
    jm = JsonMode(ScriptedBackend([fenced]), max_attempts=1)
    with pytest.raises(AttemptsExhaustedError) as info:
        list(jm.stream_items("x", Item))
    assert info.value.repairable is True
    assert info.value.hint == "mode='repair' would repair the last output"
    repaired = JsonMode(ScriptedBackend([fenced]), mode="repair", max_attempts=1)
    assert list(repaired.stream_items("x", Item)) == [Item(n=1), Item(n=2)]


def test_stream_items_does_not_suggest_repair_for_a_reply_it_did_not_read_to_the_end():
    # Strict mode ends the attempt at the bad item: what followed was never read.
    jm = JsonMode(ScriptedBackend([('[{"n": "1"}', ', {"n": 2}]')]), max_attempts=1)
    with pytest.raises(AttemptsExhaustedError) as info:
        list(jm.stream_items("x", Item))
    assert info.value.attempts[-1].raw == '[{"n": "1"}'
    assert (info.value.repairable, info.value.hint) == (False, None)
