"""The litellm backend against a real OpenAI-compatible HTTP server on 127.0.0.1.

Nothing is mocked: litellm and the OpenAI SDK speak HTTP to a scripted local
server (tests/support/openai_server.py), which records every request. Each test
checks the value, how many requests the server saw, and what was in them.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pydantic
import pytest
from support.openai_server import Delay, Drop, HttpError, OpenAIServer, Reply

from jsonmode import (
    AttemptsExhaustedError,
    JsonMode,
    PermanentBackendError,
    Repair,
    Schema,
    TransientBackendError,
    TransportPolicy,
    Usage,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_implicit_event_loop")]

Start = Callable[..., OpenAIServer]

PERSON: dict[str, Any] = {
    "title": "Person",
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "email"],
    "additionalProperties": False,
}
ADA = {"name": "Ada", "age": 36, "email": "ada@example.com"}
ADA_JSON = json.dumps(ADA)
PROMPT = "Extract the person: Ada, 36, ada@example.com"
FAST = TransportPolicy(max_retries=3, initial_wait=0.01, max_wait=0.02)


def jsonmode(server: OpenAIServer | str, mode: str = "strict", **options: Any) -> JsonMode:
    api_base = server if isinstance(server, str) else server.base_url
    options.setdefault("timeout", 5.0)
    options.setdefault("transport", FAST)
    return JsonMode("openai/test-model", mode=mode, api_base=api_base, api_key="unused", **options)


def messages(server: OpenAIServer, index: int) -> list[dict[str, Any]]:
    return list(server.requests[index]["messages"])


def kinds(repairs: tuple[Repair, ...]) -> list[str]:
    return [repair.kind for repair in repairs]


def assert_first_request(server: OpenAIServer, prompt: str = PROMPT) -> None:
    body = server.requests[0]
    # prompted tier: the schema travels in the prompt; client options stay out of the body
    assert sorted(body) == ["messages", "model"]
    assert body["model"] == "test-model"
    sent = body["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert '"minLength":1' in sent[0]["content"]  # the schema itself
    assert sent[1]["content"] == prompt


def assert_reask(server: OpenAIServer, index: int, previous_output: str) -> str:
    """Request ``index`` is the first request + the failed output + feedback; returns it."""
    first, later = messages(server, 0), messages(server, index)
    assert later[: len(first)] == first
    assert later[len(first) : -1] == [{"role": "assistant", "content": previous_output}]
    assert later[-1]["role"] == "user"
    return str(later[-1]["content"])


# -- output slips ---------------------------------------------------------------------

FENCED = f"```json\n{ADA_JSON}\n```"
PROSE = f"Sure! Here is the person you asked for:\n{ADA_JSON}\nLet me know if you need more."
TRAILING_COMMAS = '{"name": "Ada", "age": 36, "email": "ada@example.com",}'
SINGLE_QUOTES = "{'name': 'Ada', 'age': 36, 'email': 'ada@example.com'}"
PROSE_AND_TRAILING_COMMA = f"Here you go: {TRAILING_COMMAS} Anything else?"


@pytest.mark.parametrize(
    ("output", "expected_kinds"),
    [
        pytest.param(FENCED, ["extract"], id="fenced"),
        pytest.param(PROSE, ["extract"], id="prose"),
        pytest.param(TRAILING_COMMAS, ["syntax"], id="trailing-commas"),
        pytest.param(SINGLE_QUOTES, ["syntax"], id="single-quotes"),
        pytest.param(PROSE_AND_TRAILING_COMMA, ["extract", "syntax"], id="prose-and-comma"),
    ],
)
def test_repair_mode_fixes_slips_in_one_request(
    openai_server: Start, output: str, expected_kinds: list[str]
) -> None:
    server = openai_server(Reply(output))
    result = jsonmode(server, "repair").run(PROMPT, PERSON)
    assert result.value == ADA
    assert result.data == ADA
    assert server.request_count == 1
    assert_first_request(server)
    assert len(result.attempts) == 1
    assert result.attempts[0].outcome == "valid"
    assert result.raw == output
    assert kinds(result.repairs) == expected_kinds
    assert result.tier == "prompted"
    assert result.mode == "repair"


@pytest.mark.parametrize(
    "output",
    [
        pytest.param(FENCED, id="fenced"),
        pytest.param(PROSE, id="prose"),
        pytest.param(TRAILING_COMMAS, id="trailing-commas"),
        pytest.param(SINGLE_QUOTES, id="single-quotes"),
    ],
)
def test_strict_mode_rejects_slips_and_reasks(openai_server: Start, output: str) -> None:
    server = openai_server(Reply(output), Reply(ADA_JSON))
    result = jsonmode(server, "strict").run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 2
    assert_first_request(server)
    first, second = result.attempts
    assert first.outcome == "invalid_json"
    assert first.raw == output
    assert first.repairs == ()
    assert second.outcome == "valid"
    assert second.repairs == ()
    feedback = assert_reask(server, 1, output)
    assert "Attempt 1 of 3 did not conform" in feedback
    assert "could not be read as JSON" in feedback
    if output.startswith("```"):
        assert "Do not wrap the JSON in markdown code fences." in feedback


def test_repair_mode_coerces_a_string_for_an_integer(openai_server: Start) -> None:
    output = '{"name": "Ada", "age": "42", "email": "ada@example.com"}'
    server = openai_server(Reply(output))
    result = jsonmode(server, "repair").run(PROMPT, PERSON)
    assert result.value == {**ADA, "age": 42}
    assert server.request_count == 1
    assert result.repairs == (Repair("$.age", "string_to_integer", "42", 42),)


def test_strict_mode_reasks_for_a_string_for_an_integer(openai_server: Start) -> None:
    output = '{"name": "Ada", "age": "42", "email": "ada@example.com"}'
    server = openai_server(Reply(output), Reply(ADA_JSON))
    result = jsonmode(server, "strict").run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 2
    first = result.attempts[0]
    assert first.outcome == "schema_violation"
    assert first.value == {**ADA, "age": "42"}
    assert [(issue.path, issue.keyword) for issue in first.issues] == [("$.age", "type")]
    feedback = assert_reask(server, 1, output)
    assert "$.age (type)" in feedback


# -- truncation -----------------------------------------------------------------------

CUT_OFF = [
    pytest.param('{"name": "Ada", "age": 36, "email": "ada@exa', id="inside-string"),
    pytest.param('{"name": "Ada", "age": 36, "email": "ada@example.com"', id="before-brace"),
    pytest.param('```json\n{"name": "Ada", "age": 3', id="inside-fence"),
]


@pytest.mark.parametrize("mode", ["strict", "repair"])
@pytest.mark.parametrize("output", CUT_OFF)
def test_truncated_output_is_never_valid(openai_server: Start, mode: str, output: str) -> None:
    server = openai_server(Reply(output, finish_reason="length"), Reply(ADA_JSON))
    result = jsonmode(server, mode).run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 2
    first, second = result.attempts
    assert first.outcome == "truncated"
    assert first.raw == output
    assert second.outcome == "valid"
    assert "cut off" in assert_reask(server, 1, output)


@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_truncated_top_level_number_is_not_valid(openai_server: Start, mode: str) -> None:
    """A number cut off at the length limit still parses: "12" may be the start of "1234".

    The backend said the output was cut off, and a top-level number gives no sign of
    where it ends, so it must not be taken as the answer.
    """
    server = openai_server(Reply("12", finish_reason="length"), Reply("1234"))
    result = jsonmode(server, mode).run("How many?", {"type": "integer"})
    assert [a.outcome for a in result.attempts] == ["truncated", "valid"]
    assert result.value == 1234
    assert server.request_count == 2


@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_truncated_every_time_exhausts_attempts(openai_server: Start, mode: str) -> None:
    output = '{"name": "Ada", "age": 36, "email": "ada@example.com"'
    server = openai_server(*[Reply(output, finish_reason="length")] * 2)
    with pytest.raises(AttemptsExhaustedError) as caught:
        jsonmode(server, mode, max_attempts=2).run(PROMPT, PERSON)
    assert server.request_count == 2
    assert [a.outcome for a in caught.value.attempts] == ["truncated", "truncated"]


# -- transport failures -----------------------------------------------------------------


def test_rate_limit_then_success_retries_the_same_request(openai_server: Start) -> None:
    server = openai_server(
        HttpError(429, "Rate limit reached", "rate_limit_exceeded", "rate_limit_exceeded"),
        Reply(ADA_JSON),
    )
    result = jsonmode(server).run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 2
    assert server.requests[0] == server.requests[1]
    (attempt,) = result.attempts
    assert attempt.outcome == "valid"
    assert attempt.transport_retries == 1


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503])
def test_transient_status_is_retried(openai_server: Start, status: int) -> None:
    server = openai_server(
        HttpError(status, f"try again ({status})", "server_error"), Reply(ADA_JSON)
    )
    result = jsonmode(server).run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 2
    assert result.attempts[0].transport_retries == 1


def test_server_error_every_time_raises_transient_after_the_policy_bound(
    openai_server: Start,
) -> None:
    calls = FAST.max_retries + 1
    server = openai_server(*[HttpError(500, "The server had an error", "server_error")] * calls)
    with pytest.raises(TransientBackendError) as caught:
        jsonmode(server).run(PROMPT, PERSON)
    assert server.request_count == calls
    assert server.remaining == 0
    # every retry is jsonmode's own: the OpenAI SDK never retried underneath it
    assert {r.headers["x-stainless-retry-count"] for r in server.recorded} == {"0"}
    assert caught.value.status_code == 500
    # a server that answered 500 is said as such (a connection failure is not: see below)
    assert caught.value.message == "InternalServerError (HTTP 500): The server had an error"
    (attempt,) = caught.value.attempts
    assert attempt.outcome == "backend_error"
    assert attempt.transport_retries == FAST.max_retries
    assert attempt.error
    assert "The server had an error" in attempt.error


def test_timeout_is_retried_as_transient(openai_server: Start) -> None:
    server = openai_server(Delay(10.0), Reply(ADA_JSON))
    started = time.perf_counter()
    result = jsonmode(server, timeout=0.5).run(PROMPT, PERSON)
    assert time.perf_counter() - started < 5.0  # did not wait for the slow answer
    assert result.value == ADA
    assert server.request_count == 2
    assert server.requests[0] == server.requests[1]
    assert result.attempts[0].transport_retries == 1
    assert result.attempts[0].latency_s >= 0.5  # the timed-out call counts in the attempt


def test_timeout_every_time_raises_transient(openai_server: Start) -> None:
    policy = TransportPolicy(max_retries=1, initial_wait=0.01, max_wait=0.02)
    server = openai_server(Delay(10.0), Delay(10.0))
    with pytest.raises(TransientBackendError) as caught:
        jsonmode(server, timeout=0.3, transport=policy).run(PROMPT, PERSON)
    assert server.request_count == 2
    assert caught.value.attempts[0].outcome == "backend_error"


def test_dropped_connection_is_retried_as_transient(openai_server: Start) -> None:
    server = openai_server(Drop(), Reply(ADA_JSON))
    result = jsonmode(server).run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 2
    assert result.attempts[0].transport_retries == 1


@pytest.mark.parametrize(
    ("status", "error_type", "code"),
    [
        (400, "invalid_request_error", "invalid_value"),
        (401, "invalid_request_error", "invalid_api_key"),
        (403, "permission_error", "forbidden"),
        (404, "invalid_request_error", "model_not_found"),
        (422, "invalid_request_error", "unprocessable"),
    ],
)
def test_permanent_error_is_raised_after_exactly_one_request(
    openai_server: Start, status: int, error_type: str, code: str
) -> None:
    server = openai_server(HttpError(status, f"refused with {status}", error_type, code))
    with pytest.raises(PermanentBackendError) as caught:
        jsonmode(server).run(PROMPT, PERSON)
    assert server.request_count == 1
    assert caught.value.status_code == status
    assert f"refused with {status}" in str(caught.value)
    (attempt,) = caught.value.attempts
    assert attempt.outcome == "backend_error"
    assert attempt.transport_retries == 0


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A loopback URL whose port is bound but not listening: connections are refused."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{holder.getsockname()[1]}/v1"


def test_refused_connection_is_transient(refused_url: str) -> None:
    with pytest.raises(TransientBackendError) as caught:
        jsonmode(refused_url).run(PROMPT, PERSON)
    (attempt,) = caught.value.attempts
    assert attempt.outcome == "backend_error"
    assert attempt.transport_retries == FAST.max_retries
    # what happened and where (issue 38: was "InternalServerError (HTTP 500): Connection error.")
    where = refused_url.removeprefix("http://").removesuffix("/v1")
    assert caught.value.message == f"cannot connect to {where} (connection refused)"
    assert caught.value.status_code is None


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_connection_failures_say_what_happened_and_where(
    openai_server: Start, refused_url: str, driver: str
) -> None:
    def failure(url: str) -> TransientBackendError:
        jm = jsonmode(url, transport=TransportPolicy(max_retries=0))
        run = jm.run if driver == "sync" else lambda *a: asyncio.run(jm.arun(*a))
        with pytest.raises(TransientBackendError) as caught:
            run(PROMPT, PERSON)
        return caught.value

    refused = failure(refused_url)
    where = refused_url.removeprefix("http://").removesuffix("/v1")
    assert refused.message == f"cannot connect to {where} (connection refused)"
    server = openai_server(Drop())
    dropped = failure(server.base_url)
    assert dropped.message == (
        f"lost the connection to 127.0.0.1:{server.port} (the server closed it without answering)"
    )
    plain = openai_server()
    tls = failure(plain.base_url.replace("http://", "https://"))
    assert tls.message == (
        f"cannot connect to 127.0.0.1:{plain.port} (TLS handshake failed: wrong version number)"
    )
    assert plain.request_count == 0
    for error in (refused, dropped, tls):
        assert error.status_code is None
        assert error.retryable


# -- re-asks ------------------------------------------------------------------------------


def test_reask_carries_the_previous_output_and_every_error(openai_server: Start) -> None:
    bad = '{"name": "", "age": -1, "nickname": "Countess"}'
    server = openai_server(Reply(bad), Reply(ADA_JSON))
    conversation = [
        {"role": "system", "content": "You extract people from text."},
        {"role": "user", "content": PROMPT},
    ]
    before = copy.deepcopy(conversation)
    result = jsonmode(server, "strict").run(conversation, PERSON)

    assert conversation == before
    assert result.value == ADA
    assert server.request_count == 2
    first_sent = messages(server, 0)
    assert [m["role"] for m in first_sent] == ["system", "user"]
    assert first_sent[0]["content"].startswith("You extract people from text.\n\n")
    assert first_sent[1]["content"] == PROMPT

    failed = result.attempts[0]
    assert failed.outcome == "schema_violation"
    found = {(issue.path, issue.keyword) for issue in failed.issues}
    assert {
        ("$.name", "minLength"),
        ("$.age", "minimum"),
        ("$", "required"),
        ("$", "additionalProperties"),
    } <= found
    feedback = assert_reask(server, 1, bad)
    assert f"violates the schema in {len(failed.issues)} place(s)" in feedback
    for issue in failed.issues:
        assert f"{issue.path} ({issue.keyword})" in feedback
        assert issue.message in feedback


def test_every_attempt_invalid_raises_with_every_attempt(openai_server: Start) -> None:
    # the last one repair would fix (a string for the integer): the hint says so
    outputs = ["not JSON at all", FENCED, '{"name": "Ada", "age": "36", "email": "a@b.c"}']
    server = openai_server(*[Reply(output) for output in outputs])
    with pytest.raises(AttemptsExhaustedError) as caught:
        jsonmode(server, "strict").run(PROMPT, PERSON)
    assert server.request_count == 3
    attempts = caught.value.attempts
    assert [a.index for a in attempts] == [1, 2, 3]
    assert [a.raw for a in attempts] == outputs
    assert [a.outcome for a in attempts] == ["invalid_json", "invalid_json", "schema_violation"]
    assert "Attempt 1 of 3" in assert_reask(server, 1, outputs[0])
    assert "Attempt 2 of 3" in assert_reask(server, 2, outputs[1])
    assert caught.value.hint  # strict mode points at repair mode


def test_usage_is_summed_over_attempts(openai_server: Start) -> None:
    server = openai_server(
        Reply("no JSON here", prompt_tokens=100, completion_tokens=7),
        Reply(ADA_JSON, prompt_tokens=160, completion_tokens=20),
    )
    result = jsonmode(server).run(PROMPT, PERSON)
    assert server.request_count == 2
    assert [a.usage for a in result.attempts] == [Usage(100, 7), Usage(160, 20)]
    assert result.usage == Usage(260, 27)
    assert result.usage.total_tokens == 287


# -- concurrency ------------------------------------------------------------------------


def test_one_instance_serves_many_threads(openai_server: Start) -> None:
    server = openai_server(*[Reply(ADA_JSON)] * 8)
    jm = jsonmode(server)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: jm.run(f"person {i}", PERSON), range(8)))
    assert [r.value for r in results] == [ADA] * 8
    assert all(len(r.attempts) == 1 for r in results)
    assert server.request_count == 8
    prompts = sorted(body["messages"][-1]["content"] for body in server.requests)
    assert prompts == sorted(f"person {i}" for i in range(8))


def test_one_instance_serves_many_tasks(openai_server: Start) -> None:
    server = openai_server(*[Reply(ADA_JSON)] * 8)
    jm = jsonmode(server)

    async def many() -> list[Any]:
        return await asyncio.gather(*(jm.arun(f"person {i}", PERSON) for i in range(8)))

    results = asyncio.run(many())
    assert [r.value for r in results] == [ADA] * 8
    assert server.request_count == 8
    prompts = sorted(body["messages"][-1]["content"] for body in server.requests)
    assert prompts == sorted(f"person {i}" for i in range(8))


# -- native tier ------------------------------------------------------------------------


def test_native_tier_sends_response_format_and_still_validates(openai_server: Start) -> None:
    bad = '{"name": "Ada", "age": -3, "email": "ada@example.com"}'
    server = openai_server(Reply(bad), Reply(ADA_JSON))
    jm = jsonmode(server, tier="native")
    assert jm.tier == "native"
    result = jm.run(PROMPT, PERSON)
    assert result.value == ADA
    assert result.tier == "native"
    assert server.request_count == 2
    assert result.attempts[0].outcome == "schema_violation"
    expected = Schema.of(PERSON).json_schema
    for body in server.requests:
        response_format = body["response_format"]
        assert response_format["type"] == "json_schema"
        assert response_format["json_schema"]["schema"] == expected
        assert isinstance(response_format["json_schema"]["name"], str)
        # not every property is required, so OpenAI's strict mode cannot take it
        assert response_format["json_schema"]["strict"] is False
        assert "guided_json" not in body


def test_native_tier_marks_a_closed_fully_required_schema_strict(openai_server: Start) -> None:
    closed = {**PERSON, "required": ["name", "age", "email", "tags"]}
    server = openai_server(Reply(json.dumps({**ADA, "tags": []})))
    result = jsonmode(server, tier="native").run(PROMPT, closed)
    assert result.value == {**ADA, "tags": []}
    (body,) = server.requests
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["response_format"]["json_schema"]["schema"] == Schema.of(closed).json_schema


def test_vllm_native_tier_sends_response_format_and_still_validates(openai_server: Start) -> None:
    # vLLM removed guided_json (0.12) and ignores it with HTTP 200: the schema must
    # travel as response_format (tests/with_vllm checks a real vLLM server honours it).
    bad = '{"name": "Ada", "age": "36", "email": "ada@example.com"}'
    server = openai_server(Reply(bad), Reply(ADA_JSON))
    jm = JsonMode(
        "hosted_vllm/test-model",
        api_base=server.base_url,
        api_key="unused",
        timeout=5.0,
        transport=FAST,
    )
    assert jm.tier == "native"  # known to take a schema: auto picks native
    result = jm.run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 2
    assert result.attempts[0].outcome == "schema_violation"
    for body in server.requests:
        assert body["model"] == "test-model"
        response_format = body["response_format"]
        assert response_format["type"] == "json_schema"
        assert response_format["json_schema"]["schema"] == Schema.of(PERSON).json_schema
        assert not {"guided_json", "extra_body", "structured_outputs"} & set(body)


def test_vllm_native_tier_keeps_the_callers_extra_body(openai_server: Start) -> None:
    server = openai_server(Reply(ADA_JSON))
    jm = JsonMode(
        "hosted_vllm/test-model",
        api_base=server.base_url,
        api_key="unused",
        timeout=5.0,
        transport=FAST,
        extra_body={"top_k": 5, "vllm_xargs": {"x": 1}},
    )
    assert jm.run(PROMPT, PERSON).value == ADA
    (body,) = server.requests
    assert body["top_k"] == 5
    assert body["vllm_xargs"] == {"x": 1}
    assert body["response_format"]["json_schema"]["schema"] == Schema.of(PERSON).json_schema


def test_vllm_processor_gets_the_schema_as_its_per_request_argument(openai_server: Start) -> None:
    server = openai_server(Reply(ADA_JSON))
    jm = JsonMode(
        "openai/served",
        api_base=server.base_url,
        api_key="unused",
        timeout=5.0,
        transport=FAST,
        vllm_processor=True,
        extra_body={"vllm_xargs": {"x": 1}, "top_k": 5},
    )
    assert jm.tier == "native"  # auto: the server is known to take the schema
    assert jm.run(PROMPT, PERSON).value == ADA
    (body,) = server.requests
    assert body["vllm_xargs"]["x"] == 1
    assert json.loads(body["vllm_xargs"]["json_schema"]) == Schema.of(PERSON).json_schema
    assert body["top_k"] == 5
    assert "response_format" not in body


def test_pydantic_model_value(openai_server: Start) -> None:
    class Person(pydantic.BaseModel):
        name: str
        age: int
        email: str

    server = openai_server(Reply(PROSE))
    result = jsonmode(server, "repair").run(PROMPT, Person)
    assert result.value == Person(**ADA)
    assert result.data == ADA
    assert server.request_count == 1
    system = messages(server, 0)[0]["content"]
    assert all(f'"{field}"' in system for field in ("name", "age", "email"))


# -- async ----------------------------------------------------------------------------------


def test_async_happy_path(openai_server: Start) -> None:
    server = openai_server(Reply(PROSE))
    result = asyncio.run(jsonmode(server, "repair").arun(PROMPT, PERSON))
    assert result.value == ADA
    assert kinds(result.repairs) == ["extract"]
    assert server.request_count == 1
    assert_first_request(server)
    assert server.recorded[0].headers["x-stainless-async"].startswith("async")


def test_async_rate_limit_then_success(openai_server: Start) -> None:
    server = openai_server(
        HttpError(429, "Rate limit reached", "rate_limit_exceeded"), Reply(ADA_JSON)
    )
    result = asyncio.run(jsonmode(server).arun(PROMPT, PERSON))
    assert result.value == ADA
    assert server.request_count == 2
    assert server.requests[0] == server.requests[1]
    (attempt,) = result.attempts
    assert attempt.transport_retries == 1


def test_async_permanent_error_after_one_request(openai_server: Start) -> None:
    server = openai_server(HttpError(400, "bad request"))
    with pytest.raises(PermanentBackendError) as caught:
        asyncio.run(jsonmode(server).arun(PROMPT, PERSON))
    assert caught.value.status_code == 400
    assert server.request_count == 1


def test_async_timeout_is_retried_as_transient(openai_server: Start) -> None:
    server = openai_server(Delay(10.0), Reply(ADA_JSON))
    started = time.perf_counter()
    result = asyncio.run(jsonmode(server, timeout=0.5).arun(PROMPT, PERSON))
    assert time.perf_counter() - started < 5.0
    assert result.value == ADA
    assert server.request_count == 2
    assert result.attempts[0].transport_retries == 1


def test_async_dropped_connection_is_retried_as_transient(openai_server: Start) -> None:
    server = openai_server(Drop(), Reply(ADA_JSON))
    result = asyncio.run(jsonmode(server).arun(PROMPT, PERSON))
    assert result.value == ADA
    assert server.request_count == 2
    assert result.attempts[0].transport_retries == 1


def test_async_server_error_every_time_raises_transient(openai_server: Start) -> None:
    calls = FAST.max_retries + 1
    server = openai_server(*[HttpError(503, "overloaded", "server_error")] * calls)
    with pytest.raises(TransientBackendError) as caught:
        asyncio.run(jsonmode(server).arun(PROMPT, PERSON))
    assert server.request_count == calls
    assert caught.value.status_code == 503
    assert caught.value.attempts[0].transport_retries == FAST.max_retries


def test_async_refused_connection_is_transient(refused_url: str) -> None:
    with pytest.raises(TransientBackendError) as caught:
        asyncio.run(jsonmode(refused_url).arun(PROMPT, PERSON))
    assert caught.value.attempts[0].transport_retries == FAST.max_retries


def test_async_reask_matches_sync(openai_server: Start) -> None:
    bad = '{"name": "Ada", "age": "36", "email": "ada@example.com"}'
    server = openai_server(Reply(bad), Reply(ADA_JSON))
    result = asyncio.run(jsonmode(server).arun(PROMPT, PERSON))
    assert result.value == ADA
    assert server.request_count == 2
    assert "$.age (type)" in assert_reask(server, 1, bad)


def test_a_long_error_body_is_clipped_in_the_error(openai_server: Start) -> None:
    # A 400 whose body echoes a big request put all of it into the message, on stderr
    # and in every batch line. The message keeps its head and tail, saying how much was
    # cut. (200 KB here: litellm itself takes superlinear time on bigger bodies.)
    body = "bad request: " + "x" * 200_000 + " END"
    server = openai_server(HttpError(400, body))
    with pytest.raises(PermanentBackendError) as caught:
        jsonmode(server).run(PROMPT, PERSON)
    message = caught.value.message
    assert len(message) < 2_100
    assert "bad request: xxx" in message
    assert message.endswith("x END")
    assert "characters cut" in message
    assert caught.value.status_code == 400
    assert server.request_count == 1
