"""Chat completions with ``"strict": true`` tools through the official ``openai`` client:
the calls' arguments conform (repaired, or re-asked with the errors), non-strict tools
pass unchecked, a reply that never conforms is a 422."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest

from tests.support.openai_server import HttpError, Reply, ToolReply
from tests.support.serve_app import Stack

pytestmark = pytest.mark.integration

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
LOOSE = {"type": "function", "function": {"name": "note", "parameters": {"type": "object"}}}
TOOLS: list[Any] = [WEATHER, LOOSE]
ASK = [{"role": "user", "content": "Weather in Paris for 3 days?"}]


class Weather(pydantic.BaseModel):
    city: str
    days: int


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    s = Stack(keepalive_s=0.3, timeout_s=5.0, transport_retries=1, max_retry_wait_s=2.0)
    yield s
    s.close()


def arguments(completion: Any, index: int = 0) -> Any:
    return json.loads(completion.choices[0].message.tool_calls[index].function.arguments)


def test_repair_mode_repairs_a_strict_call_and_leaves_a_loose_one_alone(stack: Stack) -> None:
    slip = ToolReply("get_weather", "{'city': 'Paris', 'days': '3',}", others=(("note", "{oops"),))
    upstream = stack.script(slip)
    completion = stack.client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert [call.function.name for call in calls] == ["note", "get_weather"]  # type: ignore[union-attr]
    assert calls[0].function.arguments == "{oops"  # type: ignore[union-attr]  # not strict
    assert arguments(completion, 1) == {"city": "Paris", "days": 3}
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.model == "m"
    record = completion.model_extra["jsonmode"]
    assert record["attempts"] == 1
    assert record["tier"] == "native"
    repair = {
        "path": "tool_calls[1].function.arguments.days",
        "kind": "string_to_integer",
        "before": "3",
        "after": 3,
    }
    assert repair in record["repairs"]
    assert upstream.request_count == 1
    assert upstream.requests[0]["tools"] == TOOLS  # the tools went upstream as given


def test_a_wrong_call_is_re_asked_with_its_errors_and_a_new_message_list(stack: Stack) -> None:
    upstream = stack.script(
        ToolReply("get_weather", '{"city": "Paris"}'),
        ToolReply("get_weather", '{"city": "Paris", "days": 3}'),
    )
    messages = copy.deepcopy(ASK)
    completion = stack.client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert arguments(completion) == {"city": "Paris", "days": 3}
    assert completion.model_extra["jsonmode"]["attempts"] == 2
    assert completion.model_extra["jsonmode"]["outcomes"] == ["schema_violation", "valid"]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.total_tokens) == (20, 30)
    first, second = upstream.requests
    assert first["messages"] == ASK
    assert messages == ASK  # the client's list is untouched
    reask = second["messages"]
    assert reask[0] == ASK[0]
    assert reask[1]["role"] == "assistant"
    assert reask[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert reask[2]["role"] == "tool"
    assert reask[2]["tool_call_id"] == reask[1]["tool_calls"][0]["id"]
    assert "'days' is a required property" in reask[2]["content"]


def test_strict_mode_re_asks_what_repair_mode_would_fix(stack: Stack) -> None:
    upstream = stack.script(
        ToolReply("get_weather", '{"city": "Paris", "days": "3"}'),
        ToolReply("get_weather", '{"city": "Paris", "days": 3}'),
    )
    completion = stack.client.chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, extra_body={"jsonmode": {"mode": "strict"}}
    )
    assert arguments(completion) == {"city": "Paris", "days": 3}
    assert completion.model_extra["jsonmode"]["repairs"] == []
    assert completion.model_extra["jsonmode"]["mode"] == "strict"
    assert upstream.request_count == 2


def test_a_call_that_never_conforms_is_a_422_listing_every_attempt(stack: Stack) -> None:
    upstream = stack.script(*[ToolReply("get_weather", '{"city": 1}')] * 2)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        stack.client.chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, extra_body={"jsonmode": {"max_attempts": 2}}
        )
    body = caught.value.response.json()
    assert body["error"]["type"] == "jsonmode_nonconforming"
    assert [attempt["outcome"] for attempt in body["error"]["attempts"]] == ["schema_violation"] * 2
    paths = {issue["path"] for issue in body["error"]["issues"]}
    assert paths == {"tool_calls[0].function.arguments", "tool_calls[0].function.arguments.city"}
    assert body["jsonmode"]["attempts"] == 2
    assert body["usage"]["total_tokens"] == 30
    assert upstream.request_count == 2


def test_a_forced_function_goes_through_the_tiers_with_its_parameters_as_schema(
    stack: Stack,
) -> None:
    # the upstream answers in text (no tool calling): prompted, repaired, re-asked
    upstream = stack.script(Reply("It is sunny."), Reply("Sure: {'city': 'Paris', 'days': '1'}"))
    choice: Any = {"type": "function", "function": {"name": "get_weather"}}
    completion = stack.client.chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0.5
    )
    assert arguments(completion) == {"city": "Paris", "days": 1}
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert calls[0].id.startswith("call_")
    assert completion.choices[0].finish_reason == "tool_calls"
    record = completion.model_extra["jsonmode"]
    assert record["tier"] == "prompted"
    assert record["attempts"] == 2
    assert "tool_calls[0].function.arguments.days" in [r["path"] for r in record["repairs"]]
    first = upstream.requests[0]
    assert "tools" not in first
    assert "tool_choice" not in first
    assert first["temperature"] == 0.5
    assert "get_weather" in first["messages"][0]["content"]
    assert '"days"' in first["messages"][0]["content"]  # the parameters are the schema
    assert completion.usage is not None
    assert completion.usage.total_tokens == 30


def test_required_with_one_strict_tool_is_forced_and_never_conforming_is_a_422(
    stack: Stack,
) -> None:
    upstream = stack.script(Reply('{"city": 1}'), Reply('{"city": 2}'))
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        stack.client.chat.completions.create(
            model="m",
            messages=ASK,
            tools=[WEATHER],  # type: ignore[list-item]
            tool_choice="required",
            extra_body={"jsonmode": {"max_attempts": 2}},
        )
    body = caught.value.response.json()
    assert body["error"]["type"] == "jsonmode_nonconforming"
    assert body["jsonmode"]["attempts"] == 2
    assert upstream.request_count == 2
    assert "tools" not in upstream.requests[0]


def test_upstream_429_is_retried_under_the_transport_policy(stack: Stack) -> None:
    upstream = stack.script(
        HttpError(429, headers={"Retry-After": "0"}),
        ToolReply("get_weather", '{"city": "Paris", "days": 1}'),
    )
    completion = stack.client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    assert arguments(completion) == {"city": "Paris", "days": 1}
    assert completion.model_extra["jsonmode"]["attempts"] == 1
    assert upstream.request_count == 2


def test_parse_with_a_pydantic_function_tool(stack: Stack) -> None:
    tool = openai.pydantic_function_tool(Weather, name="get_weather")
    upstream = stack.script(
        ToolReply("get_weather", '```json\n{"city": "Paris", "days": 2.0}\n```')
    )
    completion = stack.client.chat.completions.parse(model="m", messages=ASK, tools=[tool])
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].function.parsed_arguments == Weather(city="Paris", days=2)
    assert upstream.request_count == 1


def test_streamed_tool_calls_arrive_conforming_with_summed_usage(stack: Stack) -> None:
    upstream = stack.script(
        ToolReply("get_weather", '{"city": "Paris"}'),
        ToolReply("get_weather", "{'city': 'Paris', 'days': 4}"),
    )
    stream = stack.client.chat.completions.create(
        model="m",
        messages=ASK,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: list[str] = []
    usage = None
    finish = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or ():
                pieces.append(call.function.arguments or "" if call.function else "")
    assert json.loads("".join(pieces)) == {"city": "Paris", "days": 4}  # the conforming attempt
    assert finish == "tool_calls"
    assert usage is not None
    assert usage.total_tokens == 30
    assert upstream.requests[0]["stream"] is False  # each attempt is fetched whole


def test_async_client(stack: Stack) -> None:
    async def main() -> Any:
        async with openai.AsyncOpenAI(
            base_url=stack.base, api_key="none", max_retries=0
        ) as aclient:
            return await aclient.chat.completions.create(model="m", messages=ASK, tools=TOOLS)

    stack.script(
        ToolReply("get_weather", '{"city": "Paris", "days": true}'),
        ToolReply("get_weather", '{"city": "Rome", "days": 5}'),
    )
    assert arguments(asyncio.run(main())) == {"city": "Rome", "days": 5}


def test_an_unusable_strict_schema_is_a_400_before_the_upstream(stack: Stack) -> None:
    upstream = stack.script()
    bad = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {"type": 5}}}
    answer = httpx.post(
        f"{stack.base}/chat/completions",
        json={"model": "m", "messages": ASK, "tools": [bad]},
        timeout=10,
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"].startswith("tools[0].function.parameters")
    assert upstream.request_count == 0
