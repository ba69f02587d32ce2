"""Schema → grammar: what is accepted, what is left to post-validation, options, budgets."""

import json

import pytest
from pydantic import BaseModel, Field

from jsonmode.decoding.compiled import compile_schema
from jsonmode.errors import BudgetExceededError, UnsupportedSchemaError, UsageError


def accepts(schema, value, **options):
    return compile_schema(schema, **options).accepts(json.dumps(value))


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": ["string", "null"], "pattern": "@"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ({"name": "Ada", "age": 36}, True),
        ({"name": "Ada", "age": 36, "email": None, "tags": ["x", "y"]}, True),
        ({"name": "Ada", "age": 36, "tags": []}, True),
        ({"name": "", "age": 36}, False),  # minLength
        ({"name": "Ada", "age": 151}, False),  # maximum
        ({"name": "Ada", "age": -1}, False),  # minimum
        ({"name": "Ada", "age": 3.5}, False),  # integer
        ({"name": "Ada"}, False),  # required
        ({"name": "Ada", "age": 1, "tags": ["a", "b", "c", "d"]}, False),  # maxItems
        ({"name": "Ada", "age": 1, "other": 1}, False),  # additionalProperties
        ({"age": 1, "name": "Ada"}, False),  # schema order
    ],
)
def test_person(value, ok):
    assert accepts(PERSON, value) is ok
    assert compile_schema(PERSON).unenforced == ()


def test_compact_and_standard_whitespace_only_by_default():
    compiled = compile_schema(PERSON)
    value = {"name": "Ada", "age": 36}
    assert compiled.accepts(json.dumps(value))
    assert compiled.accepts(json.dumps(value, separators=(",", ":")))
    assert not compiled.accepts(json.dumps(value, indent=2))
    flexible = compile_schema(PERSON, whitespace="flexible")
    assert flexible.accepts(json.dumps(value, indent=2))
    assert flexible.accepts(json.dumps({**value, "tags": ["a"]}, indent=2))


def test_any_property_order_option():
    compiled = compile_schema(PERSON, property_order="any")
    assert compiled.accepts(json.dumps({"age": 1, "name": "Ada"}))
    assert not compiled.accepts(json.dumps({"age": 1}))


def test_additional_properties_default_allows_other_keys_only():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert accepts(schema, {"a": 1, "b": "anything", "c": [1, {"d": None}]})
    assert accepts(schema, {"b": 2})
    assert not accepts(schema, {"a": "x"})
    assert not compile_schema(schema).accepts('{"a": 1, "a": 2}')  # no duplicate keys


def test_additional_properties_schema_and_pattern_properties():
    schema = {
        "type": "object",
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    assert accepts(schema, {"x-a": "s", "n": 1})
    assert not accepts(schema, {"x-a": 1})
    assert not accepts(schema, {"n": "s"})


def test_enum_and_const_any_spelling():
    schema = {"enum": ["café", 1, None, [1, "a"], {"k": True}]}
    for value in schema["enum"]:
        assert accepts(schema, value)
    assert compile_schema(schema).accepts('"caf\\u00e9"')
    assert not accepts(schema, "cafe")
    assert not accepts(schema, 2)
    assert accepts({"const": {"a": [1, 2]}}, {"a": [1, 2]})


def test_enum_values_filtered_by_sibling_keywords():
    compiled = compile_schema({"type": "string", "enum": ["a", 1, "b"], "maxLength": 1})
    assert compiled.accepts('"a"')
    assert not compiled.accepts("1")


def test_anyof_oneof_allof():
    nullable = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert accepts(nullable, None)
    assert accepts(nullable, "x")
    assert not accepts(nullable, 1)
    merged = {"allOf": [{"type": "integer", "minimum": 3}, {"maximum": 5}]}
    assert [accepts(merged, v) for v in (2, 3, 5, 6)] == [False, True, True, False]
    tagged = {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
            {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]},
        ]
    }
    assert compile_schema(tagged).unenforced == ()  # provably disjoint
    overlapping = {"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 3}]}
    assert compile_schema(overlapping).unenforced == ("/oneOf",)


def test_alternatives_that_do_not_merge_are_all_enforced():
    """allOf of several anyOf (they do not merge into one keyword) used to recurse
    without end (MaskBench's Handwritten allOfPProp and allany schemas); anyOf beside
    oneOf used to leave the oneOf to post-validation. Each is now enforced: the
    branches of one take the others in."""
    both = {
        "allOf": [
            {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            {"anyOf": [{"type": "string"}, {"type": "null"}]},
            {"anyOf": [{"maxLength": 2}, {"type": "boolean"}]},
        ]
    }
    compiled = compile_schema(both)
    assert compiled.unenforced == ()
    verdicts = [compiled.accepts(json.dumps(v)) for v in ("ab", "abc", 1, None, True)]
    assert verdicts == [True, False, False, False, False]
    side_by_side = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "oneOf": [{"type": "string"}, {"type": "null"}],
    }
    assert compile_schema(side_by_side).unenforced == ()
    assert [accepts(side_by_side, v) for v in ("x", 1, None)] == [True, False, False]
    nested = {"type": "object", "allOf": [{"anyOf": [{"maxProperties": 1}]}] * 3}
    assert accepts(nested, {"a": 1})


def test_recursive_references():
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["value"],
            }
        },
        "$ref": "#/$defs/node",
    }
    value = {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]}
    assert accepts(tree, value)
    assert not accepts(tree, {"value": 1, "children": [{"children": []}]})


