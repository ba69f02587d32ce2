"""The litellm backend's streams and tool-call transport, through real litellm and the OpenAI
SDK against scripted loopback servers (tests/support/openai_server.py, raw_http.py).

Nothing is mocked: the server answers ``"stream": true`` with server-sent
``chat.completion.chunk`` events, and records every request body.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from support import raw_http
from support.openai_server import HttpError, OpenAIServer, Reply, ToolReply
from support.raw_http import RawServer, Trickle

from jsonmode import (
    Completion,
    JsonMode,
    PermanentBackendError,
    Schema,
    TransientBackendError,
    TransportPolicy,
    Usage,
    UsageError,
)
from jsonmode.backends import deadline
from jsonmode.backends.base import Chunk, Request
from jsonmode.backends.litellm import LiteLLMBackend

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_implicit_event_loop")]

Start = Callable[..., OpenAIServer]

PERSON: dict[str, Any] = {
    "title": "Person",
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
    },
    "required": ["name", "age", "email"],
}
ADA = {"name": "Ada", "age": 36, "email": "ada@example.com"}
ADA_JSON = json.dumps(ADA)
PIECES = ('{"name": "Ada", ', '"age": 36, ', '"email": ', '"ada@example.com"}')
PROMPT = "Extract the person: Ada, 36, ada@example.com"
ONE_CALL = TransportPolicy(max_retries=0)
SLACK = 1.5  # seconds allowed past a deadline (thread start, error mapping, a loaded CI box)


@pytest.fixture(autouse=True, scope="module")
def _litellm_imported() -> None:
    """litellm's first import takes seconds: not inside the times measured here."""
    LiteLLMBackend("openai/test-model").prepare()


@pytest.fixture(autouse=True)
def _no_abandoned_workers() -> None:
    """Counts of abandoned workers below are exact: wait for other tests' to end."""
    _until(lambda: deadline.abandoned() == 0, 10.0)


def backend(server: OpenAIServer | RawServer, **options: Any) -> LiteLLMBackend:
    options.setdefault("timeout", 5.0)
    return LiteLLMBackend(
        "openai/test-model", api_base=server.base_url, api_key="unused", **options
    )


def request(schema: object = PERSON, *, native: bool = False) -> Request:
    return Request(({"role": "user", "content": PROMPT},), Schema.of(schema), native=native)


def collect(stream: Iterator[Chunk]) -> tuple[list[str], Completion | None]:
    """The text pieces of a stream and its final Completion (None when it sent none)."""
    pieces: list[str] = []
    final = None
    for chunk in stream:
        if isinstance(chunk, Completion):
            assert final is None, "one final Completion at most"
            final = chunk
        else:
            assert final is None, "the Completion comes last"
            pieces.append(chunk)
    return pieces, final


def acollect(stream: AsyncIterator[Chunk]) -> tuple[list[str], Completion | None]:
    async def run() -> list[Chunk]:
        return [chunk async for chunk in stream]

    return collect(iter(asyncio.run(run())))


def read(llm: LiteLLMBackend, driver: str, what: Request, into: list[Any]) -> None:
    """Reads ``llm``'s stream (sync or async) into ``into`` as it comes, until it ends or fails."""
    if driver == "sync":
        for chunk in llm.stream(what):
            into.append(chunk)
        return

    async def run() -> None:
        async for chunk in llm.astream(what):
            into.append(chunk)

    asyncio.run(run())


def _until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


