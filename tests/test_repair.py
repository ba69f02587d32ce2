"""repair/: extraction, syntax repair under the content-loss guard, coercion."""

import json

import pytest
from pydantic import BaseModel

import jsonmode
import jsonmode.repair.parse
from jsonmode import OutputParseError, Schema, SchemaViolationError
from jsonmode.repair.coerce import coerce
from jsonmode.repair.extract import find_candidates
from jsonmode.repair.report import REPAIR_KINDS
from jsonmode.repair.syntax import ContentLossError, repair_syntax
from jsonmode.session.prompts import describe_failure


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('```json\n{"a": 1}\n```', [('{"a": 1}', True)]),
        ("```\n[1, 2]\n```\nthanks", [("[1, 2]", True)]),
        ('Sure: {"a": 1} and also [2]', [('{"a": 1}', True), ("[2]", True)]),
        ('{"a": "brace } in string"}', [('{"a": "brace } in string"}', True)]),
        ('{"a": [1, 2', [('{"a": [1, 2', False)]),
        # closed fence: a slip, not a cut; the whole-reply span runs to the end, so it is
        ('```json\n{"a": 1\n```', [('{"a": 1\n', True), ('{"a": 1\n```', False)]),
        ('```python\nx = [1]\n```\nthen {"a": 1}', [("[1]", True), ('{"a": 1}', True)]),
        ("{'t': '12\" vinyl', 'n': 'O'Brien'}", [("{'t': '12\" vinyl', 'n': 'O'Brien'}", True)]),
        ('```json\n{"a": [1', [('{"a": [1', False)]),
        ("42", [("42", True)]),
        ("no json here", [("no json here", True)]),
    ],
)
def test_find_candidates(text, expected):
    assert [(c.text, c.closed) for c in find_candidates(text)] == expected


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ('{"a": 1,}', {"a": 1}),
        ("{'name': 'Ada', 'note': 'it is'}", {"name": "Ada", "note": "it is"}),
        ("{a: 1, b: 'x'}", {"a": 1, "b": "x"}),
        ('{"a": True, "b": None}', {"a": True, "b": None}),
        ('{"a": 1 // the age\n}', {"a": 1}),
        ('{"a": /* why */ 2}', {"a": 2}),
        ('{"t": "caf\\u00e9",}', {"t": "café"}),
        ('{"quote": \'he said "hi" twice\',}', {"quote": 'he said "hi" twice'}),
        ("['x', 'y',]", ["x", "y"]),
    ],
)
def test_repair_syntax_keeps_content(raw, value):
    assert repair_syntax(raw) == value


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("hello world", "no JSON"),
        ("", "empty"),
        ('{"a": 1, "a": 2}', "lose"),  # a duplicate key would silently drop a value
        ('{"name": "x", "age": }', "empty string"),  # never invent a missing value
        ("{'name': 'O'Brien'}", "alter the string"),  # json-repair returns "O'Brien'"
        ('{"t": "line\\n",}', "alter the string"),  # json-repair drops the newline
    ],
)
def test_repair_syntax_refuses_lossy_repairs(raw, why):
    with pytest.raises(ContentLossError, match=why):
        repair_syntax(raw)


@pytest.mark.parametrize(
    ("raw", "schema"),
    [
        # json-repair read a bare word and the brackets after it as one string, then
        # closed the open containers with brackets of its own: {"tags": ["urgent}}"]}.
        ('{"tags": {urgent}}', {"properties": {"tags": {"items": {"type": "string"}}}}),
        ("{a}", {"type": "array", "items": {"type": "string"}}),
        ("[a}", {"type": "array", "items": {"type": "string"}}),
        ("Result: {status}", {"type": "array", "items": {"type": "string"}}),
    ],
)
def test_repair_never_turns_brackets_into_text(raw, schema):
    with pytest.raises(OutputParseError, match="bracket") as failure:
        jsonmode.parse(raw, schema, "repair")
    assert failure.value.raw == raw


