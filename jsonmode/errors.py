"""One exception tree for the whole package.

Every error jsonmode raises is a :class:`JsonModeError`. Each class says whether
trying the same thing again can succeed (``retryable``) and may carry a ``hint``
for the human reading it. Errors raised by a generation carry ``attempts``: every
attempt made so far, so nothing the model produced is lost.

::

    JsonModeError                      retryable  meaning
    ├── UsageError                     no         jsonmode was called wrongly (also a TypeError)
    ├── SchemaError                    no         the schema cannot be used as given
    │   ├── InvalidSchemaError         no         not a valid JSON Schema / not a schema type
    │   ├── InvalidGrammarError        no         a grammar that cannot be read (line, column)
    │   └── UnsupportedSchemaError     no         valid, but uses what jsonmode cannot enforce
    │       └── BudgetExceededError    no         compiling it would exceed a size/time budget
    ├── OutputError                    yes        one model output does not conform
    │   ├── OutputParseError           yes        no JSON document could be read
    │   ├── OutputTruncatedError       yes        the document was cut off
    │   │   └── ThinkingTruncatedError yes        the reply ended inside its thinking
    │   └── SchemaViolationError       yes        JSON, but it violates the schema
    ├── AttemptsExhaustedError         no         every attempt produced non-conforming output
    └── BackendError                   (varies)   the model backend failed
        ├── TransientBackendError      yes        rate limit, timeout, 5xx, refused connection
        └── PermanentBackendError      no         400/401/403/404/422 ...: retrying cannot help

The split keeps four failures apart that callers handle differently: a bad
schema (fix your code), bad model output (retry with feedback), a transient
backend failure (back off and retry the same request) and misuse.

Beside the tree, one Python warning category: :class:`JsonModeWarning` (a
``UserWarning``), for what is legal but probably a mistake (a misspelt schema
keyword); filter it with ``warnings.filterwarnings("ignore", category=JsonModeWarning)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from jsonmode._text import clip
from jsonmode.records import Attempt, Issue, Repair, SchemaWarning

__all__ = [
    "AttemptsExhaustedError",
    "BackendError",
    "BudgetExceededError",
    "InvalidGrammarError",
    "InvalidSchemaError",
    "JsonModeError",
    "JsonModeWarning",
    "OutputError",
    "OutputParseError",
    "OutputTruncatedError",
    "PermanentBackendError",
    "SchemaError",
    "SchemaViolationError",
    "ThinkingTruncatedError",
    "TransientBackendError",
    "UnsupportedSchemaError",
    "UsageError",
]


class JsonModeError(Exception):
    """Root of every error jsonmode raises.

    Attributes:
        retryable: whether the same operation may succeed if tried again.
        hint: what the caller can do about it, when there is something to say.
        attempts: every attempt of the generation that raised it (empty outside one).
    """

    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        attempts: Sequence[Attempt] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.attempts: tuple[Attempt, ...] = tuple(attempts)

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message} (hint: {self.hint})"


class UsageError(JsonModeError, TypeError):
    """jsonmode was called with arguments it cannot accept."""


class SchemaError(JsonModeError):
    """The schema cannot be used as given.

    Attributes:
        schema_path: JSON-pointer-like location of the problem inside the schema, if known.
    """

    def __init__(self, message: str, *, schema_path: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.schema_path = schema_path


class InvalidSchemaError(SchemaError):
    """Not a valid JSON Schema, or not something that can be turned into one; or, with
    ``strict_schema=True`` (``--strict-schema``), a schema with lint warnings.

    Attributes:
        warnings: for the latter, the :class:`SchemaWarning` records that refused the
            schema (:attr:`jsonmode.Schema.warnings`); empty otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        schema_path: str = "",
        hint: str | None = None,
        warnings: Sequence[SchemaWarning] = (),
    ) -> None:
        super().__init__(message, schema_path=schema_path, hint=hint)
        self.warnings: tuple[SchemaWarning, ...] = tuple(warnings)


class InvalidGrammarError(SchemaError):
    """A grammar (GBNF) that cannot be read: malformed text, an undefined rule, no
    ``root``. ``line`` and ``column`` (1-based) say where, when it is one place (0
    otherwise); the message names them too."""

    def __init__(
        self, message: str, *, line: int = 0, column: int = 0, hint: str | None = None
    ) -> None:
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(where + message, hint=hint)
        self.line = line
        self.column = column