# -- text streams ---------------------------------------------------------------------------


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_server_that_does_not_stream_is_asked_again_without_stream(driver: str) -> None:
    """A server that answers a streamed request with a plain JSON body gives the event
    reader nothing; the same request is sent again unstreamed and its reply is read."""
    plain = raw_http.completion(ADA_JSON)
    server = RawServer([raw_http.Send(plain), raw_http.Send(plain)])
    try:
        llm = backend(server)
        stream = llm.stream(request()) if driver == "sync" else llm.astream(request())
        pieces, final = collect(stream) if driver == "sync" else acollect(stream)  # type: ignore[arg-type]
        assert pieces == []
        assert final is not None
        assert final.text == ADA_JSON
        assert final.usage == Usage(10, 5)
        assert server.request_count == 2
    finally:
        server.close()


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_pieces_arrive_in_order_and_join_to_the_reply(openai_server: Start, driver: str) -> None:
    server = openai_server(Reply(ADA_JSON, pieces=PIECES, prompt_tokens=42, completion_tokens=17))
    llm = backend(server)
    stream = llm.stream(request()) if driver == "sync" else llm.astream(request())
    pieces, final = collect(stream) if driver == "sync" else acollect(stream)  # type: ignore[arg-type]
    assert pieces == list(PIECES)
    assert final == Completion(ADA_JSON, Usage(42, 17), truncated=False)
    (body,) = server.requests
    assert body["stream"] is True
    # litellm sends no stream_options to a custom api_base by itself: jsonmode asks for usage
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": PROMPT}]
    if driver == "async":
        assert server.recorded[0].headers["x-stainless-async"].startswith("async")


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_reply_cut_at_the_length_limit_is_truncated(openai_server: Start, driver: str) -> None:
    cut = '{"name": "Ada", "age": 3'
    server = openai_server(Reply(cut, finish_reason="length"))
    llm = backend(server)
    stream = llm.stream(request()) if driver == "sync" else llm.astream(request())
    pieces, final = collect(stream) if driver == "sync" else acollect(stream)  # type: ignore[arg-type]
    assert "".join(pieces) == cut
    assert len(pieces) > 1
    assert final is not None
    assert final.text == cut
    assert final.truncated is True


def test_the_callers_stream_options_are_kept_and_unreported_usage_is_none(
    openai_server: Start,
) -> None:
    """Usage is what the server reported, never litellm's estimate from counting tokens."""
    server = openai_server(Reply(ADA_JSON))
    llm = backend(server, stream_options={"include_usage": False})
    pieces, final = collect(llm.stream(request()))
    assert "".join(pieces) == ADA_JSON
    assert final == Completion(ADA_JSON, None, truncated=False)
    assert server.requests[0]["stream_options"] == {"include_usage": False}


def test_a_stream_option_of_complete_is_read_whole_with_the_reported_usage(
    openai_server: Start,
) -> None:
    server = openai_server(Reply(ADA_JSON, prompt_tokens=7, completion_tokens=3))
    completion = backend(server, stream=True).complete(request())
    assert completion == Completion(ADA_JSON, Usage(7, 3))
    assert server.requests[0]["stream_options"] == {"include_usage": True}


def test_providers_without_stream_options_are_not_sent_it() -> None:
    """litellm lists stream_options for OpenAI-style servers only; others would refuse it."""
    openai_like, _ = LiteLLMBackend("hosted_vllm/m", api_base="http://x")._arguments(
        request(), stream=True
    )
    ollama, _ = LiteLLMBackend("ollama/llama3")._arguments(request(), stream=True)
    anthropic, _ = LiteLLMBackend("anthropic/claude-3-5-sonnet-20240620")._arguments(
        request(), stream=True
    )
    assert openai_like["stream_options"] == {"include_usage": True}
    assert "stream_options" not in ollama
    assert "stream_options" not in anthropic


# -- failures -----------------------------------------------------------------------------


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_rate_limit_before_the_stream_is_transient_with_retry_after(
    openai_server: Start, driver: str
) -> None:
    server = openai_server(HttpError(429, "Rate limit reached", headers={"Retry-After": "3"}))
    llm = backend(server)
    with pytest.raises(TransientBackendError) as caught:
        read(llm, driver, request(), [])
    error = caught.value
    assert error.status_code == 429
    assert error.retry_after == 3.0
    # one clean line: the type once, the status, the server's words
    assert str(error) == "RateLimitError (HTTP 429): Rate limit reached"
    assert server.requests[0]["stream"] is True


