"""``POST /v1/responses`` through the official ``openai`` client (sync, async, streams,
``parse`` with a pydantic model), in front of the scripted upstream that slips."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from jsonmode.serve.responses import Ids, response_events, response_object
from tests.support.openai_server import Delay, HttpError, Reply
from tests.support.serve_app import Stack

pytestmark = pytest.mark.integration

GOOD = '{"name": "Ada", "age": 36}'
EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
KEEPALIVE_S = 0.3


class Person(pydantic.BaseModel):
    name: str
    age: int


class Responses(Stack):
    """The stack, with raw access to /v1/responses."""

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{self.base}/responses", json=body, timeout=10)

    def events(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The data of every SSE event of a streamed answer, read raw."""
        with httpx.stream("POST", f"{self.base}/responses", json=body, timeout=10) as answer:
            lines = list(answer.iter_lines())
        return [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


@pytest.fixture(scope="module")
def stack() -> Iterator[Responses]:
    s = Responses(tier="prompted", keepalive_s=KEEPALIVE_S, timeout_s=5.0, transport_retries=0)
    yield s
    s.close()


def test_parse_repairs_a_slip_and_the_reply_is_a_response_object(stack: Responses) -> None:
    upstream = stack.script(Reply("Sure! {'name': 'Ada', 'age': '36'}"))
    parsed = stack.client.responses.parse(model="m", input="Ada, 36", text_format=Person)
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


def test_the_body_validates_against_the_openai_types(stack: Responses) -> None:
    stack.script(Reply(GOOD, prompt_tokens=7, completion_tokens=3))
    person = {"type": "json_schema", "name": "person", "strict": True}
    answer = stack.post(
        {
            "model": "m",
            "input": "Ada",
            "instructions": "Extract the person.",
            "text": {"format": {**person, "schema": Person.model_json_schema()}},
        }
    )
    assert answer.status_code == 200
    body = answer.json()
    response = Response.model_validate(body)  # pydantic validation of every field
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


def test_a_wrong_reply_is_re_asked_and_usage_sums_every_attempt(stack: Responses) -> None:
    upstream = stack.script(Reply('{"name": "Ada"}'), Reply(GOOD))
    parsed = stack.client.responses.parse(model="m", input="Ada", text_format=Person)
    assert parsed.output_parsed == Person(name="Ada", age=36)
    assert parsed.model_extra["jsonmode"]["attempts"] == 2
    assert parsed.usage is not None
    assert parsed.usage.input_tokens == 20
    assert parsed.usage.total_tokens == 30
    reask = upstream.requests[1]["messages"]
    assert "age" in reask[-1]["content"]  # the errors went back to the model
    assert len(upstream.requests[0]["messages"]) == 2  # the contract + the input


def test_a_reply_that_never_conforms_is_a_422_the_client_raises(stack: Responses) -> None:
    upstream = stack.script(*[Reply("no")] * 3)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        stack.client.responses.parse(model="m", input="Ada", text_format=Person)
    assert caught.value.status_code == 422
    body = caught.value.response.json()
    assert body["error"]["type"] == "jsonmode_nonconforming"
    assert len(body["error"]["attempts"]) == 3
    assert body["jsonmode"]["attempts"] == 3
    assert upstream.request_count == 3


def test_input_items_instructions_and_sampling_fields_reach_the_upstream(stack: Responses) -> None:
    upstream = stack.script(Reply('{"ok": true}'))
    parts = [{"type": "input_text", "text": "Is it "}, {"type": "input_text", "text": "ok?"}]
    response = stack.client.responses.create(
        model="m",
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": "Answer in JSON."},
            {"role": "user", "content": parts},  # type: ignore[typeddict-item]
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


def test_a_replayed_conversation_becomes_chat_messages(stack: Responses) -> None:
    upstream = stack.script(Reply('{"ok": true}'))
    earlier = {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Which city?", "annotations": []}],
    }
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    answer = stack.post(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "Weather?"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                earlier,
                call,
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "message", "role": "user", "content": "Paris."},
            ],
            "text": {"format": {"type": "json_object"}},
            "previous_response_id": None,
            "store": False,
            "tools": [],
        }
    )
    assert answer.status_code == 200
    sent = upstream.requests[0]["messages"][1:]  # after the contract
    assert sent == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Which city?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "Paris."},
    ]


