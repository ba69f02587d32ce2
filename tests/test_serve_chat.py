"""``jsonmode serve``'s chat completions endpoint, driven by the official ``openai`` client
(sync, async, streamed, ``parse``) and raw HTTP, in front of the scripted upstream.

Each test scripts an upstream that slips the way real models do and checks what the
client gets: conforming content, the ``jsonmode`` record, usage summed over attempts,
typed errors in OpenAI's shape, and that bad requests never reach the upstream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pydantic
import pytest

from jsonmode.serve.config import ServeConfig
from tests.support.openai_server import Delay, Drop, HttpError, OpenAIServer, Reply
from tests.support.serve_app import ServedApp, Stack

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": SCHEMA, "strict": True},
}
ASK = [{"role": "user", "content": "Who wrote the first program?"}]


class Person(pydantic.BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    s = Stack(
        keepalive_s=0.3,
        transport_retries=1,
        max_retry_wait_s=2.0,
        timeout_s=1.5,
        max_body_bytes=64 * 1024,
    )
    yield s
    s.close()


def test_a_slipping_reply_is_repaired_and_says_how(stack: Stack) -> None:
    stack.script(Reply('Sure! ```json\n{"name": "Ada", "age": "36",}\n```'))
    reply = stack.client.chat.completions.create(model="any", messages=ASK, response_format=FORMAT)
    value = json.loads(reply.choices[0].message.content or "")
    assert value == {"name": "Ada", "age": 36}
    record = reply.model_extra["jsonmode"]
    assert record["tier"] == "prompted"
    assert record["attempts"] == 1
    assert {r["kind"] for r in record["repairs"]} >= {"extract", "string_to_integer"}
    assert reply.model == "any"
    assert reply.choices[0].finish_reason == "stop"


def test_a_reask_carries_the_errors_and_usage_sums_every_attempt(stack: Stack) -> None:
    stack.script(Reply('{"name": "Ada"}'), Reply('{"name": "Ada", "age": 36}', prompt_tokens=30))
    reply = stack.client.chat.completions.create(
        model="m", messages=ASK, response_format=FORMAT, extra_body={"jsonmode": {"mode": "strict"}}
    )
    assert json.loads(reply.choices[0].message.content or "") == {"name": "Ada", "age": 36}
    assert reply.model_extra["jsonmode"]["attempts"] == 2
    assert reply.model_extra["jsonmode"]["outcomes"] == ["schema_violation", "valid"]
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (40, 10)
    reask = json.dumps(stack.upstream.requests[1]["messages"])
    assert "age" in reask
    assert "required" in reask
    assert stack.upstream.requests[0]["messages"][-1] == ASK[0]


def test_the_parse_helper_gets_a_pydantic_instance(stack: Stack) -> None:
    stack.script(Reply('{"name": "Ada", "age": 36} I hope this helps'))
    completion = stack.client.chat.completions.parse(
        model="m", messages=ASK, response_format=Person
    )
    assert completion.choices[0].message.parsed == Person(name="Ada", age=36)


def test_the_async_client_many_at_once_each_gets_its_own_reply(stack: Stack) -> None:
    stack.script(*[Reply(json.dumps({"name": f"n{i}", "age": i})) for i in range(8)])

    async def main() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=stack.served.base_url, api_key="k", max_retries=0)
        async with client:
            return await asyncio.gather(
                *[
                    client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
                    for _ in range(8)
                ]
            )

    replies = asyncio.run(main())
    names = sorted(json.loads(r.choices[0].message.content)["name"] for r in replies)
    assert names == sorted(f"n{i}" for i in range(8))


def test_json_object_gets_an_object(stack: Stack) -> None:
    stack.script(Reply("Here: [1, 2]"), Reply('{"ok": true}'))
    reply = stack.client.chat.completions.create(
        model="m", messages=ASK, response_format={"type": "json_object"}
    )
    assert json.loads(reply.choices[0].message.content or "") == {"ok": True}


def test_a_reply_that_never_conforms_is_a_422_listing_every_attempt(stack: Stack) -> None:
    stack.script(Reply("no"), Reply('{"name": 5}'))
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        stack.client.chat.completions.create(
            model="m",
            messages=ASK,
            response_format=FORMAT,
            extra_body={"jsonmode": {"max_attempts": 2}},
        )
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "jsonmode_nonconforming"
    assert [a["outcome"] for a in body["attempts"]] == ["invalid_json", "schema_violation"]
    assert {i["keyword"] for i in body["issues"]} == {"required", "type"}
    full = caught.value.response.json()
    assert full["jsonmode"]["attempts"] == 2
    assert full["usage"]["prompt_tokens"] == 20


def test_max_attempts_asked_for_is_capped_by_the_server(stack: Stack) -> None:
    stack.script(*[Reply("no")] * 5)
    with pytest.raises(openai.UnprocessableEntityError):
        stack.client.chat.completions.create(
            model="m",
            messages=ASK,
            response_format=FORMAT,
            extra_body={"jsonmode": {"max_attempts": 500}},
        )
    assert stack.upstream.request_count == stack.config.max_attempts_cap == 5


def _events(response: httpx.Response) -> tuple[list[Any], list[str]]:
    """(data payloads, comment lines) of an SSE body."""
    data, comments = [], []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            data.append(payload if payload == "[DONE]" else json.loads(payload))
        elif line.startswith(":"):
            comments.append(line)
    return data, comments


def _post(stack: Stack, body: dict[str, Any], **kwargs: Any) -> httpx.Response:
    return httpx.post(stack.served.base_url + "/chat/completions", json=body, timeout=30, **kwargs)


def test_a_stream_sends_only_the_conforming_attempt_with_keepalives_meanwhile(
    stack: Stack,
) -> None:
    # the first attempt is wrong and slow (longer than the keep-alive interval)
    stack.script(Delay(0.8, Reply('{"name": "WRONG"}')), Reply('{"name": "Ada", "age": 36}'))
    body = {
        "model": "m",
        "messages": ASK,
        "response_format": FORMAT,
        "stream": True,
        "stream_options": {"include_usage": True},
        "jsonmode": {"mode": "strict"},
    }
    response = _post(stack, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    data, comments = _events(response)
    assert comments
    assert all(c == ": keep-alive" for c in comments)
    assert data[-1] == "[DONE]"
    content = "".join(
        d["choices"][0]["delta"].get("content") or "" for d in data[:-1] if d["choices"]
    )
    assert "WRONG" not in response.text  # never sent, not even as a partial
    assert json.loads(content) == {"name": "Ada", "age": 36}
    usage = data[-2]
    assert usage["choices"] == []
    assert usage["usage"]["prompt_tokens"] == 20
    assert usage["jsonmode"]["attempts"] == 2


def test_the_official_client_streams_and_reads_the_usage(stack: Stack) -> None:
    stack.script(Reply('{"name": "Ada", "age": "36"}'))
    stream = stack.client.chat.completions.create(
        model="m",
        messages=ASK,
        response_format=FORMAT,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(content) == {"name": "Ada", "age": 36}
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 15


def test_a_stream_that_fails_quickly_is_a_real_422(stack: Stack) -> None:
    stack.script(Reply("no"))
    body = {"model": "m", "messages": ASK, "response_format": FORMAT, "stream": True}
    body["jsonmode"] = {"max_attempts": 1}
    response = _post(stack, body)
    assert response.status_code == 422
    assert response.json()["error"]["type"] == "jsonmode_nonconforming"


def test_a_stream_that_fails_after_it_started_ends_with_an_error_event(stack: Stack) -> None:
    stack.script(Delay(0.8, Reply("no")))
    stream = stack.client.chat.completions.create(
        model="m",
        messages=ASK,
        response_format=FORMAT,
        stream=True,
        extra_body={"jsonmode": {"max_attempts": 1}},
    )
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert "no conforming JSON" in str(caught.value)


def test_a_refusal_passes_through_without_a_reask(stack: Stack) -> None:
    stack.script(Reply("", refusal="I can't help with that."))
    reply = stack.client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
    assert reply.choices[0].message.refusal == "I can't help with that."
    assert reply.choices[0].message.content is None
    assert stack.upstream.request_count == 1
    assert reply.model_extra["jsonmode"]["outcomes"] == ["refused"]


def test_a_request_without_structure_is_proxied_unchanged(stack: Stack) -> None:
    stack.script(Reply("just prose"), Reply("streamed prose"))
    reply = stack.client.chat.completions.create(
        model="my-name", messages=ASK, temperature=0.25, seed=7
    )
    assert reply.choices[0].message.content == "just prose"
    sent = stack.upstream.requests[0]
    assert sent == {"model": "scripted", "messages": ASK, "temperature": 0.25, "seed": 7}
    stream = stack.client.chat.completions.create(model="m", messages=ASK, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
        "streamed prose"
    )


def test_request_fields_reach_the_upstream_with_every_attempt(stack: Stack) -> None:
    stack.script(Reply("no"), Reply('{"name": "Ada", "age": 1}'))
    stack.client.chat.completions.create(
        model="m", messages=ASK, response_format=FORMAT, temperature=0.0, max_tokens=50, seed=3
    )
    for sent in stack.upstream.requests:
        assert (sent["temperature"], sent["max_tokens"], sent["seed"]) == (0.0, 50, 3)
        assert "jsonmode" not in sent


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": ASK, "stream": "yes"}, "stream"),
        (
            {"model": "m", "messages": ASK, "response_format": {"type": "xml"}},
            "response_format.type",
        ),
        (
            {
                "model": "m",
                "messages": ASK,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x"}},
            },
            "response_format.json_schema.schema",
        ),
        (
            {
                "model": "m",
                "messages": ASK,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "properties": {"a": {"type": "strang"}}},
                    },
                },
            },
            "response_format.json_schema.schema",
        ),
        (
            {
                "model": "m",
                "messages": ASK,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"$ref": "file:///etc/passwd"}},
                },
            },
            "response_format.json_schema.schema",
        ),
        (
            {
                "model": "m",
                "messages": ASK,
                "response_format": FORMAT,
                "jsonmode": {"mdoe": "strict"},
            },
            "jsonmode.mdoe",
        ),
        (
            {
                "model": "m",
                "messages": ASK,
                "response_format": FORMAT,
                "jsonmode": {"max_attempts": 0},
            },
            "jsonmode.max_attempts",
        ),
        ({"model": "m", "messages": ASK, "response_format": FORMAT, "n": 3}, "n"),
    ],
)
def test_a_bad_request_is_a_400_naming_its_path_and_never_reaches_the_upstream(
    stack: Stack, body: dict[str, Any], param: str
) -> None:
    before = stack.upstream.request_count
    response = _post(stack, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None
    assert error["param"].startswith(param), error
    assert stack.upstream.request_count == before


def test_malformed_json_and_oversized_bodies(stack: Stack) -> None:
    before = stack.upstream.request_count
    bad = httpx.post(
        stack.served.base_url + "/chat/completions",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_json"
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 70_000}]}
    assert _post(stack, big).status_code == 413

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it is read
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"y" * 1000
        yield b'"}]}'

    too_big = httpx.post(stack.served.base_url + "/chat/completions", content=chunked())
    assert too_big.status_code == 413
    assert too_big.json()["error"]["type"] == "request_too_large"
    assert stack.upstream.request_count == before


def test_upstream_failures_map_to_the_statuses_clients_know(stack: Stack) -> None:
    # 429 twice (one retry in the transport policy), Retry-After passed on
    stack.script(
        HttpError(429, headers={"Retry-After": "0"}), HttpError(429, headers={"Retry-After": "1"})
    )
    with pytest.raises(openai.RateLimitError) as limited:
        stack.client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
    assert limited.value.response.headers["retry-after"] == "1"
    stack.script(HttpError(500), HttpError(502))
    with pytest.raises(openai.InternalServerError) as failed:
        stack.client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
    assert failed.value.status_code == 502
    stack.script(Drop(), Drop())
    with pytest.raises(openai.InternalServerError) as dropped:
        stack.client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
    assert dropped.value.status_code == 502
    stack.script(HttpError(400, "bad temperature"))
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
    assert "bad temperature" in str(refused.value)
    assert stack.upstream.request_count == 1  # a 400 is never retried


def test_an_upstream_past_its_deadline_is_a_504(stack: Stack) -> None:
    stack.script(Delay(2.5, Reply("{}")), Delay(2.5, Reply("{}")))
    with pytest.raises(openai.APIStatusError) as caught:
        stack.client.chat.completions.create(
            model="m", messages=ASK, response_format=FORMAT, timeout=30
        )
    assert caught.value.status_code == 504
    assert caught.value.body["type"] == "upstream_timeout"  # type: ignore[index]


def test_models_and_healthz(stack: Stack) -> None:
    models = stack.client.models.list()
    assert [m.id for m in models.data] == ["scripted"]
    health = httpx.get(stack.served.root + "/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}


def test_the_server_key_is_required_and_checked_before_the_upstream() -> None:
    with OpenAIServer([Reply('{"name": "Ada", "age": 1}')]) as upstream:
        config = ServeConfig(
            "openai/scripted",
            api_base=upstream.base_url,
            api_key="s3cret",
            upstream_api_key="UPKEY",
        )
        with ServedApp(config) as served:
            for key in ("wrong", "s3cre", "s3cret2"):
                with (
                    openai.OpenAI(base_url=served.base_url, api_key=key, max_retries=0) as client,
                    pytest.raises(openai.AuthenticationError),
                ):
                    client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
            assert httpx.post(served.base_url + "/chat/completions", json={}).status_code == 401
            assert upstream.request_count == 0
            assert httpx.get(served.root + "/healthz").status_code == 200  # for load balancers
            with openai.OpenAI(base_url=served.base_url, api_key="s3cret", max_retries=0) as good:
                reply = good.chat.completions.create(
                    model="m", messages=ASK, response_format=FORMAT
                )
            assert "UPKEY" not in reply.model_dump_json()
            assert upstream.requests
            assert upstream.request_count == 1
            sent = upstream.recorded[-1].headers
            assert sent["authorization"] == "Bearer UPKEY"  # the upstream's key, not the client's


def test_every_reply_conforms_to_the_schema_it_asked_for(stack: Stack) -> None:
    slips = [
        '{"name": "A", "age": -1}',
        "{'name': 'B', 'age': 2}",
        '{"name": "C", "age": 3, "extra": 1}',
        '```\n{"name": "D", "age": "4"}\n```',
    ]
    stack.script(*[Reply(s) for s in slips], *[Reply('{"name": "E", "age": 5}')] * 4)
    for _ in slips:
        reply = stack.client.chat.completions.create(
            model="m", messages=ASK, response_format=FORMAT
        )
        jsonschema.validate(json.loads(reply.choices[0].message.content or ""), SCHEMA)


def test_other_providers_go_through_litellm() -> None:
    """An upstream that is not openai/ or hosted_vllm/ is called through litellm: here
    together_ai/ (OpenAI's wire) at the scripted server's address."""
    script = [Reply('{"name": "Ada", "age": "3"}'), Reply("plain"), Reply("streamed text")]
    with OpenAIServer(script) as upstream:
        config = ServeConfig(
            "together_ai/scripted", api_base=upstream.base_url, upstream_api_key="k"
        )
        with (
            ServedApp(config) as served,
            openai.OpenAI(base_url=served.base_url, api_key="x", max_retries=0) as client,
        ):
            reply = client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
            assert json.loads(reply.choices[0].message.content or "") == {"name": "Ada", "age": 3}
            plain = client.chat.completions.create(model="m", messages=ASK, temperature=0.5)
            assert plain.choices[0].message.content == "plain"
            stream = client.chat.completions.create(model="m", messages=ASK, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert text == "streamed text"
        assert upstream.requests[1] == {"model": "scripted", "messages": ASK, "temperature": 0.5}


def test_the_native_tier_sends_the_schema_under_the_clients_name(stack: Stack) -> None:
    """With an upstream that takes a JSON Schema (``tier="native"``), each attempt
    carries the schema as ``response_format`` under the name the client gave it."""
    stack.script(Reply('{"name": "Ada", "age": "36"}'))
    config = ServeConfig("openai/scripted", api_base=stack.upstream.base_url, tier="native")
    with (
        ServedApp(config) as served,
        openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0) as client,
    ):
        reply = client.chat.completions.create(model="m", messages=ASK, response_format=FORMAT)
    assert json.loads(reply.choices[0].message.content or "") == {"name": "Ada", "age": 36}
    assert reply.model_extra["jsonmode"]["tier"] == "native"
    sent = stack.upstream.requests[0]["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["name"] == "person"
    assert sent["json_schema"]["schema"]["required"] == ["name", "age"]
