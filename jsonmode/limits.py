"""Size caps on schemas and regular expressions, checked before any work on them.

What a schema costs to read (its metaschema check, reference analysis, the compiled
check) and to compile grows with its size, and a regular expression's parse, DFA and
fallback grow with its length; so each input is measured first and refused, with a
:class:`~jsonmode.errors.BudgetExceededError` naming the cap, before it costs more
than reading its length. The time those steps take is bounded separately: a schema
is read under the compile deadline (:mod:`jsonmode.budget`; outside a
compile, ``DEFAULT_SECONDS``).

The caps, with the largest real inputs measured (JSONSchemaBench, MaskBench):

- :data:`MAX_SCHEMA_CHARS`, 8 MiB: one schema's JSON text — a JSON text or file as
  given, a dict as ``json.dumps`` writes it (largest real schema: Kubernetes, 1.28 M
  characters). Also the JSON text of ``compile_choice``'s list.
- :data:`MAX_PATTERN_CHARS`, 64 KiB: one regular expression — a schema's ``pattern``,
  a ``patternProperties`` name (``propertyNames`` patterns included), the source of
  ``compile_regex`` (longest real ``pattern``: 1 327 characters).

Both are module attributes read at each call: raise one process-wide with, say,
``jsonmode.limits.MAX_SCHEMA_CHARS = 32 << 20``. Thread-safe (read only).
"""

from __future__ import annotations

from jsonmode.errors import BudgetExceededError

__all__ = ["MAX_PATTERN_CHARS", "MAX_SCHEMA_CHARS", "check_pattern", "check_schema_size"]

#: Longest JSON text of one schema (characters): 8 MiB.
MAX_SCHEMA_CHARS = 8 << 20
#: Longest regular expression (characters): 64 KiB.
MAX_PATTERN_CHARS = 64 << 10

SCHEMA_BUDGET = "schema size (characters of JSON text)"
PATTERN_BUDGET = "pattern length (characters)"


def check_schema_size(chars: int, what: str = "the schema", *, read: bool = False) -> None:
    """Raise :class:`BudgetExceededError` when ``chars`` (the length of ``what``'s
    JSON text; ``read``: as much of it as was read, the rest left unread) is over
    :data:`MAX_SCHEMA_CHARS`."""
    limit = MAX_SCHEMA_CHARS
    if chars > limit:
        size = f"more than {limit:,}" if read else f"{chars:,}"
        raise BudgetExceededError(
            SCHEMA_BUDGET,
            limit,
            doing=f"{what} ({size} characters of JSON text)",
            hint="split the schema, or raise jsonmode.limits.MAX_SCHEMA_CHARS",
        )


def check_pattern(pattern: str, where: str = "") -> None:
    """Raise :class:`BudgetExceededError` when ``pattern`` is longer than
    :data:`MAX_PATTERN_CHARS`; ``where`` (a JSON pointer) is named in the message."""
    limit = MAX_PATTERN_CHARS
    if len(pattern) > limit:
        at = f" at {where}" if where else ""
        raise BudgetExceededError(
            PATTERN_BUDGET,
            limit,
            doing=f"the regular expression{at} ({len(pattern):,} characters)",
            hint="shorten the pattern, or raise jsonmode.limits.MAX_PATTERN_CHARS",
        )
