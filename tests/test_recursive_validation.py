"""Validating a value against a recursive schema costs time linear in the value.

jsonschema's ``anyOf``/``oneOf`` judged a recursive union's child once per branch and
level, and listed every branch's errors: a 274-byte output took 54 s and 2.5 GB, and
each further level doubled it. The compiled check (fastcheck) doubled the same way.
See :mod:`jsonmode.schema.verdicts`.
"""

from __future__ import annotations

import json
import pathlib
import textwrap

import jsonschema
import pytest
from support.bounded import run_python

from jsonmode import SchemaViolationError, parse
from jsonmode.schema.core import Schema
from jsonmode.schema.linear import linear_validator_class, without_memo
from jsonmode.schema.verdicts import MAX_BRANCH_ERRORS

SUITE = (
    pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "json-schema-test-suite"
) / "tests"
DRAFT_7 = "http://json-schema.org/draft-07/schema#"


def _union(keyword: str, required_first: bool, draft: str | None = None) -> dict[str, object]:
    """A recursive union of two object shapes sharing a recursive ``children``."""

    def shape(name: str) -> dict[str, object]:
        children = {"type": "array", "items": {"$ref": "#/definitions/N"}}
        if required_first:
            return {"type": "object", "required": [name], "properties": {"children": children}}
        properties = {"children": children, name: {"type": "integer"}}
        return {"type": "object", "properties": properties, "required": [name]}

    schema: dict[str, object] = {
        "definitions": {"N": {keyword: [shape("a"), shape("b")]}},
        "$ref": "#/definitions/N",
    }
    if draft:
        schema["$schema"] = draft
    return schema


def _nested(depth: int) -> str:
    return '{"children": [' * depth + "{}" + "]}" * depth


@pytest.mark.parametrize("keyword", ["anyOf", "oneOf"])
def test_a_recursive_union_is_judged_in_linear_time(keyword: str) -> None:
    # 2 ** 60 branch visits before: this never ended.
    schemas = [
        _union(keyword, required_first, draft)
        for draft in (None, DRAFT_7)  # the compiled check first, and jsonschema alone
        for required_first in (True, False)
    ]
    out = run_python(
        textwrap.dedent(
            """
            import json, sys, jsonmode
            failing, passing = sys.argv[2], sys.argv[3]
            for schema in json.loads(sys.argv[1]):
                for mode in ("strict", "repair"):
                    try:
                        jsonmode.parse(failing, schema, mode)
                    except jsonmode.SchemaViolationError as error:
                        print(error.issues[0].keyword)
                print(jsonmode.parse(passing, schema).data is not None)
            """
        ),
        120,
        json.dumps(schemas),
        _nested(60),
        '{"a": 1, "children": [' * 60 + '{"a": 1}' + "]}" * 60,
    )
    assert out.split() == [keyword, keyword, "True"] * 4


def test_all_of_over_a_recursive_reference_judges_each_value_once() -> None:
    # A valid value must be read whole: allOf's two references doubled per level.
    out = run_python(
        textwrap.dedent(
            """
            import jsonmode
            from jsonmode.schema.core import Schema
            node = {"type": "object", "properties": {"c": {"type": "array",
                    "items": {"$ref": "#/definitions/N"}}}}
            for draft in (None, "http://json-schema.org/draft-07/schema#"):
                schema = {"definitions": {"N": {"allOf": [node, node]}},
                          "$ref": "#/definitions/N"}
                if draft:
                    schema["$schema"] = draft
                value = {"c": []}
                for _ in range(60):
                    value = {"c": [value]}
                checked = Schema.of(schema)
                print(checked.conforms(value), checked.issues(value) == [],
                      checked.validator.is_valid(value))
            """
        ),
        120,
    )
    assert out.split() == ["True"] * 6


def test_a_failing_union_is_explained_by_its_branches_and_nested_ones_summed_up() -> None:
    with pytest.raises(SchemaViolationError) as caught:
        parse(_nested(3), _union("anyOf", required_first=True, draft=DRAFT_7))
    issues = caught.value.issues
    assert issues[0].path == "$"
    assert issues[0].keyword == "anyOf"
    branch = [issue.message for issue in issues[1:]]
    assert any(m.startswith("(in anyOf branch 0)") and "'a' is a required" in m for m in branch)
    assert any(m.startswith("(in anyOf branch 1)") and "'b' is a required" in m for m in branch)
    # The children's own unions: one error each, no branches of theirs.
    validator = Schema.of(_union("anyOf", required_first=True, draft=DRAFT_7)).validator
    (error,) = validator.iter_errors(json.loads(_nested(3)))
    nested = [e for e in error.context if e.validator == "anyOf"]
    assert nested
    assert all(not e.context for e in nested)
    assert len(error.context) <= 2 * MAX_BRANCH_ERRORS


def test_a_union_matching_twice_fails_one_of_and_quotes_briefly() -> None:
    schema = {"oneOf": [{"type": "string"}, {"maxLength": 10_000}], "$schema": DRAFT_7}
    with pytest.raises(SchemaViolationError) as caught:
        parse(json.dumps("x" * 5_000), schema)
    (issue,) = caught.value.issues
    assert issue.keyword == "oneOf"
    assert "is valid under each of" in issue.message
    assert len(issue.message) < 1_000


_KEYWORD_FILES = [
    "allOf.json",
    "anyOf.json",
    "oneOf.json",
    "not.json",
    "if-then-else.json",
    "ref.json",
    "dynamicRef.json",
    "unevaluatedProperties.json",
    "unevaluatedItems.json",
    "items.json",
    "properties.json",
]
_STOCK = {"draft7": jsonschema.Draft7Validator, "draft2020-12": jsonschema.Draft202012Validator}


def _suite_cases() -> list[object]:
    cases = []
    for draft in _STOCK:
        for name in _KEYWORD_FILES:
            path = SUITE / draft / name
            if not path.exists():
                continue
            for index, group in enumerate(json.loads(path.read_text(encoding="utf-8"))):
                if "localhost" in json.dumps(group["schema"]):
                    continue  # (remote references: never fetched)
                cases.append(pytest.param(draft, group, id=f"{draft}/{name}:{index}"))
    assert len(cases) > 150, f"official test suite not found under {SUITE}"
    return cases


@pytest.mark.parametrize(("draft", "group"), _suite_cases())
def test_the_replaced_keywords_keep_the_suite_verdicts(draft: str, group: dict) -> None:
    stock = _STOCK[draft]
    schema = group["schema"]
    for cls in (linear_validator_class(stock), without_memo(linear_validator_class(stock))):
        validator = cls(schema)
        for test in group["tests"]:
            data, valid = test["data"], test["valid"]
            assert validator.is_valid(data) is valid, test["description"]
            assert (next(iter(validator.iter_errors(data)), None) is None) is valid
