"""What a generation returns: the value plus the record of every attempt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from jsonmode.records import OUTCOMES, TIERS, Attempt, Mode, Outcome, Repair, Tier, Usage

__all__ = ["OUTCOMES", "TIERS", "Attempt", "Outcome", "Result", "Tier", "Usage"]

T = TypeVar("T")


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
        reasoning: (property) the thinking of the attempt that produced the value, kept
            apart from the answer (None: the model did not think, or ``reasoning=None``).
    """

    value: T
    data: Any
    tier: Tier
    mode: Mode
    attempts: tuple[Attempt, ...]
    duration_s: float

    @property
    def raw(self) -> str:
        """The text of the attempt that succeeded."""
        return self.attempts[-1].raw

    @property
    def reasoning(self) -> str | None:
        """The thinking of the attempt that succeeded (None when it had none)."""
        return self.attempts[-1].reasoning

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
