"""JsonModeParser's sync and async streams (``transform`` / ``atransform``) read the
chunks through one reader (the parser's partials): on the same scripted chunks both
yield the same partial values and the same validated value, or fail the same way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk

from jsonmode.adapters.langchain import JsonModeParser

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
GOOD = ['{"na', 'me": "Ada', '", "ag', 'e": 36}']
CHUNKS: dict[str, list[Any]] = {
    "text": GOOD,
    "messages": [AIMessageChunk(content=piece) for piece in GOOD],
    "invalid at its end": ['{"name": ', '"Ada"}'],
    "mixed text and messages": ['{"name": ', AIMessageChunk(content='"Ada", "age": 1}')],
    "nothing": [],
}


def outcome(run: Any) -> tuple[Any, ...]:
    got: list[Any] = []
    try:
        run(got)
    except Exception as exc:
        return (got, type(exc).__name__, str(exc))
    return (got, None, None)


@pytest.mark.parametrize("case", list(CHUNKS))
def test_transform_and_atransform_yield_alike(case: str) -> None:
    chunks = CHUNKS[case]
    parser = JsonModeParser(SCHEMA)

    def sync(got: list[Any]) -> None:
        got.extend(parser.transform(iter(chunks)))

    async def source() -> AsyncIterator[Any]:
        for chunk in chunks:
            yield chunk

    async def collect(got: list[Any]) -> None:
        async for value in parser.atransform(source()):
            got.append(value)

    sync_outcome = outcome(sync)
    async_outcome = outcome(lambda got: asyncio.run(collect(got)))
    assert sync_outcome == async_outcome
    values, error, _ = sync_outcome
    if case in ("text", "messages"):
        assert values[-1] == {"name": "Ada", "age": 36}
        assert len(values) > 2  # partial values came first
        assert error is None
    if case == "invalid at its end":
        assert error == "OutputParserException"
    if case == "nothing":
        assert sync_outcome == ([], None, None)