def test_quoted_brackets_and_bare_words_between_brackets_still_repair():
    assert jsonmode.parse('{"a": "x}", b: [c, d],}', {"type": "object"}, "repair").value == {
        "a": "x}",
        "b": ["c", "d"],
    }


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity", "undefined", "nan"])
def test_bare_non_values_never_become_numbers_or_strings(word):
    with pytest.raises(ContentLossError, match="not a JSON value"):
        repair_syntax(f'{{"x": {word},}}')
    assert repair_syntax(f'{{"x": "{word}",}}') == {"x": word}  # quoted: the model meant text


def _coerce(schema, value):
    spec = Schema.of(schema)
    return coerce(value, spec.json_schema, spec.validator)


@pytest.mark.parametrize(
    ("schema", "before", "after", "kinds"),
    [
        ({"type": "integer"}, "42", 42, ["string_to_integer"]),
        ({"type": "integer"}, " -7 ", -7, ["string_to_integer"]),
        ({"type": "integer"}, 31.0, 31, ["float_to_integer"]),
        ({"type": "integer"}, "1234567890123456789", 1234567890123456789, ["string_to_integer"]),
        ({"type": "number"}, "1234567890123456789", 1234567890123456789, ["string_to_number"]),
        ({"type": "number"}, "4.5", 4.5, ["string_to_number"]),
        ({"type": "boolean"}, "False", False, ["string_to_boolean"]),
        ({"type": "null"}, "null", None, ["string_to_null"]),
        (
            {"type": "array", "items": {"type": "integer"}},
            "3",
            [3],
            ["wrap_array", "string_to_integer"],
        ),
        ({"enum": ["red", "green"]}, "RED", "red", ["enum_case"]),
        ({"const": "yes"}, "YES", "yes", ["enum_case"]),
        ({"type": "string"}, "42", "42", []),  # already allowed: untouched
        ({"type": ["string", "integer"]}, "42", "42", []),
        ({"type": "integer"}, "1,000", "1,000", []),  # never guess
        ({"type": "integer"}, "4.5", "4.5", []),
        ({"enum": ["a", "A"]}, "Ä", "Ä", []),  # ambiguous or no match: untouched
        ({"type": "number"}, "nan", "nan", []),
    ],
)
def test_coerce_scalars(schema, before, after, kinds):
    value, repairs = _coerce(schema, before)
    assert value == after
    assert type(value) is type(after)
    assert [r.kind for r in repairs] == kinds


def test_coerce_walks_nested_structures_and_refs_with_paths():
    schema = {
        "$defs": {"Item": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "number"}]},
        },
        "additionalProperties": {"type": "integer"},
    }
    original = {"items": [{"qty": "2"}, {"qty": 3}], "pair": ["true", "1.5"], "extra": "9"}
    value, repairs = _coerce(schema, original)
    assert value == {"items": [{"qty": 2}, {"qty": 3}], "pair": [True, 1.5], "extra": 9}
    assert [(r.path, r.kind) for r in repairs] == [
        ("$.items[0].qty", "string_to_integer"),
        ("$.pair[0]", "string_to_boolean"),
        ("$.pair[1]", "string_to_number"),
        ("$.extra", "string_to_integer"),
    ]
    assert original["items"][0]["qty"] == "2", "coercion must not mutate its input"


def test_coerce_anyof_keeps_valid_values_and_picks_the_branch_that_works():
    schema = {"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer"}]}
    assert _coerce(schema, "ab")[0] == "ab"  # no branch fixes it: untouched
    value, repairs = _coerce({"anyOf": [{"type": "boolean"}, {"type": "integer"}]}, "12")
    assert value == 12
    assert [r.kind for r in repairs] == ["string_to_integer"]
    assert _coerce({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "12") == ("12", [])


def test_coerce_never_adds_or_removes_properties():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer", "default": 1}},
        "required": ["a"],
        "additionalProperties": False,
    }
    value, repairs = _coerce(schema, {"b": "2"})
    assert value == {"b": "2"}
    assert repairs == []


# -- Python literals: spelled as JSON and recorded, never read as text -------------------

TODO = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "done": {"type": "boolean"},
        "due": {"type": ["string", "null"]},
    },
}


def test_python_literals_become_json_literals_and_are_recorded():
    parsed = jsonmode.parse("{'text': 'call mom', 'done': False, 'due': None}", TODO, "repair")
    assert parsed.data == {"text": "call mom", "done": False, "due": None}
    assert [r.kind for r in parsed.repairs] == ["python_literal", "syntax"]
    literal = parsed.repairs[0]
    assert "None" in literal.before
    assert "null" in literal.after


