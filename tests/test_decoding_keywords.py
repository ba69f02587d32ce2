"""Keywords the decoder enforces by rewriting or counting (issue 26, item 6).

``not``, ``if``/``then``/``else``, ``dependentRequired``/``dependentSchemas`` (draft 7
``dependencies``), ``unevaluatedProperties``/``unevaluatedItems``, non-disjoint
``oneOf`` (jsonmode.decoding.compile.lowering, jsonmode.decoding.compile.negation),
``propertyNames``,
``contains``/``minContains``/``maxContains`` and trivial ``minProperties``/
``maxProperties`` (jsonmode.decoding.compile.containers), and exact ``allOf`` merges of
``additionalProperties`` and ``prefixItems`` (jsonmode.decoding.compile.merging).

Every schema here must compile with ``unenforced == ()``, and then ``accepts`` must
agree with jsonschema on the listed values and on a few hundred generated ones
(members in schema order, and in a random order under ``property_order="any"``).
Schemas whose rewrite would not be exact must keep the keyword in ``unenforced``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from support.schema_order import SchemaOrder

from jsonmode import UnsupportedSchemaError, compile_schema
from jsonmode.decoding.compile.lowering import Lowering
from jsonmode.decoding.compile.merging import merge
from jsonmode.decoding.compile.negation import negate, not_in_pattern
from jsonmode.schema.core import Schema
from jsonmode.schema.pointer import resolve_local_ref
from jsonmode.schema.refs import resolve_references

DRAFT7 = "http://json-schema.org/draft-07/schema#"

# (schema, valid values, invalid values)
ENFORCED: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    # not
    ({"not": {"type": "string"}}, [1, None, {}], ["x"]),
    (
        {"not": {"enum": ["foo", 'a"b', "", 1, 2.5, True, None]}},
        ["fo", "foox", 2, 0.5, False],
        ["foo", 'a"b', "", 1, 1.0, 2.5, True, None],
    ),
    ({"not": {"type": "string", "maxLength": 2}}, [1, "abc"], ["", "ab"]),
    ({"not": {"required": ["a", "b"]}}, [{"a": 1}, {}], [{"a": 1, "b": 2}, 3, "x"]),
    ({"not": {"properties": {"a": {"type": "string"}}}}, [{"a": 1}], [{"a": "x"}, {}, 3]),
    ({"not": {"anyOf": [{"type": "string"}, {"minimum": 3}]}}, [2, -1.5], ["x", 3, 7.5, None]),
    ({"not": {"allOf": [{"type": "number"}, {"maximum": 3}]}}, [4, "x"], [3, -1]),
    ({"not": {"not": {"const": 2}}}, [2], [3, "2"]),
    ({"properties": {"a": {"not": {}}}}, [{}, {"b": 1}], [{"a": 1}]),
    # if / then / else
    (
        {"if": {"properties": {"k": {"const": "n"}}, "required": ["k"]}}
        | {"then": {"required": ["v"]}, "else": {"properties": {"v": False}}},
        [{"k": "n", "v": 1}, {"k": "m"}, {}, 5],
        [{"k": "n"}, {"k": "m", "v": 1}, {"v": 1}],
    ),
    (
        {"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}},
        ["ab", 3],
        ["a", 1.5, None],
    ),
    ({"if": {"minimum": 2}, "then": {"maximum": 5}}, [1, 5, "x"], [6]),
    ({"if": {"const": 1}, "else": False}, [1, 1.0], [2, "1"]),
    ({"then": {"const": 1}}, [2], []),  # then without if does nothing
    # dependentRequired / dependentSchemas
    (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}}
        | {"dependentRequired": {"a": ["b"]}},
        [{"a": 1, "b": 2}, {"b": 2}, {}],
        [{"a": 1}, {"a": "x", "b": 1}],
    ),
    (
        {"dependentRequired": {"bar": ["foo"]}},
        [{"foo": 1, "bar": 2}, {"bar": 2, "foo": 1}, {"foo": 1}, [], 1],
        [{"bar": 2}],
    ),
    (
        {"dependentRequired": {"a": ["b", "c"]}, "additionalProperties": {"type": "integer"}},
        [{"c": 1, "a": 2, "b": 3}, {"b": 1}],
        [{"a": 1, "b": 2}, {"a": 1, "b": 2, "c": "x"}],
    ),
    (
        {"dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}, "required": ["b"]}}},
        [{"a": 1, "b": 2}, {"b": "x"}],
        [{"a": 1}, {"a": 1, "b": "x"}],
    ),
    ({"dependentSchemas": {"a": False}}, [{"b": 1}], [{"a": 1}]),
    (
        {"$schema": DRAFT7, "dependencies": {"a": ["b"], "c": {"required": ["d"]}}},
        [{"a": 1, "b": 1}, {"c": 1, "d": 1}, {}],
        [{"a": 1}, {"c": 1}],
    ),
    # propertyNames
    (
        {"propertyNames": {"pattern": "^[ab]+$", "maxLength": 2}},
        [{"ab": 1}, {}],
        [{"abc": 1}, {"c": 1}],
    ),
    (
        {
            "propertyNames": {"enum": ["a", "foo"]},
            "properties": {"foo": {"type": "integer"}, "bar": {}},
        },
        [{"foo": 1, "a": 2}],
        [{"bar": 1}, {"x": 1}, {"foo": "x"}],
    ),
    (
        {"propertyNames": {"minLength": 2}, "patternProperties": {"^f": {"type": "integer"}}}
        | {"additionalProperties": False},
        [{"fa": 1}, {}],
        [{"f": 1}, {"ga": 1}, {"fa": "x"}],
    ),
    ({"propertyNames": False}, [{}, 1], [{"a": 1}]),
    (
        {"propertyNames": {"const": "foo"}, "required": ["foo"]},
        [{"foo": None}],
        [{}, {"foo": 1, "b": 2}],
    ),
    # minProperties / maxProperties where nothing needs counting
    ({"maxProperties": 0}, [{}, "x"], [{"a": 1}]),
    (
        {"properties": {"a": {}}, "required": ["a"], "additionalProperties": False}
        | {"minProperties": 1, "maxProperties": 1},
        [{"a": 1}],
        [{}, {"a": 1, "b": 2}],
    ),
    # contains / minContains / maxContains
    (
        {"contains": {"type": "string"}, "items": {"type": ["string", "integer"]}},
        [["a"], [1, "a", 2]],
        [[], [1, 2], ["a", None]],
    ),
    (
        {"contains": {"enum": ["foo", "bar"]}, "minContains": 2, "maxContains": 3},
        [["foo", 1, "bar"], ["foo", "foo", "foo"]],
        [["foo"], ["foo"] * 4, []],
    ),
    ({"contains": {"const": 1}, "minContains": 0, "maxContains": 1}, [[], [2], [1, 2]], [[1, 1]]),
    ({"contains": {"const": 1}, "minContains": 3, "maxContains": 1}, ["x"], [[1, 1, 1], []]),
    ({"contains": False}, [{}, 1], [[], [1]]),
    ({"contains": True}, [[None]], [[]]),
    ({"$schema": DRAFT7, "contains": {"minimum": 5}}, [[5], [1, 6]], [[], [1]]),
    # oneOf whose branches may overlap
    ({"oneOf": [{"type": "string"}, {"minLength": 2}]}, ["a", 3], ["ab"]),
    (
        {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        [{"a": 1}, {"b": 1}],
        [{}, {"a": 1, "b": 1}],
    ),
    # unevaluatedProperties / unevaluatedItems, statically known
    (
        {"properties": {"foo": {}}, "allOf": [{"properties": {"bar": {"type": "integer"}}}]}
        | {"unevaluatedProperties": False},
        [{"foo": 1, "bar": 2}, {}],
        [{"baz": 1}, {"bar": "x"}],
    ),
    (
        {"patternProperties": {"^x": {"type": "integer"}}, "allOf": [{"$ref": "#/$defs/d"}]}
        | {
            "unevaluatedProperties": {"type": "string"},
            "$defs": {"d": {"properties": {"foo": {}}}},
        },
        [{"foo": 1, "xa": 2, "y": "s"}],
        [{"y": 1}, {"xa": "s"}],
    ),
    (
        {"allOf": [{"properties": {"foo": True}}, {"unevaluatedProperties": False}]},
        [{}, 1],
        [{"foo": 1}],
    ),
    (
        {
            "prefixItems": [{"type": "integer"}],
            "allOf": [{"prefixItems": [True, {"type": "string"}]}],
        }
        | {"unevaluatedItems": False},
        [[1, "a"], [1], []],
        [[1, "a", 2], ["a"]],
    ),
    (
        {"prefixItems": [{"type": "integer"}], "unevaluatedItems": {"type": "string"}},
        [[1, "a", "b"]],
        [[1, 2]],
    ),
    (
        {"properties": {"x": {"$ref": "#"}}, "unevaluatedProperties": False},
        [{"x": {"x": {}}}],
        [{"x": {"y": 1}}],
    ),
    # allOf merges that used to be left to post-validation
    (
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"properties": {"b": {}}},
            ]
        },
        [{"a": 1}, {}],
        [{"b": 1}, {"a": "x"}],
    ),
    (
        {
            "allOf": [
                {"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False}
            ]
        }
        | {"properties": {"b": {"minimum": 2}, "x": {}}},
        [{"ac": 1}, {}],
        [{"b": 3}, {"x": 1}, {"ac": "s"}],
    ),
    (
        {
            "allOf": [
                {"prefixItems": [{"type": "integer"}], "items": False},
                {"prefixItems": [True, True]},
            ]
        },
        [[1], []],
        [[1, 2], ["a"]],
    ),
    # a required name that properties does not declare takes additionalProperties
    ({"required": ["a"], "additionalProperties": False}, ["x"], [{"a": 1}, {}]),
    (
        {"required": ["a"], "additionalProperties": {"type": "integer"}}
        | {"patternProperties": {"^f": {"minimum": 3}}},
        [{"a": 1, "fa": 3}],
        [{"a": "x"}, {"a": 1, "fa": 2}, {}],
    ),
]

KEYS = ["foo", "bar", "a", "b", "c", "d", "ab", "x", "xa", "fa", "k", "v", "y"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, 1, 2, 3, 5, 6, -1, 1.5, 2.5, 2.0])
    if kind == 3:
        return rng.choice(["", "a", "n", "m", "ab", "foo", "bar", 'a"b', "abc"])
    if kind in (4, 5):
        return rng.choice([1, "foo", None, 3])
    if kind in (6, 7):
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def _ordered(schema: dict[str, Any], spec: Schema) -> SchemaOrder:
    return SchemaOrder(resolve_references(spec.json_schema).document, spec.validator)


@pytest.mark.parametrize(("schema", "good", "bad"), ENFORCED, ids=lambda v: json.dumps(v)[:60])
def test_enforced_exactly(schema, good, bad):
    compiled = compile_schema(schema)
    assert compiled.unenforced == ()
    order = _ordered(schema, compiled.schema)
    for value in good:
        assert compiled.schema.conforms(value), value
        assert compiled.accepts(json.dumps(order.order(value))), value
    for value in bad:
        assert not compiled.schema.conforms(value), value
        assert not compiled.accepts(json.dumps(order.order(value))), value


@pytest.mark.parametrize("index", range(len(ENFORCED)))
def test_generated_values_agree_with_jsonschema(index):
    schema = ENFORCED[index][0]
    rng = random.Random(index)
    for property_order in ("schema", "any"):
        compiled = compile_schema(schema, property_order=property_order)
        assert compiled.unenforced == ()
        order = _ordered(schema, compiled.schema)
        for _ in range(150):
            value = _value(rng)
            if property_order == "any" and isinstance(value, dict):
                members = list(value.items())
                rng.shuffle(members)
                text = json.dumps(dict(members))
            else:
                text = json.dumps(order.order(value))
            assert compiled.accepts(text) == compiled.schema.conforms(value), (text, schema)


# Rewrites that would not be exact: the keyword stays unenforced (and strict refuses).
NOT_EXACT = [
    ({"not": {"type": "integer"}}, "/not"),  # a number that is not an integer: no automaton
    ({"not": {"pattern": "^a"}}, "/not"),
    ({"if": {"multipleOf": 2}, "then": {"minimum": 1}}, "/if"),
    ({"contains": {"type": "integer"}, "maxContains": 1}, "/maxContains"),
    ({"contains": {"const": 1}, "minItems": 2}, "/contains"),
    ({"prefixItems": [True], "contains": {"const": 1}}, "/contains"),
    ({"minProperties": 1}, "/minProperties"),
    ({"maxProperties": 1}, "/maxProperties"),
    ({"propertyNames": {"format": "email"}}, "/propertyNames"),
    (
        {"anyOf": [{"properties": {"a": True}}], "unevaluatedProperties": False},
        "/unevaluatedProperties",
    ),
    ({"contains": {"const": 1}, "unevaluatedItems": False}, "/unevaluatedItems"),
    ({"dependentRequired": {n: [n + "1", n + "2"] for n in "abcd"}}, "/dependentRequired"),
    ({"oneOf": [{"minimum": 1}, {"maximum": 3}, {"const": 2}]}, "/oneOf"),
    # draft 4's exclusiveMinimum is a flag: no open interval to write the complement with
    ({"$schema": "http://json-schema.org/draft-04/schema#", "not": {"enum": [1, 2]}}, "/not"),
]


@pytest.mark.parametrize(("schema", "where"), NOT_EXACT)
def test_what_is_not_exact_stays_unenforced(schema, where):
    compiled = compile_schema(schema)
    assert where in compiled.unenforced
    with pytest.raises(UnsupportedSchemaError):
        compile_schema(schema, strict=True)


def test_unsatisfiable_rewrites_are_refused_as_before():
    for schema in ({"not": {}}, {"not": True}, {"allOf": [True, False]}, {"oneOf": [True, True]}):
        with pytest.raises(UnsupportedSchemaError, match="accepts no value"):
            compile_schema(schema)


def test_negation_keyword_by_keyword():
    resolve = lambda ref: resolve_local_ref({}, ref)  # noqa: E731
    assert negate({}, resolve) is False
    assert negate(False, resolve) is True
    assert negate({"type": ["string", "number"]}, resolve) == {
        "type": ["null", "boolean", "object", "array"]
    }
    assert negate({"minimum": 5}, resolve) == {"type": "number", "exclusiveMaximum": 5}
    assert negate({"minLength": 0}, resolve) is False
    assert negate({"type": "integer"}, resolve) is None
    assert negate({"multipleOf": 2}, resolve) is None
    assert negate({"exclusiveMinimum": True}, resolve, legacy=True) is None
    # draft 7: a reference's siblings do not count
    assert negate({"$ref": "#/x", "type": "string"}, lambda ref: {"const": 1}, draft7=True) == (
        negate({"const": 1}, resolve)
    )


def test_the_complement_of_a_string_set_is_a_pattern():
    import re

    pattern = not_in_pattern(["foo", "fo\u00e9", ""])
    assert pattern is not None
    for text in ["f", "fo", "fox", "fooo", "x", "foé!", "\n"]:
        assert re.search(pattern, text), text
    for text in ["foo", "foé", ""]:
        assert not re.search(pattern, text), text
    assert not_in_pattern(["\U0001f600"]) is None  # beyond the BMP: not written


def test_merging_closed_objects_is_exact():
    reported: list[str] = []
    merged = merge(
        {"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        {"properties": {"b": {}}, "patternProperties": {"^x": {"minimum": 1}}},
        reported.append,
    )
    assert merged["properties"] == {"a": {"type": "integer"}, "b": False}
    assert merged["patternProperties"] == {"^x": False}
    assert merged["additionalProperties"] is False
    assert reported == []
    # A pattern beside a closed side that has patterns of its own: not exact.
    merge(
        {"patternProperties": {"^a": {}}, "additionalProperties": False},
        {"patternProperties": {"^b": {}}},
        reported.append,
    )
    assert reported == ["additionalProperties"]


def test_merging_prefix_items_position_by_position():
    merged = merge(
        {"prefixItems": [{"type": "integer"}], "items": {"minimum": 0}},
        {"prefixItems": [True, {"maximum": 9}]},
        lambda keyword: pytest.fail(keyword),
    )
    assert merged["prefixItems"] == [
        {"type": "integer"},
        {"allOf": [{"minimum": 0}, {"maximum": 9}]},
    ]
    assert merged["items"] == {"minimum": 0}


def test_a_rewrite_keeps_undeclared_names_in_any_order():
    lowering = Lowering({}, "modern")
    lowered = lowering.lower({"dependentRequired": {"bar": ["foo"]}})
    branches = lowered["allOf"][0]["anyOf"]
    # absent, then present in each order of the two names the schema leaves undeclared
    assert branches[0] == {"properties": {"bar": False}}
    orders = [list(branch["properties"]) for branch in branches[1:]]
    assert sorted(orders) == [["bar", "foo"], ["foo", "bar"]]
    assert lowering.lower({"type": "string"}) == {"type": "string"}


def test_lowering_leaves_dialects_alone():
    # draft 7 has no unevaluatedProperties or dependentRequired: jsonschema ignores them
    for schema in ({"unevaluatedProperties": False}, {"dependentRequired": {"a": ["b"]}}):
        compiled = compile_schema({"$schema": DRAFT7, **schema})
        assert compiled.accepts('{"a": 1, "z": 2}')
    # draft 6 has no if/then/else
    six = {"$schema": "http://json-schema.org/draft-06/schema#", "if": {"const": 1}, "then": False}
    assert compile_schema(six).accepts("1")
