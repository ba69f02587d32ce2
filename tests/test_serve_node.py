"""``jsonmode serve`` called from Node with the official ``openai`` npm package (issue 42,
item 7).

One scripted upstream (tests/support/openai_server.py, real models' slips) and one real
``jsonmode serve`` process, with an API key, are shared by the module; each test gives
the upstream its script and runs tests/node/openai_client.mjs under ``node`` with the
package installed by the session fixture ``node_openai`` (tests/support/node_client.py;
a missing node/npm or a failed install fails these tests, never skips them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from support.node_client import NodeClient, install
from support.openai_server import Delay, OpenAIServer, Reply
from support.serve_process import ServeProcess

pytestmark = pytest.mark.integration

KEY = "sk-jsonmode-node-test"
UPSTREAM_KEY = "sk-upstream-node-secret"
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ADA = {"name": "Ada", "age": 36}
ADA_JSON = json.dumps(ADA)
FENCED = 'Sure! ```json\n{"name": "Ada", "age": 36,}\n```'  # repaired, no re-ask
WORDS = '{"name": "Ada", "age": "thirty-six"}'  # no repair can make this an integer: re-ask
MESSAGES = [{"role": "user", "content": "Extract the person: Ada, 36"}]
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "Person", "schema": PERSON, "strict": True},
}


@pytest.fixture(scope="session")
def node_openai(tmp_path_factory: pytest.TempPathFactory) -> NodeClient:
    """``node`` with the ``openai`` npm package, installed once per session."""
    return install(tmp_path_factory.mktemp("node-openai"))


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def served(upstream: OpenAIServer) -> Iterator[ServeProcess]:
    with ServeProcess(
        "--upstream",
        "openai/scripted",
        "--api-base",
        upstream.base_url,
        "--api-key-env",
        "JSONMODE_NODE_TEST_KEY",
        "--upstream-key-env",
        "JSONMODE_NODE_UPSTREAM_KEY",
        "--max-attempts",
        "3",
        "--keepalive",
        "0.2",
        env={"JSONMODE_NODE_TEST_KEY": KEY, "JSONMODE_NODE_UPSTREAM_KEY": UPSTREAM_KEY},
    ) as process:
        yield process


def node(
    client: NodeClient,
    served: ServeProcess,
    upstream: OpenAIServer,
    script: list[Any],
    *requests: dict[str, Any],
) -> list[Any]:
    """Give the upstream ``script``, run the requests through the npm client, and check
    that the upstream was asked exactly as often as scripted."""
    upstream.rescript(script)
    results: list[Any] = client.run(
        "openai_client.mjs", list(requests), base_url=served.base_url, api_key=KEY
    )
    assert upstream.request_count == len(script), served.log[-3000:]
    assert upstream.remaining == 0
    return results


def chat(**params: Any) -> dict[str, Any]:
    body = {"model": "scripted", "messages": MESSAGES, "response_format": RESPONSE_FORMAT}
    return {"api": "chat", "params": {**body, **params}}


def conforming(text: str) -> Any:
    value = json.loads(text)
    jsonschema.validate(value, PERSON)
    return value


def test_a_slip_is_repaired_and_reported(
    node_openai: NodeClient, served: ServeProcess, upstream: OpenAIServer
) -> None:
    (result,) = node(node_openai, served, upstream, [Reply(FENCED)], chat())
    assert result["ok"], result
    reply = result["reply"]
    message = reply["choices"][0]["message"]
    assert conforming(message["content"]) == ADA
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["jsonmode"]["attempts"] == 1
    assert reply["jsonmode"]["repairs"]  # the fence and the trailing comma
    assert isinstance(reply["jsonmode"]["tier"], str)
    assert reply["usage"]["total_tokens"] == 15
    recorded = upstream.recorded[-1]
    assert KEY not in json.dumps(recorded.headers)  # the client's key stays here
    assert recorded.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}"


def test_wrong_types_are_re_asked_and_usage_sums_the_attempts(
    node_openai: NodeClient, served: ServeProcess, upstream: OpenAIServer
) -> None:
    script = [Reply(WORDS, prompt_tokens=11, completion_tokens=7), Reply(ADA_JSON)]
    (result,) = node(node_openai, served, upstream, script, chat(temperature=0.2))
    assert result["ok"], result
    reply = result["reply"]
    assert conforming(reply["choices"][0]["message"]["content"]) == ADA
    assert reply["jsonmode"]["attempts"] == 2
    assert reply["usage"] == {"prompt_tokens": 21, "completion_tokens": 12, "total_tokens": 33}
    assert upstream.requests[-2]["temperature"] == 0.2


def test_a_stream_sends_only_the_conforming_attempt_and_the_summed_usage(
    node_openai: NodeClient, served: ServeProcess, upstream: OpenAIServer
) -> None:
    # the re-ask is slow: the server sends SSE comments meanwhile, which the client skips
    pieces = ('{"name": ', '"Ada", ', '"age": 36}')
    script = [Reply(WORDS), Delay(1.0, Reply(ADA_JSON, pieces=pieces))]
    params = chat(stream=True, stream_options={"include_usage": True})
    (result,) = node(node_openai, served, upstream, script, params)
    assert result["ok"], result
    assert conforming(result["content"]) == ADA  # nothing of the first attempt was sent
    assert "thirty" not in json.dumps(result["chunks"])
    assert result["usage"]["total_tokens"] == 30
    finishes = [
        choice["finish_reason"]
        for chunk in result["chunks"]
        for choice in chunk["choices"]
        if choice.get("finish_reason")
    ]
    assert finishes == ["stop"]
    reports = [chunk["jsonmode"] for chunk in result["chunks"] if "jsonmode" in chunk]
    assert reports
    assert reports[-1]["attempts"] == 2


def test_a_never_conforming_upstream_is_an_unprocessable_entity_error(
    node_openai: NodeClient, served: ServeProcess, upstream: OpenAIServer
) -> None:
    script = [Reply("I cannot answer that in JSON."), Reply(WORDS), Reply('{"name": "Ada"}')]
    (result,) = node(node_openai, served, upstream, script, chat())
    assert not result["ok"]
    error = result["error"]
    assert error["name"] == "UnprocessableEntityError"
    assert error["instanceOf"]["UnprocessableEntityError"]
    assert error["status"] == 422
    assert error["type"] == "jsonmode_nonconforming"
    body = error["body"]
    outcomes = [attempt["outcome"] for attempt in body["attempts"]]
    assert outcomes == ["invalid_json", "schema_violation", "schema_violation"]
    assert body["issues"]  # the last attempt's: "age" is missing
    assert "age" in json.dumps(body["issues"])


def test_a_wrong_key_is_an_authentication_error_and_never_reaches_the_upstream(
    node_openai: NodeClient, served: ServeProcess, upstream: OpenAIServer
) -> None:
    wrong = {**chat(), "api_key": "sk-wrong"}
    stream = {**chat(stream=True), "api_key": KEY[:-1]}
    results = node(node_openai, served, upstream, [], wrong, stream)
    for result in results:
        assert not result["ok"]
        assert result["error"]["name"] == "AuthenticationError"
        assert result["error"]["instanceOf"]["AuthenticationError"]
        assert result["error"]["status"] == 401