def test_a_refused_request_is_permanent_and_said_once(openai_server: Start) -> None:
    server = openai_server(HttpError(400, "unknown field 'tools'"))
    with pytest.raises(PermanentBackendError) as caught:
        collect(backend(server).stream(request()))
    assert str(caught.value) == "BadRequestError (HTTP 400): unknown field 'tools'"


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_connection_dropped_mid_stream_is_transient(openai_server: Start, driver: str) -> None:
    server = openai_server(Reply(ADA_JSON, pieces=PIECES, cut_after=2))
    llm = backend(server)
    pieces: list[str] = []
    with pytest.raises(TransientBackendError) as caught:
        read(llm, driver, request(), pieces)
    assert pieces == list(PIECES[:2])  # what came before the break was shown
    message = str(caught.value)
    # what broke, where, and when (issue 38: was "APIConnectionError mid-stream: Connection error.")
    assert message == (
        f"lost the connection to 127.0.0.1:{server.port} mid-stream "
        "(the server closed it before the reply ended)"
    )
    assert caught.value.status_code is None  # no status: litellm's is made up
    assert caught.value.retryable


def test_error_lines_through_the_facade_name_their_type_once(openai_server: Start) -> None:
    server = openai_server(HttpError(429, "Rate limit reached", "rate_limit_exceeded"))
    jm = JsonMode(
        "openai/test-model", api_base=server.base_url, api_key="unused", transport=ONE_CALL
    )
    with pytest.raises(TransientBackendError) as caught:
        jm.run(PROMPT, PERSON)
    (attempt,) = caught.value.attempts
    for line in (str(caught.value), attempt.error or ""):
        assert line.count("RateLimitError") == 1, line
        assert "litellm." not in line
        assert "OpenAIException" not in line
        assert "RateLimitError (HTTP 429): Rate limit reached" in line


# -- one deadline for the whole stream ------------------------------------------------------


def test_the_deadline_ends_a_trickling_stream_and_frees_its_worker(openai_server: Start) -> None:
    # every piece comes well inside any per-read timeout; the stream as a whole does not
    slow = tuple(ADA_JSON[i : i + 4] for i in range(0, len(ADA_JSON), 4))
    server = openai_server(Reply(ADA_JSON, pieces=slow, every=0.3))
    llm = backend(server, timeout=1.0)
    pieces: list[Chunk] = []
    started = time.perf_counter()
    with pytest.raises(TransientBackendError, match="timeout of 1 s"):
        read(llm, "sync", request(), pieces)
    assert 1.0 <= time.perf_counter() - started < 1.0 + SLACK
    assert 1 <= len(pieces) < len(slow)
    # the worker stops at the next piece (0.3 s) and closes the connection: it does not
    # read on to the end (3 s more)
    assert _until(lambda: deadline.abandoned() == 0, 1.0)


def test_the_deadline_cancels_a_trickling_async_stream_and_closes_its_connection(
    raw_server: Callable[..., RawServer],
) -> None:
    head, body = raw_http.events(list(PIECES))
    server = raw_server(Trickle(body, every=0.02, head=head))
    llm = backend(server, timeout=1.0)
    pieces: list[Chunk] = []
    started = time.perf_counter()
    with pytest.raises(TransientBackendError, match="timeout of 1 s"):
        read(llm, "async", request(), pieces)
    ended = time.monotonic()
    assert 1.0 <= time.perf_counter() - started < 1.0 + SLACK
    assert all(isinstance(piece, str) for piece in pieces)
    # cancelled, not abandoned: the client closed the connection and the server noticed
    assert _until(lambda: server.closed_by_client[0] is not None, 2.0)
    closed = server.closed_by_client[0]
    assert closed is not None
    assert closed - ended < 1.0


def test_closing_a_stream_early_releases_it(openai_server: Start) -> None:
    # 40 pieces, 0.1 s apart: read to its end, the stream would hold its worker 4 s
    long = tuple(f" {number}," for number in range(40))
    server = openai_server(Reply("".join(long), pieces=long, every=0.1))
    stream = backend(server, timeout=30.0).stream(request())
    assert next(stream) == long[0]
    stream.close()  # type: ignore[attr-defined]
    # the worker stops at the next piece and closes the connection
    assert _until(lambda: deadline.abandoned() == 0, 1.5)


# -- tool-call transport --------------------------------------------------------------------


