"""The records every layer shares: what a generation and its failures are made of.

:class:`Issue` (one reason a value does not conform), :class:`Repair` (one change made
to a model's output), :class:`SchemaWarning` (one finding about a schema),
:class:`Usage` and :class:`Attempt` (one call to the backend and what became of it).
They live on the ground floor, beside :mod:`jsonmode.errors`, which carries them: this
module imports nothing of jsonmode above :mod:`jsonmode._text`, so the error tree
reaches neither the schema validators nor the repair code.

The modules that make these records re-export them where users have always found
them (``jsonmode.schema.validation.Issue``, ``jsonmode.repair.report.Repair``,
``jsonmode.result.Attempt`` ...). All are immutable (frozen dataclasses): safe to
share between threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from jsonmode._text import shown

__all__ = [
    "OUTCOMES",
    "REPAIR_KINDS",
    "TIERS",
    "Attempt",
    "Issue",
    "Mode",
    "Outcome",
    "Repair",
    "RepairKind",
    "SchemaWarning",
    "Severity",
    "Tier",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class Issue:
    """One reason a value does not conform.

    Attributes:
        path: JSONPath-style location in the instance, ``$`` for the root (``$.items[0].name``).
        keyword: the schema keyword that failed (``type``, ``required``, ``enum`` ...),
            or ``parse``/``model`` for failures outside JSON Schema.
        message: human-readable explanation, suitable for showing to a model.
    """

    path: str
    keyword: str
    message: str

    def __str__(self) -> str:
        return f"{self.path} ({self.keyword}): {self.message}"


RepairKind = Literal[
    "extract",  # the JSON was cut out of prose or a markdown fence
    "double_encoded",  # the reply was a JSON string holding the document: its content was read
    "python_literal",  # None/True/False (or NULL, TRUE...) outside strings -> null/true/false
    "syntax",  # json-repair fixed the syntax (quotes, commas, comments, missing brackets)
    "string_to_integer",  # "42" -> 42 where the schema says integer
    "string_to_number",  # "4.5" -> 4.5 where the schema says number
    "string_to_boolean",  # "true" -> true
    "string_to_null",  # "null" -> null
    "float_to_integer",  # 31.0 -> 31 where the schema says integer
    "wrap_array",  # one value -> a one-element array
    "enum_case",  # "RED" -> "red": a case-insensitive, unambiguous enum match
]
REPAIR_KINDS: tuple[RepairKind, ...] = get_args(RepairKind)


@dataclass(frozen=True, slots=True)
class Repair:
    """One change made to a model's output.

    Attributes:
        path: where in the document (``$`` for the whole output).
        kind: what was done; one of :data:`REPAIR_KINDS`.
        before: the original (text for ``extract``/``python_literal``/``syntax``/
            ``double_encoded``, else the JSON value).
        after: the replacement, same convention.
    """

    path: str
    kind: RepairKind
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.path}: {self.kind} {_short(self.before)} -> {_short(self.after)}"


Severity = Literal["warning", "note"]


@dataclass(frozen=True, slots=True)
class SchemaWarning:
    """One finding about a schema (a record, not a Python warning category: the façade
    emits these as :class:`~jsonmode.errors.JsonModeWarning`).

    Attributes:
        location: the JSON pointer (RFC 6901) of the keyword in the schema document
            (``/properties/name/requried``); ``""`` (the whole document) for the record
            that counts the findings left out.
        keyword: the keyword as written (``""`` for that counting record).
        message: one line: ``unknown keyword 'requried' (did you mean 'required'?)``.
        severity: ``"warning"``, or ``"note"`` for a finding that is probably meant
            (OpenAPI's ``nullable``): the CLI prints it as ``jsonmode: note:``, and the
            façade does not emit it.
    """

    location: str
    keyword: str
    message: str
    severity: Severity = "warning"

    def __str__(self) -> str:
        if not self.location:
            return self.message
        return f"{shown(self.location, middle=True)}: {self.message}"


#: How replies are read: ``strict`` (never repaired) or ``repair`` (every repair recorded).
Mode = Literal["strict", "repair"]

Tier = Literal["constrained", "native", "prompted"]
TIERS: tuple[Tier, ...] = get_args(Tier)

#: How one attempt ended.
Outcome = Literal[
    "valid", "invalid_json", "schema_violation", "truncated", "thinking_truncated", "backend_error"
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts, when the backend reports them. ``reasoning_tokens``: how many of
    the completion tokens were thinking, when the API says (OpenAI's
    ``completion_tokens_details.reasoning_tokens``; None when it does not)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        reasoning = (
            None
            if self.reasoning_tokens is None and other.reasoning_tokens is None
            else (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        )
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            reasoning,
        )


@dataclass(frozen=True, slots=True)
class Attempt:
    """One call to the backend and what became of its output.

    Attributes:
        index: 1-based attempt number.
        outcome: how it ended (see :data:`Outcome`).
        raw: the output text, unchanged ("" when the backend failed).
        error: why it failed, in one line (parse error, truncation, backend error).
        issues: every schema violation (for ``schema_violation``).
        repairs: repairs applied (repair mode only), in order.
        value: the JSON value read from the output, when one was read.
        latency_s: wall time of the backend call, transport retries included.
        usage: token counts, when the backend reported them.
        transport_retries: transient backend failures retried inside this attempt.
        reasoning: the model's thinking, split off before the answer was read (from the
            reply's thinking markers, or returned apart by the API); None: none.
        calls: (property) backend calls the attempt took, ``transport_retries + 1``.
    """

    index: int
    outcome: Outcome
    raw: str = ""
    error: str | None = None
    issues: tuple[Issue, ...] = ()
    repairs: tuple[Repair, ...] = ()
    value: Any = None
    latency_s: float = 0.0
    usage: Usage | None = None
    transport_retries: int = 0
    reasoning: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "valid"

    @property
    def calls(self) -> int:
        """Backend calls this attempt took: the first and every transport retry."""
        return self.transport_retries + 1

    def describe(self) -> str:
        """A few lines for humans: outcome, time and backend calls, errors, repairs."""
        calls = f"{self.calls} call" + ("" if self.calls == 1 else "s")
        lines = [f"attempt {self.index}: {self.outcome} ({self.latency_s * 1000:.1f} ms, {calls})"]
        if self.error:
            lines.append(f"  error: {self.error}")
        lines += [f"  issue: {issue}" for issue in self.issues]
        lines += [f"  repair: {repair}" for repair in self.repairs]
        if self.raw:
            raw = self.raw if len(self.raw) <= 500 else self.raw[:500] + " ..."
            lines.append("  raw: " + raw.replace("\n", "\n       "))
        return "\n".join(lines)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
