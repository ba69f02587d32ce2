"""Backends: one small protocol (:mod:`.base`), one module per kind of backend."""

from __future__ import annotations

from typing import Any

from jsonmode.backends.base import Backend, Completion, Request
from jsonmode.backends.function import FunctionBackend
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


def resolve(backend: object, **options: Any) -> Backend:
    """The backend for what the caller passed to ``JsonMode``.

    A :class:`Backend` is used as is; a string is a litellm model; a transformers
    model is decoded locally; a LangChain model (or runnable) goes through
    :class:`~jsonmode.adapters.langchain.LangChainBackend`; any other callable is a
    :class:`FunctionBackend`. ``options`` go to the backend's constructor.
    """
    if isinstance(backend, Backend):
        if options:
            raise UsageError(f"options {sorted(options)} cannot be applied to a ready backend")
        return backend
    if isinstance(backend, str):
        from jsonmode.backends.litellm import LiteLLMBackend

        return LiteLLMBackend(backend, **options)
    if _is_torch_module(backend):
        from jsonmode.backends.transformers import TransformersBackend

        return TransformersBackend(backend, **options)
    if _is_langchain_runnable(backend):
        from jsonmode.backends.langchain import LangChainBackend

        return LangChainBackend(backend, **options)  # type: ignore[arg-type]
    if callable(backend):
        unknown = set(options) - {"takes", "timeout"}
        if unknown:
            raise UsageError(f"a function backend takes no options {sorted(unknown)}")
        return FunctionBackend(backend, **options)
    raise UsageError(
        f"cannot use {type(backend).__name__} as a backend",
        hint="pass a litellm model string, a callable returning text, a LangChain model, "
        "or a Backend",
    )
