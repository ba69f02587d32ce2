"""Every tier understands thinking (issue 41, item 3): a reasoning model's thinking is
split off its reply before the answer is read, never searched for the answer, kept on
the result; a reply that ends inside its thinking is its own outcome, re-asked for a
shorter thinking."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

import jsonmode.metrics
from jsonmode import JsonMode, Reasoning
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.scripted import ScriptedBackend
from jsonmode.errors import (
    AttemptsExhaustedError,
    OutputTruncatedError,
    ThinkingTruncatedError,
    UsageError,
)
from jsonmode.records import Usage
from jsonmode.repair.reasoning import AUTO, split_reasoning
from jsonmode.result import OUTCOMES

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
THINKING = 'The user wants {"name": "x", "age": 1}? No, age is 36.'
ADA = '{"name": "Ada", "age": 36}'
REPLY = f"<think>\n{THINKING}\n</think>\n{ADA}"


def run(replies, mode="strict", **options):
    backend = ScriptedBackend(replies)
    return JsonMode(backend, mode=mode, **options).run("Who?", PERSON), backend


# -- the issue's reply, both modes ------------------------------------------------------


@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_the_issue_reply_gives_ada_and_keeps_the_thinking(mode):
    result, _ = run([REPLY], mode)
    assert result.data == {"name": "Ada", "age": 36}
    assert result.reasoning == THINKING
    assert result.attempts[-1].reasoning == THINKING
    assert result.raw == REPLY  # the reply itself is kept unchanged
    assert len(result.attempts) == 1


@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_a_conforming_draft_in_the_thinking_is_never_the_answer(mode):
    # the thinking holds a conforming document; the answer does not conform: the
    # attempt fails (it is never answered from the thinking), the re-ask's answer wins
    draft = '<think>\n{"name": "Draft", "age": 1}\n</think>\n{"name": "Ada"}'
    result, backend = run([draft, ADA], mode)
    assert result.data == {"name": "Ada", "age": 36}
    assert len(result.attempts) == 2
    assert result.attempts[0].outcome == "schema_violation"
    assert result.attempts[0].reasoning == '{"name": "Draft", "age": 1}'
    assert result.reasoning is None  # the second reply did not think
    assert len(backend.requests) == 2


@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_a_thinking_with_no_answer_after_it_is_not_read(mode):
    only = '<think>{"name": "Draft", "age": 1}</think>'
    with pytest.raises(AttemptsExhaustedError) as info:
        run([only], mode, max_attempts=1)
    assert info.value.attempts[0].outcome == "invalid_json"


def test_a_prefilled_start_marker():
    # the chat template wrote <think>: the reply starts inside the thinking
    result, _ = run([f"{THINKING}\n</think>\n\n{ADA}"])
    assert result.data == {"name": "Ada", "age": 36}
    assert result.reasoning == THINKING


@pytest.mark.parametrize(
    "reply",
    [
        f"[THINK]{THINKING}[/THINK]{ADA}",  # Magistral
        # gpt-oss harmony: analysis channel, then the final channel's message
        f"<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant<|channel|>final"
        f"<|message|>{ADA}<|return|>",
        f"<|start|>assistant<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant"
        f"<|channel|>final<|message|>{ADA}",
    ],
    ids=["magistral", "harmony", "harmony-header"],
)
def test_other_families_spellings(reply):
    result, _ = run([reply])
    assert result.data == {"name": "Ada", "age": 36}
    assert result.reasoning == THINKING


def test_given_markers_are_used_and_sent_on_every_request():
    markers = Reasoning(end="<<END>>", start="<<THINK>>")
    result, backend = run(
        [f"<<THINK>>{THINKING}<<END>>{{}}", f"<<THINK>>hm<<END>>{ADA}"], reasoning=markers
    )
    assert result.data == {"name": "Ada", "age": 36}
    assert result.reasoning == "hm"
    assert [request.reasoning for request in backend.requests] == [markers, markers]


def test_auto_sends_no_markers_to_a_backend_that_detects_none():
    _, backend = run([REPLY])
    assert backend.requests[0].reasoning is None


class Detecting(ScriptedBackend):
    """A backend that knows its model's markers (DetectsReasoning)."""

    def detected_reasoning(self) -> Reasoning | None:
        return Reasoning(end="</reasoning>", start="<reasoning>")


