"""Options given to ``JsonMode`` by keyword, and the native transports (issue 38, items 4, 9).

Every test that sends anything does it to the scripted OpenAI-compatible server on
127.0.0.1 (tests/support/openai_server.py), which records each request body: a refused
option must leave the server with no request at all, and an accepted one must arrive as
the provider expects it, with nothing unknown beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from support.openai_server import OpenAIServer, Reply, ToolReply

from jsonmode import AttemptsExhaustedError, JsonMode, TransportPolicy, UsageError
from jsonmode.backends.litellm import LiteLLMBackend, litellm_options
from jsonmode.backends.options import FACADE_OPTIONS, closest

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
PROMPT = "Extract the person: Ada, 36"
ONE_CALL = TransportPolicy(max_retries=0)


def jsonmode(server: OpenAIServer, **options: Any) -> JsonMode:
    options.setdefault("timeout", 5.0)
    options.setdefault("transport", ONE_CALL)
    return JsonMode("openai/test-model", api_base=server.base_url, api_key="unused", **options)


# -- item 4: misspelt and unknown options ------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("mdoe", "mode"),
        ("max_attemps", "max_attempts"),
        ("tire", "tier"),
        ("trasnport", "transport"),
        ("schema_nmae", "schema_name"),
        ("timout", "timeout"),
        ("nativ", "native"),
    ],
)
def test_a_misspelt_jsonmode_option_is_refused_naming_the_option_meant(
    openai_server: Start, given: str, meant: str
) -> None:
    server = openai_server(Reply(ADA_JSON))
    with pytest.raises(UsageError, match=f"did you mean '{meant}'\\?") as caught:
        jsonmode(server, **{given: "repair"})
    assert repr(given) in str(caught.value)
    assert server.request_count == 0


def test_a_misspelt_option_of_a_function_backend_names_the_option_meant() -> None:
    with pytest.raises(UsageError, match="did you mean 'timeout'"):
        JsonMode(lambda messages: ADA_JSON, timout=3)
    with pytest.raises(UsageError, match="did you mean 'max_attempts'"):
        JsonMode(lambda messages: ADA_JSON, max_attempt=3)


@pytest.mark.parametrize("driver", ["run", "arun", "stream", "map", "prepare"])
def test_an_option_litellm_does_not_take_is_refused_before_any_request(
    openai_server: Start, driver: str
) -> None:
    server = openai_server(Reply(ADA_JSON))
    jm = jsonmode(server, frobnicate=1)  # close to nothing: known only once litellm is read
    drivers: dict[str, Callable[[], object]] = {
        "run": lambda: jm.run(PROMPT, PERSON),
        "arun": lambda: asyncio.run(jm.arun(PROMPT, PERSON)),
        "stream": lambda: list(jm.stream(PROMPT, PERSON)),
        "map": lambda: jm.map([PROMPT], PERSON, progress=False),
        "prepare": jm.prepare,
    }
    with pytest.raises(UsageError) as caught:
        drivers[driver]()
    assert "unknown option 'frobnicate'" in str(caught.value)
    assert "extra_body" in str(caught.value.hint)
    assert server.request_count == 0


def test_a_misspelt_litellm_option_names_the_one_meant(openai_server: Start) -> None:
    server = openai_server(Reply(ADA_JSON))
    jm = jsonmode(server, temprature=0.2)
    with pytest.raises(UsageError, match="did you mean 'temperature'"):
        jm.run(PROMPT, PERSON)
    assert server.request_count == 0


def test_a_backend_used_directly_checks_its_options_before_its_first_call(
    openai_server: Start,
) -> None:
    from jsonmode.backends import Request
    from jsonmode.schema.core import Schema

    server = openai_server(Reply(ADA_JSON))
    llm = LiteLLMBackend("openai/test-model", api_base=server.base_url, mdoe="repair")
    request = Request(({"role": "user", "content": PROMPT},), Schema.of(PERSON))
    with pytest.raises(UsageError, match="did you mean 'mode'"):
        llm.complete(request)
    assert server.request_count == 0


@pytest.mark.parametrize("name", ["max_retries", "num_retries"])
def test_retry_counts_of_other_libraries_are_refused_with_jsonmodes_two(
    openai_server: Start, name: str
) -> None:
    server = openai_server(Reply(ADA_JSON))
    with pytest.raises(UsageError) as caught:
        jsonmode(server, **{name: 5})
    assert "max_attempts" in str(caught.value.hint)
    assert "TransportPolicy(max_retries=" in str(caught.value.hint)
    with pytest.raises(UsageError):
        LiteLLMBackend("openai/test-model", **{name: 5})
    assert server.request_count == 0


def test_the_request_body_carries_known_options_and_extra_body_and_nothing_else(
    openai_server: Start,
) -> None:
    server = openai_server(Reply(ADA_JSON))
    jm = jsonmode(
        server,
        mode="repair",
        temperature=0.2,
        max_tokens=64,
        seed=7,
        extra_body={"top_k": 3, "repetition_penalty": 1.1},  # fields litellm does not know
        metadata={"run": "x"},  # litellm's own: never sent
    )
    assert jm.run(PROMPT, PERSON).value == ADA
    (body,) = server.requests
    assert sorted(body) == [
        "max_tokens",
        "messages",
        "model",
        "repetition_penalty",
        "seed",
        "temperature",
        "top_k",
    ]
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.2, 64, 7)
    assert (body["top_k"], body["repetition_penalty"]) == (3, 1.1)


def test_no_option_litellm_takes_looks_like_a_misspelling_of_jsonmodes() -> None:
    """The façade refuses a name close to one of its own before litellm is read; so no
    name litellm takes may be that close (``model`` is refused anyway: jsonmode sets it)."""
    ours = (*FACADE_OPTIONS, "timeout", "native", "vllm_processor")
    for model in ("openai/x", "hosted_vllm/x", "ollama/x", "anthropic/x", "gemini/x", "groq/x"):
        names = litellm_options(model)
        assert {"api_base", "temperature", "extra_body", "max_tokens"} <= names
        clashes = {
            name: closest(name, ours)
            for name in names
            if name not in ours and name != "model" and closest(name, ours)
        }
        assert clashes == {}, (model, clashes)


def test_model_and_messages_are_not_options_of_a_model_string() -> None:
    for name in ("model", "messages"):
        with pytest.raises(UsageError, match="jsonmode sends"):
            JsonMode("openai/x", api_base="http://127.0.0.1:9/v1", **{name: "y"})


# -- item 9: a native transport selects the native tier -----------------------------------------


@pytest.mark.parametrize("native", ["tools", "response_format"])
def test_asking_for_a_transport_selects_the_native_tier(openai_server: Start, native: str) -> None:
    reply = ToolReply("Person", ADA_JSON) if native == "tools" else Reply(ADA_JSON)
    server = openai_server(reply)
    jm = jsonmode(server, native=native)  # tier="auto"; an api_base alone stays prompted
    assert jm.tier == "native"
    result = jm.run(PROMPT, PERSON)
    assert result.value == ADA
    assert result.tier == "native"
    (body,) = server.requests
    assert (native in body) is True  # "tools" or "response_format"


def test_a_function_backend_says_why_it_has_no_transport() -> None:
    with pytest.raises(UsageError, match="no native tier"):
        JsonMode(lambda messages: ADA_JSON, native="tools")


@pytest.mark.parametrize("tier", ["prompted", "constrained"])
def test_a_transport_with_another_tier_is_refused(tier: str) -> None:
    with pytest.raises(UsageError, match=f"tier='{tier}' sends none"):
        JsonMode("openai/x", api_base="http://127.0.0.1:9/v1", tier=tier, native="tools")


def _reask_of(server: OpenAIServer) -> str:
    return str(server.requests[1]["messages"][-1]["content"])


@pytest.mark.parametrize("driver", ["sync", "async", "stream"])
def test_a_call_to_another_function_is_a_failed_attempt_that_is_reasked(
    openai_server: Start, driver: str
) -> None:
    server = openai_server(ToolReply("lookup", ADA_JSON), ToolReply("Person", ADA_JSON))
    jm = jsonmode(server, native="tools")
    if driver == "sync":
        result = jm.run(PROMPT, PERSON)
    elif driver == "async":
        result = asyncio.run(jm.arun(PROMPT, PERSON))
    else:
        events = list(jm.stream(PROMPT, PERSON))
        kinds = [event.kind for event in events]
        # the other call's arguments are never shown as a partial value
        assert kinds[0] == "retry"
        assert kinds[-1] == "final"
        result = events[-1].result
    assert result.value == ADA
    first, second = result.attempts
    assert first.outcome == "schema_violation"
    assert [issue.keyword for issue in first.issues] == ["tool"]
    assert "'lookup'" in first.issues[0].message
    assert "'Person'" in first.issues[0].message
    assert second.ok
    assert server.request_count == 2
    reask = _reask_of(server)
    assert "'lookup'" in reask
    assert "'Person'" in reask


def test_calls_only_to_other_functions_exhaust_the_attempts(openai_server: Start) -> None:
    server = openai_server(ToolReply("lookup", ADA_JSON), ToolReply("search", ADA_JSON))
    jm = jsonmode(server, native="tools", max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as caught:
        jm.run(PROMPT, PERSON)
    assert [attempt.outcome for attempt in caught.value.attempts] == ["schema_violation"] * 2
    assert server.request_count == 2


# -- item 9: the CLI flag ---------------------------------------------------------------------


def _command() -> list[str]:
    script = shutil.which("jsonmode", path=str(pathlib.Path(sys.executable).parent))
    if script:
        return [script]
    return [sys.executable, "-c", "import sys; from jsonmode.cli import main; sys.exit(main())"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("OPENAI_API_KEY", None)
    env.pop("JSONMODE_MODEL", None)
    return subprocess.run(
        [*_command(), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def schema_file(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "person.json"
    path.write_text(json.dumps(PERSON), encoding="utf-8")
    return str(path)


def test_cli_generate_native_tools_sends_one_forced_function_call(
    openai_server: Start, schema_file: str
) -> None:
    server = openai_server(ToolReply("Person", ADA_JSON))
    done = _cli(
        "generate",
        "--schema",
        schema_file,
        "--model",
        "openai/test-model",
        "--api-base",
        server.base_url,
        "--native",
        "tools",
        PROMPT,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ADA
    (body,) = server.requests
    assert body["tools"][0]["function"]["name"] == "Person"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "Person"}}
    assert "response_format" not in body


def test_cli_batch_native_response_format(
    openai_server: Start, schema_file: str, tmp_path: pathlib.Path
) -> None:
    server = openai_server(Reply(ADA_JSON))
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"prompt": PROMPT}) + "\n", encoding="utf-8")
    done = _cli(
        "batch",
        "--schema",
        schema_file,
        "--input",
        str(source),
        "--output",
        str(target),
        "--no-progress",
        "--model",
        "openai/test-model",
        "--api-base",
        server.base_url,
        "--native",
        "response_format",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(target.read_text(encoding="utf-8")) == {"value": ADA}
    (body,) = server.requests
    assert body["response_format"]["json_schema"]["name"] == "Person"


def test_cli_native_with_the_prompted_tier_is_bad_usage(
    openai_server: Start, schema_file: str
) -> None:
    server = openai_server(Reply(ADA_JSON))
    done = _cli(
        "generate",
        "--schema",
        schema_file,
        "--model",
        "openai/test-model",
        "--api-base",
        server.base_url,
        "--tier",
        "prompted",
        "--native",
        "tools",
        PROMPT,
    )
    assert done.returncode == 2
    assert "tier='prompted' sends none" in done.stderr
    assert server.request_count == 0
