"""The façade with in-package backends: attempts, re-asks, modes, transport retries."""

import asyncio
import copy

import pytest
from pydantic import BaseModel

import jsonmode
from jsonmode import (
    AttemptsExhaustedError,
    Completion,
    JsonMode,
    PermanentBackendError,
    TransientBackendError,
    TransportPolicy,
    Usage,
    UsageError,
)
from jsonmode.backends import ScriptedBackend

GOOD = '{"name": "Ada", "age": 36}'
SLOPPY = "Here you go:\n```json\n{'name': 'Ada', 'age': '36',}\n```"


class Person(BaseModel):
    name: str
    age: int


class Sleeps:
    def __init__(self):
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def no_wait(sleeps: Sleeps | None = None, **overrides) -> TransportPolicy:
    async def async_sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps(seconds)

    return TransportPolicy(sleep=sleeps or (lambda s: None), async_sleep=async_sleep, **overrides)


def test_first_try_strict():
    backend = ScriptedBackend([GOOD])
    result = JsonMode(backend).run("Extract Ada, 36", Person)
    assert result.value == Person(name="Ada", age=36)
    assert result.data == {"name": "Ada", "age": 36}
    assert result.tier == "prompted"
    assert [a.outcome for a in result.attempts] == ["valid"]
    assert result.raw == GOOD
    assert result.repairs == ()


def test_strict_reasks_with_previous_output_and_every_error():
    bad = '{"name": 7, "age": "x"}'
    backend = ScriptedBackend([bad, GOOD])
    result = JsonMode(backend, mode="strict").run("Extract Ada, 36", Person)
    assert [a.outcome for a in result.attempts] == ["schema_violation", "valid"]
    first, second = backend.requests
    assert second.messages[: len(first.messages)] == first.messages
    assistant, feedback = second.messages[-2:]
    assert assistant == {"role": "assistant", "content": bad}
    assert feedback["role"] == "user"
    for issue in result.attempts[0].issues:
        assert issue.path in feedback["content"]
        assert issue.keyword in feedback["content"]
    assert {i.path for i in result.attempts[0].issues} == {"$.name", "$.age"}


def test_repair_mode_repairs_and_records():
    result = JsonMode(ScriptedBackend([SLOPPY]), mode="repair").run("x", Person)
    assert result.value == Person(name="Ada", age=36)
    assert [r.kind for r in result.repairs] == ["extract", "syntax", "string_to_integer"]
    assert len(result.attempts) == 1


def test_strict_never_repairs():
    backend = ScriptedBackend([SLOPPY, SLOPPY, SLOPPY])
    with pytest.raises(AttemptsExhaustedError) as info:
        JsonMode(backend, mode="strict").run("x", Person)
    assert [a.outcome for a in info.value.attempts] == ["invalid_json"] * 3
    assert all(a.raw == SLOPPY and a.repairs == () for a in info.value.attempts)
    assert "repair" in (info.value.hint or "")


def test_deterministic_backend_never_gets_an_identical_request():
    backend = ScriptedBackend(["nope"] * 4)
    with pytest.raises(AttemptsExhaustedError) as info:
        JsonMode(backend, max_attempts=4).run("x", Person)
    assert len(info.value.attempts) == 4
    seen = [tuple(tuple(sorted(m.items())) for m in r.messages) for r in backend.requests]
    assert len(set(seen)) == len(seen)


def test_callers_messages_are_never_mutated():
    messages = [
        {"role": "system", "content": "You extract people."},
        {"role": "user", "content": "Ada, 36"},
    ]
    before = copy.deepcopy(messages)
    backend = ScriptedBackend(["bad", GOOD])
    JsonMode(backend).run(messages, Person)
    assert messages == before
    first = backend.requests[0].messages
    assert first[0]["content"].startswith("You extract people.")  # system merged, not duplicated
    assert sum(m["role"] == "system" for m in first) == 1
    assert "JSON Schema" in first[0]["content"]


