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

from tests.support.openai_server import OpenAIServer, Reply, ToolReply
from tests.support.serve_inprocess import served

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


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)


def arguments(completion: Any, index: int = 0) -> Any:
    return json.loads(completion.choices[0].message.tool_calls[index].function.arguments)


@pytest.fixture(scope="module")
def idle() -> Iterator[tuple[OpenAIServer, str]]:
    """One server for the requests that must never reach its upstream."""
    with OpenAIServer([]) as upstream, served(upstream) as base:
        yield upstream, base


def test_repair_mode_repairs_a_strict_call_and_leaves_a_loose_one_alone() -> None:
    slip = ToolReply("get_weather", "{'city': 'Paris', 'days': '3',}", others=(("note", "{oops"),))
    with OpenAIServer([slip]) as upstream, served(upstream) as base, client(base) as openai_client:
        completion = openai_client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert [call.function.name for call in calls] == ["note", "get_weather"]
    assert calls[0].function.arguments == "{oops"  # not strict: passed as the model wrote it
    assert arguments(completion, 1) == {"city": "Paris", "days": 3}
    assert completion.choices[0].finish_reason == "tool_calls"
    record = completion.model_extra["jsonmode"]
    assert record["attempts"] == 1
    assert {
        "path": "tool_calls[1].function.arguments.days",
        "kind": "string_to_integer",
        "before": "3",
        "after": 3,
    } in record["repairs"]
    assert upstream.request_count == 1
    assert upstream.requests[0]["tools"] == TOOLS  # the tools went upstream as given


def test_a_wrong_call_is_re_asked_with_its_errors_and_a_new_message_list() -> None:
    script = [
        ToolReply("get_weather", '{"city": "Paris"}'),
        ToolReply("get_weather", '{"city": "Paris", "days": 3}'),
    ]
    messages = copy.deepcopy(ASK)
    with OpenAIServer(script) as upstream, served(upstream) as base, client(base) as openai_client:
        completion = openai_client.chat.completions.create(
            model="m", messages=messages, tools=TOOLS
        )
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


def test_strict_mode_re_asks_what_repair_mode_would_fix() -> None:
    script = [
        ToolReply("get_weather", '{"city": "Paris", "days": "3"}'),
        ToolReply("get_weather", '{"city": "Paris", "days": 3}'),
    ]
    with OpenAIServer(script) as upstream, served(upstream) as base, client(base) as openai_client:
        completion = openai_client.chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, extra_body={"jsonmode": {"mode": "strict"}}
        )
    assert arguments(completion) == {"city": "Paris", "days": 3}
    assert completion.model_extra["jsonmode"]["repairs"] == []
    assert completion.model_extra["jsonmode"]["mode"] == "strict"
    assert upstream.request_count == 2


def test_a_call_that_never_conforms_is_a_422_listing_every_attempt() -> None:
    script = [ToolReply("get_weather", '{"city": 1}')] * 2
    with (
        OpenAIServer(script) as upstream,
        served(upstream, max_attempts=2) as base,
        client(base) as openai_client,
        pytest.raises(openai.UnprocessableEntityError) as caught,
    ):
        openai_client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    body = caught.value.response.json()
    assert body["error"]["type"] == "jsonmode_nonconforming"
    assert [attempt["outcome"] for attempt in body["error"]["attempts"]] == ["schema_violation"] * 2
    paths = {issue["path"] for issue in body["error"]["issues"]}
    assert paths == {"tool_calls[0].function.arguments", "tool_calls[0].function.arguments.city"}
    assert body["jsonmode"]["attempts"] == 2
    assert body["usage"]["total_tokens"] == 30
    assert upstream.request_count == 2


def test_a_forced_function_answered_with_text_is_re_asked() -> None:
    script = [Reply("It is sunny."), ToolReply("get_weather", '{"city": "Paris", "days": 1}')]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    with OpenAIServer(script) as upstream, served(upstream) as base, client(base) as openai_client:
        completion = openai_client.chat.completions.create(
            model="m",
            messages=ASK,
            tools=TOOLS,
            tool_choice=choice,  # type: ignore[arg-type]
        )
    assert arguments(completion) == {"city": "Paris", "days": 1}
    assert upstream.requests[0]["tool_choice"] == choice
    assert "get_weather" in upstream.requests[1]["messages"][-1]["content"]


def test_parse_with_a_pydantic_function_tool() -> None:
    tool = openai.pydantic_function_tool(Weather, name="get_weather")
    script = [ToolReply("get_weather", '```json\n{"city": "Paris", "days": 2.0}\n```')]
    with OpenAIServer(script) as upstream, served(upstream) as base, client(base) as openai_client:
        completion = openai_client.chat.completions.parse(model="m", messages=ASK, tools=[tool])
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].function.parsed_arguments == Weather(city="Paris", days=2)
    assert upstream.request_count == 1


def test_streamed_tool_calls_arrive_conforming_with_summed_usage() -> None:
    script = [
        ToolReply("get_weather", '{"city": "Paris"}'),
        ToolReply("get_weather", "{'city': 'Paris', 'days': 4}"),
    ]
    with OpenAIServer(script) as upstream, served(upstream) as base, client(base) as openai_client:
        stream = openai_client.chat.completions.create(
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
    assert json.loads("".join(pieces)) == {
        "city": "Paris",
        "days": 4,
    }  # only the conforming attempt
    assert finish == "tool_calls"
    assert usage is not None
    assert usage.total_tokens == 30
    assert upstream.requests[0]["stream"] is False  # each attempt is fetched whole


def test_async_client() -> None:
    async def main(base: str) -> Any:
        async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0) as aclient:
            return await aclient.chat.completions.create(model="m", messages=ASK, tools=TOOLS)

    script = [
        ToolReply("get_weather", '{"city": "Paris", "days": true}'),
        ToolReply("get_weather", '{"city": "Rome", "days": 5}'),
    ]
    with OpenAIServer(script) as upstream, served(upstream) as base:
        completion = asyncio.run(main(base))
    assert arguments(completion) == {"city": "Rome", "days": 5}


def test_an_unusable_strict_schema_is_a_400_before_the_upstream(
    idle: tuple[OpenAIServer, str],
) -> None:
    upstream, base = idle
    bad = {
        "type": "function",
        "function": {"name": "f", "strict": True, "parameters": {"type": "nope"}},
    }
    answer = httpx.post(
        f"{base}/chat/completions", json={"model": "m", "messages": ASK, "tools": [bad]}, timeout=10
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"].startswith("tools[0].function.parameters")
    assert upstream.request_count == 0
