"""The compile options: :class:`CompileOptions`, every knob of a compile and its budgets.

Shared by the schema compiler (:mod:`~jsonmode.decoding.compile.compiler`, which re-exports it),
the grammar front ends and the schema builder's collaborators; imports nothing of the
decoder but the budget's default, so any of them can import it. Immutable: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jsonmode.budget import DEFAULT_SECONDS
from jsonmode.errors import UnsupportedSchemaError, UsageError

__all__ = ["CompileOptions"]


@dataclass(frozen=True)
class CompileOptions:
    """How a schema compiles. Every field is a typed setting with a documented default.

    Attributes:
        whitespace: ``"standard"`` allows at most one space after ``,`` and ``:``
            (what ``json.dumps`` writes; generation stays compact); ``"flexible"``
            allows up to ``max_whitespace`` whitespace characters between any two
            tokens (accepts ``json.dumps(x, indent=2)``).
        max_whitespace: the bound for flexible whitespace runs (default 40).
        property_order: ``"schema"`` (declared order: the order is the reasoning
            order) or ``"any"`` (any order, each member once, ``required`` enforced;
            any number of members, see :mod:`~jsonmode.decoding.automata.families`).
        spelling: ``"canonical"`` (default): the decoder lets a model write each value
            only as ``json.dumps(value, ensure_ascii=False)`` would — integers without
            a fraction or exponent (``84``, never ``84.0``), strings without needless
            escapes (no ``\\/``, no ``\\u`` for a character that may be written as it
            is), constants and keys in their one spelling. ``"complete"``: any JSON
            spelling of a valid value. ``accepts()`` always takes every spelling.
        strict: raise :class:`UnsupportedSchemaError` instead of listing a keyword in
            ``unenforced``.
        max_rule_states: automaton states per rule (default 20 000; each costs
            256 int32 transitions, ~1 KiB).
        max_repeat: counted repetitions (``maxItems``, ``maxLength``) expand up to this
            bound (default 256); larger bounds are post-validated instead.
        max_nesting_depth: how deep the matcher's stack may grow (default 64), in
            frames (a grammar's counts levels of recursion, default 256: see
            :mod:`jsonmode.decoding.automata.headroom`). A stack that could not finish within it
            is never kept.
        max_compile_seconds: give up compiling after this long (default 10 s),
            checked while compiling (per schema node, automaton state, enum value;
            see :mod:`~jsonmode.budget`): an over-budget schema stops within
            milliseconds of it, reading and validating the schema included.

    Exceeding a budget raises :class:`~jsonmode.errors.BudgetExceededError` naming it
    (its ``budget`` attribute), and the façade falls back to the prompted tier. Memory
    while compiling follows the state budget (``max_rule_states``, and the regex
    engine's own), not the size of the schema's expansion.

    Raises:
        UsageError: a field of the wrong type or out of range: ``whitespace``,
            ``property_order`` and ``spelling`` are strings; ``strict`` a bool;
            ``max_whitespace`` and ``max_repeat`` ints of 0 or more;
            ``max_rule_states`` and ``max_nesting_depth`` ints of 1 or more;
            ``max_compile_seconds`` a positive number (int or float, ``inf`` for no
            limit). A bool is not a number here.
        UnsupportedSchemaError: a ``whitespace``, ``property_order`` or ``spelling``
            string that is not one of the names above.
    """

    whitespace: Literal["standard", "flexible"] = "standard"
    max_whitespace: int = 40
    property_order: Literal["schema", "any"] = "schema"
    spelling: Literal["canonical", "complete"] = "canonical"
    strict: bool = False
    max_rule_states: int = 20_000
    max_repeat: int = 256
    max_nesting_depth: int = 64
    max_compile_seconds: float = DEFAULT_SECONDS

    def __post_init__(self) -> None:
        for name, names in _CHOICES.items():
            value = getattr(self, name)
            if not isinstance(value, str):
                expected = " or ".join(repr(choice) for choice in names)
                raise UsageError(_misused(name, f"one of the strings {expected}", value))
            if value not in names:
                raise UnsupportedSchemaError(f"unknown {name} option {value!r}")
        if not isinstance(self.strict, bool):
            raise UsageError(_misused("strict", "True or False", self.strict))
        for name, least in _COUNTS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise UsageError(_misused(name, f"an int of {least} or more", value))
        seconds = self.max_compile_seconds
        if (
            not isinstance(seconds, (int, float))
            or isinstance(seconds, bool)
            or not seconds > 0  # (NaN too)
        ):
            expected = "a number of seconds above 0 (float('inf'): no limit)"
            raise UsageError(_misused("max_compile_seconds", expected, seconds))


# CompileOptions' fields checked by __post_init__: the string options and their
# names, and the counts with their least value.
_CHOICES = {
    "whitespace": ("standard", "flexible"),
    "property_order": ("schema", "any"),
    "spelling": ("canonical", "complete"),
}
_COUNTS = {"max_whitespace": 0, "max_rule_states": 1, "max_repeat": 0, "max_nesting_depth": 1}


def _misused(option: str, expected: str, value: object) -> str:
    """The message for a compile option of the wrong type or range."""
    return f"compile option {option} must be {expected}, not {value!r} ({type(value).__name__})"
