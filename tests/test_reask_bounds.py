"""Re-asks are bounded: a huge failed output never becomes a huge next request.

A 60 MB reply once produced two re-ask requests of 126 MB each (the output itself, plus
an issue message quoting it whole). Each re-ask now repeats at most a documented amount
of the output, says it was cut, and cuts every listed error.
"""

from __future__ import annotations

import pytest

from jsonmode import AttemptsExhaustedError, JsonMode, SchemaViolationError
from jsonmode.backends import ScriptedBackend
from jsonmode.repair.parse import parse
from jsonmode.schema.validation import MAX_MESSAGE_CHARS
from jsonmode.session.prompts import (
    MAX_REASK_ISSUES,
    MAX_REASK_MESSAGE_CHARS,
    MAX_REASK_OUTPUT_CHARS,
    describe_failure,
    reask_messages,
)

HUGE = 2_000_000
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 3}},
    "required": ["name"],
}
# Bounds with room for the fixed wording (system contract, instructions, markers).
REASK_EXTRA_LIMIT = (
    MAX_REASK_OUTPUT_CHARS + MAX_REASK_ISSUES * (MAX_REASK_MESSAGE_CHARS + 80) + 4_000
)


def _size(messages) -> int:
    return sum(len(str(message["content"])) for message in messages)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param("x" * HUGE, id="unreadable"),
        pytest.param('{"name": "' + "y" * HUGE + '"}', id="violation-quoting-the-value"),
        pytest.param("[" + ",".join(["1"] * (HUGE // 2)) + "]", id="many-issues"),
        pytest.param('{"name": "abc", "extra": "' + "z" * HUGE + '"', id="cut-off"),
    ],
)
@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_each_reask_stays_small_and_says_it_was_cut(reply: str, mode: str) -> None:
    backend = ScriptedBackend([reply, reply, reply])
    with pytest.raises(AttemptsExhaustedError) as caught:
        JsonMode(backend, mode=mode, max_attempts=3).run("name?", SCHEMA)
    assert len(caught.value.attempts) == 3
    assert caught.value.attempts[0].raw == reply  # nothing lost from the record
    first = _size(backend.requests[0].messages)
    for request in backend.requests[1:]:
        extra = _size(request.messages) - first
        assert extra < REASK_EXTRA_LIMIT, extra
        assistant = [m for m in request.messages if m["role"] == "assistant"]
        assert "cut" in assistant[-1]["content"]
        assert f"{len(reply):,} characters long" in request.messages[-1]["content"]


def test_a_short_output_is_repeated_whole() -> None:
    backend = ScriptedBackend(['{"name": "toolong"}', '{"name": "ok"}'])
    JsonMode(backend).run("name?", SCHEMA)
    repeated = [m for m in backend.requests[1].messages if m["role"] == "assistant"]
    assert repeated[-1]["content"] == '{"name": "toolong"}'
    assert "cut" not in backend.requests[1].messages[-1]["content"]


def test_issue_list_and_messages_are_cut_with_a_count() -> None:
    many = {"type": "array", "items": {"type": "string"}}
    text = "[" + ",".join(str(n) for n in range(100)) + "]"
    with pytest.raises(SchemaViolationError) as caught:
        parse(text, many)
    failure = caught.value
    described = describe_failure(failure)
    assert described.count("\n- ") == MAX_REASK_ISSUES + 1  # the listed ones and "and N more"
    assert f"and {100 - MAX_REASK_ISSUES} more" in described


def test_reask_of_a_failed_attempt_is_a_new_tuple() -> None:
    backend = ScriptedBackend(["x" * 10_000, '{"name": "ok"}'])
    result = JsonMode(backend).run("name?", SCHEMA)
    attempt = result.attempts[0]
    first = backend.requests[0].messages
    again = reask_messages(first, attempt, 3)
    assert again[: len(first)] == first
    assert len(again[len(first)]["content"]) < MAX_REASK_OUTPUT_CHARS + 200


def test_an_issue_never_holds_a_copy_of_a_huge_output() -> None:
    with pytest.raises(SchemaViolationError) as caught:
        parse('"' + "y" * HUGE + '"', {"maxLength": 3})
    issue = caught.value.issues[0]
    assert len(issue.message) <= MAX_MESSAGE_CHARS + 40
    assert issue.message.endswith("is too long")  # jsonschema's verdict is kept
    assert len(caught.value.message) < 2 * MAX_MESSAGE_CHARS
