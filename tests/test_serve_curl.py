"""``jsonmode serve`` called with the real ``curl`` binary (issue 42, item 7): what a
shell script or a language without an OpenAI SDK sends.

One scripted upstream and one real ``jsonmode serve`` process (no API key) are shared by
the module. curl is promised (``.ci/run`` installs it where missing): without it these
tests fail, never skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from support.openai_server import Delay, OpenAIServer, Reply
from support.serve_process import ServeProcess

pytestmark = pytest.mark.integration

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ADA = {"name": "Ada", "age": 36}
ADA_JSON = json.dumps(ADA)
MESSAGES = [{"role": "user", "content": "Extract the person: Ada, 36"}]
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "Person", "schema": PERSON, "strict": True},
}
LIMIT = 64 * 1024  # the server's --max-body-bytes here
KEEPALIVE = 0.2  # seconds between SSE comments while a streamed request retries
STATUS = "\n%{http_code}"  # curl -w: the status after the body, on a line of its own


@pytest.fixture(scope="module")
def curl_program() -> str:
    found = shutil.which("curl")
    if found is None:
        pytest.fail("curl is required: apt-get install -y --no-install-recommends curl")
    return found


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def served(upstream: OpenAIServer) -> Iterator[ServeProcess]:
    arguments = ("--upstream", "openai/scripted", "--api-base", upstream.base_url)
    limits = ("--max-body-bytes", str(LIMIT), "--keepalive", str(KEEPALIVE))
    with ServeProcess(*arguments, *limits) as process:
        yield process


def curl(program: str, *arguments: str, data: bytes | None = None) -> tuple[int, str]:
    """Run curl (``-sS``, the status written last); the body and the HTTP status."""
    done = subprocess.run(
        [program, "-sS", "--max-time", "30", "-w", STATUS, *arguments],
        input=data,
        capture_output=True,
        timeout=40,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    body, _, status = done.stdout.decode().rpartition("\n")
    return int(status), body


def post(program: str, url: str, body: bytes, *extra: str) -> tuple[int, str]:
    headers = ("-H", "Content-Type: application/json")
    return curl(program, "-X", "POST", *headers, *extra, "--data-binary", "@-", url, data=body)


def request(**fields: Any) -> bytes:
    body = {"model": "scripted", "messages": MESSAGES, "response_format": RESPONSE_FORMAT}
    return json.dumps({**body, **fields}).encode()


def has_content(line: str) -> bool:
    """Whether an SSE line is a chunk with some content."""
    if not line.startswith("data: {"):
        return False
    chunk = json.loads(line.removeprefix("data: "))
    return any(choice["delta"].get("content") for choice in chunk["choices"])


def test_a_json_request_gets_conforming_content(
    curl_program: str, served: ServeProcess, upstream: OpenAIServer
) -> None:
    upstream.rescript([Reply('{"name": "Ada", "age": "36"}')])  # a string where an integer goes
    status, text = post(curl_program, f"{served.base_url}/chat/completions", request())
    assert status == 200, text
    reply = json.loads(text)
    content = reply["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(content), PERSON)
    assert json.loads(content) == ADA
    assert reply["object"] == "chat.completion"
    assert reply["jsonmode"]["attempts"] == 1
    assert reply["jsonmode"]["repairs"]
    assert upstream.remaining == 0


def test_a_streamed_request_is_server_sent_events(
    curl_program: str, served: ServeProcess, upstream: OpenAIServer
) -> None:
    upstream.rescript([Reply("not JSON at all"), Delay(5 * KEEPALIVE, Reply(ADA_JSON))])
    body = request(stream=True, stream_options={"include_usage": True})
    status, text = post(curl_program, f"{served.base_url}/chat/completions", body, "-N")
    assert status == 200, text
    lines = text.splitlines()
    # Every line is an SSE field, a comment (": keep-alive") or a blank separator.
    assert all(line == "" or line.startswith(("data: ", ":")) for line in lines)
    events = [line for line in lines if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
    content = "".join(
        choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"]
    )
    # while the re-ask is slow, comments keep the connection alive, before any content
    first = next(number for number, line in enumerate(lines) if has_content(line))
    assert any(line.startswith(":") for line in lines[:first])
    assert json.loads(content) == ADA
    assert "not JSON" not in text
    assert chunks[-1]["usage"]["total_tokens"] == 30  # both attempts
    assert upstream.remaining == 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (request(response_format={"type": "json_schema"}), "response_format"),
        (
            request(
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "p", "schema": {"type": "nonsense"}},
                }
            ),
            "response_format",
        ),
        (json.dumps({"model": "scripted", "messages": "hi"}).encode(), "messages"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_problem_and_never_reaches_the_upstream(
    curl_program: str, served: ServeProcess, upstream: OpenAIServer, body: bytes, param: str
) -> None:
    upstream.rescript([])
    status, text = post(curl_program, f"{served.base_url}/chat/completions", body)
    assert status == 400, text
    error = json.loads(text)["error"]
    assert isinstance(error["param"], str)
    assert param in error["param"]
    assert error["message"]
    assert upstream.request_count == 0


def test_malformed_json_is_a_400(
    curl_program: str, served: ServeProcess, upstream: OpenAIServer
) -> None:
    upstream.rescript([])
    status, text = post(curl_program, f"{served.base_url}/chat/completions", b'{"model": "m", ')
    assert status == 400, text
    assert json.loads(text)["error"]["message"]
    assert upstream.request_count == 0


def test_a_body_over_the_limit_is_a_413_with_or_without_a_length(
    curl_program: str, served: ServeProcess, upstream: OpenAIServer
) -> None:
    upstream.rescript([])
    big = request(messages=[{"role": "user", "content": "x" * (LIMIT + 1000)}])
    url = f"{served.base_url}/chat/completions"
    for extra in ((), ("-H", "Transfer-Encoding: chunked")):
        status, text = post(curl_program, url, big, *extra)
        assert status == 413, (extra, text[:500])
        assert json.loads(text)["error"]["message"]
    assert upstream.request_count == 0
    # the server carries on
    status, _ = curl(curl_program, f"{served.base_url.removesuffix('/v1')}/healthz")
    assert status == 200


def test_healthz_and_models(curl_program: str, served: ServeProcess) -> None:
    root = served.base_url.removesuffix("/v1")
    status, _ = curl(curl_program, f"{root}/healthz")
    assert status == 200
    status, text = curl(curl_program, f"{served.base_url}/models")
    assert status == 200, text
    models = json.loads(text)
    assert models["object"] == "list"
    assert models["data"]
    assert all(model["object"] == "model" and model["id"] for model in models["data"])