def tools_jsonmode(server: OpenAIServer, **options: Any) -> JsonMode:
    options.setdefault("timeout", 5.0)
    options.setdefault("transport", ONE_CALL)
    options.setdefault("tier", "native")
    return JsonMode(
        "openai/test-model", api_base=server.base_url, api_key="unused", native="tools", **options
    )


def test_tools_request_carries_the_tool_and_tool_choice_and_no_response_format(
    openai_server: Start,
) -> None:
    server = openai_server(ToolReply("Person", ADA_JSON))
    result = tools_jsonmode(server).run(PROMPT, PERSON)
    assert result.value == ADA
    assert result.tier == "native"
    (body,) = server.requests
    assert "response_format" not in body
    (tool,) = body["tools"]
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["name"] == "Person"
    assert function["parameters"] == Schema.of(PERSON).json_schema
    assert isinstance(function["description"], str)
    assert function["description"]
    assert "strict" not in function  # the schema is not closed: OpenAI's strict mode cannot take it
    assert body["tool_choice"] == {"type": "function", "function": {"name": "Person"}}


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_tool_call_reply_is_read(openai_server: Start, driver: str) -> None:
    server = openai_server(ToolReply("Person", ADA_JSON, prompt_tokens=30, completion_tokens=9))
    jm = tools_jsonmode(server)
    result = jm.run(PROMPT, PERSON) if driver == "sync" else asyncio.run(jm.arun(PROMPT, PERSON))
    assert result.value == ADA
    assert result.raw == ADA_JSON
    assert result.usage == Usage(30, 9)


def test_of_several_tool_calls_the_one_named_like_the_schema_is_read(openai_server: Start) -> None:
    server = openai_server(
        ToolReply("Person", ADA_JSON, others=(("lookup", '{"query": "Ada"}'),)),
        ToolReply("Person", ADA_JSON, others=(("lookup", '{"query": "Ada"}'),)),
    )
    assert tools_jsonmode(server).run(PROMPT, PERSON).value == ADA
    llm = backend(server, native="tools")
    pieces, final = collect(llm.stream(request(native=True)))
    assert "".join(pieces) == ADA_JSON  # the other call's arguments are never shown
    assert final is not None
    assert final.text == ADA_JSON


def test_a_reply_without_a_tool_call_falls_back_to_its_content(openai_server: Start) -> None:
    server = openai_server(Reply(ADA_JSON))
    assert tools_jsonmode(server).run(PROMPT, PERSON).value == ADA
    assert "tools" in server.requests[0]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_streamed_tool_call_yields_its_arguments(openai_server: Start, driver: str) -> None:
    server = openai_server(ToolReply("Person", ADA_JSON, pieces=PIECES))
    llm = backend(server, native="tools")
    stream = (
        llm.stream(request(native=True)) if driver == "sync" else llm.astream(request(native=True))
    )
    pieces, final = collect(stream) if driver == "sync" else acollect(stream)  # type: ignore[arg-type]
    assert pieces == list(PIECES)
    assert final == Completion(ADA_JSON, Usage(10, 5), truncated=False)
    (body,) = server.requests
    assert body["tool_choice"]["function"]["name"] == "Person"
    assert "response_format" not in body
    assert body["stream"] is True


def test_a_schema_that_is_not_an_object_travels_wrapped_and_comes_back_unwrapped(
    openai_server: Start,
) -> None:
    name = Schema.of(list[int]).name
    arguments = '{ "value" : [1, 2, 3] }\n'  # blanks where a model may put them
    server = openai_server(
        ToolReply(name, arguments),
        ToolReply(name, arguments, pieces=('{"val', 'ue": [1, ', "2, 3]", "}")),
    )
    result = tools_jsonmode(server).run(PROMPT, list[int])
    assert result.value == [1, 2, 3]
    assert result.raw == "[1, 2, 3]"
    parameters = server.requests[0]["tools"][0]["function"]["parameters"]
    assert parameters["type"] == "object"
    assert parameters["properties"] == {"value": Schema.of(list[int]).json_schema}
    assert parameters["required"] == ["value"]
    assert server.requests[0]["tools"][0]["function"]["strict"] is True
    pieces, final = collect(backend(server, native="tools").stream(request(list[int], native=True)))
    assert "".join(pieces) == "[1, 2, 3]"
    assert final is not None
    assert final.text == "[1, 2, 3]"