def test_pydantic_models_compile():
    class Item(BaseModel):
        name: str
        qty: int = Field(ge=1)

    class Order(BaseModel):
        items: list[Item]
        note: str | None = None

    compiled = compile_schema(Order)
    good = Order(items=[Item(name="x", qty=2)]).model_dump(mode="json")
    assert compiled.accepts(json.dumps(good))
    assert not compiled.accepts(json.dumps({"items": [{"name": "x", "qty": 0}]}))


def test_unenforced_keywords_are_listed_and_strict_refuses_them():
    schema = {"type": "array", "items": {"type": "number", "multipleOf": 0.5}, "uniqueItems": True}
    assert set(compile_schema(schema).unenforced) == {"/uniqueItems", "/items/multipleOf"}
    with pytest.raises(UnsupportedSchemaError, match="uniqueItems"):
        compile_schema(schema, strict=True)


def test_unsatisfiable_schemas_are_refused():
    with pytest.raises(UnsupportedSchemaError, match="accepts no value"):
        compile_schema({"type": "integer", "minimum": 5, "maximum": 3})
    with pytest.raises(UnsupportedSchemaError, match="accepts no value"):
        compile_schema({"type": "object", "properties": {"a": False}, "required": ["a"]})


def test_budgets_are_typed():
    with pytest.raises(BudgetExceededError):
        compile_schema({"type": "string", "pattern": "^[ab]{100}$"}, max_rule_states=20)
    with pytest.raises(UsageError, match="unknown compile option"):
        compile_schema({"type": "string"}, whitespaces="flexible")


def _nested(depth, wrap):
    schema = {"type": "integer"}
    for _ in range(depth):
        schema = wrap(schema)
    return schema


def test_deep_schemas_compile_or_are_refused_with_a_typed_error():
    """Subschemas nested through references (each definition shallow) reach the
    builder's fixed depth bound: a typed budget whose hint does not point at a compile
    option (there is none). Nested inline deeper than the metaschema check can recurse
    (the fast check falls back to jsonschema's, which runs out too): a typed refusal.
    Never a RecursionError."""
    from jsonmode.errors import JsonModeError

    def chain(length):
        defs = {
            f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}}}
            for i in range(length)
        }
        defs[f"d{length}"] = {"type": "integer"}
        return {"$defs": defs, "$ref": "#/$defs/d0"}

    assert compile_schema(chain(20)).accepts('{"a":' * 20 + "1" + "}" * 20)
    with pytest.raises(BudgetExceededError) as info:
        compile_schema(chain(100))
    assert (info.value.budget, info.value.limit) == ("schema nesting depth", 96)
    assert "compile options" not in str(info.value)

    def nest(schema):
        return {"type": "object", "properties": {"a": schema}}

    assert compile_schema(_nested(40, nest)).accepts('{"a":' * 40 + "1" + "}" * 40)
    for deep in (_nested(250, nest), _nested(150, lambda s: {"anyOf": [s, {"type": "null"}]})):
        with pytest.raises(UnsupportedSchemaError, match="nests too deeply"):
            compile_schema(deep)
    with pytest.raises(JsonModeError):  # (not a RecursionError)
        compile_schema(_nested(1000, nest))


def test_equal_looking_lexemes_never_share_an_automaton():
    """Regression: `minimum: 0` once printed like no bound and reused its automaton."""
    schema = {
        "type": "object",
        "properties": {"free": {"type": "integer"}, "count": {"type": "integer", "minimum": 0}},
    }
    assert accepts(schema, {"free": -1, "count": 0})
    assert not accepts(schema, {"free": -1, "count": -1})
    assert "integer[0,]" in str(compile_schema(schema).grammar)


def test_property_order_is_part_of_the_cache_key():
    a = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}
    b = {"type": "object", "properties": {"y": {"type": "integer"}, "x": {"type": "integer"}}}
    assert compile_schema(b).accepts('{"y":1,"x":2}')
    assert compile_schema(a).accepts('{"x":1,"y":2}')
    assert not compile_schema(a).accepts('{"y":1,"x":2}')