def test_a_python_literal_alone_needs_no_syntax_repair():
    parsed = jsonmode.parse('{"text": "x", "done": True, "due": NULL}', TODO, "repair")
    assert parsed.data == {"text": "x", "done": True, "due": None}
    assert [r.kind for r in parsed.repairs] == ["python_literal"]


@pytest.mark.parametrize(
    "raw",
    [
        "{'due': None;}",
        "{'due': None.}",
        "{'due': None!}",
        "{'due': None/}",
        "{'due': None`}",
        "{'due': None'}",
        "{'due': null;}",
        "{'done': True;}",
        "{'done': true?}",
        "{'due': None)}",
        "{'due': None -}",
        "{'due': None of these}",
    ],
)
def test_a_bare_literal_never_becomes_a_string(raw):
    with pytest.raises(OutputParseError):
        jsonmode.parse(raw, TODO, "repair")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": None}', '{"a": null}'),
        ("[None,True,False,NULL,Null,TRUE,null]", "[null,true,false,null,null,true,null]"),
        ('{"a": None # no date\n}', '{"a": null # no date\n}'),
        ('{"a": /* x */ None /* y */}', '{"a": /* x */ null /* y */}'),
        ("{a: None\n b: True}", "{a: null\n b: true}"),
        ("None", "null"),
        ('{"a": "None", "b": \'True\'}', '{"a": "None", "b": \'True\'}'),  # strings untouched
        ("{None: 1}", "{None: 1}"),  # a key
        ('{"a": None of these}', '{"a": None of these}'),  # part of unquoted text
        ('["x" None]', '["x" None]'),  # not where a value starts
        ("[Nonesuch, None_x, x.None, $None]", "[Nonesuch, None_x, x.None, $None]"),
    ],
)
def test_normalize_literals(text, expected):
    from jsonmode.repair.syntax import normalize_literals  # new: the rest runs without it

    assert normalize_literals(text) == expected


# -- every character json-repair would drop fails the repair ------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "[1, 2, 3, ...]",
        "[1, 2, 3, …]",
        '{"a": 1, ...}',
        "[1, @, 2]",
        "[1 + 2]",
        '{"a": 1; "b": 2}',
        "[1 | 2]",
        "[1, ~, 2]",
        "[1, `x`]",
        "[-]",
        "[1, -, 2]",
        "[+1]",
        '{"confidence": 95%}',
        '{"price": $5}',
    ],
)
def test_dropped_characters_fail_the_repair(raw):
    with pytest.raises(ContentLossError, match="lose content"):
        repair_syntax(raw)
    with pytest.raises(OutputParseError):
        jsonmode.parse(raw, {}, "repair")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ('{"a": "wait... @you; 50% | ~x",}', {"a": "wait... @you; 50% | ~x"}),  # in strings
        ("{“label”: “positive”}", {"label": "positive"}),  # typographic quotes
        ("{'a': [1, 2,], /* note */ 'b': -1.5e3, # c\n}", {"a": [1, 2], "b": -1500.0}),
        ("{name: Bob, age: 3,}", {"name": "Bob", "age": 3}),  # unquoted keys and values
        ('{"url": "https://x.io/a?b=1#c"}\n', {"url": "https://x.io/a?b=1#c"}),
    ],
)
def test_legit_repairs_still_pass(raw, value):
    assert repair_syntax(raw) == value


def test_candidates_know_their_depth():
    [candidate] = find_candidates('Sure: {"a": [[1], {"b": 2}]} done')
    assert candidate.depth == 3


# -- double-encoded JSON -----------------------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
ADA = {"name": "Ada", "age": 36}
DOUBLE = json.dumps(json.dumps(ADA))  # "{\"name\": \"Ada\", \"age\": 36}"


def test_repair_unwraps_a_json_string_holding_the_document_and_records_it():
    parsed = jsonmode.parse(DOUBLE, PERSON, "repair")
    assert parsed.data == ADA
    assert [(r.path, r.kind) for r in parsed.repairs] == [("$", "double_encoded")]
    assert parsed.repairs[0].before == DOUBLE
    assert parsed.repairs[0].after == json.dumps(ADA)
    assert "double_encoded" in REPAIR_KINDS