def test_auto_uses_and_sends_what_the_backend_detected():
    backend = Detecting([f"<reasoning>{THINKING}</reasoning>{ADA}"])
    result = JsonMode(backend).run("Who?", PERSON)
    assert result.reasoning == THINKING
    assert backend.requests[0].reasoning == Reasoning(end="</reasoning>", start="<reasoning>")


def test_reasoning_none_reads_replies_whole_as_today():
    with pytest.raises(AttemptsExhaustedError) as info:
        run([REPLY], "strict", reasoning=None, max_attempts=1)
    assert "output is not JSON" in str(info.value)
    with pytest.raises(AttemptsExhaustedError) as info:
        run([REPLY], "repair", reasoning=None, max_attempts=1)
    assert "2 different JSON documents" in str(info.value)
    result, backend = run([ADA], reasoning=None)
    assert result.reasoning is None
    assert backend.requests[0].reasoning is None


@pytest.mark.parametrize("bad", ["yes", "off", 1, Reasoning, {"end": "</think>"}])
def test_bad_reasoning_values_are_usage_errors(bad):
    with pytest.raises(UsageError, match="reasoning must be"):
        JsonMode(ScriptedBackend([]), reasoning=bad)


def test_thinking_returned_apart_by_the_api_is_kept():
    result, _ = run([Completion(ADA, reasoning="apart")])
    assert result.reasoning == "apart"
    result, _ = run([Completion(REPLY, reasoning="apart")])
    assert result.reasoning == f"apart\n{THINKING}"


def test_a_marker_inside_the_answer_is_left_alone():
    # no thinking: the end marker sits in a string of the answer
    result, _ = run(['{"name": "</think>", "age": 1}'])
    assert result.data == {"name": "</think>", "age": 1}
    assert result.reasoning is None


def test_every_tier_reads_through_the_split():
    for tier, backend in (
        ("native", ScriptedBackend([REPLY], native_schema=True)),
        ("prompted", ScriptedBackend([REPLY])),
    ):
        result = JsonMode(backend, tier=tier).run("Who?", PERSON)
        assert (result.tier, result.reasoning) == (tier, THINKING)


def test_text_under_a_grammar_reads_the_answer_only():
    backend = ScriptedBackend([f"<think>{THINKING}</think>\n\nyes"])
    result = JsonMode(backend).run_text("Yes or no?", 'root ::= "yes" | "no"')
    assert result.value == "yes"
    assert result.reasoning == THINKING


# -- a reply that ends inside its thinking ---------------------------------------------


def test_out_of_tokens_inside_the_thinking_is_its_own_outcome_and_reask():
    cut = Completion('<think>\nLet me draft {"name": "x", "age": 1} and', truncated=True)
    result, backend = run([cut, ADA], "repair")
    assert result.data == {"name": "Ada", "age": 36}
    first = result.attempts[0]
    assert first.outcome == "thinking_truncated"
    assert "ran out of tokens inside its thinking" in (first.error or "")
    assert "'</think>'" in (first.error or "")
    assert first.reasoning == 'Let me draft {"name": "x", "age": 1} and'
    reask = backend.requests[1].messages[-1]["content"]
    assert "ran out of room while you were still thinking" in reask
    assert "answer directly" in reask
    assert "cut off before the JSON document ended" not in reask  # not the blind re-ask


def test_a_thinking_that_never_closes_is_the_same_outcome():
    with pytest.raises(AttemptsExhaustedError) as info:
        run(["[THINK]still thinking"], max_attempts=1)
    error = info.value
    assert error.attempts[0].outcome == "thinking_truncated"
    assert "ended inside its thinking" in str(error)
    assert "'[/THINK]'" in str(error)
    assert error.hint is not None
    assert "max_tokens" in error.hint


def test_the_typed_error_sits_under_output_truncated():
    assert issubclass(ThinkingTruncatedError, OutputTruncatedError)
    assert "thinking_truncated" in OUTCOMES


