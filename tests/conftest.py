"""Shared fixtures."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import pytest
from support import alone
from support.openai_server import OpenAIServer
from support.raw_http import RawServer


class _Closable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=_Closable)

# tests/with_crewai needs crewai, which pins its own pydantic and json-repair and so lives
# in its own environment: .ci/crewai.sh builds it and runs that suite there.
collect_ignore = [] if importlib.util.find_spec("crewai") else ["with_crewai"]
# tests/with_vllm needs vLLM (~3.4 GB, its own torch pin): .ci/vllm.sh builds its
# environment and runs that suite there.
if not importlib.util.find_spec("vllm"):
    collect_ignore.append("with_vllm")


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("alone") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """Under pytest-xdist, an ``alone`` test runs (set-up, call and teardown) while no other
    test runs: it bounds wall-clock time; any other test may run beside any test but an
    ``alone`` one (tests/support/alone.py)."""
    alone.enter(_alone(item))
    try:
        return (yield)
    finally:
        alone.leave(keep=_alone(item) and _alone(nextitem))


@pytest.fixture
def no_implicit_event_loop() -> None:
    """Stop ``asyncio.get_event_loop()`` from creating a loop nobody closes.

    litellm's sync ``completion`` dispatches its service-logging hook on
    ``asyncio.get_event_loop()``; in the main thread of Python < 3.14, with no loop
    set yet, that call creates and installs a loop that is never closed, and its
    garbage collection later raises "ResourceWarning: unclosed event loop" (an error
    under ``filterwarnings = error``). Once ``set_event_loop`` has been called the
    call raises RuntimeError instead, and litellm runs the hook with ``asyncio.run``.
    """
    asyncio.set_event_loop(None)


def _servers(make: Callable[[tuple[Any, ...]], S]) -> Iterator[Callable[..., S]]:
    """A factory fixture's body: ``start(*script)`` builds a server with ``make``; every
    server started is closed afterwards."""
    started: list[S] = []

    def start(*script: Any) -> S:
        server = make(script)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def openai_server(no_implicit_event_loop: None) -> Iterator[Callable[..., OpenAIServer]]:
    """A factory: ``openai_server(Reply(...), HttpError(429), ...)`` starts a scripted
    OpenAI-compatible server on 127.0.0.1; every server started is closed afterwards."""
    yield from _servers(OpenAIServer)


@pytest.fixture
def raw_server(no_implicit_event_loop: None) -> Iterator[Callable[..., RawServer]]:
    """A factory for raw-bytes loopback servers (tests/support/raw_http.py: trickling,
    silent, arbitrary bytes), closed afterwards."""
    yield from _servers(RawServer)