def test_truncated_output_is_never_returned_as_valid():
    cut = Completion('{"name": "Ada", "age": 3', truncated=True)
    backend = ScriptedBackend([cut, GOOD])
    result = JsonMode(backend, mode="repair").run("x", Person)
    assert [a.outcome for a in result.attempts] == ["truncated", "valid"]
    assert "cut off" in backend.requests[1].messages[-1]["content"]


def test_usage_is_summed_over_attempts():
    backend = ScriptedBackend([Completion("bad", Usage(10, 2)), Completion(GOOD, Usage(20, 5))])
    assert JsonMode(backend).run("x", Person).usage == Usage(30, 7)
    assert JsonMode(ScriptedBackend([GOOD])).run("x", Person).usage is None


def test_transient_failures_retry_the_same_request_without_spending_attempts():
    sleeps = Sleeps()
    backend = ScriptedBackend([TransientBackendError("429"), TransientBackendError("503"), GOOD])
    result = JsonMode(backend, max_attempts=1, transport=no_wait(sleeps)).run("x", Person)
    assert result.attempts[0].transport_retries == 2
    assert len(sleeps.calls) == 2
    assert backend.requests[0] == backend.requests[1] == backend.requests[2]


def test_transient_failures_give_up_after_the_policy_bound():
    backend = ScriptedBackend([TransientBackendError("503", status_code=503)] * 10)
    with pytest.raises(TransientBackendError) as info:
        JsonMode(backend, transport=no_wait(max_retries=2)).run("x", Person)
    assert len(backend.requests) == 3
    assert [a.outcome for a in info.value.attempts] == ["backend_error"]
    assert info.value.attempts[0].transport_retries == 2


def test_permanent_failures_raise_at_once():
    backend = ScriptedBackend([PermanentBackendError("400", status_code=400), GOOD])
    with pytest.raises(PermanentBackendError) as info:
        JsonMode(backend, transport=no_wait()).run("x", Person)
    assert len(backend.requests) == 1
    assert info.value.status_code == 400


def test_backend_error_after_invalid_attempt_keeps_history():
    backend = ScriptedBackend(["bad", PermanentBackendError("401")])
    with pytest.raises(PermanentBackendError) as info:
        JsonMode(backend).run("x", Person)
    assert [a.outcome for a in info.value.attempts] == ["invalid_json", "backend_error"]
    assert info.value.attempts[0].raw == "bad"


def test_examples_become_turns_and_must_conform():
    backend = ScriptedBackend([GOOD])
    JsonMode(backend).run("Bob, 7", Person, examples=[("Eve, 30", Person(name="Eve", age=30))])
    roles = [m["role"] for m in backend.requests[0].messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert backend.requests[0].messages[2]["content"] == '{"name":"Eve","age":30}'
    with pytest.raises(UsageError, match="example 0"):
        JsonMode(ScriptedBackend([GOOD])).run("x", Person, examples=[("Eve", {"name": "Eve"})])


def test_json_schema_dict_returns_plain_json():
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 2}
    assert JsonMode(ScriptedBackend(["[1, 2]"])).generate("x", schema) == [1, 2]


def test_async_paths_share_the_logic():
    backend = ScriptedBackend(["bad", TransientBackendError("429"), GOOD])
    jm = JsonMode(backend, transport=no_wait())
    result = asyncio.run(jm.arun("x", Person))
    assert [a.outcome for a in result.attempts] == ["invalid_json", "valid"]
    assert result.attempts[1].transport_retries == 1
    assert asyncio.run(JsonMode(ScriptedBackend([GOOD])).agenerate("x", Person)).age == 36


def test_one_instance_serves_concurrent_requests():
    jm = JsonMode(ScriptedBackend([GOOD] * 20))

    async def many():
        return await asyncio.gather(*(jm.agenerate(f"p{i}", Person) for i in range(20)))

    assert all(p.name == "Ada" for p in asyncio.run(many()))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "lenient"}, "mode"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"tier": "magic"}, "tier"),
        ({"tier": "native"}, "natively"),
    ],
)
def test_bad_arguments_are_usage_errors(kwargs, match):
    with pytest.raises(UsageError, match=match):
        JsonMode(ScriptedBackend([]), **kwargs)


