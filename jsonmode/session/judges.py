"""Judges: what one session asks of its target, and the schema judge.

The attempt session (:mod:`jsonmode.session.attempts`) asks a :class:`Judge` which tier
to use, what to send first and on a re-ask, and how to read each output;
:class:`SchemaJudge` does it for a JSON value under a schema,
:class:`~jsonmode.session.grammar_judge.GrammarJudge` for a text under a grammar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import pydantic

from jsonmode._json import StrictJSONError, check_value
from jsonmode.backends.base import Backend, Constrains, Request
from jsonmode.errors import OutputError, UnsupportedSchemaError, UsageError
from jsonmode.repair.parse import Mode, Parsed, parse
from jsonmode.result import Attempt, Tier
from jsonmode.schema.core import Schema
from jsonmode.session.prompts import Message, first_messages, reask_messages

__all__ = ["Judge", "SchemaJudge", "checked_examples", "repair_would_pass"]


class Judge(Protocol):
    """What one validation session asks of its target (a schema, a grammar)."""

    #: what the output must be, in the exhausted error: "conforming JSON" ...
    wanted: str

    def tier(self, tier: Tier, backend: Backend) -> Tier:
        """The tier this target runs in, given the instance's tier."""
        ...

    def request(self, messages: tuple[Message, ...], tier: Tier) -> Request: ...

    def first_messages(
        self, messages: tuple[Message, ...], examples: Sequence[tuple[str, Any]]
    ) -> tuple[Message, ...]:
        """The contract, the checked few-shot turns, the caller's messages."""
        ...

    def reask_messages(
        self, first: tuple[Message, ...], failed: Attempt, max_attempts: int
    ) -> tuple[Message, ...]: ...

    def read(self, text: str, truncated: bool) -> Parsed:
        """The value of one output, or an :class:`OutputError` raised."""
        ...

    def repairable(self, attempt: Attempt) -> bool:
        """A strict run: whether repair mode would have read ``attempt`` as valid."""
        ...


class SchemaJudge:
    """The session's judge for a JSON value under a schema (see :class:`Judge`)."""

    wanted = "conforming JSON"

    def __init__(self, spec: Schema, mode: Mode, context: Any) -> None:
        self.spec = spec
        self.mode = mode
        self.context = context

    def tier(self, tier: Tier, backend: Backend) -> Tier:
        """Constrained falls back to prompted when the decoder cannot compile this
        schema (unsupported construct or over a budget)."""
        if tier != "constrained":
            return tier
        if not isinstance(backend, Constrains):
            return "prompted"
        try:
            backend.constrain(self.spec)
        except UnsupportedSchemaError:
            return "prompted"
        return "constrained"

    def request(self, messages: tuple[Message, ...], tier: Tier) -> Request:
        return Request(
            messages, self.spec, native=tier == "native", constrained=tier == "constrained"
        )

    def first_messages(
        self, messages: tuple[Message, ...], examples: Sequence[tuple[str, Any]]
    ) -> tuple[Message, ...]:
        return first_messages(self.spec, messages, checked_examples(self.spec, examples))

    def reask_messages(
        self, first: tuple[Message, ...], failed: Attempt, max_attempts: int
    ) -> tuple[Message, ...]:
        return reask_messages(first, failed, max_attempts)

    def read(self, text: str, truncated: bool) -> Parsed:
        return parse(text, self.spec, self.mode, truncated=truncated, context=self.context)

    def repairable(self, attempt: Attempt) -> bool:
        return repair_would_pass(attempt, self.spec, self.context)


def repair_would_pass(attempt: Attempt, spec: Schema, context: Any) -> bool:
    """Whether repair mode would have read ``attempt``'s output as conforming (so a
    hint to use it helps); bounded by repair's own limits."""
    if attempt.outcome in ("valid", "backend_error", "truncated") or not attempt.raw:
        return False
    try:
        parse(attempt.raw, spec, "repair", context=context)
    except OutputError:
        return False
    return True


def checked_examples(spec: Schema, examples: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``examples`` as (prompt, JSON value) pairs; a pydantic instance is dumped.

    Raises:
        UsageError: an example that is not a (prompt, value) pair, not a JSON value,
            or does not conform to ``spec``.
    """
    checked: list[tuple[str, Any]] = []
    for index, example in enumerate(examples):
        if not (isinstance(example, tuple) and len(example) == 2 and isinstance(example[0], str)):
            raise UsageError(f"example {index} must be a (prompt, value) pair")
        prompt, value = example
        if isinstance(value, pydantic.BaseModel):
            value = value.model_dump(mode="json")
        try:
            check_value(value)  # a number beyond the double range, a lone surrogate
        except StrictJSONError as exc:
            raise UsageError(f"example {index} is not a JSON value: {exc}") from None
        issues = spec.issues(value)
        if issues:
            raise UsageError(f"example {index} does not conform to the schema: {issues[0]}")
        checked.append((prompt, value))
    return checked
