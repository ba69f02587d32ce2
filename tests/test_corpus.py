"""A corpus of realistic model outputs, each read in both modes.

``corpus/cases.jsonl`` holds one case per line: the raw reply, the schema it answers
(a name in ``corpus/schemas.json``), what strict mode must do (``accept``/``reject``)
and what repair mode must give (a value, compared with its number types, or an error
class), optionally with the repair kinds expected in order.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jsonschema
import pytest

import jsonmode
from jsonmode import OutputError, OutputParseError, OutputTruncatedError, SchemaViolationError
from jsonmode.repair.report import REPAIR_KINDS

CORPUS = pathlib.Path(__file__).parent / "corpus"
SCHEMAS: dict[str, Any] = json.loads((CORPUS / "schemas.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = [
    json.loads(line)
    for line in (CORPUS / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]
ERRORS: dict[str, type[OutputError]] = {
    cls.__name__: cls for cls in (OutputParseError, OutputTruncatedError, SchemaViolationError)
}
FIELDS = {"id", "schema", "raw", "strict", "repair", "repair_kinds", "note"}


def same(a: Any, b: Any) -> bool:
    """JSON equality that also compares types: 42 != 42.0, 1 != true, "1" != 1."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def conforms(raw: str, schema: Any) -> bool:
    """Independent of jsonmode: RFC 8259 JSON (json.loads without its NaN/Infinity and
    duplicate-key leniency) that validates against the schema, formats included."""
    try:
        data = json.loads(
            raw, parse_constant=_reject_constant, object_pairs_hook=_reject_duplicates
        )
    except (ValueError, RecursionError):
        return False
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return bool(validator.is_valid(data))


def _why(case: dict[str, Any]) -> str:
    return f"{case['id']}: {case['note']}"


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_strict(case: dict[str, Any]) -> None:
    schema = SCHEMAS[case["schema"]]
    if case["strict"] == "accept":
        parsed = jsonmode.parse(case["raw"], schema, "strict")
        assert same(parsed.data, json.loads(case["raw"])), _why(case)
        assert parsed.repairs == (), _why(case)
    else:
        with pytest.raises(OutputError):
            jsonmode.parse(case["raw"], schema, "strict")


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_repair(case: dict[str, Any]) -> None:
    schema = SCHEMAS[case["schema"]]
    expected = case["repair"]
    if "error" in expected:
        with pytest.raises(OutputError) as caught:
            jsonmode.parse(case["raw"], schema, "repair")
        assert type(caught.value).__name__ == expected["error"], (
            f"{_why(case)}; got {type(caught.value).__name__}: {caught.value}"
        )
        return
    parsed = jsonmode.parse(case["raw"], schema, "repair")
    assert same(parsed.data, expected["value"]), (
        f"{_why(case)}; got {parsed.data!r}, expected {expected['value']!r}"
    )
    if "repair_kinds" in case:
        assert [r.kind for r in parsed.repairs] == case["repair_kinds"], _why(case)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_strict_accepts_exactly_conforming_json(case: dict[str, Any]) -> None:
    schema = SCHEMAS[case["schema"]]
    expected = "accept" if conforms(case["raw"], schema) else "reject"
    assert case["strict"] == expected, f"corpus label is wrong: {_why(case)}"
    if expected == "reject":
        with pytest.raises(OutputError):
            jsonmode.parse(case["raw"], schema, "strict")


def test_corpus_shape() -> None:
    assert len(CASES) >= 100
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    for case in CASES:
        assert set(case) <= FIELDS, case["id"]
        assert {"id", "schema", "raw", "strict", "repair", "note"} <= set(case), case["id"]
        assert case["schema"] in SCHEMAS, case["id"]
        assert case["strict"] in ("accept", "reject"), case["id"]
        assert len(case["repair"]) == 1, case["id"]
        if "error" in case["repair"]:
            assert case["repair"]["error"] in ERRORS, case["id"]
            assert "repair_kinds" not in case, case["id"]
            assert case["strict"] == "reject", f"{case['id']}: repair cannot fail on valid output"
        else:
            assert "value" in case["repair"], case["id"]
        assert set(case.get("repair_kinds", ())) <= set(REPAIR_KINDS), case["id"]
    assert {case["schema"] for case in CASES} == set(SCHEMAS), "every schema is used"
    exercised = {kind for case in CASES for kind in case.get("repair_kinds", ())}
    assert exercised == set(REPAIR_KINDS), f"never exercised: {set(REPAIR_KINDS) - exercised}"
    untouched = [c for c in CASES if c["strict"] == "accept" and c.get("repair_kinds") == []]
    assert len(untouched) >= 15, "valid outputs that must pass untouched in both modes"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_is_valid_2020_12(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMAS[name])
    assert jsonmode.Schema.of(SCHEMAS[name]).json_schema == SCHEMAS[name]