@pytest.mark.parametrize("prompt", [b"bytes", {"role": "user"}, [], [{"content": "x"}], 42])
def test_bad_prompts_are_usage_errors(prompt):
    with pytest.raises(UsageError):
        JsonMode(ScriptedBackend([GOOD])).run(prompt, Person)


def test_native_tier_passes_schema_in_request():
    backend = ScriptedBackend([GOOD], native_schema=True)
    result = JsonMode(backend).run("x", Person)
    assert result.tier == "native"
    assert backend.requests[0].native
    assert JsonMode(ScriptedBackend([GOOD], native_schema=True), tier="prompted").tier == "prompted"
    assert JsonMode(ScriptedBackend([GOOD], native_schema=None), tier="native").tier == "native"


def test_transformers_models_are_refused_clearly():
    # A callable whose class comes from transformers must not become a function backend.
    model_class = type("PreTrainedModel", (), {"__call__": lambda self, *a: None})
    model_class.__module__ = "transformers.modeling_utils"
    with pytest.raises(UsageError, match="tokenizer"):
        JsonMode(model_class())


def test_repr_names_backend_mode_and_tier():
    text = repr(JsonMode(ScriptedBackend([]), mode="repair"))
    assert "scripted" in text
    assert "repair" in text
    assert "prompted" in text
    assert isinstance(jsonmode.JsonMode, type)


# -- backend calls per attempt, Retry-After (issue 22) ------------------------------------------


def test_attempt_records_its_backend_calls_and_describe_shows_them():
    backend = ScriptedBackend([TransientBackendError("503"), "bad", GOOD])
    result = JsonMode(backend, transport=no_wait()).run("x", Person)
    first, second = result.attempts
    assert (first.calls, first.transport_retries) == (2, 1)
    assert (second.calls, second.transport_retries) == (1, 0)
    assert first.describe().splitlines()[0].endswith(", 2 calls)")
    assert second.describe().splitlines()[0].endswith(", 1 call)")
    assert sum(a.calls for a in result.attempts) == len(backend.requests) == 3


def test_calls_of_a_failed_attempt_count_every_call():
    backend = ScriptedBackend([TransientBackendError("503")] * 3)
    with pytest.raises(TransientBackendError) as info:
        JsonMode(backend, transport=no_wait(max_retries=2)).run("x", Person)
    assert info.value.attempts[0].calls == 3 == len(backend.requests)


def test_retry_after_is_waited_for_and_the_budget_kept():
    sleeps = Sleeps()
    asked = TransientBackendError("429", status_code=429, retry_after=4.0)
    result = JsonMode(ScriptedBackend([asked, GOOD]), transport=no_wait(sleeps, max_delay=10)).run(
        "x", Person
    )
    assert sleeps.calls == [4.0]
    assert result.attempts[0].calls == 2
    too_long = TransientBackendError("429", status_code=429, retry_after=40.0)
    with pytest.raises(TransientBackendError, match="max_delay") as info:
        JsonMode(ScriptedBackend([too_long, GOOD]), transport=no_wait(sleeps, max_delay=10)).run(
            "x", Person
        )
    assert sleeps.calls == [4.0]
    assert info.value.retry_after == 40.0
    assert info.value.__cause__ is too_long
    assert too_long.message == "429"  # the backend's error is not rewritten


def test_permanent_failure_with_retry_after_is_not_retried():
    sleeps = Sleeps()
    refused = PermanentBackendError("400", status_code=400, retry_after=1.0)
    with pytest.raises(PermanentBackendError) as info:
        JsonMode(ScriptedBackend([refused, GOOD]), transport=no_wait(sleeps)).run("x", Person)
    assert info.value is refused
    assert sleeps.calls == []