def test_integral_floats_are_integers_except_in_draft_4():
    assert accepts({"type": "integer"}, 1.0)
    legacy = compile_schema(
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}
    )
    assert not legacy.accepts("1.0")
    assert legacy.accepts("1")


def test_compiled_schemas_are_cached():
    assert compile_schema(PERSON) is compile_schema(json.loads(json.dumps(PERSON)))
    assert compile_schema(PERSON) is not compile_schema(PERSON, whitespace="flexible")


GOLDEN_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "name": {"type": "string", "maxLength": 8},
        "kind": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 2},
    },
    "required": ["id", "name"],
    "additionalProperties": False,
    "$defs": {"tag": {"type": "string", "pattern": "^[a-z]+$"}},
}

GOLDEN_GRAMMAR = """\
root ::= " "? obj
obj ::= "{" <in order: "\\"id\\":" " "? integer_1 , "\\"score\\":" " "? number_0_1? , \
"\\"name\\":" " "? string_8 , "\\"kind\\":" " "? ( "\\"a\\"" | "\\"b\\"" )? , \
"\\"tags\\":" " "? arr_properties_tags?> "}"
integer_1 ::= /integer[1,]/
number_0_1 ::= /number[0,1]/
string_8 ::= "\\"" /string[,8]/ "\\""
arr_properties_tags ::= "[" (  | ref_tag ( "," " "? ref_tag )? ) "]"
ref_tag ::= string_pattern_a_z
string_pattern_a_z ::= "\\"" /string pattern:^[a-z]+$/ "\\""\
"""


def test_printed_grammar_is_pinned():
    """The intermediate form, golden: scalars are lexeme rules, structure calls them."""
    compiled = compile_schema(GOLDEN_SCHEMA)
    assert str(compiled.grammar) == GOLDEN_GRAMMAR
    assert compiled.fully_enforced


