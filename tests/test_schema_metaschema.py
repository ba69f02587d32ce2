"""The fast 2020-12 metaschema check gives jsonschema's verdict on every schema.

Differential: the official test suite's schemas, a sample of MaskBench schemas, and
MaskBench schemas with one keyword broken at random (wrong types, negative counts, bad
regexes, ...), each checked both ways.
"""

from __future__ import annotations

import copy
import gzip
import json
import pathlib
import random
import warnings
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from jsonmode.errors import InvalidSchemaError
from jsonmode.schema.core import Schema
from jsonmode.schema.metaschema import _flat_check, _flat_validator, _restated_check, check_schema

DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
SUITE = DATA / "json-schema-test-suite" / "tests" / "draft2020-12"
MASKBENCH = DATA / "jsonschemabench" / "maskbench"
OFFICIAL = jsonschema.Draft202012Validator

# Values that break a keyword (or are fine for some: the verdicts must agree either way).
BREAKAGES: dict[str, list[Any]] = {
    "type": ["strng", ["string", "string"], [], 3, ["integer", "nope"]],
    "minLength": [-1, 1.5, "2", None],
    "maxItems": [-3, 2.0, True],
    "required": ["a", ["a", "a"], [1], {}],
    "pattern": ["(", "[a-", 7, "\\p{L}+"],
    "enum": ["x", {}, []],
    "properties": [[], {"a": 3}, {"a": "string"}],
    "items": [3, "x", [{"type": "string"}]],
    "prefixItems": [[], {}, [3]],
    "$ref": [5, "#/$defs/x y"],
    "format": [3, None],
    "multipleOf": [0, -2, "2"],
    "allOf": [[], {}, [1]],
    "anyOf": [[], [True, 7]],
    "additionalProperties": ["no", 0, None],
    "dependentRequired": [{"a": "b"}, {"a": [1]}, []],
    "$defs": [[], {"a": 1}],
    "minimum": ["1", None, True],
    "exclusiveMinimum": [True, "0"],
    "uniqueItems": ["yes", 1],
    "$id": ["#frag", 3, "http://example.com/a#b"],
    "$anchor": ["1bad", "ok_anchor", 2],
    "contentSchema": [3, {"type": 1}],
    "dependencies": [{"a": 1}, {"a": ["b", "b"]}, []],
    "$schema": [3, "not a uri"],
}