def test_the_metrics_count_the_thinking_truncated_outcome():
    registry = CollectorRegistry()
    jsonmode.metrics.enable(registry)
    try:
        with pytest.raises(AttemptsExhaustedError):
            run(["<think>and so on"], max_attempts=1)
    finally:
        jsonmode.metrics.disable()
    labels = {"tier": "prompted", "result": "thinking_truncated"}
    assert registry.get_sample_value("jsonmode_attempts_total", labels) == 1


# -- the split itself ---------------------------------------------------------------------


def test_split_several_blocks_and_plain_replies():
    split = split_reasoning(f"<think>a</think>\n<think>b</think>{ADA}", AUTO)
    assert (split.thinking, split.answer, split.unfinished) == ("a\nb", ADA, False)
    assert split_reasoning(ADA, AUTO).thinking is None
    assert split_reasoning(ADA, ()).answer == ADA
    assert split_reasoning(REPLY, ()).answer == REPLY  # no markers: nothing split


@pytest.mark.alone  # a wall-clock bound (tests/support/alone.py)
def test_split_is_linear_on_hostile_text():
    hostile = "<think>" + "</thin" * 200_000  # 1.2 MB, no end marker
    started = time.perf_counter()
    split = split_reasoning(hostile, AUTO)
    assert split.unfinished
    hostile = "x" * 1_000_000 + "</think" * 100_000
    split_reasoning(hostile, AUTO)
    assert time.perf_counter() - started < 1.0


def test_request_carries_reasoning_field():
    assert Request.__dataclass_fields__["reasoning"].default is None


def test_thinking_tokens_are_estimated_when_not_reported():
    registry = CollectorRegistry()
    jsonmode.metrics.enable(registry)
    try:
        run([Completion(f"<think>{'x' * 41}</think>{ADA}", Usage(3, 20))])
        run([Completion(f"<think>{'x' * 41}</think>{ADA}", Usage(3, 20, reasoning_tokens=9))])
    finally:
        jsonmode.metrics.disable()

    def count(source):
        labels = {"tier": "prompted", "source": source}
        return registry.get_sample_value("jsonmode_thinking_tokens_total", labels)

    assert count("estimated") == 11  # 41 characters at 4 a token, rounded up
    assert count("reported") == 9


def test_usage_sums_reasoning_tokens():
    assert Usage(1, 2) + Usage(1, 2) == Usage(2, 4)
    assert (Usage(1, 2, 5) + Usage(1, 2)).reasoning_tokens == 5


# -- streaming -------------------------------------------------------------------------------


def stream_events(pieces, **options):
    backend = ScriptedBackend([tuple(pieces)])
    return list(JsonMode(backend, **options).stream("Who?", PERSON))


def test_streamed_thinking_is_shown_apart_from_the_partial_values():
    pieces = ["<th", "ink>\nThe user wants ", '{"name": "x", ', '"age": 1}? No.\n</th', "ink>\n"]
    pieces += ['{"name": ', '"Ada", ', '"age": 36}']
    events = stream_events(pieces)
    kinds = [event.kind for event in events]
    assert kinds[-1] == "final"
    thinking = "".join(event.text for event in events if event.kind == "thinking")
    assert thinking.strip() == 'The user wants {"name": "x", "age": 1}? No.'
    partials = [event.value for event in events if event.kind == "partial"]
    assert partials  # read from the answer only: never the draft in the thinking
    assert all(value.get("name") in (None, "Ada") for value in partials)
    assert partials[-1] == {"name": "Ada", "age": 36}
    assert all(not event.text.startswith("<think>") for event in events if event.kind == "partial")
    # every thinking event comes before the first partial value
    assert kinds.index("partial") > max(i for i, k in enumerate(kinds) if k == "thinking")
    final = events[-1].result
    assert final.reasoning == 'The user wants {"name": "x", "age": 1}? No.'


