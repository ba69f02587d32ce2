"""Backends: one small protocol (:mod:`.base`), one module per kind of backend."""

from __future__ import annotations

from typing import Any

from jsonmode.backends.base import Backend, Completion, Request
from jsonmode.backends.function import FunctionBackend
from jsonmode.backends.options import check_spelling
from jsonmode.backends.scripted import ScriptedBackend
from jsonmode.errors import UsageError

__all__ = ["Backend", "Completion", "FunctionBackend", "Request", "ScriptedBackend", "resolve"]


def _is_torch_module(obj: object) -> bool:
    return any(
        klass.__module__.split(".")[0] in ("torch", "transformers") for klass in type(obj).__mro__
    )


def _is_langchain_runnable(obj: object) -> bool:
    """A LangChain model or runnable, recognised without importing LangChain."""
    return any(
        klass.__name__ == "Runnable" and klass.__module__ == "langchain_core.runnables.base"
        for klass in type(obj).__mro__
    )


def _is_openai_client(obj: object) -> bool:
    """An ``openai.OpenAI`` / ``AsyncOpenAI`` client (Azure's too, and subclasses),
    recognised without importing openai."""
    return any(
        klass.__module__.split(".")[0] == "openai"
        and klass.__name__ in ("OpenAI", "AsyncOpenAI", "AzureOpenAI", "AsyncAzureOpenAI")
        for klass in type(obj).__mro__
    )


def resolve(backend: object, **options: Any) -> Backend:
    """The backend for what the caller passed to ``JsonMode``.

    A :class:`Backend` is used as is; a string is a litellm model; an OpenAI SDK
    client goes through :class:`~jsonmode.backends.openai_client.OpenAIClientBackend`;
    a transformers model is decoded locally; a LangChain model (or runnable) goes
    through :class:`~jsonmode.adapters.langchain.LangChainBackend`; any other callable
    is a :class:`FunctionBackend`. ``options`` go to the backend's constructor.
    """
    if isinstance(backend, Backend):
        if options:
            raise UsageError(f"options {sorted(options)} cannot be applied to a ready backend")
        return backend
    if isinstance(backend, str):
        if "model" in options:
            raise UsageError(
                f"model={options['model']!r} is not an option here: jsonmode sends the model "
                f"string it was given, {backend!r}",
            )
        from jsonmode.backends.litellm import LiteLLMBackend

        return LiteLLMBackend(backend, **options)
    if _is_openai_client(backend):
        from jsonmode.backends.openai_client import OpenAIClientBackend

        return OpenAIClientBackend(backend, **options)
    if _is_torch_module(backend):
        from jsonmode.backends.transformers import TransformersBackend

        return TransformersBackend(backend, **options)
    if _is_langchain_runnable(backend):
        from jsonmode.backends.langchain import LangChainBackend

        return LangChainBackend(backend, **options)  # type: ignore[arg-type]
    if callable(backend):
        if "native" in options:
            raise UsageError(
                f"native={options['native']!r} picks how the native tier sends the schema, "
                "and a function backend has no native tier: it takes text and returns text",
                hint="a litellm model string or an OpenAI client can take the schema natively",
            )
        check_spelling(options, _FUNCTION_OPTIONS, "a function backend")
        unknown = set(options) - set(_FUNCTION_OPTIONS)
        if unknown:
            raise UsageError(f"a function backend takes no options {sorted(unknown)}")
        return FunctionBackend(backend, **options)
    raise UsageError(
        f"cannot use {type(backend).__name__} as a backend",
        hint="pass a litellm model string, an OpenAI client, a callable returning text, "
        "a LangChain model, or a Backend",
    )


_FUNCTION_OPTIONS = ("takes", "timeout")
