"""An OpenAI SDK client as the backend (issue 38, item 10).

The real ``openai.OpenAI`` / ``openai.AsyncOpenAI`` clients speak HTTP to the scripted
OpenAI-compatible server on 127.0.0.1 (tests/support/openai_server.py), which records
every request: nothing is mocked, nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import openai
import pytest
from support.openai_server import Delay, HttpError, OpenAIServer, Reply, ToolReply

from jsonmode import (
    JsonMode,
    PermanentBackendError,
    TransientBackendError,
    TransportPolicy,
    Usage,
    UsageError,
)
from jsonmode.backends.openai_client import OpenAIClientBackend

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_implicit_event_loop")]

Start = Callable[..., OpenAIServer]

PERSON: dict[str, Any] = {
    "title": "Person",
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ADA = {"name": "Ada", "age": 36}
ADA_JSON = json.dumps(ADA)
PIECES = ('{"name": ', '"Ada", ', '"age": 36', "}")
PROMPT = "Extract the person: Ada, 36"
FAST = TransportPolicy(max_retries=3, initial_wait=0.01, max_wait=0.02)


def client(server: OpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused")


def aclient(server: OpenAIServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="unused")


def jsonmode(sdk: object, **options: Any) -> JsonMode:
    options.setdefault("timeout", 5.0)
    options.setdefault("transport", FAST)
    return JsonMode(sdk, model="test-model", **options)


def test_a_client_is_a_backend_and_its_base_url_and_key_are_used(openai_server: Start) -> None:
    server = openai_server(Reply(ADA_JSON, prompt_tokens=12, completion_tokens=4))
    sdk = openai.OpenAI(base_url=server.base_url, api_key="sk-test-key")
    jm = jsonmode(sdk, temperature=0.2)
    assert isinstance(jm.backend, OpenAIClientBackend)
    assert jm.tier == "prompted"  # some OpenAI-compatible server: support unknown
    result = jm.run(PROMPT, PERSON)
    assert result.value == ADA
    assert result.usage == Usage(12, 4)
    (recorded,) = server.recorded
    assert recorded.headers["authorization"] == "Bearer sk-test-key"
    body = recorded.body
    assert sorted(body) == ["messages", "model", "temperature"]
    assert body["model"] == "test-model"
    assert [message["role"] for message in body["messages"]] == ["system", "user"]


def test_openais_own_endpoint_is_known_to_take_a_schema() -> None:
    sdk = openai.OpenAI(api_key="unused")  # base_url: api.openai.com; nothing is sent here
    assert JsonMode(sdk, model="gpt-4o-mini").tier == "native"


def test_reasks_go_through_the_client(openai_server: Start) -> None:
    server = openai_server(Reply('{"name": "Ada"}'), Reply(ADA_JSON))
    result = jsonmode(client(server)).run(PROMPT, PERSON)
    assert result.value == ADA
    assert [attempt.outcome for attempt in result.attempts] == ["schema_violation", "valid"]
    assert server.requests[1]["messages"][-2] == {
        "role": "assistant",
        "content": '{"name": "Ada"}',
    }


@pytest.mark.parametrize("native", ["response_format", "tools"])
def test_the_native_tier_sends_the_schema_by_the_transport_asked(
    openai_server: Start, native: str
) -> None:
    reply = ToolReply("Person", ADA_JSON) if native == "tools" else Reply(ADA_JSON)
    server = openai_server(reply)
    jm = jsonmode(client(server), native=native)
    assert jm.tier == "native"
    assert jm.run(PROMPT, PERSON).value == ADA
    (body,) = server.requests
    if native == "tools":
        assert body["tools"][0]["function"]["name"] == "Person"
        assert body["tool_choice"] == {"type": "function", "function": {"name": "Person"}}
        assert "response_format" not in body
    else:
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["schema"]["title"] == "Person"
        assert body["response_format"]["json_schema"]["strict"] is True
        assert "tools" not in body


def test_a_call_to_another_function_is_reasked(openai_server: Start) -> None:
    server = openai_server(ToolReply("lookup", ADA_JSON), ToolReply("Person", ADA_JSON))
    result = jsonmode(client(server), native="tools").run(PROMPT, PERSON)
    assert [attempt.outcome for attempt in result.attempts] == ["schema_violation", "valid"]
    assert "'lookup'" in server.requests[1]["messages"][-1]["content"]


def test_an_async_client_serves_async_calls_and_refuses_sync_ones(openai_server: Start) -> None:
    server = openai_server(Reply('{"name": "Ada"}'), Reply(ADA_JSON))
    jm = jsonmode(aclient(server))
    result = asyncio.run(jm.arun(PROMPT, PERSON))
    assert result.value == ADA
    assert server.request_count == 2
    with pytest.raises(UsageError, match="async calls only"):
        jm.run(PROMPT, PERSON)
    assert server.request_count == 2


def test_a_sync_client_serves_async_calls_too(openai_server: Start) -> None:
    server = openai_server(Reply(ADA_JSON))
    assert asyncio.run(jsonmode(client(server)).agenerate(PROMPT, PERSON)) == ADA


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_streaming_shows_the_value_grow_and_reports_usage(openai_server: Start, kind: str) -> None:
    server = openai_server(Reply(ADA_JSON, pieces=PIECES, prompt_tokens=9, completion_tokens=3))
    if kind == "sync":
        jm = jsonmode(client(server))
        events = list(jm.stream(PROMPT, PERSON))
    else:
        jm = jsonmode(aclient(server))

        async def watch() -> list[Any]:
            return [event async for event in jm.astream(PROMPT, PERSON)]

        events = asyncio.run(watch())
    *partials, final = events
    assert [event.kind for event in partials] == ["partial"] * len(partials)
    assert partials[-1].value == ADA
    assert final.result.value == ADA
    assert final.result.usage == Usage(9, 3)
    (body,) = server.requests
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_a_streamed_tool_call_with_a_sync_client_in_async_code(openai_server: Start) -> None:
    server = openai_server(ToolReply("Person", ADA_JSON, pieces=PIECES))
    jm = jsonmode(client(server), native="tools")

    async def watch() -> list[Any]:
        return [event async for event in jm.astream(PROMPT, PERSON)]

    *partials, final = asyncio.run(watch())
    assert partials
    assert final.result.value == ADA


def test_the_clients_own_retries_are_off_and_jsonmodes_policy_retries(
    openai_server: Start,
) -> None:
    """The SDK retries a 500 twice by default: under jsonmode's policy that would be 3
    calls per policy call, unseen by the attempt's record. Here every call the server
    sees is one the policy made and counted."""
    server = openai_server(HttpError(500), HttpError(429), Reply(ADA_JSON))
    sdk = client(server)
    result = jsonmode(sdk).run(PROMPT, PERSON)
    assert result.value == ADA
    assert server.request_count == 3
    assert result.attempts[0].transport_retries == 2
    assert sdk.max_retries == 2  # the caller's client is not changed


def test_without_transport_retries_one_failure_is_one_request(openai_server: Start) -> None:
    server = openai_server(HttpError(503), HttpError(503), HttpError(503), Reply(ADA_JSON))
    with pytest.raises(TransientBackendError) as caught:
        jsonmode(client(server), transport=TransportPolicy(max_retries=0)).run(PROMPT, PERSON)
    assert server.request_count == 1
    assert caught.value.status_code == 503
    assert str(caught.value) == "InternalServerError (HTTP 503): scripted error"


def test_a_refused_request_is_permanent_after_one_call(openai_server: Start) -> None:
    server = openai_server(HttpError(400, "unknown field"), Reply(ADA_JSON))
    with pytest.raises(PermanentBackendError) as caught:
        jsonmode(client(server)).run(PROMPT, PERSON)
    assert server.request_count == 1
    assert caught.value.status_code == 400
    assert str(caught.value) == "BadRequestError (HTTP 400): unknown field"


def test_retry_after_is_carried(openai_server: Start) -> None:
    server = openai_server(HttpError(429, headers={"Retry-After": "7"}))
    with pytest.raises(TransientBackendError) as caught:
        jsonmode(client(server), transport=TransportPolicy(max_retries=0)).run(PROMPT, PERSON)
    assert caught.value.retry_after == 7.0


def test_the_whole_call_is_bounded_by_the_timeout(openai_server: Start) -> None:
    server = openai_server(Delay(5.0, Reply(ADA_JSON)))
    jm = jsonmode(client(server), timeout=0.5, transport=TransportPolicy(max_retries=0))
    started = time.perf_counter()
    with pytest.raises(TransientBackendError):
        jm.run(PROMPT, PERSON)
    assert time.perf_counter() - started < 3.0


def test_options_are_checked_against_create_and_extra_body_goes_in_the_body(
    openai_server: Start,
) -> None:
    server = openai_server(Reply(ADA_JSON))
    sdk = client(server)
    with pytest.raises(UsageError, match="did you mean 'temperature'"):
        jsonmode(sdk, temprature=0.1)
    with pytest.raises(UsageError, match="unknown option 'top_k'") as caught:
        jsonmode(sdk, top_k=3)
    assert "extra_body" in str(caught.value.hint)
    with pytest.raises(UsageError, match="TransportPolicy"):
        jsonmode(sdk, max_retries=3)
    with pytest.raises(UsageError, match="needs the model"):
        JsonMode(sdk)
    with pytest.raises(UsageError, match="did you mean 'mode'"):
        jsonmode(sdk, mdoe="repair")
    assert server.request_count == 0
    assert jsonmode(sdk, seed=1, extra_body={"top_k": 3}).generate(PROMPT, PERSON) == ADA
    (body,) = server.requests
    assert sorted(body) == ["messages", "model", "seed", "top_k"]


def test_an_azure_client_is_accepted() -> None:
    sdk = openai.AzureOpenAI(
        api_key="unused", api_version="2024-10-21", azure_endpoint="http://127.0.0.1:9"
    )
    jm = JsonMode(sdk, model="my-deployment")
    assert isinstance(jm.backend, OpenAIClientBackend)
    assert jm.backend.name == "openai:my-deployment"
