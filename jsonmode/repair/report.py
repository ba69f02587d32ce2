"""The record of one repair: nothing jsonmode changes in a model's output goes unrecorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["REPAIR_KINDS", "Repair", "RepairKind"]

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


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
