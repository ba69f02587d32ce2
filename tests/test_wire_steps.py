"""The streamed reply's one logic (openai_wire.stream_steps) under its two drivers:
run_stream (blocking I/O) and arun_stream (awaited) must give the same chunks, send the
same requests and close the same streams at the same points, on the same scripted
replies: a normal stream, one that brings nothing (asked again unstreamed), one that
fails mid-way, and a consumer that stops early."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace as NS
from typing import Any

import pytest

from jsonmode.backends.base import Completion
from jsonmode.backends.openai_wire import arun_stream, run_stream, stream_steps
from jsonmode.errors import TransientBackendError
from jsonmode.result import Usage


def event(content: str | None = None, finish: str | None = None, usage: Any = None) -> NS:
    delta = NS(content=content, tool_calls=None)
    return NS(choices=[NS(delta=delta, finish_reason=finish)], usage=usage)


def whole(text: str) -> NS:
    message = NS(content=text, tool_calls=None)
    return NS(choices=[NS(message=message, finish_reason="stop")], usage=None)


class Broken(Exception):
    pass


class Script:
    """Replies to requests in order, logging every request, event read and close."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.log: list[Any] = []

    def create(self, **arguments: Any) -> Any:
        self.log.append(("create", dict(arguments)))
        reply = self.replies.pop(0)
        if isinstance(reply, list):
            return Stream(self, reply)
        return reply

    async def acreate(self, **arguments: Any) -> Any:
        await asyncio.sleep(0)
        return self.create(**arguments)


class Stream:
    def __init__(self, script: Script, events: list[Any]) -> None:
        self.script = script
        self.events = iter(events)

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Any:
        item = next(self.events)  # StopIteration ends it
        if isinstance(item, Exception):
            self.script.log.append(("fails", type(item).__name__))
            raise item
        self.script.log.append(("event",))
        return item

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Any:
        await asyncio.sleep(0)
        try:
            return self.__next__()
        except StopIteration:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self.script.log.append(("close",))

    async def aclose(self) -> None:
        await asyncio.sleep(0)
        self.close()


ARGUMENTS = {"model": "m", "messages": [], "stream": True, "stream_options": {"x": 1}}


def run_sync(script: Script, stop_after: int | None = None) -> tuple[list[Any], Any]:
    got: list[Any] = []
    chunks = run_stream(stream_steps(dict(ARGUMENTS), None), script.create)
    try:
        for chunk in chunks:
            got.append(chunk)
            if stop_after is not None and len(got) == stop_after:
                chunks.close()
                break
    except Exception as exc:
        return got, type(exc)
    return got, None


def run_async(script: Script, stop_after: int | None = None) -> tuple[list[Any], Any]:
    async def main() -> tuple[list[Any], Any]:
        got: list[Any] = []
        chunks = arun_stream(
            stream_steps(dict(ARGUMENTS), None),
            script.acreate,
            aiter,
            lambda response: response.aclose(),
        )
        try:
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    got.append(chunk)
                    if stop_after is not None and len(got) == stop_after:
                        break
        except Exception as exc:
            return got, type(exc)
        return got, None

    return asyncio.run(main())


def both(make: Any, stop_after: int | None = None) -> tuple[Any, list[Any]]:
    """The outcome and log of the sync driver, checked equal to the async driver's."""
    sync_script, async_script = make(), make()
    sync_outcome = run_sync(sync_script, stop_after)
    async_outcome = run_async(async_script, stop_after)
    assert sync_outcome == async_outcome
    assert sync_script.log == async_script.log
    return sync_outcome, sync_script.log


def test_a_stream_gives_its_pieces_then_the_whole_reply_and_is_closed_at_its_end() -> None:
    usage = NS(prompt_tokens=3, completion_tokens=2)
    outcome, log = both(
        lambda: Script([event('{"a"'), event(": 1}", finish="length"), event(usage=usage)])
    )
    assert outcome == (['{"a"', ": 1}", Completion('{"a": 1}', Usage(3, 2), truncated=True)], None)
    assert log == [("create", ARGUMENTS), ("event",), ("event",), ("event",), ("close",)]


def test_a_stream_that_brings_nothing_is_asked_again_unstreamed_after_closing() -> None:
    outcome, log = both(lambda: Script([event(None)], whole("[1]")))
    assert outcome == ([Completion("[1]")], None)
    assert log == [
        ("create", ARGUMENTS),
        ("event",),
        ("close",),
        ("create", {"model": "m", "messages": []}),
    ]


def test_a_stream_failing_mid_way_is_closed_and_its_error_raised_as_it_is() -> None:
    outcome, log = both(lambda: Script([event("{"), Broken("cut")]))
    assert outcome == (["{"], Broken)
    assert log == [("create", ARGUMENTS), ("event",), ("fails", "Broken"), ("close",)]


def test_a_stream_with_no_event_at_all_is_closed_then_a_transient_error() -> None:
    outcome, log = both(lambda: Script([]))
    assert outcome == ([], TransientBackendError)
    assert log == [("create", ARGUMENTS), ("close",)]


class Refused(Script):
    """A server that refuses the request: nothing opened, nothing to close."""

    def create(self, **arguments: Any) -> Any:
        self.log.append(("create", dict(arguments)))
        raise Broken("refused")


def test_a_request_that_fails_raises_its_error_and_closes_nothing() -> None:
    outcome, log = both(Refused)
    assert outcome == ([], Broken)
    assert log == [("create", ARGUMENTS)]


def test_a_consumer_stopping_early_closes_the_stream_once_and_asks_nothing_more() -> None:
    outcome, log = both(lambda: Script([event("a"), event("b"), event("c")]), stop_after=1)
    assert outcome == (["a"], None)
    assert log == [("create", ARGUMENTS), ("event",), ("close",)]


@pytest.mark.parametrize("driver", [run_sync, run_async])
def test_each_driver_alone_matches_the_script(driver: Any) -> None:
    script = Script([event("x")])
    assert driver(script) == (["x", Completion("x")], None)
    assert script.log == [("create", ARGUMENTS), ("event",), ("close",)]
