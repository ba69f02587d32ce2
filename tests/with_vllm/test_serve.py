"""``jsonmode serve`` in front of the real vLLM server (issue 42, item 7): the official
``openai`` Python client, pointed at ``jsonmode serve --upstream hosted_vllm/tiny
--vllm-processor``, gets conforming JSON from the random-weight model, plain and
streamed, and the reply says which tier ran (``constrained``: jsonmode's processor in
vLLM decoded it).

The vLLM server is the session's (conftest.py ``server``: jsonmode's processor loaded,
shared with test_server.py: one start for both); ``jsonmode serve`` is one child process
for this module. The random model's unconstrained text is noise, so a conforming reply
on the first attempt shows the schema travelled to vLLM and constrained it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from support.serve_process import ServeProcess
from test_offline import SCHEMAS, conforms

PERSON = SCHEMAS[0]
TREE = SCHEMAS[3]  # recursive ($ref)


@pytest.fixture(scope="module")
def served(server: Any) -> Iterator[ServeProcess]:
    upstream = ["--upstream", "hosted_vllm/tiny", "--api-base", server.base_url]
    # one attempt: the first one must conform, or the request is a 422
    with ServeProcess(*upstream, "--vllm-processor", "--max-attempts", "1") as process:
        yield process


def client(served: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=120)


def response_format(schema: dict[str, Any]) -> Any:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}


def test_the_python_client_gets_conforming_json_constrained_on_the_first_attempt(
    served: ServeProcess,
) -> None:
    for seed, schema in enumerate((PERSON, TREE)):
        reply = client(served).chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Reply with JSON."}],
            response_format=response_format(schema),
            max_tokens=600,
            temperature=1.0,
            seed=seed,
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        conforms(choice.message.content or "", schema)
        report = reply.to_dict()["jsonmode"]
        assert report["tier"] == "constrained", report  # jsonmode's processor in vLLM
        assert report["attempts"] == 1, report
        assert report["repairs"] == []
        assert reply.usage is not None
        assert reply.usage.completion_tokens > 0


def test_a_stream_through_serve_is_conforming(served: ServeProcess) -> None:
    stream = client(served).chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Reply with JSON."}],
        response_format=response_format(PERSON),
        max_tokens=600,
        temperature=1.0,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    conforms(text, PERSON)
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0
    reports = [c.to_dict()["jsonmode"] for c in chunks if "jsonmode" in c.to_dict()]
    assert reports
    assert reports[-1]["tier"] == "constrained"
    assert json.loads(text)  # a document, not noise