class UnsupportedSchemaError(SchemaError):
    """A valid schema that uses something jsonmode cannot enforce or handle."""


class BudgetExceededError(UnsupportedSchemaError):
    """Compiling the schema would exceed a budget (automaton size, nesting, time), or
    matching a text against it would (the parse stacks of an ambiguous schema: see
    :class:`jsonmode.decoding.reference.ReferenceMatcher`).

    The façade answers it at compile time by falling back from constrained decoding to
    the prompted tier. Attributes: ``budget`` (what ran out) and ``limit`` (its setting);
    ``doing`` words what was under way in the message.
    """

    def __init__(
        self,
        budget: str,
        limit: float,
        *,
        hint: str | None = None,
        doing: str = "compiling the schema",
    ) -> None:
        super().__init__(
            f"{doing} exceeds the budget for {budget} ({limit})",
            hint=hint or "raise the budget in the compile options, or simplify the schema",
        )
        self.budget = budget
        self.limit = limit


class OutputError(JsonModeError):
    """One model output does not conform to the schema.

    Attributes:
        raw: the text that was checked, unchanged.
        issues: every validation issue found (empty for parse failures).
        repairs: repairs applied before the failure was found (repair mode only).
        value: the JSON value that was read, when one was (schema violations).
    """

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        raw: str,
        issues: Sequence[Issue] = (),
        repairs: Sequence[Repair] = (),
        value: Any = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.raw = raw
        self.value = value
        self.issues: tuple[Issue, ...] = tuple(issues)
        self.repairs: tuple[Repair, ...] = tuple(repairs)


class OutputParseError(OutputError):
    """No JSON document could be read from the output (or repair would lose content)."""


class OutputTruncatedError(OutputError):
    """The output was cut off (length limit, or a document that never closes)."""


class ThinkingTruncatedError(OutputTruncatedError):
    """A reasoning model's reply ended inside its thinking (out of tokens, or its
    thinking never closed): it holds no answer. ``raw`` is the whole reply; the
    attempt's outcome is ``thinking_truncated``, and the re-ask asks for a shorter
    thinking rather than repeating the request blindly."""


class SchemaViolationError(OutputError):
    """The output is JSON but violates the schema; ``issues`` lists every violation."""


class AttemptsExhaustedError(JsonModeError):
    """Every allowed attempt produced output that does not conform.

    ``attempts`` holds every attempt, with its raw text, errors and repairs.
    ``repairable`` is True when the run was strict and repair mode would have read the
    last attempt's output as conforming (only then does the hint suggest it).
    """

    repairable: bool = False


#: The longest message a :class:`BackendError` keeps (characters).
MAX_BACKEND_MESSAGE = 2_000


class BackendError(JsonModeError):
    """The model backend failed.

    The message is at most :data:`MAX_BACKEND_MESSAGE` characters: a server's error
    body can be megabytes (a 400 echoing the request), and it would be repeated on
    stderr, in every batch line and in each attempt; its head and tail are kept, with
    a marker saying how much was cut.

    Attributes:
        status_code: the HTTP status, when the backend reported one.
        retry_after: seconds the server asked to wait before the next request
            (``Retry-After`` / ``retry-after-ms``), when it said; the transport policy
            waits at least that long, or gives up when it is longer than its budget.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
        hint: str | None = None,
        attempts: Sequence[Attempt] = (),
    ) -> None:
        super().__init__(clip(message, MAX_BACKEND_MESSAGE, tail=200), hint=hint, attempts=attempts)
        self.status_code = status_code
        self.retry_after = retry_after


class TransientBackendError(BackendError):
    """A failure that may go away: rate limit, timeout, server error, refused connection."""

    retryable = True


class PermanentBackendError(BackendError):
    """A failure that the same request will always meet: bad request, auth, unknown model."""


class JsonModeWarning(UserWarning):
    """Legal, but probably not what was meant: emitted by :class:`~jsonmode.JsonMode`
    once per schema and instance for each of the schema's
    :attr:`~jsonmode.Schema.warnings` (an unknown keyword such as ``"requried"``, which
    JSON Schema ignores, ``minimum`` above ``maximum`` ...: the schema lint). The record
    is on the warning: ``warning.record``. ``JsonMode(strict_schema=True)`` raises
    :class:`InvalidSchemaError` instead."""

    def __init__(self, message: str, record: SchemaWarning | None = None) -> None:
        super().__init__(message)
        self.record = record