def _suite_schemas() -> Iterator[Any]:
    for path in sorted(SUITE.rglob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            yield group["schema"]


def _maskbench_schemas() -> Iterator[Any]:
    for path in sorted(MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                schema = row["schema"]
                yield json.loads(schema) if isinstance(schema, str) else schema


def _draft(schema: Any) -> type[jsonschema.protocols.Validator]:
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        return OFFICIAL  # jsonschema's lookup would fail; its metaschema rejects it
    return jsonschema.validators.validator_for(schema, default=OFFICIAL)


def _official(schema: Any) -> bool:
    cls = _draft(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return False
    return True


def _ours(schema: Any) -> bool:
    cls = _draft(schema)
    try:
        check_schema(cls, schema)
    except jsonschema.SchemaError:
        return False
    return True


def _subschemas(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _subschemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _subschemas(value)


def test_the_flat_metaschema_is_built_and_compiled():
    flat = _flat_validator()
    assert flat is not None  # else every check takes the slow path
    assert _flat_check() is not None
    assert _flat_check() != flat.is_valid  # compiled by fastcheck, not jsonschema's walk
    for cls in (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator):
        assert _restated_check(cls) is not None  # the older metaschemas restated, compiled


def test_draft4_verdicts_agree_on_real_and_edge_schemas():
    """Draft 4 schemas (a third of MaskBench's): the restated metaschema's verdict is
    jsonschema's, including draft 4's integers (``2.0`` is not a count there) and its
    Boolean exclusive bounds."""
    draft4 = "http://json-schema.org/draft-04/schema#"
    schemas = [s for s in _maskbench_schemas() if _draft(s) is jsonschema.Draft4Validator]
    schemas = random.Random(11).sample(schemas, 400)
    edges = [
        {"minLength": 2.0},
        {"minLength": 2},
        {"maximum": 3, "exclusiveMaximum": True},
        {"exclusiveMaximum": True},
        {"exclusiveMinimum": 3},
        {"multipleOf": 0},
        {"multipleOf": 0.5},
        {"required": []},
        {"required": ["a", "a"]},
        {"type": ["string", "string"]},
        {"enum": []},
        {"pattern": "("},
        {"items": [{"type": "string"}], "additionalItems": False},
        {"dependencies": {"a": ["b"], "c": {"type": "string"}}},
        {"properties": {"a": {"type": "intger"}}},
    ]
    check = _restated_check(jsonschema.Draft4Validator)
    assert check is not None
    for schema in [*schemas, *({"$schema": draft4, **edge} for edge in edges)]:
        assert check(schema) == _official(schema), json.dumps(schema)[:300]
        assert _ours(schema) == _official(schema)
    assert not check({"$schema": draft4, "minLength": 2.0})


@pytest.mark.parametrize("source", ["suite", "maskbench"])
def test_verdicts_agree_on_real_schemas(source):
    if source == "suite":
        schemas = list(_suite_schemas())
    else:  # a fixed sample: all 8 000 take 90 s
        schemas = random.Random(7).sample(list(_maskbench_schemas()), 800)
    assert len(schemas) > 400
    flat = _flat_check()
    assert flat is not None
    compared = 0
    for schema in schemas:
        if _draft(schema) is OFFICIAL:
            assert flat(schema) == _official(schema), json.dumps(schema)[:300]
            compared += 1
    assert compared > 400


def test_verdicts_agree_on_broken_schemas():
    rng = random.Random(20261121)
    schemas = [s for s in _maskbench_schemas() if isinstance(s, dict)]
    checked = invalid = 0
    for schema in rng.sample(schemas, 300):
        for _ in range(4):
            broken = copy.deepcopy(schema)
            target = rng.choice(list(_subschemas(broken)))
            keyword = rng.choice(sorted(BREAKAGES))
            target[keyword] = rng.choice(BREAKAGES[keyword])
            expected = _official(broken)
            assert _ours(broken) == expected, (keyword, json.dumps(broken)[:300])
            checked += 1
            invalid += not expected
    assert checked == 1200
    assert invalid > 300  # the breakages do break schemas


def test_schema_of_reports_the_official_error():
    with pytest.raises(InvalidSchemaError) as caught:
        Schema.of({"type": "object", "properties": {"a": {"minLength": -1}}})
    assert caught.value.schema_path == "/properties/a/minLength"


@pytest.mark.parametrize("declared", [3, [], {"a": 1}])
def test_a_metaschema_that_is_not_a_string_is_an_invalid_schema(declared):
    with pytest.raises(InvalidSchemaError) as caught:
        Schema.of({"$schema": declared, "type": "string"})
    assert caught.value.schema_path == "/$schema"


@pytest.mark.parametrize("source", ["suite", "maskbench"])
def test_draft7_and_draft6_verdicts_agree(source):
    """Draft 7 and 6 schemas: the official suite's draft 7 schemas (declared as such)
    and MaskBench's; the restated metaschemas give jsonschema's verdicts."""
    older = (jsonschema.Draft6Validator, jsonschema.Draft7Validator)
    if source == "suite":
        draft7 = "http://json-schema.org/draft-07/schema#"
        schemas = [
            {"$schema": draft7, **group["schema"]}
            if isinstance(group["schema"], dict) and "$schema" not in group["schema"]
            else group["schema"]
            for path in sorted((SUITE.parent / "draft7").rglob("*.json"))
            for group in json.loads(path.read_text(encoding="utf-8"))
        ]
    else:
        schemas = [s for s in _maskbench_schemas() if _draft(s) in older]
    compared = 0
    for schema in schemas:
        cls = _draft(schema)
        if cls not in older:
            continue
        check = _restated_check(cls)
        assert check is not None
        with warnings.catch_warnings():  # `re` warns of some patterns ("[--x]"), both ways
            warnings.simplefilter("ignore", FutureWarning)
            assert check(schema) == _official(schema), json.dumps(schema)[:300]
        compared += 1
    assert compared > 100


def test_a_fast_check_out_of_recursion_leaves_the_verdict_to_jsonschema(monkeypatch):
    """The fast check recurses deeper per level than jsonschema's: a schema deep
    enough to exhaust it gets jsonschema's verdict, not a RecursionError."""
    from jsonmode.schema import metaschema

    def exhausted(schema: Any) -> bool:
        raise RecursionError

    monkeypatch.setattr(metaschema, "_flat_check", lambda: exhausted)
    check_schema(OFFICIAL, {"type": "object", "properties": {"a": {"type": "integer"}}})
    with pytest.raises(jsonschema.exceptions.SchemaError):
        check_schema(OFFICIAL, {"type": "object", "properties": {"a": {"type": 3}}})
