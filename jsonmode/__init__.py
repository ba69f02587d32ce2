"""jsonmode: make any LLM return JSON that conforms to a schema.

    >>> import jsonmode
    >>> jm = jsonmode.JsonMode("openai/gpt-4o-mini", mode="repair")
    >>> person = jm.generate("Extract: Ada Lovelace, 36", Person)   # doctest: +SKIP

The public surface is exactly ``__all__`` (a test pins it). Optional integrations
live in submodules that ``import jsonmode`` never imports.
"""

from jsonmode._startup import defer_slow_imports

defer_slow_imports()

# ruff: noqa: E402 - the deferral above must run before jsonschema is imported

from jsonmode.backends.base import Backend, Completion, Request
from jsonmode.decorator import structured
from jsonmode.errors import (
    AttemptsExhaustedError,
    BackendError,
    BudgetExceededError,
    InvalidGrammarError,
    InvalidSchemaError,
    JsonModeError,
    JsonModeWarning,
    OutputError,
    OutputParseError,
    OutputTruncatedError,
    PermanentBackendError,
    SchemaError,
    SchemaViolationError,
    TransientBackendError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.facade import JsonMode
from jsonmode.reasoning import Reasoning
from jsonmode.repair.parse import Parsed, parse
from jsonmode.repair.report import Repair
from jsonmode.result import Attempt, Result, Usage
from jsonmode.retry import TransportPolicy
from jsonmode.schema import Issue, Schema

__version__ = "0.1.0"

# The decoder needs numpy (and torch for logits): imported on first use, so that
# `import jsonmode` stays light for the API tiers and the CLI.
_LAZY = {
    "CompiledGrammar": "jsonmode.decoding.grammars.compiled",
    "CompiledSchema": "jsonmode.decoding.compiled",
    "Vocabulary": "jsonmode.decoding.vocabulary",
    "compile_choice": "jsonmode.decoding.grammars.compiled",
    "compile_csv": "jsonmode.decoding.grammars.builtins",
    "compile_grammar": "jsonmode.decoding.grammars.compiled",
    "compile_jsonl": "jsonmode.decoding.grammars.builtins",
    "compile_regex": "jsonmode.decoding.grammars.compiled",
    "compile_schema": "jsonmode.decoding.compiled",
    "compile_structural_tag": "jsonmode.decoding.grammars.structural_tags",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jsonmode' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Attempt",
    "AttemptsExhaustedError",
    "Backend",
    "BackendError",
    "BudgetExceededError",
    "CompiledGrammar",
    "CompiledSchema",
    "Completion",
    "InvalidGrammarError",
    "InvalidSchemaError",
    "Issue",
    "JsonMode",
    "JsonModeError",
    "JsonModeWarning",
    "OutputError",
    "OutputParseError",
    "OutputTruncatedError",
    "Parsed",
    "PermanentBackendError",
    "Reasoning",
    "Repair",
    "Request",
    "Result",
    "Schema",
    "SchemaError",
    "SchemaViolationError",
    "TransientBackendError",
    "TransportPolicy",
    "UnsupportedSchemaError",
    "Usage",
    "UsageError",
    "Vocabulary",
    "__version__",
    "compile_choice",
    "compile_csv",
    "compile_grammar",
    "compile_jsonl",
    "compile_regex",
    "compile_schema",
    "compile_structural_tag",
    "parse",
    "structured",
]
