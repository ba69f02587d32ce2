"""Thinking a reasoning API returns apart (``reasoning_content``), through real litellm
against the scripted loopback server (tests/support/openai_server.py): kept on the
result, whole and streamed, and counted as thinking tokens as the API reported them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.openai_server import OpenAIServer, Reply

import jsonmode.metrics
from jsonmode import JsonMode, TransportPolicy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_implicit_event_loop")]

Start = Callable[..., OpenAIServer]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
THINKING = 'Maybe {"name": "Draft"}? No: the user said Ada.'


def instance(server: OpenAIServer, **options: Any) -> JsonMode:
    return JsonMode(
        "openai/test-model",
        api_base=server.base_url,
        api_key="unused",
        timeout=5.0,
        transport=TransportPolicy(max_retries=0),
        **options,
    )


def test_reasoning_content_lands_on_the_result(openai_server: Start) -> None:
    server = openai_server(Reply('{"name": "Ada"}', reasoning=THINKING, reasoning_tokens=12))
    result = instance(server).run("Who?", SCHEMA)
    assert result.data == {"name": "Ada"}
    assert result.reasoning == THINKING
    assert result.usage is not None
    assert result.usage.reasoning_tokens == 12


def test_streamed_reasoning_content_lands_on_the_result(openai_server: Start) -> None:
    server = openai_server(Reply('{"name": "Ada"}', reasoning=THINKING))
    events = list(instance(server).stream("Who?", SCHEMA))
    final = events[-1]
    assert final.kind == "final"
    assert final.result.reasoning == THINKING
    assert final.result.data == {"name": "Ada"}


def test_thinking_tokens_are_counted_as_reported(openai_server: Start) -> None:
    server = openai_server(Reply('{"name": "Ada"}', reasoning=THINKING, reasoning_tokens=12))
    registry = CollectorRegistry()
    jsonmode.metrics.enable(registry)
    try:
        instance(server).run("Who?", SCHEMA)
    finally:
        jsonmode.metrics.disable()
    reported = {"tier": "prompted", "source": "reported"}
    estimated = {"tier": "prompted", "source": "estimated"}
    assert registry.get_sample_value("jsonmode_thinking_tokens_total", reported) == 12
    assert registry.get_sample_value("jsonmode_thinking_tokens_total", estimated) == 0