def test_the_prompted_tier_sends_no_tools(openai_server: Start) -> None:
    server = openai_server(Reply(ADA_JSON))
    jm = JsonMode("openai/test-model", api_base=server.base_url, api_key="unused", tier="prompted")
    assert jm.run(PROMPT, PERSON).value == ADA
    assert not {"tools", "tool_choice", "response_format"} & set(server.requests[0])
    # a transport is the native tier's: asking for it with another tier is a contradiction
    with pytest.raises(UsageError, match="tier='prompted' sends none"):
        tools_jsonmode(server, tier="prompted")


@pytest.mark.parametrize(
    "options",
    [
        {"native": "function"},
        {"native": "tools", "vllm_processor": True},
        {"native": "tools", "tools": []},
        {"native": "tools", "tool_choice": "auto"},
    ],
)
def test_native_option_values_are_checked(options: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        JsonMode("openai/x", api_base="http://127.0.0.1:9/v1", **options)


# -- prepare -------------------------------------------------------------------------------


def test_prepare_imports_litellm_ahead_and_construction_does_not() -> None:
    code = (
        "import sys, threading\n"
        "from jsonmode.backends.litellm import LiteLLMBackend\n"
        "backend = LiteLLMBackend('openai/x', api_base='http://127.0.0.1:9/v1')\n"
        "assert 'litellm' not in sys.modules, 'construction imported litellm'\n"
        "threads = [threading.Thread(target=backend.prepare) for _ in range(4)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "assert 'litellm' in sys.modules\n"
        "import jsonmode.backends.litellm as module\n"
        "assert module._module is sys.modules['litellm']\n"
        "backend.prepare()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


# -- the façade streams through litellm ------------------------------------------------------


@pytest.mark.parametrize("native", ["response_format", "tools"])
def test_jsonmode_stream_shows_the_value_grow_in_the_native_tier(
    openai_server: Start, native: str
) -> None:
    """JsonMode.stream against a streaming server: partial values while the reply
    arrives (never a string before it closed), then the Result run() would return."""
    reply = ToolReply("Person", ADA_JSON, pieces=PIECES) if native == "tools" else None
    server = openai_server(reply or Reply(ADA_JSON, pieces=PIECES))
    jm = JsonMode(
        "openai/test-model",
        api_base=server.base_url,
        api_key="unused",
        tier="native",
        native=native,
        timeout=5.0,
        transport=ONE_CALL,
    )
    events = list(jm.stream(PROMPT, PERSON))
    *partials, final = events
    assert [event.kind for event in partials] == ["partial"] * len(partials)
    assert [event.value for event in partials] == [
        {"name": "Ada"},
        {"name": "Ada", "age": 36},
        ADA,
    ]
    assert final.kind == "final"
    assert final.result.value == ADA
    assert final.result.tier == "native"
    assert final.first_partial_s is not None
    (body,) = server.requests
    assert body["stream"] is True
    assert ("tools" in body) == (native == "tools")
    assert ("response_format" in body) == (native == "response_format")


def test_jsonmode_astream_reasks_through_litellm(openai_server: Start) -> None:
    server = openai_server(
        Reply('{"name": "Ada", "age": "old"}', pieces=('{"name": "Ada", ', '"age": "old"}')),
        Reply(ADA_JSON, pieces=PIECES),
    )
    jm = JsonMode(
        "openai/test-model",
        api_base=server.base_url,
        api_key="unused",
        timeout=5.0,
        transport=ONE_CALL,
    )

    async def watch() -> list[Any]:
        return [event async for event in jm.astream(PROMPT, PERSON)]

    events = asyncio.run(watch())
    kinds = [event.kind for event in events]
    assert kinds.count("retry") == 1
    retry = events[kinds.index("retry")]
    assert retry.transport is False
    assert {issue.path for issue in retry.issues} >= {"$.age"}
    assert events[-1].result.value == ADA
    assert len(events[-1].result.attempts) == 2
    assert len(server.requests) == 2
