"""OpenAIClientBackend's streams, sync and async, read the reply through one logic
(openai_wire.stream_steps) under two drivers: on the same scripted replies a sync
client's ``stream``, an async client's ``astream`` and a sync client's ``astream`` (in
worker threads) give the same chunks, or fail the same way at the same point, against
the scripted server (tests/support/openai_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import openai
import pytest
from support.openai_server import HttpError, OpenAIServer, Reply, ToolReply

from jsonmode import Schema
from jsonmode.backends.base import Request
from jsonmode.backends.openai_client import OpenAIClientBackend

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_implicit_event_loop")]

Start = Callable[..., OpenAIServer]
SCHEMA = Schema.of({"type": "array", "items": {"type": "integer"}})
PLAIN = Request(({"role": "user", "content": "numbers"},), SCHEMA)
NATIVE = Request(({"role": "user", "content": "numbers"},), SCHEMA, native=True)

SCRIPTS: dict[str, tuple[Request, Any]] = {
    "pieces": (PLAIN, Reply("[1, 2, 3]", pieces=("[1", ", 2", ", 3]"))),
    "cut at the length limit": (PLAIN, Reply("[1, 2", finish_reason="length")),
    "a wrapped tool call": (NATIVE, ToolReply("response", '{"value": [4, 5]}')),
    "broken off mid-stream": (PLAIN, Reply("[1, 2, 3]", pieces=("[1", ", 2", ", 3]"), cut_after=1)),
    "refused": (PLAIN, HttpError(400, "no such model")),
    "overloaded": (PLAIN, HttpError(503, "try later")),
}


def outcome(run: Callable[[list[Any]], None]) -> tuple[Any, ...]:
    got: list[Any] = []
    try:
        run(got)
    except Exception as exc:
        return (got, type(exc).__name__, str(exc).split(" (hint")[0])
    return (got, None, None)


def backend(sdk: object) -> OpenAIClientBackend:
    return OpenAIClientBackend(sdk, model="m", timeout=5.0, native="tools")


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_sync_and_async_streams_give_the_same_chunks_and_failures(
    openai_server: Start, case: str
) -> None:
    request, action = SCRIPTS[case]
    server = openai_server(action, action, action)
    sync_sdk = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    async_sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)

    def sync_stream(got: list[Any]) -> None:
        for chunk in backend(sync_sdk).stream(request):
            got.append(chunk)

    def async_stream(sdk: object) -> Callable[[list[Any]], None]:
        async def main(got: list[Any]) -> None:
            async for chunk in backend(sdk).astream(request):
                got.append(chunk)

        return lambda got: asyncio.run(main(got))

    outcomes = [
        outcome(sync_stream),
        outcome(async_stream(async_sdk)),
        outcome(async_stream(sync_sdk)),
    ]
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert server.request_count == 3
    chunks, error, _ = outcomes[0]
    expected_pieces = {"pieces": ["[1", ", 2", ", 3]"], "broken off mid-stream": ["[1"]}
    if case in expected_pieces:
        assert [chunk for chunk in chunks if isinstance(chunk, str)] == expected_pieces[case]
    if case == "a wrapped tool call":
        assert chunks[-1].text == "[4, 5]"
    if error is None:
        assert chunks[-1].text == "".join(chunks[:-1])
        assert chunks[-1].usage is not None
    else:
        assert error in ("TransientBackendError", "PermanentBackendError")
