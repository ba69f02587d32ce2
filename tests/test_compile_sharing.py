"""A schema compile does each piece of work once: the decoder takes the pattern DFAs
that reading the schema (``Schema.of``) compiled for validation, instead of
compiling every ``pattern``, ``patternProperties`` name and ``propertyNames`` pattern
a second time; the DFA is the same one, and a pattern that does not compile fails
exactly as before."""

from __future__ import annotations

from typing import Any

import pytest

import jsonmode
from jsonmode import limits
from jsonmode import regex as rx
from jsonmode.decoding import compiled as compiled_module
from jsonmode.errors import UnsupportedSchemaError
from jsonmode.schema import patterns


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every pattern ``jsonmode.regex.compile_pattern`` compiles from now on."""
    seen: list[str] = []
    original = rx.compile_pattern

    def counted(pattern: str, **options: Any) -> rx.CharDFA:
        seen.append(pattern)
        return original(pattern, **options)

    monkeypatch.setattr(rx, "compile_pattern", counted)
    return seen


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^zq[0-9]{3}-shared$"},
        {
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^zq[a-f]{4}-prop$"}},
            "patternProperties": {"^zq_x[0-9]+$": {"type": "integer"}},
            "propertyNames": {"pattern": "^zq[a-z_0-9]*$"},
        },
    ],
    ids=["pattern", "object"],
)
def test_each_pattern_of_a_schema_is_compiled_once(
    schema: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _counting(monkeypatch)
    compiled_module._cache.clear()
    compiled = jsonmode.compile_schema(schema)
    assert seen, "the schema's patterns are compiled while it is read"
    assert sorted(seen) == sorted(set(seen)), f"compiled twice: {seen}"
    assert compiled.accepts('"zq123-shared"') == (schema.get("type") == "string")


def test_the_shared_dfa_is_the_one_compile_pattern_builds() -> None:
    for pattern in ("^[a-z]+$", "ab|cd", "x{2,5}", "^\\d{4}-\\d{2}$", "é+"):
        patterns.compiled(pattern)  # (cached first, as reading a schema does)
        assert patterns.pattern_dfa(pattern) == rx.compile_pattern(pattern)
    fresh = "^never-cached-[0-9]{3}$"
    assert patterns.pattern_dfa(fresh) == rx.compile_pattern(fresh)


def test_a_pattern_the_dfa_refuses_fails_as_compile_pattern_does() -> None:
    over = "a" * 1999 + "."  # over the DFA's budget: validation searches it lazily
    assert patterns.compiled(over).engine == "lazy"
    with pytest.raises(UnsupportedSchemaError) as shared:
        patterns.pattern_dfa(over)
    with pytest.raises(UnsupportedSchemaError) as direct:
        rx.compile_pattern(over)
    assert shared.value.message == direct.value.message


def test_a_cached_dfa_is_not_shared_past_a_lowered_pattern_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pattern = "^[a-c]{2}-capped-[0-9]+$"
    patterns.compiled(pattern)
    monkeypatch.setattr(limits, "MAX_PATTERN_CHARS", len(pattern) - 1)
    with pytest.raises(jsonmode.BudgetExceededError):
        rx.compile_pattern(pattern)
    with pytest.raises(jsonmode.BudgetExceededError):
        patterns.pattern_dfa(pattern)
