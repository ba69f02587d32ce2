"""The CrewAI adapter through real crewai: Agents, Tasks and Crews whose LLM is a
``JsonModeLLM`` around jsonmode's scripted backend (no mock of crewai anywhere)."""

from __future__ import annotations

import asyncio
import copy
import inspect
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from crewai import Agent, Crew, Task, TaskOutput
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.llm_events import (
    LLMCallCompletedEvent,
    LLMCallFailedEvent,
    LLMCallStartedEvent,
)
from crewai.llms.base_llm import BaseLLM
from pydantic import BaseModel, Field

import jsonmode
from jsonmode import (
    AttemptsExhaustedError,
    Completion,
    JsonMode,
    TransientBackendError,
    TransportPolicy,
    Usage,
)
from jsonmode.adapters.crewai import JsonModeLLM, schema_guardrail
from jsonmode.backends import ScriptedBackend

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOOD = '{"name": "Ada Lovelace", "age": 36}'
MISSING_AGE = '{"name": "Ada Lovelace"}'
FENCED_STRING_AGE = '```json\n{"name": "Ada Lovelace", "age": "36"}\n```'


class Person(BaseModel):
    name: str
    age: int = Field(ge=0)


ADA = Person(name="Ada Lovelace", age=36)


def crew_for(llm: BaseLLM, **task_options: Any) -> tuple[Crew, Task]:
    agent = Agent(role="Extractor", goal="Extract people", backstory="Careful.", llm=llm)
    task = Task(
        description="Extract the person: Ada Lovelace, 36",
        expected_output="the person as JSON",
        agent=agent,
        **task_options,
    )
    return Crew(agents=[agent], tasks=[task]), task


def task_output(raw: str) -> TaskOutput:
    return TaskOutput(description="Extract the person", raw=raw, agent="Extractor")


def texts(request: jsonmode.Request) -> list[str]:
    return [str(message["content"]) for message in request.messages]


# -- JsonModeLLM ---------------------------------------------------------------------


def test_call_signatures_are_the_ones_crewai_uses_today():
    for name in ("call", "acall"):
        ours = inspect.signature(getattr(JsonModeLLM, name)).parameters
        theirs = inspect.signature(getattr(BaseLLM, name)).parameters
        assert list(ours) == list(theirs), name
        assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]


def test_output_pydantic_goes_through_jsonmodes_reask_loop():
    backend = ScriptedBackend([MISSING_AGE, GOOD])
    crew, task = crew_for(JsonModeLLM(backend), output_pydantic=Person)

    result = crew.kickoff()

    assert result.pydantic == ADA
    assert task.output is not None
    assert task.output.pydantic == ADA
    first, reask = backend.requests
    assert jsonmode.Schema.of(Person).prompt_form in texts(first)[0]
    assert "Ada Lovelace, 36" in texts(first)[-1]
    assert texts(reask)[-2] == MISSING_AGE
    assert "- $ (required): 'age' is a required property" in texts(reask)[-1]


def test_a_tasks_response_model_is_honoured():
    backend = ScriptedBackend([FENCED_STRING_AGE])
    crew, _ = crew_for(JsonModeLLM(backend, mode="repair"), response_model=Person)

    result = crew.kickoff()

    assert result.raw == ADA.model_dump_json()
    assert len(backend.requests) == 1
    assert jsonmode.Schema.of(Person).prompt_form in texts(backend.requests[0])[0]


def test_output_json_gets_the_validated_object():
    crew, _ = crew_for(JsonModeLLM(ScriptedBackend([GOOD])), output_json=Person)
    assert crew.kickoff().json_dict == {"name": "Ada Lovelace", "age": 36}