def test_a_request_without_a_format_is_proxied_and_converted_back(stack: Responses) -> None:
    upstream = stack.script(Reply("Hello there", prompt_tokens=3, completion_tokens=2))
    response = stack.client.responses.create(model="m", input="hi")
    assert response.output_text == "Hello there"
    assert response.usage is not None
    assert response.usage.total_tokens == 5
    assert "jsonmode" not in (response.model_extra or {})
    assert upstream.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert "response_format" not in upstream.requests[0]


def test_a_refusal_passes_through_as_a_refusal_part(stack: Responses) -> None:
    stack.script(Reply("", refusal="I can't help with that."))
    answer = stack.post({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})
    assert answer.status_code == 200
    response = Response.model_validate(answer.json())
    content = response.output[0].content[0]  # type: ignore[union-attr]
    assert content.type == "refusal"
    assert content.refusal == "I can't help with that."  # type: ignore[union-attr]


def test_async_client(stack: Responses) -> None:
    async def main() -> Person | None:
        async with openai.AsyncOpenAI(
            base_url=stack.base, api_key="none", max_retries=0
        ) as aclient:
            parsed = await aclient.responses.parse(model="m", input="Ada", text_format=Person)
            return parsed.output_parsed

    stack.script(Reply("```json\n" + GOOD + "\n```"))
    assert asyncio.run(main()) == Person(name="Ada", age=36)


def test_stream_sends_only_the_conforming_attempt_as_the_official_events(stack: Responses) -> None:
    stack.script(Reply('{"name": "Bob"}'), Reply(GOOD))
    with stack.client.responses.stream(model="m", input="Ada", text_format=Person) as stream:
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


def test_a_stream_without_format_passes_the_upstream_deltas_on(stack: Responses) -> None:
    pieces = ("Hello", " there", ", Ada")
    upstream = stack.script(Reply("".join(pieces), pieces=pieces, completion_tokens=4))
    events = stack.events({"model": "m", "input": "hi", "stream": True})
    for event in events:
        EVENTS.validate_python(event)  # each event has the openai package's shape
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == list(pieces)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello there, Ada"
    assert events[-1]["response"]["usage"]["output_tokens"] == 4
    assert upstream.requests[0]["stream"] is True


def test_a_failure_after_the_stream_started_is_an_error_event(stack: Responses) -> None:
    upstream = stack.script(Delay(KEEPALIVE_S * 3, Reply("not json")))
    stream = stack.client.responses.create(
        model="m",
        input="Ada",
        text={"format": {"type": "json_object"}},
        stream=True,
        extra_body={"jsonmode": {"max_attempts": 1}},
    )
    seen: list[str] = []
    with pytest.raises(openai.APIError) as caught:
        seen.extend(event.type for event in stream)
    assert seen == ["response.created", "response.in_progress"]
    assert caught.value.body["type"] == "jsonmode_nonconforming"
    assert upstream.request_count == 1


def test_upstream_failures_map_as_on_chat(stack: Responses) -> None:
    stack.script(HttpError(429, "slow down", "rate_limit_error", headers={"Retry-After": "7"}))
    with pytest.raises(openai.RateLimitError) as limited:
        stack.client.responses.parse(model="m", input="Ada", text_format=Person)
    assert limited.value.response.headers["retry-after"] == "7"
    stack.script(HttpError(503))
    with pytest.raises(openai.InternalServerError) as unavailable:
        stack.client.responses.create(
            model="m", input="Ada", text={"format": {"type": "json_object"}}
        )
    assert unavailable.value.status_code == 503
    # proxied: the upstream's own refusal of the request comes back as it was
    stack.script(HttpError(400, "bad temperature"))
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="m", input="hi", temperature=7)
    assert refused.value.status_code == 400
    assert "bad temperature" in str(refused.value)


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
                "text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": 5}}},
            },
            "text.format.schema",
        ),
        ({"model": "m", "input": "x", "jsonmode": {"mode": "loose"}}, "jsonmode.mode"),
    ],
)
def test_bad_requests_are_400_naming_the_responses_field(
    stack: Stack, body: dict[str, Any], param: str
) -> None:
    upstream = stack.script()
    answer = stack.post(body)
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
