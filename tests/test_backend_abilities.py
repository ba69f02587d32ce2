"""Backend abilities are declared protocols (backends/base.py), checked with isinstance:
each shipped backend has exactly the abilities it implements, and the façade's choices
follow them (no getattr probing)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import jsonmode.backends.base as base
from jsonmode import JsonMode, UsageError
from jsonmode.backends import FunctionBackend, ScriptedBackend
from jsonmode.backends.langchain import LangChainBackend
from jsonmode.backends.litellm import LiteLLMBackend
from jsonmode.backends.openai_client import OpenAIClientBackend
from jsonmode.backends.transformers import TransformersBackend

ABILITIES = (
    base.Constrains,
    base.ConstrainsGrammar,
    base.TakesGrammar,
    base.CompletesBatch,
    base.Prepares,
)

EXPECTED: dict[type, set[type]] = {
    TransformersBackend: {base.Constrains, base.ConstrainsGrammar, base.CompletesBatch},
    LiteLLMBackend: {base.TakesGrammar, base.Prepares},
    OpenAIClientBackend: set(),
    FunctionBackend: set(),
    LangChainBackend: set(),
    ScriptedBackend: set(),
}


@pytest.mark.parametrize("backend", list(EXPECTED), ids=lambda cls: cls.__name__)
def test_each_shipped_backend_has_exactly_its_abilities(backend: type) -> None:
    blank = object.__new__(backend)  # the abilities are the class's methods and flags
    found = {ability for ability in ABILITIES if isinstance(blank, ability)}
    assert found == EXPECTED[backend]


def test_every_shipped_backend_is_listed() -> None:
    import jsonmode.backends as package
    import jsonmode.backends.langchain as langchain
    import jsonmode.backends.litellm as litellm
    import jsonmode.backends.openai_client as openai_client
    import jsonmode.backends.transformers as transformers

    shipped = set()
    for module in (package, langchain, litellm, openai_client, transformers):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            ours = cls.__module__.startswith("jsonmode.backends.")
            protocol = cls in (base.Backend, base.StreamingBackend)
            if ours and cls.__name__.endswith("Backend") and not protocol:
                shipped.add(cls)
    assert shipped == set(EXPECTED)


class Plain:
    name = "plain"
    native_schema = False

    def complete(self, request: Any) -> Any:
        raise AssertionError("not called")

    async def acomplete(self, request: Any) -> Any:
        raise AssertionError("not called")


class Local(Plain, base.Constrains):
    """Declares the constrained ability by subclassing the protocol."""

    constrained_decoding = True

    def constrain(self, schema: Any) -> Any:
        return schema


def test_the_constrained_tier_follows_the_declared_ability() -> None:
    assert JsonMode(Local()).tier == "constrained"
    assert JsonMode(Plain()).tier == "prompted"
    with pytest.raises(UsageError, match="exposes no logits"):
        JsonMode(Plain(), tier="constrained")


def test_prepare_calls_only_a_backend_that_prepares() -> None:
    calls: list[str] = []

    class Preparing(Plain):
        def prepare(self) -> None:
            calls.append("prepare")

    assert isinstance(Preparing(), base.Prepares)
    assert not isinstance(Plain(), base.Prepares)
    JsonMode(Preparing()).prepare()
    JsonMode(Plain()).prepare()  # nothing to do, nothing raised
    assert calls == ["prepare"]
