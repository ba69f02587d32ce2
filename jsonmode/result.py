"""What a generation returns: the value plus the record of every attempt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, get_args

from jsonmode.repair.report import Repair
from jsonmode.schema.validation import Issue

__all__ = ["OUTCOMES", "TIERS", "Attempt", "Outcome", "Result", "Tier", "Usage"]

T = TypeVar("T")

Tier = Literal["constrained", "native", "prompted"]
TIERS: tuple[Tier, ...] = get_args(Tier)

#: How one attempt ended.
Outcome = Literal["valid", "invalid_json", "schema_violation", "truncated", "backend_error"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts, when the backend reports them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
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


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    """A conforming value and how it was obtained.

    Attributes:
        value: a model instance / typed value for Python types, else the JSON value.
        data: the plain JSON value.
        tier: which tier produced it.
        mode: ``strict`` or ``repair``.
        attempts: every attempt, the last one valid.
        duration_s: wall time of the whole request.
    """

    value: T
    data: Any
    tier: Tier
    mode: Literal["strict", "repair"]
    attempts: tuple[Attempt, ...]
    duration_s: float

    @property
    def raw(self) -> str:
        """The text of the attempt that succeeded."""
        return self.attempts[-1].raw

    @property
    def repairs(self) -> tuple[Repair, ...]:
        """Repairs applied to the successful attempt."""
        return self.attempts[-1].repairs

    @property
    def usage(self) -> Usage | None:
        """Token counts summed over attempts, None when the backend never reported them."""
        reported = [a.usage for a in self.attempts if a.usage is not None]
        total = Usage()
        for usage in reported:
            total = total + usage
        return total if reported else None