def test_declared_names_never_pass_as_extra_keys_in_any_spelling():
    """The trie key body: an extra key may share a prefix with a declared name, but no
    spelling of a declared name gets in; json.dumps output is accepted both ways."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "nb": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
    }
    compiled = compile_schema(schema)
    assert compiled.fully_enforced
    for text in ['{"nam":true}', '{"namex":true}', '{"":true}', '{"nb":1,"nc":false}']:
        assert compiled.accepts(text), text
    for value in ({"naïve": True}, {"n\n": True}):
        assert compiled.accepts(json.dumps(value))  # \u00ef and \n escapes
        assert compiled.accepts(json.dumps(value, ensure_ascii=False))
    for text in ['{"name":true}', '{"n\\u0061me":true}', '{"nam\\u0065":true}']:
        assert not compiled.accepts(text), text
    # Refused on purpose while the key is still a name's prefix (json.dumps never writes it).
    assert not compiled.accepts('{"n\\u0062":true}')
    assert compiled.accepts('{"x\\u0062":true}')  # off the names: any escape


def test_an_unsupported_regex_is_post_validated_or_refused_under_strict():
    pattern = {"type": "string", "pattern": "^$[a-z]*$"}
    assert compile_schema(pattern).unenforced == ("/pattern",)
    with pytest.raises(UnsupportedSchemaError) as caught:
        compile_schema(pattern, strict=True)
    assert caught.value.schema_path == "/pattern"
    keys = {"type": "object", "patternProperties": {"^$x": {"type": "integer"}}}
    assert compile_schema(keys).unenforced == ("/patternProperties",)
    with pytest.raises(UnsupportedSchemaError):
        compile_schema(keys, strict=True)


def test_a_string_keeps_its_format_when_its_lengths_exceed_the_budget():
    compiled = compile_schema({"type": "string", "format": "email", "maxLength": 40})
    assert "/maxLength" in compiled.unenforced
    assert compiled.accepts('"ada@example.org"')
    assert not compiled.accepts('""')  # the format still shapes what is generated


def test_an_unknown_metaschema_is_post_validated():
    custom = {"$schema": "https://example.com/my-meta", "type": "integer", "minimum": 3}
    assert compile_schema(custom).unenforced == ("/$schema",)
    standard = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"}
    assert compile_schema(standard).fully_enforced


def test_strings_with_length_bounds_only_are_marked_counted():
    """A string whose only constraints are length bounds becomes a rule marked with
    them (the mask engine walks it as the plain string plus a count); one with a
    pattern or a format, or no bounds, is not marked."""
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 5},
            "b": {"type": "string", "minLength": 2},
            "c": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
            "d": {"type": "string", "maxLength": 9, "format": "date"},
            "e": {"type": "string"},
        },
    }
    network = compile_schema(schema).network
    marked = {rule.name: rule.lengths for rule in network.rules if not any(rule.calls)}
    assert marked["string_5"] == (0, 5)
    assert marked["string_2"] == (2, None)
    assert all(
        lengths is None for name, lengths in marked.items() if name not in ("string_5", "string_2")
    )
    assert len(marked) >= 5


def test_a_string_with_contradictory_bounds_accepts_nothing():
    """``minLength`` above ``maxLength`` (or a pattern no length allows) is an empty
    language: the schema is refused when nothing else is left, and the member is
    never offered when it is optional (no dead end after its opening quote)."""
    with pytest.raises(UnsupportedSchemaError):
        compile_schema({"type": "string", "minLength": 5, "maxLength": 2})
    with pytest.raises(UnsupportedSchemaError):
        compile_schema({"type": "string", "pattern": "^a+$", "maxLength": 0})
    optional = compile_schema(
        {
            "type": "object",
            "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 1}, "b": {}},
            "additionalProperties": False,
        }
    )
    assert optional.accepts('{"b":1}')
    assert not optional.accepts('{"a":"xy","b":1}')
    nullable = compile_schema({"type": ["string", "null"], "minLength": 3, "maxLength": 1})
    assert nullable.accepts("null")
    assert not nullable.accepts('"ab"')


def test_pattern_keys_of_objects_with_other_names_are_not_shared():
    # Equal patterns beside different declared names are different key automata: a
    # shared label let the second schema reuse the first's (refusing "ab" below).
    first = compile_schema(
        {"properties": {"ab": {"type": "integer"}}, "patternProperties": {"^a": {}}}
        | {"additionalProperties": False}
    )
    assert first.accepts('{"ab": 1, "ax": "s"}')
    second = compile_schema(
        {"patternProperties": {"^a": {"type": "string"}}, "additionalProperties": False}
    )
    assert second.unenforced == ()
    assert second.accepts('{"ab": "s"}')
    assert not second.accepts('{"b": "s"}')


def test_a_declared_name_also_takes_the_patterns_it_matches():
    compiled = compile_schema(
        {"properties": {"foo": {"type": "integer"}}, "patternProperties": {"^f": {"minimum": 3}}}
    )
    # (still listed, as before this was enforced: tests/test_patterns.py pins it)
    assert compiled.unenforced == ("/patternProperties",)
    assert compiled.accepts('{"foo": 3}')
    assert not compiled.accepts('{"foo": 2}')


def test_draft_6_ignores_the_siblings_of_a_reference():
    schema = {
        "$schema": "http://json-schema.org/draft-06/schema#",
        "definitions": {"a": {"type": "integer"}},
        "properties": {"x": {"$ref": "#/definitions/a", "maximum": 3}},
    }
    compiled = compile_schema(schema)
    assert compiled.schema.conforms({"x": 5})
    assert compiled.accepts('{"x": 5}')
    assert not compiled.accepts('{"x": "5"}')


def _compiled_from_threads(monkeypatch, schema, threads=16, **options):
    """compile_schema(schema) from ``threads`` threads at once; the number of builds."""
    import threading
    import time

    import jsonmode.decoding.compiled as compiled_module

    builds: list[int] = []
    real = compiled_module._automata

    def slow(*args, **kwargs):
        builds.append(1)
        time.sleep(0.3)  # every other thread asks while this one builds
        return real(*args, **kwargs)

    monkeypatch.setattr(compiled_module, "_automata", slow)
    start = threading.Barrier(threads)
    outcomes: list[object] = [None] * threads

    def one(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = compile_schema(schema, **options)
        except Exception as error:
            outcomes[index] = error

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    return len(builds), outcomes


def test_one_schema_compiled_from_many_threads_at_once_is_built_once(monkeypatch):
    # Each of 16 threads built it (16 builds); now they wait for the first.
    schema = {"type": "object", "properties": {"threads": {"type": "integer", "minimum": 16}}}
    builds, outcomes = _compiled_from_threads(monkeypatch, schema)
    assert builds == 1
    assert all(outcome is outcomes[0] for outcome in outcomes)
    assert outcomes[0].accepts('{"threads": 17}')


def test_a_failing_compile_in_flight_fails_every_waiter_alike_and_is_not_cached(monkeypatch):
    schema = {"type": "string", "pattern": "^(a|b){3,9}c[0-9]{2,30}$"}
    builds, outcomes = _compiled_from_threads(monkeypatch, schema, max_rule_states=3)
    assert builds == 1
    assert all(isinstance(outcome, BudgetExceededError) for outcome in outcomes)
    builds, outcomes = _compiled_from_threads(monkeypatch, schema, threads=2, max_rule_states=3)
    assert builds == 1  # tried again, once: an error is not cached