def test_exhausted_attempts_raise_jsonmodes_error_with_every_attempt():
    llm = JsonModeLLM(ScriptedBackend([MISSING_AGE, MISSING_AGE]), max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as caught:
        llm.call("Extract Ada", response_model=Person)
    assert [attempt.outcome for attempt in caught.value.attempts] == ["schema_violation"] * 2


def test_text_calls_return_the_backends_text_cut_at_the_agents_stop_words():
    backend = ScriptedBackend(["Thought: look it up\nAction: search\nObservation: invented"])
    llm = JsonModeLLM(backend)
    llm.stop = ["\nObservation:"]

    answer = llm.call([{"role": "user", "content": "Who is Ada?"}])

    assert answer == "Thought: look it up\nAction: search"
    assert texts(backend.requests[0]) == ["Who is Ada?"]  # no schema for a text call


def test_async_calls():
    backend = ScriptedBackend([GOOD, "plain text"])
    llm = JsonModeLLM(backend)

    assert asyncio.run(llm.acall("Extract Ada", response_model=Person)) == ADA
    assert asyncio.run(llm.acall("Say something")) == "plain text"


def test_calls_emit_crewais_events_and_count_usage():
    usage = Usage(prompt_tokens=50, completion_tokens=10)
    llm = JsonModeLLM(ScriptedBackend([Completion(GOOD, usage), "not json"]), max_attempts=1)
    seen: list[Any] = []
    with crewai_event_bus.scoped_handlers():
        for kind in (LLMCallStartedEvent, LLMCallCompletedEvent, LLMCallFailedEvent):
            crewai_event_bus.register_handler(kind, lambda source, event: seen.append(event))
        assert llm.call("Extract Ada", response_model=Person) == ADA
        with pytest.raises(AttemptsExhaustedError):
            llm.call("Extract Ada", response_model=Person)
        crewai_event_bus.flush()

    kinds = [type(event).__name__ for event in seen]
    assert kinds.count("LLMCallStartedEvent") == 2
    assert kinds.count("LLMCallCompletedEvent") == 1
    assert kinds.count("LLMCallFailedEvent") == 1
    completed = next(event for event in seen if isinstance(event, LLMCallCompletedEvent))
    assert completed.usage["prompt_tokens"] == 50
    failed = next(event for event in seen if isinstance(event, LLMCallFailedEvent))
    assert "AttemptsExhaustedError" in failed.error
    summary = llm.get_token_usage_summary()
    assert (summary.prompt_tokens, summary.completion_tokens) == (50, 10)


def test_crewai_does_not_stack_its_rate_limit_retry_on_jsonmodes():
    slept: list[float] = []
    backend = ScriptedBackend([TransientBackendError("429 rate limit", status_code=429)] * 10)
    policy = TransportPolicy(max_retries=1, sleep=slept.append)
    llm = JsonModeLLM(backend, transport=policy)

    with pytest.raises(TransientBackendError):
        llm.call("Extract Ada", response_model=Person)

    assert len(backend.requests) == 2  # jsonmode's policy: one call, one retry
    assert len(slept) == 1


def test_a_shared_jsonmode_and_a_display_name():
    jm = JsonMode(ScriptedBackend([GOOD]), mode="repair")
    llm = JsonModeLLM(jm, model="ada-extractor")
    assert llm.jsonmode is jm
    assert llm.model == "ada-extractor"
    assert llm.call("Extract Ada", response_model=Person) == ADA
    assert not llm.supports_function_calling()


def test_copies_share_the_facade():
    llm = JsonModeLLM(ScriptedBackend([GOOD]))  # the scripted backend holds a lock
    clone = copy.deepcopy(llm)
    assert clone.jsonmode is llm.jsonmode
    agent = Agent(role="Extractor", goal="Extract people", backstory="Careful.", llm=llm)
    assert agent.copy().llm.call("Extract Ada", response_model=Person) == ADA


# -- schema_guardrail ----------------------------------------------------------------


def test_guardrail_accepts_conforming_output_unchanged():
    ok, value = schema_guardrail(Person)(task_output(GOOD))
    assert ok
    assert value.raw == GOOD
    assert value.pydantic == ADA
    assert value.json_dict == {"name": "Ada Lovelace", "age": 36}


def test_guardrail_rejects_with_every_error_and_the_schema():
    ok, message = schema_guardrail(Person)(task_output('{"name": 7, "age": -1}'))
    assert not ok
    assert "- $.name (type): 7 is not of type 'string'" in message
    assert "- $.age (minimum): -1 is less than the minimum of 0" in message
    assert message.endswith("JSON Schema: " + jsonmode.Schema.of(Person).prompt_form)


def test_guardrail_strict_mode_does_not_repair():
    ok, message = schema_guardrail(Person, mode="strict")(task_output(FENCED_STRING_AGE))
    assert not ok
    assert "Do not wrap the JSON in markdown code fences." in message


def test_guardrail_repair_mode_replaces_raw_with_the_repaired_json():
    ok, value = schema_guardrail(Person, mode="repair")(task_output(FENCED_STRING_AGE))
    assert ok
    assert value.raw == '{"name":"Ada Lovelace","age":36}'
    assert value.pydantic == ADA


def test_guardrail_with_a_json_schema_dict():
    schema = {"type": "object", "properties": {"tags": {"type": "array", "maxItems": 2}}}
    ok, message = schema_guardrail(schema)(task_output('{"tags": [1, 2, 3]}'))
    assert not ok
    assert "(maxItems)" in message


def test_crew_retries_the_task_with_the_guardrails_message():
    backend = ScriptedBackend([MISSING_AGE, FENCED_STRING_AGE])
    crew, _ = crew_for(JsonModeLLM(backend), guardrail=schema_guardrail(Person, mode="repair"))

    result = crew.kickoff()

    assert result.pydantic == ADA
    assert result.raw == '{"name":"Ada Lovelace","age":36}'
    retry_prompt = texts(backend.requests[1])[-1]
    assert "'age' is a required property" in retry_prompt
    assert MISSING_AGE in retry_prompt  # crewai shows the agent its previous result


def test_guardrails_list_form():
    backend = ScriptedBackend([GOOD])
    crew, _ = crew_for(JsonModeLLM(backend), guardrails=[schema_guardrail(Person)])
    assert crew.kickoff().pydantic == ADA


def test_crew_gives_up_after_the_guardrails_retries_with_its_message():
    backend = ScriptedBackend([MISSING_AGE] * 3)
    crew, _ = crew_for(
        JsonModeLLM(backend), guardrail=schema_guardrail(Person), guardrail_max_retries=1
    )
    with pytest.raises(Exception, match="'age' is a required property"):
        crew.kickoff()
    assert len(backend.requests) == 2


def test_the_crewai_example_runs_offline():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "crewai_guardrail.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "lead: Lead(company='Bletchley Analytics', contact='Joan Clarke', seats=25, "
        "next_step='call on Friday')" in done.stdout
    )
    assert "model calls: 2" in done.stdout
    assert "'next_step' is a required property" in done.stdout
