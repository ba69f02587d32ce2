"""``POST /v1/responses`` through the official ``openai`` client (sync, async, streams,
``parse`` with a pydantic model), in front of the scripted upstream that slips."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from jsonmode.serve.responses import Ids, response_events, response_object
from tests.support.openai_server import Delay, OpenAIServer, Reply
from tests.support.serve_inprocess import served

pytestmark = pytest.mark.integration

GOOD = '{"name": "Ada", "age": 36}'
EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)


class Person(pydantic.BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def idle() -> Iterator[tuple[OpenAIServer, str]]:
    """One server for the requests that must never reach its upstream."""
    with OpenAIServer([]) as upstream, served(upstream) as base:
        yield upstream, base


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)


@contextmanager
def session(script: list[Any], **settings: Any) -> Iterator[tuple[OpenAIServer, openai.OpenAI]]:
    """The scripted upstream, the server in front of it, a sync client of the server."""
    with (
        OpenAIServer(script) as upstream,
        served(upstream, **settings) as base,
        client(base) as openai_client,
    ):
        yield upstream, openai_client


def raw_post(base_url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base_url}/responses", json=body, timeout=10)


def test_parse_repairs_a_slip_and_the_reply_is_a_response_object() -> None:
    with (
        OpenAIServer([Reply("Sure! {'name': 'Ada', 'age': '36'}")]) as upstream,
        served(upstream) as base,
        client(base) as openai_client,
    ):
        parsed = openai_client.responses.parse(model="m", input="Ada, 36", text_format=Person)
    assert parsed.output_parsed == Person(name="Ada", age=36)
    assert parsed.id.startswith("resp_")
    assert parsed.status == "completed"
    assert parsed.model == "m"
    record = parsed.model_extra["jsonmode"]
    assert record["tier"] == "prompted"
    assert record["attempts"] == 1
    assert "string_to_integer" in [repair["kind"] for repair in record["repairs"]]
    assert parsed.usage is not None
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens) == (10, 5)
    assert parsed.usage.total_tokens == 15
    assert upstream.request_count == 1


def test_the_body_validates_against_the_openai_types() -> None:
    reply = Reply(GOOD, prompt_tokens=7, completion_tokens=3)
    with OpenAIServer([reply]) as upstream, served(upstream) as base:
        raw = raw_post(
            base,
            {
                "model": "m",
                "input": "Ada",
                "instructions": "Extract the person.",
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "person",
                        "strict": True,
                        "schema": Person.model_json_schema(),
                    }
                },
            },
        )
    assert raw.status_code == 200
    body = raw.json()
    response = Response.model_validate(body)  # strict pydantic validation, every field
    assert response.object == "response"
    assert json.loads(response.output_text) == json.loads(GOOD)
    message = body["output"][0]
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["status"] == "completed"
    assert message["id"].startswith("msg_")
    assert message["content"][0]["type"] == "output_text"
    assert message["content"][0]["annotations"] == []
    assert body["usage"]["input_tokens"] == 7
    assert body["usage"]["output_tokens"] == 3
    assert body["usage"]["total_tokens"] == 10
    assert body["instructions"] == "Extract the person."
    assert set(body["jsonmode"]) >= {"tier", "attempts", "repairs"}


def test_a_wrong_reply_is_re_asked_and_usage_sums_every_attempt() -> None:
    script = [Reply('{"name": "Ada"}'), Reply(GOOD)]
    with session(script) as (upstream, openai_client):
        parsed = openai_client.responses.parse(model="m", input="Ada", text_format=Person)
    assert parsed.output_parsed == Person(name="Ada", age=36)
    assert parsed.model_extra["jsonmode"]["attempts"] == 2
    assert parsed.usage is not None
    assert parsed.usage.input_tokens == 20
    assert parsed.usage.total_tokens == 30
    reask = upstream.requests[1]["messages"]
    assert "age" in reask[-1]["content"]  # the errors went back to the model
    assert len(upstream.requests[0]["messages"]) == 2  # system contract + the input


def test_a_reply_that_never_conforms_is_a_422_the_client_raises() -> None:
    with (
        session([Reply("no")] * 3) as (upstream, openai_client),
        pytest.raises(openai.UnprocessableEntityError) as caught,
    ):
        openai_client.responses.parse(model="m", input="Ada", text_format=Person)
    assert caught.value.status_code == 422
    body = caught.value.response.json()
    assert body["error"]["type"] == "jsonmode_nonconforming"
    assert len(body["error"]["attempts"]) == 3
    assert upstream.request_count == 3


def test_input_items_instructions_and_sampling_fields_reach_the_upstream() -> None:
    with session([Reply('{"ok": true}')]) as (upstream, openai_client):
        response = openai_client.responses.create(
            model="m",
            instructions="Be brief.",
            input=[
                {"role": "developer", "content": "Answer in JSON."},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Is it "},
                        {"type": "input_text", "text": "ok?"},
                    ],
                },
            ],
            text={"format": {"type": "json_object"}},
            temperature=0.25,
            top_p=0.5,
            max_output_tokens=77,
            extra_body={"jsonmode": {"mode": "strict"}},
        )
    assert json.loads(response.output_text) == {"ok": True}
    assert response.model_extra["jsonmode"]["mode"] == "strict"
    sent = upstream.requests[0]
    assert sent["temperature"] == 0.25
    assert sent["top_p"] == 0.5
    assert sent["max_tokens"] == 77
    assert "max_output_tokens" not in sent
    # instructions first, the developer message as a system one, the parts joined
    assert [message["role"] for message in sent["messages"]] == ["system", "system", "user"]
    assert sent["messages"][0]["content"].startswith("Be brief.")
    assert sent["messages"][1]["content"] == "Answer in JSON."
    assert sent["messages"][2]["content"] == "Is it ok?"


def test_a_request_without_a_format_is_proxied_and_converted_back() -> None:
    reply = Reply("Hello there", prompt_tokens=3, completion_tokens=2)
    with session([reply]) as (upstream, openai_client):
        response = openai_client.responses.create(model="m", input="hi")
    assert response.output_text == "Hello there"
    assert response.usage is not None
    assert response.usage.total_tokens == 5
    assert "jsonmode" not in (response.model_extra or {})
    assert upstream.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert "response_format" not in upstream.requests[0]


def test_async_client() -> None:
    async def main(base: str) -> Person | None:
        async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0) as aclient:
            parsed = await aclient.responses.parse(model="m", input="Ada", text_format=Person)
            return parsed.output_parsed

    with OpenAIServer([Reply("```json\n" + GOOD + "\n```")]) as upstream, served(upstream) as base:
        assert asyncio.run(main(base)) == Person(name="Ada", age=36)


def test_stream_sends_only_the_conforming_attempt_as_the_official_events() -> None:
    script = [Reply('{"name": "Bob"}'), Reply(GOOD)]
    with (
        OpenAIServer(script) as upstream,
        served(upstream) as base,
        client(base) as openai_client,
        openai_client.responses.stream(model="m", input="Ada", text_format=Person) as stream,
    ):
        events = list(stream)
        final = stream.get_final_response()
    assert [event.type for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert json.loads(deltas) == json.loads(GOOD)  # never the first attempt's "Bob"
    assert final.output_parsed == Person(name="Ada", age=36)
    assert final.model_extra["jsonmode"]["attempts"] == 2
    assert final.usage is not None
    assert final.usage.input_tokens == 20


def test_a_stream_without_format_passes_the_upstream_deltas_on() -> None:
    reply = Reply("Hello there, Ada", pieces=("Hello", " there", ", Ada"), completion_tokens=4)
    with (
        OpenAIServer([reply]) as upstream,
        served(upstream) as base,
        httpx.stream(
            "POST",
            f"{base}/responses",
            json={"model": "m", "input": "hi", "stream": True},
            timeout=10,
        ) as raw,
    ):
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    for event in events:
        EVENTS.validate_python(event)  # each event has the openai package's shape
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == [
        "Hello",
        " there",
        ", Ada",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello there, Ada"
    assert events[-1]["response"]["usage"]["output_tokens"] == 4
    assert upstream.requests[0]["stream"] is True


def test_a_failure_after_the_stream_started_is_an_error_event() -> None:
    script = [Delay(0.6, Reply("not json"))]
    seen: list[str] = []
    with session(script, keepalive_s=0.2) as (upstream, openai_client):
        stream = openai_client.responses.create(
            model="m",
            input="Ada",
            text={"format": {"type": "json_object"}},
            stream=True,
            extra_body={"jsonmode": {"max_attempts": 1}},
        )
        with pytest.raises(openai.APIError) as caught:
            seen.extend(event.type for event in stream)
    assert seen == ["response.created", "response.in_progress"]
    assert caught.value.body["type"] == "jsonmode_nonconforming"
    assert upstream.request_count == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"model": "m", "input": "x", "bogus": 1}, "bogus"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
        (
            {
                "model": "m",
                "input": "x",
                "text": {
                    "format": {"type": "json_schema", "name": "p", "schema": {"type": "nope"}}
                },
            },
            "text.format.schema",
        ),
        ({"model": "m", "input": "x", "jsonmode": {"mode": "loose"}}, "jsonmode.mode"),
    ],
)
def test_bad_requests_are_400_naming_the_responses_field(
    idle: tuple[OpenAIServer, str], body: dict[str, Any], param: str
) -> None:
    upstream, base = idle
    answer = raw_post(base, body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"].startswith(param)
    assert upstream.request_count == 0  # answered before the upstream is touched


def test_refusal_and_reasoning_render_as_the_openai_types() -> None:
    ids = Ids()
    body = {"model": "m", "input": "x"}
    parts = {"text": "", "refusal": "I can't help with that.", "reasoning": "Hmm.", "usage": None}
    final = response_object(body, ids, parts=parts, jsonmode={"tier": "native"})
    response = Response.model_validate(final)
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output[1].content[0].type == "refusal"  # type: ignore[union-attr]
    events = response_events(body, ids, parts, model="m", jsonmode=None, first=2)
    for event in events:
        EVENTS.validate_python(event)
    kinds = [event["type"] for event in events]
    assert "response.refusal.delta" in kinds
    assert "response.refusal.done" in kinds
    assert [event["sequence_number"] for event in events] == list(range(2, 2 + len(events)))