def test_streamed_prefilled_thinking_is_known_at_its_end_marker():
    events = stream_events(["Hm, ", '{"name": "x"', ", age 36.", "</think>", ADA])
    thinking = "".join(event.text for event in events if event.kind == "thinking")
    assert thinking == 'Hm, {"name": "x", age 36.'
    partials = [event.value for event in events if event.kind == "partial"]
    assert partials[-1] == {"name": "Ada", "age": 36}
    assert events[-1].result.reasoning == thinking


def test_streamed_items_read_the_answer_only():
    backend = ScriptedBackend([("<think>[1, 2]", "</think>", "[3, ", "4]")])
    items = list(JsonMode(backend).stream_items("Numbers?", {"type": "integer"}))
    assert items == [3, 4]


def test_streaming_without_reasoning_has_no_thinking_events():
    events = stream_events(["<think>x</think>", ADA], reasoning=None, mode="repair")
    assert "thinking" not in [event.kind for event in events]


def test_stream_split_matches_the_whole_split_whatever_the_cuts():
    import random

    from jsonmode.repair.reasoning import StreamedSplit

    rng = random.Random(41)
    texts = [
        REPLY,
        f"{THINKING}</think>{ADA}",
        '{"a": "</think>"}',
        f"[THINK]{THINKING}[/THINK]{ADA}",
        "<think>never ends",
        "plain prose {}",
        "<think>a</think> <think>b</think>{}",
        "<th",
    ]
    for text in texts:
        whole = split_reasoning(text, AUTO)
        for _ in range(40):
            cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 6))))
            split = StreamedSplit(AUTO)
            thinking, answer = [], []
            for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
                delta, more, restart = split.feed(text[start:end])
                if restart:
                    answer = []
                thinking.append(delta)
                answer.append(more)
            delta, more = split.finish()
            thinking.append(delta)
            answer.append(more)
            assert "".join(answer).strip() == whole.answer.strip(), (text, cuts)
            shown = "".join(thinking).strip()
            if whole.thinking is None:
                assert not shown, (text, cuts)
            else:
                assert shown, (text, cuts)


def test_map_and_astream_read_through_the_split():
    import asyncio

    backend = ScriptedBackend([REPLY, REPLY])
    results = list(JsonMode(backend).map(["a", "b"], PERSON, concurrency=1))
    assert [result.reasoning for result in results] == [THINKING, THINKING]

    async def streamed():
        jm = JsonMode(ScriptedBackend([("<think>", "hm</think>", ADA)]))
        return [event async for event in jm.astream("Who?", PERSON)]

    events = asyncio.run(streamed())
    assert [event.text for event in events if event.kind == "thinking"] == ["hm"]
    assert events[-1].result.reasoning == "hm"


def test_a_cut_off_reply_before_a_startless_end_marker_ended_inside_its_thinking():
    # Reasoning(end=...) with no start: the reply always begins inside the thinking
    markers = Reasoning(end="</r>")
    cut = Completion('so {"name": "x", "age": 1} could', truncated=True)
    result, backend = run([cut, f"brief</r>{ADA}"], "repair", reasoning=markers)
    assert result.attempts[0].outcome == "thinking_truncated"
    assert result.reasoning == "brief"
    assert "ran out of room" in backend.requests[1].messages[-1]["content"]
    # not cut off: a reply without the marker is read as the answer
    result, _ = run([ADA], reasoning=markers)
    assert result.reasoning is None


def test_a_gated_reply_is_split_exactly_whatever_its_thinking_looks_like() -> None:
    """Under a constraining backend's gate the reply is thinking, marker, document: the
    split needs no guess (the heuristic leaves a reply opening with '{' whole)."""
    from jsonmode.repair.reasoning import split_gated, split_reasoning

    marks = jsonmode.Reasoning("</think>", start="<think>")
    reply = '{"draft": 1} hmm</think>\n{"a": 2}'
    assert split_reasoning(reply, [marks]).thinking is None  # the guess declines
    split = split_gated(reply, marks)
    assert (split.thinking, split.answer, split.unfinished) == (
        '{"draft": 1} hmm',
        '{"a": 2}',
        False,
    )
    assert split_gated("<think>still going", marks).unfinished
    assert split_gated("<think>a</think>[1]", marks).answer == "[1]"