def test_an_unwrapped_document_is_repaired_and_coerced_as_usual():
    raw = json.dumps("{'name': 'Ada', 'age': '36',}")
    parsed = jsonmode.parse(raw, PERSON, "repair")
    assert parsed.data == ADA
    assert [r.kind for r in parsed.repairs] == ["double_encoded", "syntax", "string_to_integer"]
    arrays = {"type": "array", "items": {"type": "integer"}}
    parsed = jsonmode.parse(json.dumps(" [1, 2] "), arrays, "repair")
    assert parsed.data == [1, 2]
    assert [r.kind for r in parsed.repairs] == ["double_encoded"]


def test_an_array_in_a_string_is_unwrapped_not_wrapped():
    """wrap_array would make ["[\"a\"]"], which conforms: the wrong value."""
    schema = {"type": "array", "items": {"type": "string"}}
    assert jsonmode.parse(json.dumps('["a"]'), schema, "repair").data == ["a"]


def test_strict_rejects_double_encoded_json_and_says_so():
    with pytest.raises(SchemaViolationError) as caught:
        jsonmode.parse(DOUBLE, PERSON, "strict")
    error = caught.value
    assert [(i.path, i.keyword) for i in error.issues] == [("$", "type")]
    assert "JSON string" in error.issues[0].message
    assert "send the object itself" in error.issues[0].message
    assert "double-encoded" in str(error)
    assert error.repairs == ()
    assert error.raw == DOUBLE
    feedback = describe_failure(error)
    assert "send the object itself" in feedback


def test_the_documents_own_issues_follow_the_encoding_issue():
    raw = json.dumps(json.dumps({"name": "Ada", "age": "x"}))
    for mode in ("strict", "repair"):
        with pytest.raises(SchemaViolationError) as caught:
            jsonmode.parse(raw, PERSON, mode)
        paths = [(i.path, i.keyword) for i in caught.value.issues]
        assert paths == [("$", "type"), ("$.age", "type")], mode
        assert caught.value.value == {"name": "Ada", "age": "x"}
    kinds = [r.kind for r in caught.value.repairs]
    assert kinds == ["double_encoded"]


@pytest.mark.parametrize("schema", [{"type": "string"}, {}, True, {"type": ["string", "object"]}])
@pytest.mark.parametrize("mode", ["strict", "repair"])
def test_never_unwrapped_when_the_schema_accepts_the_string(schema, mode):
    parsed = jsonmode.parse(DOUBLE, schema, mode)
    assert parsed.data == json.dumps(ADA)
    assert parsed.repairs == ()


def test_only_one_level_is_unwrapped():
    triple = json.dumps(DOUBLE)
    for mode in ("strict", "repair"):
        with pytest.raises(SchemaViolationError) as caught:
            jsonmode.parse(triple, PERSON, mode)
        assert "double-encoded" not in str(caught.value)
        assert caught.value.repairs == ()


@pytest.mark.parametrize("content", ["{not json at all", "hello", "{oops}", "[1, 2", "{a} and [b]"])
def test_a_string_that_holds_no_document_is_judged_as_a_string(content):
    for mode in ("strict", "repair"):
        with pytest.raises(SchemaViolationError) as caught:
            jsonmode.parse(json.dumps(content), PERSON, mode)
        assert "double-encoded" not in str(caught.value), (content, mode)


def test_a_typed_schema_gets_its_model_from_the_unwrapped_document():
    class Person(BaseModel):
        name: str
        age: int

    parsed = jsonmode.parse(DOUBLE, Person, "repair")
    assert parsed.value == Person(name="Ada", age=36)


def test_unwrapping_is_bounded_by_the_repair_limits():
    """The content goes through the usual bounds: too long to repair is not read."""
    huge = "{'a': " + "1" * (jsonmode.repair.parse.MAX_REPAIR_CHARS + 10) + "}"
    with pytest.raises(SchemaViolationError) as caught:
        jsonmode.parse(json.dumps(huge), {"type": "object"}, "repair")
    assert caught.value.repairs == ()
