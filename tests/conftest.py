"""Shared fixtures."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator

import pytest
from support.openai_server import Action, OpenAIServer

# tests/with_crewai needs crewai, which pins its own pydantic and json-repair and so lives
# in its own environment: .ci/crewai.sh builds it and runs that suite there.
collect_ignore = [] if importlib.util.find_spec("crewai") else ["with_crewai"]


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


@pytest.fixture
def openai_server(no_implicit_event_loop: None) -> Iterator[Callable[..., OpenAIServer]]:
    """A factory: ``openai_server(Reply(...), HttpError(429), ...)`` starts a scripted
    OpenAI-compatible server on 127.0.0.1; every server started is closed afterwards."""
    started: list[OpenAIServer] = []

    def start(*script: Action) -> OpenAIServer:
        server = OpenAIServer(script)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()
