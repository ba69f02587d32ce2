"""error_bodies' sync and async HTTP clients read an error body through one bounded
reader: on the same scripted 400s (a 3 MB body, clipped; one past MAX_ERROR_READ, read
no further) both give the same bytes, against the scripted server."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.openai_server import HttpError, OpenAIServer

from jsonmode.backends.error_bodies import (
    MAX_ERROR_BODY,
    MAX_ERROR_READ,
    async_client,
    sync_client,
)

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def fetch_sync(url: str) -> tuple[int, bytes]:
    response = sync_client().post(url, json=REQUEST)
    return response.status_code, response.content


def fetch_async(url: str) -> tuple[int, bytes]:
    async def main() -> tuple[int, bytes]:
        client = async_client()
        try:
            response = await client.post(url, json=REQUEST)
            return response.status_code, response.content
        finally:
            await client.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("size", [3_000_000, MAX_ERROR_READ + 1_000_000])
def test_sync_and_async_clients_clip_an_error_body_alike(size: int) -> None:
    message = "bad request: " + "x" * size + " END"
    with OpenAIServer([HttpError(400, message)] * 2) as server:
        url = server.base_url + "/chat/completions"
        sync_status, sync_body = fetch_sync(url)
        async_status, async_body = fetch_async(url)
    assert sync_status == async_status == 400
    assert sync_body == async_body
    assert len(sync_body) <= MAX_ERROR_BODY
    text = sync_body.decode()
    if size < MAX_ERROR_READ:  # read whole: still the server's JSON, its message clipped
        said = json.loads(text)["error"]["message"]
        assert said.startswith("bad request: xxx")
        assert said.endswith("x END")
    else:  # cut at MAX_ERROR_READ bytes: the tail never read, so no " END"
        assert text.startswith('{"error"')
        assert "END" not in text
